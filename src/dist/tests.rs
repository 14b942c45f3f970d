//! One-process checks of the distributed path (the communicator is [`SelfComm`]); the
//! runs across ranks are in `tests/integration/mpi_*.rs`.

use super::comm::{Channel, Failure};
use super::exchange::distribute;
use super::partition::Scheme;
use super::read::read_share;
use crate::decomp::CpOptions;
use crate::engine::{CpuOptions, Engine, PhiKernel};
use crate::tensor::generate::{GenSpec, Pattern, generate};
use crate::tensor::tns;
use std::ops::ControlFlow;

#[test]
fn messages_of_many_rounds_arrive_whole() {
    let ch = Channel::single().with_round_bytes(64);
    let send: Vec<u32> = (0..1000).collect();
    let (got, counts) = ch.all_to_all(&send, &[1000]);
    assert_eq!(got, send);
    assert_eq!(counts, vec![1000]);
    let (got, counts) = ch.all_gather(&send[..999]);
    assert_eq!(got, &send[..999]);
    assert_eq!(counts, vec![999]);
    let mut into = vec![0u32; 999];
    ch.all_gather_into(&send[1..], &mut into);
    assert_eq!(into, &send[1..]);
    // One round: the buffers are handed to the collective as they are.
    let one = Channel::single();
    assert_eq!(one.all_to_all(&send, &[1000]).0, send);
    one.all_gather_into(&send[..999], &mut into);
    assert_eq!(into, &send[..999]);
    // Nothing leaves a single process.
    assert_eq!(ch.traffic().bytes.get(), 0);
}

#[test]
fn a_share_read_alone_is_the_whole_tensor() {
    let x = generate(&GenSpec {
        dims: vec![30, 20, 10],
        nnz: 2000,
        pattern: Pattern::Uniform,
        seed: 4,
    })
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    for name in ["x.tns", "x.tns.gz"] {
        let p = dir.path().join(name);
        tns::write(&p, &x).unwrap();
        let (want, _) = tns::read(&p).unwrap();
        let ch = Channel::single();
        let share = read_share(&ch, &p).unwrap();
        assert_eq!(share.dims, want.dims());
        let block = distribute(&ch, share, Scheme::Medium, &p, None).unwrap();
        assert_eq!(block.tensor, want, "{name}");
        assert_eq!(block.nnz, want.nnz() as u64);
    }
}

#[test]
fn bad_text_read_alone_is_the_text_readers_error() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("bad.tns");
    std::fs::write(&p, "1 1 1 1.0\n2 2 x 1.0\n").unwrap();
    let want = tns::read(&p).unwrap_err().to_string();
    match read_share(&Channel::single(), &p) {
        Err(Failure::Here(e)) => assert_eq!(e.to_string(), want),
        other => panic!("expected the parse error, got {other:?}"),
    }
    let p = dir.path().join("empty.tns");
    std::fs::write(&p, "# nothing\n").unwrap();
    let want = tns::read(&p).unwrap_err().to_string();
    match read_share(&Channel::single(), &p) {
        Err(Failure::Here(e)) => assert_eq!(e.to_string(), want),
        other => panic!("expected the empty-tensor error, got {other:?}"),
    }
}

#[test]
fn one_rank_reproduces_the_single_process_exactly() {
    let x = generate(&GenSpec {
        dims: vec![40, 30, 20],
        nnz: 4000,
        pattern: Pattern::Uniform,
        seed: 9,
    })
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("x.tns");
    tns::write(&p, &x).unwrap();
    let (x, _) = tns::read(&p).unwrap();
    let engine = Engine::cpu();
    let opts = CpOptions {
        rank: 4,
        max_iters: 8,
        tol: 0.0,
        seed: 2,
        init: None,
    };
    let prepared = engine
        .prepare(
            &x,
            &[crate::engine::Workload {
                op: crate::Op::Mttkrp,
                rank: 4,
            }],
        )
        .unwrap();
    let want = crate::decomp::cp_als(&engine, &prepared, &opts).unwrap();
    let (got, files, _) = one_rank_cp(&p, &engine, &opts, None);
    assert_eq!(got.fits, want.fits);
    assert_eq!(got.weights, want.weights);
    assert_eq!(files, written(&want.factors));
}

