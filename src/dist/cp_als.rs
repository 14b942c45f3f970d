//! CP-ALS over a partition of ranks: the single-process algorithm of
//! [`crate::decomp::cp_als()`] (same initial factors, same updates, same fit), with the
//! factor rows spread as [`super::partition`] says.
//!
//! Per mode `n`, on every rank:
//! 1. the MTTKRP of its block on its own engine, giving partial rows of its slab;
//! 2. the partial rows reduced to their owners within the slab's layer: those of the
//!    rows the block uses (`super::routes`), in one all-to-all; the owner sums them
//!    in f64, in rank order;
//! 3. the owners solve their rows with the same `R × R` system every rank forms from
//!    the Grams; the Gram, column norms and inner products of the new rows are summed
//!    (or, for max-norms, maximized) over all ranks, then every owner normalizes its
//!    rows;
//! 4. the updated rows sent to the members of the layer whose blocks use them.
//!
//! The fit comes from the same all-reduced scalars. At the end the model is arranged as
//! the single process arranges it (column norms summed in row order over the owners);
//! the factors stay spread over the ranks, and [`super::output`] writes them.

use super::comm::{Channel, DistResult, Failure, Reduce};
use super::exchange::Block;
use super::init::{rows_of, start_rows};
use super::output::{Arrangement, SpreadFactors, by_weight, ordered_column_sums};
use super::partition::Partition;
use crate::decomp::cp_als::{
    CpModel, CpOptions, RowSums, cp_residual, finish, hadamard_except, rescale_by_max, solve_rows,
};
use crate::decomp::cp_apr::units::times_pow2;
use crate::decomp::dense::{SolveKind, gram, inverse_spd};
use crate::decomp::{IterClock, IterStats, fit_from, residual, residual_rounding};
use crate::engine::{Call, ColumnMax, Engine, Prepared, Workload};
use crate::error::Error;
use crate::matrix::Matrix;
use crate::ops::Op;
use faer::Mat;
use std::ops::ControlFlow;

/// What one rank did in a distributed run.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct RankStats {
    /// The rank.
    pub rank: usize,
    /// Nonzeros in its block.
    pub nnz: u64,
    /// Peak resident memory of the process, bytes (0 where the system does not say).
    pub peak_bytes: u64,
    /// The largest memory plan the process checked, bytes (its block's, as a rule):
    /// what it expected to allocate, to read beside `peak_bytes`.
    pub planned_bytes: u64,
    /// Seconds of its own work in the iterations (kernels and dense algebra).
    pub compute_seconds: f64,
    /// Seconds inside collectives during the iterations (waiting included).
    pub comm_seconds: f64,
    /// Bytes it sent to other ranks per iteration (mean over the iterations).
    pub bytes_per_iter: u64,
    /// The bytes of factor rows its exchange sends per iteration by the model, from the
    /// rows its routes move (`super::routes`): what `bytes_per_iter` holds besides the
    /// small all-reduces.
    pub model_rows_bytes: u64,
    /// How its block's values are stored (`None` for a block without nonzeros): each
    /// rank chooses for its own block under `--values`.
    pub values: Option<crate::hls::ValueReport>,
}

/// The outcome of a distributed CP-ALS on one rank.
#[derive(Debug)]
pub struct DistCp {
    /// The model's weights (in the single process's order), fits, iterations and
    /// solves, on every rank. Its `factors` are empty: they stay spread over the ranks
    /// ([`DistCp::factors`]), and leave by [`super::output::write_factors`].
    pub model: CpModel,
    /// Per mode, the rows this rank owns (not yet arranged).
    pub owned: Vec<Matrix>,
    /// How the single process arranges the factors (column scales and order).
    pub arrangement: Arrangement,
    /// This rank's figures (its peak memory as of the end of the iterations).
    pub stats: RankStats,
}

