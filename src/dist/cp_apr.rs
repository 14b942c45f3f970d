//! CP-APR over a partition of ranks: the single-process algorithm of
//! [`crate::decomp::cp_apr()`] (same initial factors, same multiplicative updates, same
//! log-likelihood), with the factor rows spread as [`super::partition`] says.
//!
//! The partition may be the medium-grained grid or the coarse-grained variant (every
//! rank over whole modes); the steps are the same. Every rank keeps, in f64, the rows
//! of each mode's slab that its block uses; the owners of a row (see
//! [`super::partition::Partition::owned`]) are the ones that update it. Per mode `n`, on every rank:
//! 1. the owners move their inadmissible zeros (from their rows' last Φ) and scale
//!    their rows by `λ`;
//! 2. the rank's Φ session ([`crate::engine::PhiRun`]) is fixed on mode `n` with the
//!    slabs of the other modes;
//! 3. MU's inner iterations ([`crate::math::mu::inner_iterations_combined`]) on the
//!    owned rows, each Φ evaluation being: the owned rows of `B` gathered by every
//!    member of the slab's layer (the ranks whose blocks use them), Φ of the rank's
//!    block for the slab (a partial sum over its nonzeros), the partial rows reduced to
//!    their owners (one all-to-all in the layer, summed in rank order); the KKT
//!    violation is the largest over all ranks, so every rank stops after the same
//!    evaluation;
//! 4. the column sums all-reduced into `λ`, the owners normalize, and the layer gathers
//!    the normalized rows.
//!
//! A mode held on its used rows ([`super::exchange::UsedIndices`]) runs as the single
//! process runs it on those rows: the start's column sums are over the tensor's rows
//! (each rank's owned rows standing for the empty rows after them), and the mode's
//! first KKT violation counts the rows left out.
//!
//! The log-likelihood: each rank's log term from its session (fixed on the last mode),
//! summed, minus `Σ_r λ_r Π_n Σ_i A_n[i, r]` from the all-reduced column sums. At the
//! end the components are ordered as the single process orders them; the factors stay
//! spread over the ranks, and [`super::output`] writes them.
//! Φ runs in the backend's f64 session where every rank has one (the CPU's), and per
//! call in f32 on every rank otherwise (`super::block_phi`), as the single process
//! does on such a backend.

use super::block_phi::BlockPhi;
use super::comm::{Channel, DistResult, Failure, Reduce};
use super::cp_als::{RankStats, peak_memory};
use super::exchange::Block;
use super::init::start_rows;
use super::output::{Arrangement, SpreadFactors, by_weight};
use crate::decomp::cp_apr::{
    AprScale, LeftOut, check_not_collapsed, column_sums, fix_inadmissible, has_unsure_zero,
    largest_left_out, negative_values, non_integer_values, normalize, scale_columns,
};
use crate::decomp::{CpAprIter, CpAprModel, CpAprOptions, NonInteger};
use crate::engine::{Engine, PhiParams, Prepared, ValueCensus, Workload};
use crate::error::{Error, Result};
use crate::math::mu::{inner_iterations_combined, nan_max};
use crate::ops::Op;
use std::cell::RefCell;
use std::ops::Range;
use std::time::Instant;

/// The outcome of a distributed CP-APR on one rank.
#[derive(Debug)]
pub struct DistCpApr {
    /// The model's weights (in the single process's order), log-likelihood,
    /// iterations and warnings, on every rank (the kernel times and bytes of the
    /// iterations this rank's own). Its `factors` are empty: they stay spread over the
    /// ranks ([`DistCpApr::factors`]).
    pub model: CpAprModel,
    /// Per mode, the rows this rank owns, `R` values each, as the iterations left
    /// them.
    pub owned: Vec<Vec<f64>>,
    /// The single process's order of the components.
    pub arrangement: Arrangement,
    /// Φ evaluations of each mode, summed over the iterations (the same on every
    /// rank).
    pub evaluations: Vec<u64>,
    /// This rank's figures (its peak memory as of the end of the iterations).
    pub stats: RankStats,
    /// The power of two the values ran divided by, where they are far below 1.
    pub scale: Option<AprScale>,
}