/// CP-ALS of the tensor at `p` on one rank (used rows where `cp_rank` says): the model,
/// its factors as streamed to files, and the block.
fn one_rank_cp(
    p: &std::path::Path,
    engine: &Engine,
    opts: &CpOptions,
    cp_rank: Option<usize>,
) -> (crate::decomp::CpModel, Vec<String>, super::exchange::Block) {
    let ch = Channel::single();
    let share = read_share(&ch, p).unwrap();
    let mut block = distribute(&ch, share, Scheme::Medium, p, cp_rank).unwrap();
    let got = super::cp_als::cp_als(&ch, engine, &mut block, opts, &mut |_| {
        ControlFlow::Continue(())
    })
    .unwrap();
    let files = streamed(&ch, &got.factors(&block));
    (got.model, files, block)
}

/// Values far from 1 run times a power of two across ranks as in the single process
/// (`driver::value_scale`): on one rank, the tensor times 2^k fits as the tensor with
/// its largest magnitude in [1, 2) does, to the last bit, its weights times 2^k and
/// its factors the same. Without it values near 1e-38 underflowed f32 in the kernels'
/// products and those past 3.4e38 could not be stored.
#[test]
fn one_rank_runs_values_far_from_one_scaled_exactly() {
    let mut x = generate(&GenSpec {
        dims: vec![30, 20, 10],
        nnz: 900,
        pattern: Pattern::Uniform,
        seed: 4,
    })
    .unwrap();
    let max = x.values().iter().fold(0.0f64, |m, v| m.max(v.abs()));
    x.map_values(|v| v * 2f64.powi(-(max.log2().floor() as i32)));
    let engine = Engine::cpu();
    let opts = CpOptions {
        rank: 3,
        max_iters: 6,
        tol: 0.0,
        seed: 8,
        init: None,
    };
    let dir = tempfile::tempdir().unwrap();
    let run = |k: i32| {
        let mut y = x.clone();
        y.map_values(|v| crate::decomp::cp_apr::units::times_pow2(v, k));
        let p = dir.path().join(format!("x{k}.tns"));
        tns::write(&p, &y).unwrap();
        let (model, files, _) = one_rank_cp(&p, &engine, &opts, None);
        (model, files)
    };
    let (unit, unit_files) = run(0);
    assert!(
        unit.fits.last().is_some_and(|f| *f > 0.0),
        "{:?}",
        unit.fits
    );
    for k in [-140, -1000, 200, 1000] {
        let (got, files) = run(k);
        assert_eq!(got.fits, unit.fits, "2^{k}: fits");
        let want: Vec<f64> = (unit.weights.iter())
            .map(|&w| crate::decomp::cp_apr::units::times_pow2(w, k))
            .collect();
        assert_eq!(got.weights, want, "2^{k}: weights");
        assert_eq!(files, unit_files, "2^{k}: factors");
    }
}

/// Modes mostly empty run on their used rows on one rank as in the single process: the
/// block holds the used rows, the fits agree within 1e-9 relative (only the f64 sums of
/// the start's Grams differ: the single process adds the empty rows' apart), and the
/// streamed factor files have every row of the tensor, within 1e-6 of the single
/// process's and zero where its are (the text compared number by number).
#[test]
fn one_rank_runs_mostly_empty_modes_on_their_used_rows() {
    let dir = tempfile::tempdir().unwrap();
    let (p, x) = mostly_empty_file(dir.path());
    let engine = Engine::cpu();
    let opts = CpOptions {
        rank: 3,
        max_iters: 8,
        tol: 0.0,
        seed: 5,
        init: None,
    };
    let (rows, prepared) = used_rows_prepared(&engine, &x);
    let want = crate::decomp::cp_als::cp_als_on_rows(&engine, &prepared, &rows, &opts, &mut |_| {
        ControlFlow::Continue(())
    })
    .unwrap();
    let (got, files, block) = one_rank_cp(&p, &engine, &opts, Some(3));
    assert_eq!(block.dims, rows.tensor().dims());
    assert_eq!(block.tensor_dims(), x.dims());
    for (a, b) in got.fits.iter().zip(&want.fits) {
        assert!((a - b).abs() <= 1e-9 * b.abs(), "{a} vs {b}");
    }
    same_numbers(&files, &written(&want.factors));
}

/// A 3000 × 2000 × 7 tensor of 900 counts 1 … 5 whose first two modes use 60 and 40 of
/// their rows, written to `dir` as `x.tns`; as read back.
fn mostly_empty_file(dir: &std::path::Path) -> (std::path::PathBuf, crate::CooTensor) {
    let dims = [3000u32, 2000, 7];
    let mut entries = std::collections::BTreeMap::new();
    let mut state = 0x2545_f491_4f6c_dd1du64;
    while entries.len() < 900 {
        let mut next = |n: u32| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state % u64::from(n)) as u32
        };
        let c = vec![next(60) * 50, next(40) * 50 + 1, next(dims[2])];
        entries.insert(c, f64::from(next(5) + 1));
    }
    let dims: Vec<usize> = dims.iter().map(|&d| d as usize).collect();
    let x = crate::CooTensor::from_entries(dims, entries).unwrap();
    let p = dir.join("x.tns");
    tns::write(&p, &x).unwrap();
    let (x, _) = tns::read(&p).unwrap();
    (p, x)
}