impl DistCp {
    /// The factors, spread over the ranks as `block`'s partition says (the one of the
    /// run), on the tensor's rows.
    pub fn factors<'a>(&'a self, block: &'a Block) -> SpreadFactors<'a, f32> {
        SpreadFactors {
            partition: &block.partition,
            rows: self.owned.iter().map(Matrix::data).collect(),
            arrangement: self.arrangement.clone(),
            tensor_rows: block.rows.as_ref(),
        }
    }
}

/// The peak resident memory of this process (`VmHWM`), bytes; 0 where unknown.
pub fn peak_memory() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        })
        .map_or(0, |kb| kb * 1024)
}

/// The Gram matrix `AᵀA` of `rows` (some rows of a factor of `d` rows), row-major.
fn gram_of(rows: &Matrix) -> Vec<f64> {
    let g = gram(rows);
    let r = rows.cols();
    (0..r * r).map(|k| g[(k / r, k % r)]).collect()
}

/// CP-ALS of the tensor split as `block` on every rank of `ch`, each with its own
/// `engine`; `control` is called after every iteration (on every rank, with the same
/// statistics apart from times) and may stop the run.
///
/// Values far from 1 (their largest magnitude over every rank) run multiplied by a
/// power of two, as the single process runs them
/// ([`crate::driver::value_scale::ScaledValues`]): `block`'s values are multiplied in
/// place for the run (and left so); the weights come back in the given units, and the
/// fits are relative, the same in both.
pub fn cp_als(
    ch: &Channel,
    engine: &Engine,
    block: &mut Block,
    opts: &CpOptions,
    control: &mut dyn FnMut(&IterStats) -> ControlFlow<()>,
) -> DistResult<DistCp> {
    let power = run_units(ch, block);
    let block = &*block;
    let dims = &block.dims;
    let order = dims.len();
    let rank = opts.rank;
    let me = ch.rank();
    let part = &block.partition;
    ch.agree(opts.validate(block.tensor_dims()).and_then(|()| {
        if order < 2 {
            return Err(Error::InvalidTensor(format!(
                "a decomposition needs a tensor of order ≥ 2, got order {order}"
            )));
        }
        Ok(())
    }))?;
    let w = Workload {
        op: Op::Mttkrp,
        rank,
    };
    let mut model = super::plan::cp_als_model(part, order, rank, me);
    if let Some(rows) = &block.rows {
        super::plan::add_start_draw(&mut model, part, rows, rank, me);
    }
    ch.agree(super::plan::block_plan(engine, block, w, ("CP-ALS", &model), true, me).check())?;
    let prepared: Option<Prepared> = ch.agree(if block.tensor.nnz() > 0 {
        engine.prepare(&block.tensor, &[w]).map(Some)
    } else {
        Ok(None)
    })?;
    let mut norm_sq = [match &prepared {
        Some(x) => ch.agree(x.hls(Op::Mttkrp).map(|h| h.stats().norm_sq))?,
        None => ch.agree(Ok(0.0))?,
    }];
    ch.reduce_f64(&mut norm_sq, Reduce::Sum);
    let norm_sq = norm_sq[0];
    if !(norm_sq.is_finite() && norm_sq > 0.0) {
        let e = Error::InvalidTensor(format!(
            "the tensor's squared norm is {norm_sq}: every value rounds to zero in fp16 storage, or the fit is undefined"
        ));
        return Err(if me == 0 {
            Failure::Here(e)
        } else {
            Failure::Elsewhere
        });
    }

    // The single process's initial factors, rescaled as it does, each rank drawing only
    // its slabs' rows. The rescaling, the Grams and the column maxima are those of the
    // whole factors: from the rows of the tensor every rank's owned rows stand for (the
    // empty rows of a mode held on its used rows included), combined over the ranks.
    let mut slabs = Vec::with_capacity(order);
    let mut grams: Vec<Mat<f64>> = Vec::with_capacity(order);
    let mut col_max = ColumnMax::default();
    for m in 0..order {
        let rows = (part.slab(m, me), part.owned(m, me));
        let (mut f, mut spanned) = start_rows(
            opts.init.as_deref(),
            opts.seed,
            m,
            rank,
            rows,
            block.rows.as_ref(),
        );
        let mut largest = [f64::from(
            spanned.data().iter().fold(0.0f32, |a, v| a.max(v.abs())),
        )];
        ch.reduce_f64(&mut largest, Reduce::Max);
        rescale_by_max(&mut f, largest[0] as f32, 0.0..0.0);
        rescale_by_max(&mut spanned, largest[0] as f32, 0.0..0.0);
        let mut g = gram_of(&spanned);
        ch.reduce_f64(&mut g, Reduce::Sum);
        grams.push(Mat::from_fn(rank, rank, |i, j| g[i * rank + j]));
        let mut cmax: Vec<f64> = spanned
            .column_max_abs()
            .iter()
            .map(|&x| f64::from(x))
            .collect();
        ch.reduce_f64(&mut cmax, Reduce::Max);
        col_max.max.push(cmax.iter().map(|&x| x as f32).collect());
        slabs.push(f);
    }
    let layers: Vec<Channel> = (0..order).map(|m| ch.split(part.layer(m, me))).collect();
    let routes = super::routes::of_block(block, &layers, me);
    let mut owned: Vec<Matrix> = (0..order)
        .map(|m| rows_of(&slabs[m], rel(part.owned(m, me), part.slab(m, me).start)))
        .collect();

    let (bytes0, comm0) = (ch.traffic().bytes.get(), ch.traffic().seconds.get());
    let mut compute = 0.0;
    let mut weights = vec![1.0f64; rank];
    let mut fits = Vec::new();
    let mut pinv_solves = 0;
    let mut fit_old = 0.0;
    let mut iters: Vec<IterStats> = Vec::new();
    let mut local = Matrix::zeros(0, 0);
    // Which slabs changed since the last call, so a backend that keeps copies of the
    // factors (a GPU's, or the CPU's padded ones) refreshes only the one just updated.
    let mut versions = engine.factor_versions(order);
    for it in 0..opts.max_iters {
        let mut clock = IterClock::start();
        let mut inner = Vec::new();
        for n in 0..order {
            let last = n == order - 1;
            // 1. The block's partial rows.
            let slab = part.slab(n, me);
            let done = match &prepared {
                Some(x) => {
                    let call = Call {
                        col_max: Some(&col_max),
                        check_finite: false,
                        versions: Some(&versions),
                        ..Call::default()
                    };
                    clock.kernel(|| {
                        engine.run_into_with(Op::Mttkrp, x, n, &slabs, &call, &mut local)
                    })
                }
                None => {
                    local = Matrix::zeros(slab.len(), rank);
                    Ok(())
                }
            };
            ch.agree(done)?;
            // 2. Reduced to the owners.
            let layer = &layers[n];
            let own = part.owned(n, me).len();
            let mut m = Matrix::zeros(own, rank);
            routes[n].reduce(layer, local.data(), rank, m.data_mut());
            // 3. The owners' solve; the sums over every row combined.
            let a = &mut owned[n];
            let solved = clock.linalg(|| inverse_spd(&hadamard_except(&grams, n, rank)));
            let (w, kind) = ch.agree(solved)?;
            if kind == SolveKind::PseudoInverse {
                pinv_solves += 1;
            }
            let sums = clock.linalg(|| solve_rows(&m, &w, a, it == 0, last));
            let mut sums = ch.agree(sums.ok_or_else(|| {
                let e = Error::NonFinite(format!("MTTKRP of mode {n} in iteration {it}"));
                crate::decomp::with_overflow_hint(e, norm_sq)
            }))?;
            combine(ch, &mut sums);
            let update = clock.linalg(|| finish(&sums, a));
            let mut cmax: Vec<f64> = update.col_max.iter().map(|&x| x as f64).collect();
            ch.reduce_f64(&mut cmax, Reduce::Max);
            // 4. The new rows to the members of the layer that use them, into their
            //    slabs.
            drop(m);
            routes[n].gather(layer, a.data(), rank, slabs[n].data_mut());
            versions.changed(n);
            weights = update.norms;
            grams[n] = update.gram;
            col_max.max[n] = cmax.iter().map(|&x| x as f32).collect();
            if last {
                inner = update.inner;
            }
        }
        let rounding = residual_rounding(engine);
        let estimate = cp_residual(norm_sq, &weights, &grams, &inner);
        let fit_of = |r: f64| fit_from(norm_sq, r, rounding, || format!("CP-ALS iteration {it}"));
        // As the single process: in f64 from the stored values (each rank over its
        // block) where the kernels' inner product cannot resolve the residual, and for
        // the fit the run stops at. Every rank holds the same estimate, so all decide
        // alike with no collective; an estimate that makes no fit is agreed on below.
        let exact = estimate < residual::REFINE_WITHIN * rounding * norm_sq
            || it + 1 == opts.max_iters
            || (it > 0 && fit_of(estimate).is_ok_and(|f| (f - fit_old).abs() < opts.tol));
        let resid_sq = if exact {
            exact_residual(ch, engine, prepared.as_ref(), &weights, &slabs, &owned)?
        } else {
            estimate
        };
        let fit = ch.agree(fit_of(resid_sq))?;
        let delta = fit - fit_old;
        let stats = clock.finish(it, fit, delta);
        compute += stats.seconds_kernel + stats.seconds_linalg;
        fits.push(fit);
        iters.push(stats);
        if control(&stats).is_break() || (it > 0 && delta.abs() < opts.tol) {
            break;
        }
        fit_old = fit;
    }
    let traffic = ch.traffic();
    let stats = RankStats {
        rank: me,
        nnz: block.tensor.nnz() as u64,
        peak_bytes: 0,
        planned_bytes: 0,
        compute_seconds: compute,
        comm_seconds: traffic.seconds.get() - comm0,
        bytes_per_iter: (traffic.bytes.get() - bytes0) / iters.len().max(1) as u64,
        model_rows_bytes: (routes.iter())
            .map(|rt| {
                let (reduced, gathered) = rt.rows_sent();
                (reduced + gathered) * rank as u64 * super::volume::VALUE_BYTES
            })
            .sum(),
        values: (prepared.as_ref())
            .and_then(|x| x.hls(w.op).ok())
            .map(|h| h.stats().value_report()),
    };
    let (mut weights, arrangement) = arrange(ch, part, &owned, weights);
    ch.agree(if me == 0 && weights.iter().all(|&w| w == 0.0) {
        Err(Error::Numerical(format!(
            "CP-ALS collapsed to the zero model after {} iterations (every weight is 0, or its factor columns are): the products of factor entries underflow f32 over the tensor's {} modes, or the initial factors hold no usable column",
            iters.len(),
            order
        )))
    } else {
        Ok(())
    })?;
    if let Some(p) = power {
        weights.iter_mut().for_each(|w| *w = times_pow2(*w, -p));
    }
    ch.agree(crate::driver::check_finite("CP weights", &weights))?;
    Ok(DistCp {
        model: CpModel {
            weights,
            factors: Vec::new(),
            fits,
            iters,
            pinv_solves,
        },
        owned,
        arrangement,
        stats: RankStats {
            peak_bytes: peak_memory(),
            planned_bytes: crate::memplan::largest_checked(),
            ..stats
        },
    })
}