impl DistCpApr {
    /// The factors, spread over the ranks as `block`'s partition says (the one of the
    /// run), on the tensor's rows.
    pub fn factors<'a>(&'a self, block: &'a Block) -> SpreadFactors<'a, f64> {
        SpreadFactors {
            partition: &block.partition,
            rows: self.owned.iter().map(Vec::as_slice).collect(),
            arrangement: self.arrangement.clone(),
            tensor_rows: block.rows.as_ref(),
        }
    }
}

/// `r` relative to `base`, scaled to entries of rows of `rank` values.
fn entries(r: Range<usize>, base: usize, rank: usize) -> Range<usize> {
    (r.start - base) * rank..(r.end - base) * rank
}

/// The power of two the values run divided by ([`AprScale`], from the RMS over every
/// rank's values) and the run's values' sum over every rank; `block`'s values
/// multiplied into the run's units. `None` (and the values as they are) where they run
/// as given.
fn run_units(ch: &Channel, block: &mut Block) -> Option<(AprScale, f64)> {
    // The RMS as `rms_about` forms it: the largest magnitude first, then the mean
    // square of the values divided by it.
    let most = block.largest_magnitude(ch);
    let mut sq = [block
        .tensor
        .values()
        .iter()
        .map(|v| (v / most).powi(2))
        .sum::<f64>()];
    ch.reduce_f64(&mut sq, Reduce::Sum);
    let rms = if most > 0.0 && most.is_finite() {
        most * (sq[0] / block.nnz.max(1) as f64).sqrt()
    } else {
        most
    };
    let scale = AprScale::of_rms(rms)?;
    block.tensor.map_values(|v| scale.to_run(v));
    let mut sum = [block.tensor.values().iter().sum::<f64>()];
    ch.reduce_f64(&mut sum, Reduce::Sum);
    Some((scale, sum[0]))
}

/// The checks of the tensor's values of census `c` (negative values refused,
/// non-integers a warning or an error per `non_integer`), over every rank's block; the
/// warnings and whether some value is positive.
fn census(
    ch: &Channel,
    c: &ValueCensus,
    non_integer: NonInteger,
    nnz: u64,
) -> DistResult<(Vec<String>, bool)> {
    let mut n = [c.negative as u64, c.non_integer as u64, c.nonzero as u64];
    ch.reduce_u64(&mut n, Reduce::Sum);
    ch.agree(if c.negative > 0 {
        Err(negative_values(n[0], c.first_negative.unwrap_or(f64::NAN)))
    } else {
        Ok(())
    })?;
    let mut warnings = Vec::new();
    if n[1] > 0 && non_integer != NonInteger::Allow {
        let firsts = ch.gather_u64(c.first_non_integer.unwrap_or(f64::NAN).to_bits());
        let first = firsts
            .iter()
            .map(|&b| f64::from_bits(b))
            .find(|v| !v.is_nan())
            .unwrap_or(f64::NAN);
        let what = non_integer_values(n[1], nnz, first);
        match non_integer {
            NonInteger::Error => ch.agree(if ch.rank() == 0 {
                Err(Error::InvalidTensor(what))
            } else {
                Ok(())
            })?,
            _ => warnings.push(what),
        }
    }
    if n[2] == 0 {
        warnings.push("the tensor has no nonzero value: the model is zero".into());
    }
    Ok((warnings, n[2] > 0))
}