/// `x` on its used rows at rank 3, and that prepared on `engine` for MTTKRP.
fn used_rows_prepared(
    engine: &Engine,
    x: &crate::CooTensor,
) -> (crate::decomp::used_rows::UsedRows, crate::engine::Prepared) {
    let rows = crate::decomp::used_rows::UsedRows::of(x, 3)
        .unwrap()
        .expect("modes 0 and 1 mostly empty");
    let prepared = engine.prepare(rows.tensor(), &[mttkrp(3)]).unwrap();
    (rows, prepared)
}

/// MTTKRP at rank `rank`.
fn mttkrp(rank: usize) -> crate::engine::Workload {
    crate::engine::Workload {
        op: crate::Op::Mttkrp,
        rank,
    }
}

/// Checks factor files `a` against `b` number by number: the same count, within 1e-6,
/// and zero exactly where `b` is.
fn same_numbers(a: &[String], b: &[String]) {
    let numbers = |t: &[String]| -> Vec<Vec<f64>> {
        t.iter()
            .map(|f| {
                (f.lines().filter(|l| !l.starts_with('#')))
                    .flat_map(|l| l.split(' ').map(|v| v.parse::<f64>().unwrap()))
                    .collect()
            })
            .collect()
    };
    for (m, (fa, fb)) in numbers(a).iter().zip(&numbers(b)).enumerate() {
        assert_eq!(fa.len(), fb.len(), "mode {m}");
        for (u, v) in fa.iter().zip(fb) {
            assert!((u - v).abs() <= 1e-6, "mode {m}: {u} vs {v}");
            assert_eq!(*u == 0.0, *v == 0.0, "mode {m}: {u} vs {v}");
        }
    }
}

/// CP-APR of modes mostly empty runs on their used rows on one rank as in the single
/// process (`cp_apr_on_rows`): log-likelihoods and KKT violations within 1e-9 relative
/// (the start's column sums are added in another order), the same inner iterations,
/// and the factor files as [`same_numbers`] checks them; from a start near a fit, with
/// one inner iteration, a renumbered mode's first violation is that of its rows left
/// out.
#[test]
fn one_rank_runs_cp_apr_of_mostly_empty_modes_on_their_used_rows() {
    let dir = tempfile::tempdir().unwrap();
    let (p, x) = mostly_empty_file(dir.path());
    let engine = Engine::cpu();
    let (rows, prepared) = used_rows_prepared(&engine, &x);
    // A start near a fitted model (weights in mode 0) whose mode 1 has its empty row 0
    // not zero: with one inner iteration, mode 1's first violation is that row's.
    let fitted = crate::decomp::cp_apr(
        &engine,
        &engine.prepare(&x, &[mttkrp(3)]).unwrap(),
        &crate::decomp::CpAprOptions {
            rank: 3,
            max_iters: 40,
            ..Default::default()
        },
    )
    .unwrap();
    let mut near = fitted.factors.clone();
    for row in near[0].data_mut().chunks_exact_mut(3) {
        for (v, w) in row.iter_mut().zip(&fitted.weights) {
            *v *= *w as f32;
        }
    }
    near[1].data_mut()[..3].fill(0.01);
    let ch = Channel::single();
    for (init, max_inner) in [(None, 10), (None, 1), (Some(near), 1)] {
        let opts = crate::decomp::CpAprOptions {
            rank: 3,
            max_iters: 6,
            max_inner,
            tol: 0.0,
            seed: 5,
            init,
            ..Default::default()
        };
        let want =
            crate::decomp::cp_apr::cp_apr_on_rows(&engine, &prepared, &rows, &opts, &mut |_| {
                ControlFlow::Continue(())
            })
            .unwrap();
        let share = read_share(&ch, &p).unwrap();
        let mut block = distribute(&ch, share, Scheme::Medium, &p, Some(3)).unwrap();
        assert_eq!(block.dims, rows.tensor().dims());
        let got = super::cp_apr::cp_apr(&ch, &engine, &mut block, &opts, &mut |_| {})
            .unwrap()
            .expect("every mode updates");
        assert_eq!(got.model.iters.len(), want.iters.len());
        for (a, b) in got.model.iters.iter().zip(&want.iters) {
            for (u, v) in [
                (a.log_likelihood, b.log_likelihood),
                (a.kkt_violation, b.kkt_violation),
            ] {
                assert!((u - v).abs() <= 1e-9 * v.abs(), "{max_inner}: {u} vs {v}");
            }
            assert_eq!(a.inner_iters, b.inner_iters);
        }
        same_numbers(
            &streamed(&ch, &got.factors(&block)),
            &written(&want.factors),
        );
    }
}