/// The power of two the values run multiplied by
/// ([`crate::driver::value_scale::power_for`] of the largest magnitude over every
/// rank), `block`'s values multiplied by it; `None` (and the values as they are) where
/// they run as given.
fn run_units(ch: &Channel, block: &mut Block) -> Option<i32> {
    let power = crate::driver::value_scale::power_for(block.largest_magnitude(ch))?;
    block.tensor.map_values(|v| times_pow2(v, power));
    Some(power)
}

/// `r` relative to `base`.
fn rel(r: std::ops::Range<usize>, base: usize) -> std::ops::Range<usize> {
    r.start - base..r.end - base
}

/// Sums (or maximizes) the row sums of every rank.
/// `‖X − X̂‖²` in f64 from the stored values: each rank's block with its slabs, and
/// `‖X̂‖²` from the Grams of the factors' rows as held (f32, each rank's owned rows),
/// as the single process takes them from its factors; the sums all-reduced (a rank
/// without nonzeros adds nothing to the first two).
fn exact_residual(
    ch: &Channel,
    engine: &Engine,
    prepared: Option<&Prepared>,
    weights: &[f64],
    slabs: &[Matrix],
    owned: &[Matrix],
) -> DistResult<f64> {
    let sums = match prepared {
        Some(x) => engine
            .cp_residual_sums(x, Op::Mttkrp, weights, slabs)
            .map(|s| [s.misfit, s.on_support]),
        None => Ok([0.0, 0.0]),
    };
    let mut s = ch.agree(sums)?;
    ch.reduce_f64(&mut s, Reduce::Sum);
    let r = weights.len();
    let mut grams = Vec::with_capacity(owned.len());
    for a in owned {
        let g = gram(a);
        let mut flat: Vec<f64> = (0..r * r).map(|k| g[(k / r, k % r)]).collect();
        ch.reduce_f64(&mut flat, Reduce::Sum);
        grams.push(Mat::from_fn(r, r, |i, j| flat[i * r + j]));
    }
    let model_sq = residual::cp_model_norm_sq(weights, &grams);
    Ok(s[0] + (model_sq - s[1]).max(0.0))
}