/// CP-APR of the tensor split as `block` on every rank of `ch`, each with its own
/// `engine` (see the [module documentation](self)); `progress` is called after every
/// outer iteration on every rank.
///
/// Where `block` holds the used rows of some modes ([`Block::rows`]), the run is the
/// single process's on those rows ([`crate::decomp::cp_apr::cp_apr_on_rows`]): the
/// start's column sums and the first KKT violation of such a mode take in the rows
/// left out. Where such a mode does not update in the first iteration, the run stops
/// there with `None`, on every rank: the single process then runs on every row, and
/// so must the caller (distributing the tensor without a CP rank).
///
/// Values whose RMS (over every rank) is far below 1 run multiplied by a power of two,
/// as the single process runs them ([`crate::decomp::cp_apr::units`]): `block`'s values
/// are multiplied in place for the run (and left so); the model, its log-likelihoods
/// and what `progress` hears are in the given units.
pub fn cp_apr(
    ch: &Channel,
    engine: &Engine,
    block: &mut Block,
    opts: &CpAprOptions,
    progress: &mut dyn FnMut(&CpAprIter),
) -> DistResult<Option<DistCpApr>> {
    // The values' checks read them as given, before any change of units.
    let given = ValueCensus::of_values(block.tensor.values().iter().copied());
    let scale = run_units(ch, block);
    let dims = &block.dims;
    let order = dims.len();
    let rank = opts.rank;
    let me = ch.rank();
    let part = &block.partition;
    ch.agree(if order < 2 {
        Err(Error::InvalidTensor(format!(
            "a decomposition needs a tensor of order ≥ 2, got order {order}"
        )))
    } else {
        opts.validate(block.tensor_dims())
    })?;
    let divided;
    let opts = match (scale, &opts.init) {
        (Some((s, _)), Some(init)) => {
            let mut init = init.clone();
            ch.agree(s.divide_init(&mut init))?;
            divided = CpAprOptions {
                init: Some(init),
                ..opts.clone()
            };
            &divided
        }
        _ => opts,
    };
    let mut progress = |s: &CpAprIter| match scale {
        Some((scale, sum)) => progress(&scale.iteration(s, sum)),
        None => progress(s),
    };
    let block = &*block;
    let local_nnz = block.tensor.nnz();
    let w = Workload {
        op: Op::Mttkrp,
        rank,
    };
    let mut model =
        super::plan::cp_apr_model(part, order, (local_nnz, rank), me, engine.offers_phi_runs());
    if let Some(rows) = &block.rows {
        super::plan::add_start_draw(&mut model, part, rows, rank, me);
    }
    ch.agree(super::plan::block_plan(engine, block, w, ("CP-APR", &model), false, me).check())?;
    let prepared: Option<Prepared> = ch.agree(if local_nnz > 0 {
        engine.prepare(&block.tensor, &[w]).map(Some)
    } else {
        Ok(None)
    })?;
    let (warnings, positive) = census(ch, &given, opts.non_integer, block.nnz)?;
    // The f64 session where the backend offers one; Op::Phi per call in f32 otherwise,
    // on every rank when some rank has no session (the ranks' arithmetic stays one).
    let run = ch.agree(match &prepared {
        Some(x) => engine.phi_run(x, rank),
        None => Ok(None),
    })?;
    let per_call = {
        let mut p = [u64::from(local_nnz > 0 && run.is_none())];
        ch.reduce_u64(&mut p, Reduce::Sum);
        p[0] > 0
    };
    let mut phi = BlockPhi::new(
        engine,
        prepared.as_ref(),
        if per_call { None } else { run },
        rank,
    );

    // Each rank's slab rows of the single process's initial factors, in f64, divided
    // by the whole columns' sums into λ: the sums over the tensor's rows every rank's
    // owned rows stand for (a mode held on its used rows has its empty rows there too),
    // all-reduced. For such a mode, each column's largest entry over the rows left out
    // besides, which the single process's first KKT violation of the mode reads.
    let slab_rows: Vec<Range<usize>> = (0..order).map(|m| part.slab(m, me)).collect();
    let own: Vec<Range<usize>> = (0..order)
        .map(|m| entries(part.owned(m, me), slab_rows[m].start, rank))
        .collect();
    let mut slabs: Vec<Vec<f64>> = Vec::with_capacity(order);
    let mut left = LeftOut {
        sums: Vec::with_capacity(order),
        largest: Vec::with_capacity(order),
    };
    let mut lambda = vec![1.0f64; rank];
    for (m, slab) in slab_rows.iter().enumerate() {
        let owned = part.owned(m, me);
        let (f, spanned) = start_rows(
            opts.init.as_deref(),
            opts.seed,
            m,
            rank,
            (slab.clone(), owned.clone()),
            block.rows.as_ref(),
        );
        let mut sums = column_sums(spanned.data(), rank);
        ch.reduce_f64(&mut sums, Reduce::Sum);
        let used = (block.rows.as_ref())
            .and_then(|r| r.used[m].as_deref().map(|u| (r.span(m, owned.clone()), u)));
        left.largest.push(used.map(|(span, u)| {
            let mut top = largest_left_out(spanned.data(), rank, span.start, &u[owned], &sums);
            ch.reduce_f64(&mut top, Reduce::Max);
            top
        }));
        drop(spanned);
        let mut slab: Vec<f64> = f.data().iter().map(|&v| f64::from(v)).collect();
        normalize(&mut slab, &sums);
        for (l, s) in lambda.iter_mut().zip(&sums) {
            *l *= s;
        }
        slabs.push(slab);
        left.sums.push(sums);
    }
    let layers: Vec<Channel> = (0..order).map(|m| ch.split(part.layer(m, me))).collect();
    let routes = super::routes::of_block(block, &layers, me);
    let ll_mode = if per_call {
        (0..order).min_by_key(|&m| dims[m]).expect("order ≥ 2")
    } else {
        order - 1
    };
    let params = PhiParams {
        eps: opts.eps as f32,
        log_term: false,
    };

    let (bytes0, comm0) = (ch.traffic().bytes.get(), ch.traffic().seconds.get());
    let start = Instant::now();
    let mut compute = 0.0;
    // The last Φ of each mode's owned rows (for the inadmissible zeros).
    let mut phis: Vec<Vec<f64>> = vec![Vec::new(); order];
    let mut kkt = vec![0.0f64; order];
    let mut evaluations = vec![0u64; order];
    let mut iters: Vec<CpAprIter> = Vec::new();
    let mut converged = false;
    for it in 0..opts.max_iters {
        let t0 = Instant::now();
        let c0 = ch.traffic().seconds.get();
        let (k0, to0, from0) = (phi.kernel, phi.to_device, phi.from_device);
        let mut all_met = true;
        let mut inner_iters = 0;
        let mut moved = vec![0.0f64; order];
        for n in 0..order {
            let o = own[n].clone();
            // 1. Inadmissible zeros, and the weights into this mode (owned rows).
            if it > 0
                && fix_inadmissible(
                    &mut slabs[n][o.clone()],
                    &phis[n],
                    opts.kappa_tol,
                    opts.kappa,
                )
            {
                moved[n] = 1.0;
            }
            // The violation of the rows left out, in the first iteration (the only one
            // they are not zero in).
            let left_violation = left.violation(n, &lambda).filter(|_| it == 0);
            scale_columns(&mut slabs[n][o.clone()], &lambda);
            lambda.fill(1.0);
            // 2. The session on this mode, the other slabs fixed.
            ch.agree(phi.fix(n, &slabs))?;
            // 3. MU's inner iterations, each Φ from every block of the layer.
            phis[n].resize(o.len(), 0.0);
            let layer = &layers[n];
            let failed: RefCell<Option<Failure>> = RefCell::new(None);
            let slab_rows = part.slab(n, me).len();
            let evaluate = |b: &[f64], out: &mut [f64]| -> Result<(u64, u64)> {
                // The rows of `B` this block uses (it reads no others); the owned rows
                // themselves where they are the slab.
                let gathered = (!routes[n].alone()).then(|| {
                    let mut slab_b = vec![0.0; slab_rows * rank];
                    routes[n].gather(layer, b, rank, &mut slab_b);
                    slab_b
                });
                let (to, from) = (phi.to_device, phi.from_device);
                let done = phi.phi(gathered.as_deref().unwrap_or(b), params);
                // Freed before the partial Φ rows arrive: one slab-sized buffer at a time.
                drop(gathered);
                if let Err(f) = ch.agree(done) {
                    *failed.borrow_mut() = Some(f);
                    return Err(Error::Numerical("Φ failed on some rank".into()));
                }
                routes[n].reduce(layer, &phi.out, rank, out);
                Ok((phi.to_device - to, phi.from_device - from))
            };
            let largest = |v: f64| -> Result<f64> {
                // NaN travels as a flag: a maximum over NaN is not defined.
                let mut m = [if v.is_nan() { 0.0 } else { v }, f64::from(v.is_nan())];
                ch.reduce_f64(&mut m, Reduce::Max);
                Ok(if m[1] > 0.0 { f64::NAN } else { m[0] })
            };
            let done = inner_iterations_combined(
                evaluate,
                largest,
                &mut slabs[n][o.clone()],
                opts.max_inner,
                opts.tol,
                &mut phis[n],
            );
            let inner = match done {
                Ok(inner) => inner,
                Err(e) => return Err(failed.into_inner().unwrap_or(Failure::Here(e))),
            };
            evaluations[n] += inner.evaluations as u64;
            inner_iters += inner.evaluations;
            if inner.evaluations > 0 {
                kkt[n] = inner.violation;
            }
            if let Some(v) = left_violation {
                if !inner.updated {
                    // The single process's rows left out would have kept their
                    // start: the run gives way to one on every row (on every rank:
                    // `updated` is the same on all).
                    return Ok(None);
                }
                // The first evaluation's violation counted them; an update zeroed them.
                if inner.evaluations == 1 {
                    kkt[n] = nan_max(kkt[n], v);
                }
            }
            if inner.updated {
                all_met = false;
            }
            // 4. The weights back out of this mode; the layer gets the new rows.
            let mut sums = column_sums(&slabs[n][o.clone()], rank);
            ch.reduce_f64(&mut sums, Reduce::Sum);
            normalize(&mut slabs[n][o.clone()], &sums);
            lambda.copy_from_slice(&sums);
            if !routes[n].alone() {
                let mine = slabs[n][o.clone()].to_vec();
                routes[n].gather(&layers[n], &mine, rank, &mut slabs[n]);
            }
            // 5. With the f32 Φ: where the next iteration's inadmissible-zero test
            //    would read a Φ of 0 that f64 keeps positive, mark it positive (as the
            //    single process does).
            if per_call && opts.kappa > 0.0 {
                let unsure = has_unsure_zero(&slabs[n][o], &phis[n], opts.kappa_tol);
                let mut any = [u64::from(unsure)];
                ch.reduce_u64(&mut any, Reduce::Sum);
                if any[0] > 0 {
                    let mut partial = Vec::new();
                    ch.agree(phi.support(n, &slabs, &mut partial))?;
                    let mut support = vec![0.0; phis[n].len()];
                    routes[n].reduce(layer, &partial, rank, &mut support);
                    for (p, &s) in phis[n].iter_mut().zip(&support) {
                        if *p == 0.0 && s > 0.0 {
                            *p = f64::from(f32::MIN_POSITIVE);
                        }
                    }
                }
            }
        }
        // The log-likelihood's Φ: with the session on the last mode, fixed with the
        // final factors of the others; per call on the smallest mode (the single
        // process's choices).
        if ll_mode != order - 1 {
            ch.agree(phi.fix(ll_mode, &slabs))?;
        }
        let mut b = slabs[ll_mode].clone();
        scale_columns(&mut b, &lambda);
        let log_term = ch.agree(phi.phi(
            &b,
            PhiParams {
                log_term: true,
                ..params
            },
        ))?;
        let mut buf = vec![log_term];
        for m in 0..order {
            buf.extend(column_sums(&slabs[m][own[m].clone()], rank));
        }
        buf.extend_from_slice(&moved);
        buf.push(f64::from(start.elapsed().as_secs_f64() > opts.max_seconds));
        ch.reduce_f64(&mut buf, Reduce::Sum);
        let total: f64 = (0..rank)
            .map(|r| (0..order).fold(lambda[r], |p, m| p * buf[1 + m * rank + r]))
            .sum();
        let log_likelihood = buf[0] - total;
        ch.agree(if log_likelihood.is_finite() {
            Ok(())
        } else {
            Err(Error::NonFinite(format!(
                "the log-likelihood is {log_likelihood} (Σ x log m = {}, Σ m = {total})",
                buf[0]
            )))
        })?;
        let flags = &buf[1 + order * rank..];
        let stats = CpAprIter {
            iter: it,
            log_likelihood,
            kkt_violation: kkt.iter().copied().fold(0.0, f64::max),
            inner_iters,
            violations: flags[..order].iter().filter(|&&f| f > 0.0).count(),
            seconds: t0.elapsed().as_secs_f64(),
            seconds_kernel: phi.kernel - k0,
            bytes_to_device: phi.to_device - to0,
            bytes_from_device: phi.from_device - from0,
        };
        compute += stats.seconds - (ch.traffic().seconds.get() - c0);
        iters.push(stats);
        progress(&stats);
        if all_met {
            converged = true;
            break;
        }
        if flags[order] > 0.0 {
            break;
        }
    }
    let traffic = ch.traffic();
    let stats = RankStats {
        rank: me,
        nnz: local_nnz as u64,
        peak_bytes: 0,
        planned_bytes: 0,
        compute_seconds: compute,
        comm_seconds: traffic.seconds.get() - comm0,
        bytes_per_iter: (traffic.bytes.get() - bytes0) / iters.len().max(1) as u64,
        model_rows_bytes: (routes.iter().zip(&evaluations))
            .map(|(rt, &e)| {
                // Per evaluation `B` out and Φ back; the normalized rows out once.
                let (reduced, gathered) = rt.rows_sent();
                let e = e as f64 / iters.len().max(1) as f64;
                let rows = e * (reduced + gathered) as f64 + gathered as f64;
                (rows * rank as f64 * super::volume::APR_VALUE_BYTES as f64).round() as u64
            })
            .sum(),
        values: (prepared.as_ref())
            .and_then(|x| x.hls(w.op).ok())
            .map(|h| h.stats().value_report()),
    };
    // The single process's order of the components; its checks of the model, each
    // rank over the rows it owns.
    let perm = by_weight(&lambda);
    let weights: Vec<f64> = perm.iter().map(|&k| lambda[k]).collect();
    let owned: Vec<Vec<f64>> = slabs
        .into_iter()
        .zip(&own)
        .map(|(s, o)| s[o.clone()].to_vec())
        .collect();
    ch.agree(check_not_collapsed(positive, &weights, &owned, iters.len()))?;
    let mut model = CpAprModel {
        weights,
        factors: Vec::new(),
        log_likelihood: iters.last().map_or(0.0, |s| s.log_likelihood),
        iters,
        converged,
        warnings,
    };
    if let Some((scale, sum)) = scale {
        // `iters` holds the run's log-likelihoods (`progress` heard them converted).
        scale.model(&mut model, sum);
    }
    Ok(Some(DistCpApr {
        model,
        scale: scale.map(|(s, _)| s),
        owned,
        arrangement: Arrangement {
            perm,
            scale: vec![None; order],
        },
        evaluations,
        stats: RankStats {
            peak_bytes: peak_memory(),
            planned_bytes: crate::memplan::largest_checked(),
            ..stats
        },
    }))
}
