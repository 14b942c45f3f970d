//! GCP by stochastic gradients with Adam, as GenTen's `gcp_sgd` with its stratified
//! sampler and its defaults (see [`GcpOptions`]).
//!
//! Sample sizes left at 0 take GenTen's defaults: for the loss estimate
//! `min(max(⌈nnz/100⌉, 100000), nnz)` nonzeros and as many zeros (at most the zero
//! cells); for each gradient `min(max(⌈3 nnz / epochs⌉, 1000), nnz)` nonzeros and as
//! many zeros. Weights are stratum size over draws.
//!
//! The loss estimate `F̂ = Σ w f(x, m)` is taken over one fixed sample (stream 0)
//! before the first epoch and after each. Epoch `e` runs `epoch_iters` iterations, each
//! with a fresh gradient sample (its own stream, drawn beside the previous iteration's
//! gradient), computing the sampled gradient
//! `G` on the engine and taking an Adam step on every factor entry:
//! `μ ← β₁μ + (1−β₁)G`, `ν ← β₂ν + (1−β₂)G²`,
//! `A ← max(A − α √(1−β₂ᵗ)/(1−β₁ᵗ) · μ / √(ν + ε), lb)` with `β₁ = 0.9`, `β₂ = 0.999`,
//! `ε = 1e-8` and `lb` the loss's lower bound. An epoch whose estimate is above the
//! last accepted one fails: the factors and Adam's moments return to where the epoch
//! began, `α` is multiplied by `decay`, and after more than `max_fails` failures the
//! run stops. Otherwise the run stops after `epochs` epochs.
//!
//! Values far from 1 run divided by a power of two ([`super::units`]); the losses
//! reported are the given values'.

use super::sample::{Sampler, Strata, cells};
use super::units::ValueScale;
use super::{GcpIter, GcpOptions, Loss};
use crate::engine::{Engine, GcpSample, GcpSpread};
use crate::error::Result;
use crate::matrix::Matrix;
use crate::tensor::CooTensor;
use rayon::prelude::*;
use std::ops::ControlFlow;
use std::time::Instant;

const BETA1: f64 = 0.9;
const BETA2: f64 = 0.999;
const ADAM_EPS: f64 = 1e-8;

/// A chunk of one factor for Adam: the factor's entries, the gradient's, `μ` and `ν`.
type AdamChunk<'a> = (((&'a mut [f64], &'a [f64]), &'a mut [f64]), &'a mut [f64]);

/// The sample sizes (loss estimate, gradient) a run on a tensor of extents `dims`
/// with `nnz` stored entries uses: `opts`' or GenTen's defaults.
pub fn strata(dims: &[usize], nnz: usize, opts: &GcpOptions) -> (Strata, Strata) {
    let zero_cells = (cells(dims) - nnz as f64).max(0.0);
    let zeros_like = |n: usize| (n as f64).min(zero_cells) as usize;
    let pick = |given: usize, default: usize| if given == 0 { default } else { given };
    let f_nz = pick(opts.value_nonzeros, nnz.div_ceil(100).max(100_000).min(nnz));
    let f_z = pick(opts.value_zeros, zeros_like(f_nz));
    let g_nz = pick(
        opts.grad_nonzeros,
        (3 * nnz).div_ceil(opts.epochs.max(1)).max(1000).min(nnz),
    );
    let g_z = pick(opts.grad_zeros, zeros_like(g_nz));
    (
        Strata::new(dims, nnz, f_nz, f_z),
        Strata::new(dims, nnz, g_nz, g_z),
    )
}

/// The loss of a run: the one it fits on the values as drawn, and the given one with
/// the values' divisor `c` ([`super::units`]).
struct Losses {
    fitted: Loss,
    given: Loss,
    c: f64,
}

/// `Σ w term(x, m)` over `sample` with its model values `m`, in fixed chunks (the same
/// sum for every thread count).
pub(super) fn sample_sum(
    sample: &GcpSample,
    m: &[f64],
    term: impl Fn(f64, f64) -> f64 + Sync,
) -> f64 {
    m.par_chunks(4096)
        .zip(sample.values().par_chunks(4096))
        .zip(sample.weights().par_chunks(4096))
        .map(|((m, x), w)| {
            m.iter()
                .zip(x)
                .zip(w)
                .map(|((&m, &x), &w)| w * term(x, m))
                .sum::<f64>()
        })
        .collect::<Vec<f64>>()
        .iter()
        .sum()
}