fn combine(ch: &Channel, sums: &mut RowSums) {
    let r = sums.norm.len();
    let mut buf: Vec<f64> = (0..r * r).map(|k| sums.gram[(k / r, k % r)]).collect();
    buf.extend_from_slice(&sums.inner);
    if sums.two_norm {
        buf.extend_from_slice(&sums.norm);
        ch.reduce_f64(&mut buf, Reduce::Sum);
        sums.norm.copy_from_slice(&buf[r * r + sums.inner.len()..]);
    } else {
        ch.reduce_f64(&mut buf, Reduce::Sum);
        ch.reduce_f64(&mut sums.norm, Reduce::Max);
    }
    sums.gram = Mat::from_fn(r, r, |i, j| buf[i * r + j]);
    let k = sums.inner.len();
    sums.inner.copy_from_slice(&buf[r * r..r * r + k]);
}

/// The single process's arrangement of the model (`decomp::cp_als::arrange`) from the
/// spread factors: every column scaled to unit 2-norm, the norms into the weights,
/// the components by decreasing weight. The norms are summed in row order over the
/// owners, as one process sums them over the whole factor, so the weights and the
/// scaled values are the same to the last bit. The weights in their order, and the
/// arrangement.
fn arrange(
    ch: &Channel,
    part: &Partition,
    owned: &[Matrix],
    mut weights: Vec<f64>,
) -> (Vec<f64>, Arrangement) {
    let r = weights.len();
    let mut scale = Vec::with_capacity(owned.len());
    for (m, a) in owned.iter().enumerate() {
        let sq = ordered_column_sums(ch, part, m, a.data(), r, |v| v * v);
        let norms: Vec<f64> = sq.iter().map(|s| s.sqrt()).collect();
        for (w, n) in weights.iter_mut().zip(&norms) {
            *w *= n;
        }
        scale.push(Some(
            norms
                .iter()
                .map(|&n| if n > 0.0 { 1.0 / n } else { 1.0 })
                .collect(),
        ));
    }
    let perm = by_weight(&weights);
    let weights = perm.iter().map(|&k| weights[k]).collect();
    (weights, Arrangement { perm, scale })
}
