//! GCP's sampled gradient on the engine against a brute-force dense FP64 gradient, for
//! every loss and every mode, on small random tensors of orders 2 to 7; and against
//! central finite differences of the sampled loss. Each runs on the CPU and, as its
//! CUDA twin, on the GPU (skipped visibly without one; see `common::twin`).

use crate::common;

use common::twin;
use sptmc::decomp::gcp::{Loss, loss::NAMES};
use sptmc::engine::{CpuOptions, Engine, GcpSample, GcpSpread};
use sptmc::{CooTensor, Matrix};

/// Every loss, with a parameter where it needs one.
fn losses() -> Vec<Loss> {
    NAMES
        .iter()
        .map(|n| {
            let p = match *n {
                "negative-binomial" => Some(2.0),
                "huber" => Some(0.4),
                "beta" => Some(1.5),
                _ => None,
            };
            Loss::parse(n, p).unwrap()
        })
        .collect()
}

/// A small deterministic pseudo-random stream in `[0, 1)`.
fn stream(seed: u64) -> impl FnMut() -> f64 {
    let mut s = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    move || {
        s = s
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (s >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// A tensor of extents `dims` with about a third of its cells stored, values fit for
/// `loss`.
fn tensor(dims: &[usize], loss: &Loss, seed: u64) -> CooTensor {
    let mut u = stream(seed);
    let cells: usize = dims.iter().product();
    let mut idx = vec![Vec::new(); dims.len()];
    let mut vals = Vec::new();
    for l in 0..cells {
        if u() < 0.35 {
            let mut r = l;
            for (m, &d) in dims.iter().enumerate() {
                idx[m].push((r % d) as u32);
                r /= d;
            }
            let v = u();
            vals.push(match loss.data_kind() {
                sptmc::decomp::gcp::DataKind::Binary => 1.0,
                sptmc::decomp::gcp::DataKind::Counts => (1.0 + 4.0 * v).floor(),
                sptmc::decomp::gcp::DataKind::Nonnegative => 0.2 + 2.0 * v,
                sptmc::decomp::gcp::DataKind::Any => 3.0 * v - 1.0,
            });
        }
    }
    CooTensor::new(dims.to_vec(), idx, vals).unwrap()
}

/// Factors in the loss's domain: `[0.2, 0.9)` for nonnegative losses, `[−0.6, 0.6)`
/// otherwise.
fn factors(dims: &[usize], rank: usize, loss: &Loss, seed: u64) -> Vec<Matrix<f64>> {
    let mut u = stream(seed ^ 0xabcdef);
    let nonneg = loss.lower_bound() == 0.0;
    dims.iter()
        .map(|&d| {
            Matrix::from_fn(d, rank, |_, _| {
                if nonneg {
                    0.2 + 0.7 * u()
                } else {
                    1.2 * u() - 0.6
                }
            })
        })
        .collect()
}

/// Every cell of `x` as a sample (stored value or 0) with weights from `w(l)`.
fn all_cells(x: &CooTensor, w: impl Fn(usize) -> f64) -> GcpSample {
    let dims = x.dims();
    let cells: usize = dims.iter().product();
    let mut value = vec![0.0; cells];
    for k in 0..x.nnz() {
        let c = x.coords(k);
        let mut l = 0;
        for m in (0..dims.len()).rev() {
            l = l * dims[m] + c[m] as usize;
        }
        value[l] = x.values()[k];
    }
    let mut s = GcpSample::new(dims);
    for (l, &v) in value.iter().enumerate() {
        let mut r = l;
        let c: Vec<u32> = dims
            .iter()
            .map(|&d| {
                let i = (r % d) as u32;
                r /= d;
                i
            })
            .collect();
        s.push(&c, v, w(l)).unwrap();
    }
    s
}

/// The brute-force gradient and loss of `Σ w f(x, m)` over `s`, entry by entry.
fn brute(s: &GcpSample, a: &[Matrix<f64>], loss: &Loss) -> (f64, Vec<Matrix<f64>>) {
    let rank = a[0].cols();
    let mut g: Vec<Matrix<f64>> = a.iter().map(|f| Matrix::zeros(f.rows(), rank)).collect();
    let mut f = 0.0;
    for k in 0..s.len() {
        let c = s.coord(k);
        let m: f64 = (0..rank)
            .map(|r| {
                c.iter()
                    .zip(a)
                    .map(|(&i, f)| f.get(i as usize, r))
                    .product::<f64>()
            })
            .sum();
        let (x, w) = (s.values()[k], s.weights()[k]);
        f += w * loss.value(x, m);
        let d = w * loss.deriv(x, m);
        for n in 0..a.len() {
            for r in 0..rank {
                let mut p = d;
                for (j, (&i, f)) in c.iter().zip(a).enumerate() {
                    if j != n {
                        p *= f.get(i as usize, r);
                    }
                }
                let i = c[n] as usize;
                let old = g[n].get(i, r);
                g[n].set(i, r, old + p);
            }
        }
    }
    (f, g)
}

fn assert_close(got: f64, want: f64, scale: f64, what: &str) {
    assert!(
        (got - want).abs() <= 1e-10 * scale.max(1.0),
        "{what}: got {got}, want {want}"
    );
}

twin!(brute_force, |engine| {
    // Every cell is in the sample. On the CPU, samples of up to 65 536 entries take
    // the fused pass: the kernels compiled for orders 2 to 6 at widths 4, 8, 16, 32
    // and 64 (ranks 3, 5, 20 and 40 padded to the next), the generic loops (order 7,
    // and order 3 at rank 70), and (from 2048 entries) the pass in two halves.
    // Larger samples take the parallel passes: a mode with at most one row per 8
    // entries sums private outputs ([50, 40, 40]), the 12 000 rows of [12000, 3, 2]
    // take the row-block path.
    let cases: [(&[usize], usize); 20] = [
        (&[5, 4, 3], 3),
        (&[4, 3, 5], 70),
        (&[10, 9, 8], 20),
        (&[7, 6, 5], 40),
        (&[6, 5, 4], 64),
        (&[4, 3, 5, 6], 5),
        (&[3, 3, 2, 2, 3], 3),
        (&[9, 7], 5),
        (&[2, 3, 2, 3, 2, 2], 16),
        (&[2, 2, 2, 2, 2, 2, 3], 3),
        (&[3, 4, 2, 3], 3),
        (&[40, 3, 2], 3),
        (&[9, 8, 7], 4),
        (&[20, 15, 10], 16),
        (&[12, 11, 10], 32),
        (&[8, 7, 6, 5], 8),
        (&[4, 3, 5, 6], 16),
        (&[30, 20, 40], 8),
        (&[50, 40, 40], 8),
        (&[12000, 3, 2], 4),
    ];
    for (dims, rank) in cases {
        let dims = dims.to_vec();
        for (li, loss) in losses().iter().enumerate() {
            let x = tensor(&dims, loss, 11 + li as u64);
            let a = factors(&dims, rank, loss, 5 + li as u64);
            let s = all_cells(&x, |l| 0.5 + (l % 3) as f64);
            let (f_ref, g_ref) = brute(&s, &a, loss);
            let mut grads = Vec::new();
            let f = engine.gcp_gradient(&s, &a, loss, true, &mut grads).unwrap();
            assert_close(f, f_ref, f_ref.abs(), &format!("{loss} loss on {dims:?}"));
            let mut m = Vec::new();
            engine.gcp_values(&s, &a, &mut m).unwrap();
            assert_eq!(m.len(), s.len());
            for n in 0..dims.len() {
                let scale = g_ref[n].data().iter().fold(0.0f64, |s, v| s.max(v.abs()));
                for (k, (&g, &r)) in grads[n].data().iter().zip(g_ref[n].data()).enumerate() {
                    assert_close(
                        g,
                        r,
                        scale,
                        &format!("{loss} mode {n} entry {k} on {dims:?}"),
                    );
                }
            }
        }
    }
});

twin!(central_differences, |engine| {
    let dims = [4, 3, 5];
    for (li, loss) in losses().iter().enumerate() {
        let x = tensor(&dims, loss, 40 + li as u64);
        let a = factors(&dims, 2, loss, 50 + li as u64);
        let s = all_cells(&x, |_| 1.0);
        let mut grads = Vec::new();
        engine
            .gcp_gradient(&s, &a, loss, false, &mut grads)
            .unwrap();
        for n in 0..dims.len() {
            for (i, r) in [(0, 0), (dims[n] - 1, 1)] {
                let h = 1e-6;
                let mut plus = a.clone();
                plus[n].set(i, r, a[n].get(i, r) + h);
                let mut minus = a.clone();
                minus[n].set(i, r, a[n].get(i, r) - h);
                let mut scratch = Vec::new();
                let fp = engine
                    .gcp_gradient(&s, &plus, loss, true, &mut scratch)
                    .unwrap();
                let fm = engine
                    .gcp_gradient(&s, &minus, loss, true, &mut scratch)
                    .unwrap();
                let fd = (fp - fm) / (2.0 * h);
                let g = grads[n].get(i, r);
                // Huber's kink may lie between the two points: a looser bound there.
                let tol = if matches!(loss, Loss::Huber { .. }) {
                    1e-2
                } else {
                    1e-5
                };
                assert!(
                    (fd - g).abs() <= tol * g.abs().max(1.0),
                    "{loss} mode {n} ({i}, {r}): gradient {g}, finite difference {fd}"
                );
            }
        }
    }
});

#[test]
fn gradient_is_the_same_for_any_thread_count_and_rejects_bad_shapes() {
    let loss = Loss::PoissonLog;
    let dims = [300, 7, 90];
    let x = tensor(&[6, 7, 9], &loss, 3);
    let a = factors(&dims, 5, &loss, 9);
    let mut s = GcpSample::new(&dims);
    let mut u = stream(77);
    for k in 0..20_000 {
        let c = [
            (u() * 300.0) as u32,
            (u() * 7.0) as u32,
            (u() * 90.0) as u32,
        ];
        s.push(&c, (k % 4) as f64, 0.5).unwrap();
    }
    let run = |threads| {
        let e = Engine::cpu_with(CpuOptions {
            threads: Some(threads),
            ..CpuOptions::default()
        })
        .unwrap();
        let mut g = Vec::new();
        let f = e.gcp_gradient(&s, &a, &loss, true, &mut g).unwrap();
        (f.to_bits(), g)
    };
    assert_eq!(run(1), run(3));
    let engine = Engine::cpu();
    let mut g = Vec::new();
    let wrong = factors(x.dims(), 5, &loss, 1);
    let err = engine
        .gcp_gradient(&s, &wrong, &loss, false, &mut g)
        .unwrap_err();
    assert!(err.to_string().contains("GCP factor of mode 0"), "{err}");
    let err = s.push(&[300, 0, 0], 1.0, 1.0).unwrap_err();
    assert!(err.to_string().contains("GCP sample entry"), "{err}");
}

/// Asserts that the CPU gradient of every cell of a tensor of extents `dims` at rank
/// `rank` (seeds from `seed`) is the same bits, value included, on 1, 2 and 3 workers,
/// with every [`GcpSpread`]; that the stages give the one piece's bits; and that the
/// halves and the one piece agree to rounding.
fn assert_same_bits_for_any_thread_count(dims: &[usize], rank: usize, seed: u64) {
    let loss = &losses()[0];
    let x = tensor(dims, loss, seed);
    let a = factors(dims, rank, loss, seed + 1);
    let s = all_cells(&x, |l| 0.25 + (l % 5) as f64);
    let run = |threads, spread| {
        let engine = Engine::cpu_with(CpuOptions {
            threads: Some(threads),
            ..Default::default()
        })
        .unwrap();
        let mut grads = Vec::new();
        let f = engine
            .gcp_gradient_spread(&s, &a, loss, true, &mut grads, spread)
            .unwrap();
        (f.to_bits(), grads)
    };
    for spread in [GcpSpread::Workers, GcpSpread::Caller, GcpSpread::Staged] {
        let one = run(1, spread);
        for threads in [2, 3] {
            assert!(
                run(threads, spread) == one,
                "{dims:?} {spread:?}: {threads} workers"
            );
        }
    }
    // The stages are the one piece's terms in its order: its bits.
    for threads in [2, 3] {
        assert!(
            run(threads, GcpSpread::Staged) == run(threads, GcpSpread::Caller),
            "{dims:?}: stages against one piece on {threads} workers"
        );
    }
    // The two spreads add the same terms in another order: apart by at most
    // (N − 1)·ε·Σ|terms| per entry, N ≤ the sample's length; 1e-10 of the mode's largest
    // entry leaves room for Σ|terms| up to ~10⁵/N times it.
    let (workers, caller) = (run(2, GcpSpread::Workers).1, run(2, GcpSpread::Caller).1);
    for (mode, (w, c)) in workers.iter().zip(&caller).enumerate() {
        let scale = w.data().iter().fold(0.0f64, |m, v| m.max(v.abs()));
        for (x, y) in w.data().iter().zip(c.data()) {
            assert!(
                x.is_finite() && y.is_finite(),
                "{dims:?} mode {mode}: not finite"
            );
            assert!(
                (x - y).abs() <= 1e-10 * scale,
                "{dims:?} mode {mode}: {x} vs {y}"
            );
        }
    }
}

/// The CPU gradient is the same bits on 1, 2 and 3 workers, on both of its parallel
/// paths (a sample of 72 000 entries: private outputs summed in range order for the
/// small modes, row blocks for the 12 000 rows of the first mode, more than one per 8
/// entries) and, asked for in one piece, on the fused pass and in its stages; its value
/// too.
#[test]
fn cpu_gradient_is_the_same_for_any_thread_count() {
    assert_same_bits_for_any_thread_count(&[12000, 3, 2], 4, 71);
}

/// The fused pass in two halves (a sample of 3000 entries, the order-3 rank-16 kernel)
/// gives the same bits on 1, 2 and 3 workers.
#[test]
fn cpu_fused_gradient_is_the_same_for_any_thread_count() {
    assert_same_bits_for_any_thread_count(&[20, 15, 10], 16, 81);
}