/// `Σ w f(x, m)` over `sample` for the fitted loss, and for the given loss and units
/// (`Σ w f(c x, c m)`, the same sum when `c` is 1).
fn estimate(
    engine: &Engine,
    sample: &GcpSample,
    factors: &[Matrix<f64>],
    losses: &Losses,
    m: &mut Vec<f64>,
) -> Result<(f64, f64)> {
    engine.gcp_values(sample, factors, m)?;
    let sum = |loss: &Loss, c: f64| sample_sum(sample, m, |x, m| loss.value(c * x, c * m));
    Ok(engine.install(|| {
        let fitted = sum(&losses.fitted, 1.0);
        if losses.c == 1.0 {
            (fitted, fitted)
        } else {
            (fitted, sum(&losses.given, losses.c))
        }
    }))
}

/// What a run returns: the factors, the final loss, the initial loss, every epoch, why
/// it stopped, and what the caller should know of the run (warnings).
pub(super) type Fitted = (
    Vec<Matrix<f64>>,
    f64,
    f64,
    Vec<GcpIter>,
    String,
    Vec<String>,
);

/// A run whose loss (in the units it ran in) moved by less than this share of itself
/// from the start over every epoch it was given is said to have stalled: a healthy run
/// moves by percents in its first epoch.
pub const STALLED: f64 = 1e-6;

/// Runs GCP-SGD from `factors` (see the [module documentation](self)), on the values
/// divided by `scale`'s power of two where it has one.
pub(super) fn run(
    engine: &Engine,
    x: &CooTensor,
    opts: &GcpOptions,
    factors: Vec<Matrix<f64>>,
    scale: Option<ValueScale>,
    progress: &mut dyn FnMut(&GcpIter) -> ControlFlow<()>,
) -> Result<Fitted> {
    let rank = factors.first().map_or(0, |f| f.cols());
    let rows: usize = factors.iter().map(|f| f.rows()).sum();
    // Factors with zero columns up to the gradient kernel's width where the engine
    // finds that pays: the gradient skips its per-entry row copies, and the zero
    // columns stay zero (their gradient and moments are 0), so the bits are those of
    // the run at the rank.
    let width = engine.gcp_sgd_width(x.order(), rank, rows);
    run_at_width(engine, x, opts, factors, scale, progress, width)
}

/// `factors` with `cols` columns each ([`Matrix::with_columns`]).
fn with_columns(factors: &[Matrix<f64>], cols: usize) -> Vec<Matrix<f64>> {
    factors.iter().map(|f| f.with_columns(cols)).collect()
}