/// Where a mode held on its used rows meets the tolerance at the start, the run on
/// its used rows stops with `None` (the single process then runs on every row); on
/// every row it runs to the end.
#[test]
fn cp_apr_on_used_rows_gives_way_where_a_mode_does_not_update() {
    let dir = tempfile::tempdir().unwrap();
    let (p, _) = mostly_empty_file(dir.path());
    let engine = Engine::cpu();
    let ch = Channel::single();
    let opts = crate::decomp::CpAprOptions {
        rank: 3,
        max_iters: 3,
        tol: 1e6,
        ..Default::default()
    };
    let run = |cp_rank| {
        let share = read_share(&ch, &p).unwrap();
        let mut block = distribute(&ch, share, Scheme::Medium, &p, cp_rank).unwrap();
        assert_eq!(block.rows.is_some(), cp_rank.is_some());
        super::cp_apr::cp_apr(&ch, &engine, &mut block, &opts, &mut |_| {}).unwrap()
    };
    assert!(run(Some(3)).is_none());
    let all = run(None).expect("on every row");
    assert!(all.model.converged && all.model.iters.len() == 1);
}

/// Consecutive ranges of a run's rows stand for consecutive ranges of the tensor's
/// rows that cover all of them, each range's used rows among its own.
#[test]
fn spans_of_used_rows_cover_the_tensors_rows() {
    let rows = super::exchange::UsedIndices {
        dims: vec![100, 5],
        used: vec![Some(vec![3, 10, 11, 60, 99]), None],
    };
    let cuts = [0usize, 2, 2, 4, 5];
    let spans: Vec<_> = cuts.windows(2).map(|w| rows.span(0, w[0]..w[1])).collect();
    assert_eq!(spans, [0..11, 0..0, 11..99, 99..100]);
    assert_eq!(rows.span(0, 0..5), 0..100);
    assert_eq!(rows.span(1, 1..4), 1..4);
}

/// The factor files the spread `factors` stream to rank 0, as text.
fn streamed<T: super::comm::Plain + Into<f64>>(
    ch: &Channel,
    factors: &super::output::SpreadFactors<'_, T>,
) -> Vec<String> {
    (0..factors.rows.len())
        .map(|m| {
            let mut text = Vec::new();
            super::output::stream_factor(
                ch,
                factors.partition,
                m,
                factors.rows[m],
                &factors.arrangement,
                (factors.tensor_rows)
                    .and_then(|u| u.used[m].as_deref().map(|used| (used, u.dims[m]))),
                Some(&mut text),
            )
            .unwrap();
            String::from_utf8(text).unwrap()
        })
        .collect()
}

/// The factor files a single process writes for `factors`, as text.
fn written(factors: &[crate::Matrix]) -> Vec<String> {
    factors
        .iter()
        .enumerate()
        .map(|(m, f)| {
            let mut text = Vec::new();
            crate::model_io::write_matrix_to(
                &mut text,
                &format!("factor of mode {m}"),
                &f.to_f64(),
            )
            .unwrap();
            String::from_utf8(text).unwrap()
        })
        .collect()
}

#[test]
fn one_rank_reproduces_the_single_process_cp_apr_exactly() {
    let g = generate(&GenSpec {
        dims: vec![40, 30, 20],
        nnz: 3000,
        pattern: Pattern::Uniform,
        seed: 5,
    })
    .unwrap();
    // Counts 1 … 4.
    let entries: Vec<_> = (0..g.nnz())
        .map(|k| (g.coords(k), 1.0 + (k % 4) as f64))
        .collect();
    let x = crate::tensor::CooTensor::from_entries(g.dims().to_vec(), entries).unwrap();
    let opts = crate::decomp::CpAprOptions {
        rank: 3,
        max_iters: 6,
        tol: 0.0,
        seed: 4,
        ..Default::default()
    };
    // Φ in the CPU's f64 sessions, and per call in f32 as on CUDA.
    for phi in [PhiKernel::Session, PhiKernel::PerCall] {
        cp_apr_alone_and_on_one_rank(&x, &opts, phi);
    }
}