/// [`run`] on factors widened with zero columns to `width` (at least their rank), the
/// result narrowed back to the rank.
fn run_at_width(
    engine: &Engine,
    x: &CooTensor,
    opts: &GcpOptions,
    factors: Vec<Matrix<f64>>,
    scale: Option<ValueScale>,
    progress: &mut dyn FnMut(&GcpIter) -> ControlFlow<()>,
    width: usize,
) -> Result<Fitted> {
    let rank = factors.first().map_or(0, |f| f.cols());
    let mut factors = if width > rank {
        with_columns(&factors, width)
    } else {
        factors
    };
    let start = Instant::now();
    let losses = Losses {
        fitted: scale.map_or(opts.loss, |s| s.loss(opts.loss)),
        given: opts.loss,
        c: scale.map_or(1.0, |s| s.values()),
    };
    let loss = losses.fitted;
    let lb = loss.lower_bound();
    if let Some(s) = scale {
        s.divide_factors(&mut factors);
    }
    let sampler = Sampler::new(x, opts.seed)?.times(1.0 / losses.c);
    let (value_strata, grad_strata) = strata(x.dims(), x.nnz(), opts);
    let mut value_sample = GcpSample::new(x.dims());
    sampler.draw(&value_strata, 0, &mut value_sample)?;
    let mut m = Vec::new();
    let (initial_fitted, initial) = estimate(engine, &value_sample, &factors, &losses, &mut m)?;
    if !(initial_fitted.is_finite() && initial.is_finite()) {
        return Err(super::start_not_finite(&opts.loss, initial_fitted, initial));
    }
    let (mut best, mut best_given) = (initial_fitted, initial);
    let zeros = || -> Vec<Matrix<f64>> {
        factors
            .iter()
            .map(|f| Matrix::zeros(f.rows(), f.cols()))
            .collect()
    };
    let (mut mu, mut nu) = (zeros(), zeros());
    let (mut kept, mut mu_kept, mut nu_kept) = (factors.clone(), mu.clone(), nu.clone());
    let (mut beta1t, mut beta2t) = (1.0f64, 1.0f64);
    let mut rate = opts.rate;
    let mut fails = 0;
    let mut iters = Vec::new();
    let mut grads = Vec::new();
    let mut sample = GcpSample::new(x.dims());
    let mut next = GcpSample::new(x.dims());
    let mut stream = 1u64;
    sampler.draw(&grad_strata, stream, &mut sample)?;
    let mut spreads = Spreads::new(engine);
    let mut stopped = format!("{} epochs run", opts.epochs);
    for epoch in 0..opts.epochs {
        for _ in 0..opts.epoch_iters {
            // The next iteration's sample does not depend on the factors: it is drawn
            // beside this iteration's gradient (the same samples as drawn in turn).
            let spread = spreads.next();
            let timer = Instant::now();
            let (gradient, drawn) = engine.install(|| {
                rayon::join(
                    || {
                        engine.gcp_gradient_spread(
                            &sample, &factors, &loss, false, &mut grads, spread,
                        )
                    },
                    || sampler.draw(&grad_strata, stream + 1, &mut next),
                )
            });
            spreads.took(spread, timer.elapsed().as_secs_f64());
            gradient?;
            drawn?;
            std::mem::swap(&mut sample, &mut next);
            stream += 1;
            beta1t *= BETA1;
            beta2t *= BETA2;
            let step = rate * (1.0 - beta2t).sqrt() / (1.0 - beta1t);
            engine.install(|| adam(&mut factors, &grads, &mut mu, &mut nu, step, lb));
        }
        let (f, f_given) = estimate(engine, &value_sample, &factors, &losses, &mut m)?;
        let finite = f.is_finite() && f_given.is_finite();
        let accepted = finite && f <= best;
        let step = rate;
        if accepted {
            best = f;
            best_given = f_given;
            kept.clone_from(&factors);
            mu_kept.clone_from(&mu);
            nu_kept.clone_from(&nu);
        } else {
            fails += 1;
            factors.clone_from(&kept);
            mu.clone_from(&mu_kept);
            nu.clone_from(&nu_kept);
            beta1t /= BETA1.powi(opts.epoch_iters as i32);
            beta2t /= BETA2.powi(opts.epoch_iters as i32);
            rate *= opts.decay;
        }
        let it = GcpIter {
            iter: epoch,
            loss: f_given.is_finite().then_some(f_given),
            step,
            accepted,
            undone: match (accepted, finite) {
                (true, _) => None,
                (false, true) => Some(super::Undone::Worse),
                (false, false) => Some(super::Undone::NotFinite),
            },
            seconds: start.elapsed().as_secs_f64(),
        };
        iters.push(it);
        if progress(&it).is_break() {
            stopped = format!("stopped by the caller after epoch {}", epoch + 1);
            break;
        }
        if fails > opts.max_fails {
            stopped = format!("{fails} failed epochs (more than max_fails)");
            break;
        }
    }
    let mut warnings = Vec::new();
    let moved = (initial_fitted - best).abs() / initial_fitted.abs();
    let ran_all = iters.len() == opts.epochs && opts.epochs > 1;
    if ran_all && initial_fitted != 0.0 && moved < STALLED {
        warnings.push(stalled(opts, iters.len(), moved, x));
    }
    if let Some(s) = scale {
        s.multiply_factors(&mut kept);
    }
    if width > rank {
        kept = with_columns(&kept, rank);
    }
    Ok((kept, best_given, initial, iters, stopped, warnings))
}

/// The warning of a run of `opts` on `x` whose loss moved by `moved` of itself in
/// `epochs` epochs.
fn stalled(opts: &GcpOptions, epochs: usize, moved: f64, x: &CooTensor) -> String {
    let rms = crate::decomp::rms_about(x.values(), 0.0);
    format!(
        "GCP's loss moved by {moved:.1e} of itself in {epochs} epochs: the model is about \
         where it started. Either the start is already a minimum, or Adam's steps \
         (rate {}, ε 1e-8 beside the gradients' root mean square) do not suit loss {} on \
         values of root mean square {rms:.1e}: try a larger --rate, a loss parameter in \
         the values' units, or the values multiplied by a power of ten nearer 1",
        opts.rate, opts.loss
    )
}

/// How SGD's gradient is spread. The next iteration's sample is drawn beside it, by
/// the other workers: on two workers the gradient in two halves ran in turn (measured:
/// one piece, [`GcpSpread::Caller`], is faster, on samples drawn serially and in
/// parallel alike). With more workers the one piece leaves cores idle, and the stages
/// ([`GcpSpread::Staged`]: the same bits over every worker, for about twice the work)
/// win; where they start to depends on the machine's cores, caches and memory. Both
/// give the same bits, so the first iterations time them in turn and the rest take
/// the faster: the choice changes the time, never the result.
struct Spreads {
    /// The fastest time seen of each (one piece, stages), while timing.
    best: [f64; 2],
    /// Iterations run.
    iter: usize,
    /// The spread taken, once chosen.
    chosen: Option<GcpSpread>,
}

impl Spreads {
    /// Iterations before the choice: one of each untimed (first calls fault in their
    /// buffers), then each timed in turn [`Self::TIMED`] times (the best counts).
    const TIMED: usize = 3;

    fn new(engine: &Engine) -> Self {
        let one_worker = engine.workers() < 2;
        let cpu = matches!(engine.backend(), crate::engine::Backend::Cpu(_));
        Spreads {
            best: [f64::INFINITY; 2],
            iter: 0,
            chosen: (one_worker || !cpu).then_some(GcpSpread::Caller),
        }
    }

    fn next(&mut self) -> GcpSpread {
        if let Some(s) = self.chosen {
            return s;
        }
        if self.iter == 2 * (1 + Self::TIMED) {
            let staged = self.best[1] < self.best[0];
            let s = if staged {
                GcpSpread::Staged
            } else {
                GcpSpread::Caller
            };
            self.chosen = Some(s);
            return s;
        }
        if self.iter.is_multiple_of(2) {
            GcpSpread::Caller
        } else {
            GcpSpread::Staged
        }
    }

    /// Records that an iteration with `spread` took `seconds`.
    fn took(&mut self, spread: GcpSpread, seconds: f64) {
        if self.chosen.is_none() {
            if self.iter >= 2 {
                let at = usize::from(spread == GcpSpread::Staged);
                self.best[at] = self.best[at].min(seconds);
            }
            self.iter += 1;
        }
    }
}