/// Per call, Φ's f32 products underflow to 0 where f64 keeps them positive; the
/// inadmissible-zero rule must still see them positive, on one rank as in the single
/// process, so that κ moves the same entries as with the f64 sessions.
#[test]
fn cp_apr_per_call_marks_the_f32_underflows_as_the_single_process_does() {
    // Row 0 of mode 0 has nonzeros only where modes 1 and 2 are at rows 0 and 1, whose
    // entries of component 1 are 1e-25: its Φ there is about 1e-50, 0 in f32. Its own
    // entry of component 1 starts at 0, an inadmissible zero.
    let dims = vec![6usize, 5, 4];
    let mut entries = Vec::new();
    for i in 0..dims[0] {
        for j in 0..dims[1] {
            for k in 0..dims[2] {
                if i > 0 && (i + j + k) % 2 == 0 || i == 0 && j < 2 && k < 2 {
                    entries.push((
                        vec![i as u32, j as u32, k as u32],
                        1.0 + ((i * 7 + j * 3 + k) % 3) as f64,
                    ));
                }
            }
        }
    }
    let x = crate::tensor::CooTensor::from_entries(dims.clone(), entries).unwrap();
    let init: Vec<crate::Matrix> = dims
        .iter()
        .enumerate()
        .map(|(m, &d)| {
            let mut f = crate::Matrix::zeros(d, 2);
            for i in 0..d {
                for r in 0..2 {
                    let tiny = r == 1 && i < 2 && m > 0;
                    let v = if tiny {
                        1e-25
                    } else {
                        0.5 + 0.1 * ((i + r) % 3) as f32
                    };
                    f.data_mut()[i * 2 + r] = v;
                }
            }
            if m == 0 {
                f.data_mut()[1] = 0.0;
            }
            f
        })
        .collect();
    let opts = crate::decomp::CpAprOptions {
        rank: 2,
        max_iters: 4,
        tol: 0.0,
        init: Some(init),
        ..Default::default()
    };
    let moved = |phi| {
        let m = cp_apr_alone_and_on_one_rank(&x, &opts, phi);
        m.iters.iter().map(|s| s.violations).collect::<Vec<_>>()
    };
    let (f64_moved, f32_moved) = (moved(PhiKernel::Session), moved(PhiKernel::PerCall));
    assert!(f64_moved.iter().skip(1).all(|&v| v > 0), "{f64_moved:?}");
    assert_eq!(f32_moved, f64_moved);
}

/// Runs CP-APR of `x` with `opts` on a CPU engine whose Φ runs as `phi`, in the single
/// process and on one rank; checks the two are the same to the bit, returns the model.
fn cp_apr_alone_and_on_one_rank(
    x: &crate::tensor::CooTensor,
    opts: &crate::decomp::CpAprOptions,
    phi: PhiKernel,
) -> crate::decomp::CpAprModel {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("x.tns");
    tns::write(&p, x).unwrap();
    let (x, _) = tns::read(&p).unwrap();
    let engine = Engine::cpu_with(CpuOptions {
        phi,
        ..Default::default()
    })
    .unwrap();
    let prepared = engine
        .prepare(
            &x,
            &[crate::engine::Workload {
                op: crate::Op::Mttkrp,
                rank: opts.rank,
            }],
        )
        .unwrap();
    assert_eq!(
        engine.phi_run(&prepared, opts.rank).unwrap().is_some(),
        phi == PhiKernel::Session
    );
    let want = crate::decomp::cp_apr(&engine, &prepared, opts).unwrap();
    let ch = Channel::single();
    let share = read_share(&ch, &p).unwrap();
    let mut block = distribute(&ch, share, Scheme::Medium, &p, None).unwrap();
    let got = super::cp_apr::cp_apr(&ch, &engine, &mut block, opts, &mut |_| {})
        .unwrap()
        .expect("a run on every row is never redone");
    assert_eq!(
        got.model.log_likelihoods(),
        want.log_likelihoods(),
        "{phi:?}"
    );
    assert_eq!(got.model.weights, want.weights, "{phi:?}");
    assert_eq!(
        streamed(&ch, &got.factors(&block)),
        written(&want.factors),
        "{phi:?}"
    );
    assert_eq!(
        got.evaluations.iter().sum::<u64>() as usize,
        want.iters.iter().map(|s| s.inner_iters).sum::<usize>()
    );
    let violations = |m: &crate::decomp::CpAprModel| -> Vec<usize> {
        m.iters.iter().map(|s| s.violations).collect()
    };
    assert_eq!(violations(&got.model), violations(&want), "{phi:?}");
    want
}