/// One Adam step on every factor: moments `mu`, `nu` updated with gradient `g`, then
/// `a ← max(a − step · μ / √(ν + ε), lb)`, entry by entry. Fixed chunks of all the
/// factors run in one parallel region, or in order on this worker where they are few
/// (the same bits either way).
fn adam(
    factors: &mut [Matrix<f64>],
    grads: &[Matrix<f64>],
    mu: &mut [Matrix<f64>],
    nu: &mut [Matrix<f64>],
    step: f64,
    lb: f64,
) {
    const CH: usize = 1 << 14;
    let mut pieces = Vec::new();
    for (((a, g), m), v) in factors.iter_mut().zip(grads).zip(mu).zip(nu) {
        let chunks = (a.data_mut().chunks_mut(CH))
            .zip(g.data().chunks(CH))
            .zip(m.data_mut().chunks_mut(CH))
            .zip(v.data_mut().chunks_mut(CH));
        pieces.extend(chunks);
    }
    let update = |(((a, g), mu), nu): AdamChunk| {
        for (((a, &g), mu), nu) in a.iter_mut().zip(g).zip(mu).zip(nu) {
            *mu = BETA1 * *mu + (1.0 - BETA1) * g;
            *nu = BETA2 * *nu + (1.0 - BETA2) * g * g;
            *a = (*a - step * *mu / (*nu + ADAM_EPS).sqrt()).max(lb);
        }
    };
    if pieces.len() <= 4 {
        pieces.into_iter().for_each(update);
    } else {
        pieces.into_par_iter().for_each(update);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::CpuOptions;
    use crate::tensor::generate::{GenSpec, Pattern, generate};

    /// The engine widens SGD's factors only between its kernels' widths, for orders
    /// with kernels, and where the rows are few enough for the widened factors to stay
    /// in the cache beside Adam's moments.
    #[test]
    fn sgd_widens_only_small_factors_between_the_kernel_widths() {
        let e = Engine::cpu();
        assert_eq!(e.gcp_sgd_width(3, 24, 900), 32);
        assert_eq!(e.gcp_sgd_width(4, 10, 900), 16);
        assert_eq!(e.gcp_sgd_width(3, 32, 900), 32);
        assert_eq!(e.gcp_sgd_width(3, 24, 100_000_000), 24, "102 GB widened");
        assert_eq!(e.gcp_sgd_width(5, 24, 900), 32);
        assert_eq!(e.gcp_sgd_width(2, 5, 900), 8);
        assert_eq!(e.gcp_sgd_width(7, 24, 900), 24, "no order-7 kernel");
        assert_eq!(e.gcp_sgd_width(3, 100, 900), 100, "above the widths");
    }

    /// SGD on factors widened with zero columns to the gradient kernels' width is the
    /// run at the rank, bit for bit (losses, every epoch's estimate and the factors),
    /// for orders 2 to 5, ranks between the widths, a loss bounded below by 0, one
    /// without a bound and values run in other units; and [`run`], which widens
    /// factors this small, gives the same result.
    #[test]
    fn zero_columns_to_the_kernel_width_change_no_bit() {
        let engine = Engine::cpu_with(CpuOptions {
            threads: Some(2),
            ..CpuOptions::default()
        })
        .unwrap();
        for (dims, rank, loss, times) in [
            (vec![30, 20, 10], 5, Loss::Gaussian, 1.0),
            (vec![30, 20, 10], 20, Loss::Poisson, 1.0),
            (vec![12, 10, 8, 6], 11, Loss::Gaussian, 1.0),
            (vec![6, 5, 4, 3, 3], 6, Loss::Poisson, 1.0),
            (vec![40, 30], 3, Loss::Gaussian, 1.0),
            (vec![30, 20, 10], 40, Loss::Gaussian, 1e6),
        ] {
            let g = generate(&GenSpec {
                dims: dims.clone(),
                nnz: 600,
                pattern: Pattern::Uniform,
                seed: rank as u64,
            })
            .unwrap();
            // Counts (every loss here can model them), in the units `times` gives.
            let values = g
                .values()
                .iter()
                .map(|v| (v.abs() * 4.0).round().max(1.0) * times)
                .collect();
            let indices = (0..dims.len()).map(|m| g.indices(m).to_vec()).collect();
            let x = CooTensor::new(dims.clone(), indices, values).unwrap();
            let opts = GcpOptions {
                epochs: 3,
                epoch_iters: 20,
                rate: 1e-2,
                seed: 3,
                ..GcpOptions::new(rank, loss)
            };
            let mut init = super::super::initial_factors(&x, rank, 9, &loss);
            super::super::balance(&mut init);
            let scale = super::super::value_scale(&x, &opts);
            assert_eq!(scale.is_some(), times != 1.0, "{dims:?} rank {rank}");
            let fit = |width| {
                run_at_width(
                    &engine,
                    &x,
                    &opts,
                    init.clone(),
                    scale,
                    &mut |_| ControlFlow::Continue(()),
                    width,
                )
                .unwrap()
            };
            let width = engine.gcp_kernel_width(dims.len(), rank);
            assert!(width > rank, "rank {rank} is between the widths");
            let (at_rank, wide) = (fit(rank), fit(width));
            let what = format!("{dims:?} rank {rank} {loss}");
            assert_eq!(wide.0.len(), dims.len());
            for (a, b) in at_rank.0.iter().zip(&wide.0) {
                assert_eq!((a.rows(), a.cols()), (b.rows(), b.cols()), "{what}");
                assert_eq!(a.data(), b.data(), "{what}");
            }
            assert_eq!(at_rank.1.to_bits(), wide.1.to_bits(), "{what}");
            let losses = |f: &Fitted| {
                f.3.iter()
                    .map(|i| i.loss.map(f64::to_bits))
                    .collect::<Vec<_>>()
            };
            assert_eq!(losses(&at_rank), losses(&wide), "{what}");
            // A few dozen rows: `run` widens, and its result is the same too.
            let ran = run(&engine, &x, &opts, init.clone(), scale, &mut |_| {
                ControlFlow::Continue(())
            })
            .unwrap();
            assert_eq!(ran.1.to_bits(), at_rank.1.to_bits(), "{what}");
        }
    }
}
