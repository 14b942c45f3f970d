//! GCP by L-BFGS-B on the exact loss and gradient, as pyttb's `gcp_opt` with its
//! L-BFGS-B optimizer, for tensors small enough to sum over every cell.
//!
//! `F = Σ_nz [f(x, m) − f(0, m)] + Σ_all f(0, m)`: the first sum over the stored
//! entries through the engine ([`Engine::gcp_gradient`] with the difference loss),
//! the second in closed form for the Gaussian loss (from the factors' Grams) and the
//! Poisson loss (from their column sums), otherwise by a pass over every cell on the
//! host (`super::zeros`), refused when there are more than
//! [`GcpOptions::dense_limit`] cells.
//!
//! The optimizer is `rcompat-lbfgsb`, an implementation of L-BFGS-B (generalized
//! Cauchy point, subspace minimization, Moré–Thuente line search kept inside the
//! box), patched to take the subspace step of version 3.0 as scipy does
//! (`vendor/README.md`: the 2.3 step it had led the bounded losses to other minima
//! than pyttb's), with pyttb's settings: `m = 10`
//! corrections, `pgtol = 1e-5`, at most 1000 iterations, and the `factr` test (stop
//! when `(f_prev − f) / max(|f_prev|, |f|, 1) ≤ factr · ε_mach`, `factr = 1e7`).
//! Where the loss at the start `|F₀|` is below 1, the optimizer minimizes `F / |F₀|`,
//! and `pgtol` is capped at `pgtol` times the start's projected gradient: both tests
//! are absolute below 1, and held a tensor of small values at its random start.
//! Nonnegative losses bound every factor entry below by 0. (An earlier port,
//! `lbfgsb-rs-pure`, searched along the path `x + α d` projected onto the box and
//! asked the strong Wolfe condition of `g(x_α)ᵀd`, which ignores that the clamped
//! coordinates no longer move: with many entries at 0 that condition never held and
//! the search failed after an iteration or two.)
//!
//! Values far from 1 run divided by a power of two, as SGD's do ([`super::units`]):
//! the optimizer and its tests see the divided problem, while the losses reported
//! (the start, every iteration and the end) are the given values', from one more
//! pass over the stored entries and, without a gradient, the zeros, at each accepted
//! point (none for the Gaussian and Huber losses, whose is `c²` times); the projected
//! gradient in the progress lines is the divided problem's, taken to the given units
//! ([`ValueScale::gradient`]).

use super::sample::cells;
use super::sgd::{Fitted, sample_sum};
use super::units::ValueScale;
use super::zeros::ZeroSum;
use super::{GcpIter, GcpOptions, Loss};
use crate::engine::{Engine, EntryLoss, GcpSample};
use crate::error::{Error, Result};
use crate::matrix::Matrix;
use crate::tensor::CooTensor;
use rcompat_lbfgsb::{
    ArithmeticProfile, Bounds, OptimControl, OptimEvent, TerminationReason,
    optim_lbfgsb_with_gradient_observed,
};
use std::cell::RefCell;
use std::ops::ControlFlow;
use std::time::Instant;

/// `f(x, m) − f(0, m)`: a stored entry's loss beyond that of a zero at the same cell.
struct Beyond(Loss);

impl EntryLoss for Beyond {
    #[inline]
    fn value(&self, x: f64, m: f64) -> f64 {
        self.0.value(x, m) - self.0.value(0.0, m)
    }
    #[inline]
    fn deriv(&self, x: f64, m: f64) -> f64 {
        self.0.deriv(x, m) - self.0.deriv(0.0, m)
    }
}

/// The exact loss and gradient of one tensor and loss.
struct Objective<'a> {
    engine: &'a Engine,
    loss: Loss,
    dims: Vec<usize>,
    rank: usize,
    stored: GcpSample,
    /// How the loss of the zeros is summed.
    zeros: ZeroSum,
    /// What the optimizer sees is `scale · F` (see [`run`]).
    scale: f64,
    /// For a run on values divided by `c` ([`super::units`]): the given loss and `c`.
    given: Option<(Loss, f64)>,
}

impl Objective<'_> {
    /// The factors at the point `v`, entries below the loss's bound taken at it:
    /// L-BFGS-B's steps `x + t d` can end a rounding below a bound of 0 (-1e-17 was
    /// seen). Beside the run's ε that is nothing, but in other units (a model value
    /// of -1e-5 beside ε = 1e-10) it has no logarithm; the model evaluated is the
    /// model returned.
    fn unflatten(&self, v: &[f64]) -> Vec<Matrix<f64>> {
        let lower = self.loss.lower_bound();
        let mut at = 0;
        self.dims
            .iter()
            .map(|&d| {
                let entries = v[at..at + d * self.rank].iter().map(|v| v.max(lower));
                let m = Matrix::new(d, self.rank, entries.collect()).expect("the lengths add up");
                at += d * self.rank;
                m
            })
            .collect()
    }

    /// `scale · F` and its gradient, flattened as the factors are.
    fn eval(&self, v: &[f64]) -> Result<(f64, Vec<f64>)> {
        let factors = self.unflatten(v);
        let mut grads = Vec::new();
        let mut f = self.engine.gcp_gradient(
            &self.stored,
            &factors,
            &Beyond(self.loss),
            true,
            &mut grads,
        )?;
        f += self.zeros.add(self.engine, self.loss, &factors, &mut grads);
        Ok((
            self.scale * f,
            grads
                .iter()
                .flat_map(|g| g.data().iter().map(|g| self.scale * g))
                .collect(),
        ))
    }

    /// The loss in the given units at `v`, where the run's is `scale · F = seen`. The
    /// Gaussian and Huber losses have no ε: theirs is `c² F`. The others' is
    /// `Σ_nz [g(c x, c m) − g(0, c m)]` from the model values at the stored entries,
    /// and `Σ_all g(0, c m)` ([`ZeroSum::value_in_units`]), a pass without a gradient.
    fn in_given_units(&self, v: &[f64], seen: f64) -> Result<f64> {
        let f = seen / self.scale;
        let (g, c) = match self.given {
            None => return Ok(f),
            Some((Loss::Gaussian | Loss::Huber { .. }, c)) => return Ok(c * c * f),
            Some(given) => given,
        };
        let factors = self.unflatten(v);
        let mut m = Vec::new();
        self.engine.gcp_values(&self.stored, &factors, &mut m)?;
        let beyond = Beyond(g);
        let stored = self
            .engine
            .install(|| sample_sum(&self.stored, &m, |x, m| beyond.value(c * x, c * m)));
        Ok(stored + self.zeros.value_in_units(self.engine, g, &factors, c))
    }
}

/// What the optimizer's three callbacks (loss, gradient, events) share.
struct Shared {
    /// The last point evaluated, its loss and gradient: the gradient the optimizer
    /// asks for next is at that point, and an accepted step is that point.
    at: Vec<f64>,
    value: f64,
    gradient: Vec<f64>,
    /// The last accepted point.
    accepted: Option<Vec<f64>>,
    /// The first error of an evaluation.
    failure: Option<Error>,
    /// Set when the run is to stop after the iteration just accepted: the next
    /// evaluation then answers NaN, which ends the optimizer's run.
    stop: Option<String>,
    /// Why the optimizer stopped, from its events.
    finished: Option<TerminationReason>,
}

/// Runs L-BFGS-B from `factors` (see the [module documentation](self)), on the values
/// divided by `units`' power of two where it has one.
pub(super) fn run(
    engine: &Engine,
    x: &CooTensor,
    opts: &GcpOptions,
    mut factors: Vec<Matrix<f64>>,
    units: Option<ValueScale>,
    progress: &mut dyn FnMut(&GcpIter) -> ControlFlow<()>,
) -> Result<Fitted> {
    let start = Instant::now();
    let n_cells = cells(x.dims());
    let zeros = ZeroSum::of(opts.loss);
    if zeros == ZeroSum::Cells && n_cells > opts.dense_limit {
        return Err(Error::Unsupported(format!(
            "method lbfgs with loss {} sums the loss over every cell of the tensor, {n_cells:.0} \
             here, more than dense_limit = {:.0}; use method sgd, or raise dense_limit",
            opts.loss, opts.dense_limit
        )));
    }
    let order = x.order();
    let coords: Vec<u32> = (0..x.nnz())
        .flat_map(|k| (0..order).map(move |m| x.indices(m)[k]))
        .collect();
    let c = units.map_or(1.0, |s| s.values());
    let values = x.values().iter().map(|v| v / c).collect();
    let stored = GcpSample::from_parts(x.dims(), coords, values, vec![1.0; x.nnz()])?;
    if let Some(s) = units {
        s.divide_factors(&mut factors);
    }
    let mut objective = Objective {
        engine,
        loss: units.map_or(opts.loss, |s| s.loss(opts.loss)),
        dims: x.dims().to_vec(),
        rank: opts.rank,
        stored,
        zeros,
        scale: 1.0,
        given: units.map(|s| (opts.loss, s.values())),
    };
    let v: Vec<f64> = factors
        .iter()
        .flat_map(|f| f.data().iter().copied())
        .collect();
    let lower = opts.loss.lower_bound();
    let bounds = Bounds::new(vec![lower; v.len()], vec![f64::INFINITY; v.len()])
        .map_err(|e| Error::Numerical(format!("L-BFGS-B: {e}")))?;
    // Both of L-BFGS-B's tests are absolute at small scales: `pgtol` bounds the
    // projected gradient, and the `factr` test divides by `max(|f_prev|, |f|, 1)`. On a
    // tensor of small values (or, for the log losses, large ones) either held at the
    // random start, before any step. So the optimizer sees `F / |F₀|` where `|F₀| < 1`,
    // and `pgtol` is at most `pgtol` times the start's projected gradient; at the
    // scales where neither applies (`|F₀| ≥ 1`, start's projected gradient ≥ 1) the run
    // is pyttb's.
    let (f0, g0) = objective.eval(&v)?;
    let initial = objective.in_given_units(&v, f0)?;
    if !(f0.is_finite() && initial.is_finite()) {
        return Err(super::start_not_finite(&opts.loss, f0, initial));
    }
    let scale = if f0 != 0.0 && f0.abs() < 1.0 {
        1.0 / f0.abs()
    } else {
        1.0
    };
    objective.scale = scale;
    let objective = objective;
    let pg0 = scale
        * v.iter()
            .zip(&g0)
            .map(|(&x, &g)| ((x - g).max(lower) - x).abs())
            .fold(0.0, f64::max);
    let pgtol = opts.pgtol * pg0.min(1.0);
    let control = OptimControl {
        // The iteration limit is kept here (below), exactly: the crate, as R, would
        // allow one more.
        maxit: opts.max_iters,
        factr: opts.factr,
        pgtol,
        lmm: opts.memory,
        ..OptimControl::default_for_dimension(v.len())
    };
    let shared = RefCell::new(Shared {
        at: v.clone(),
        value: scale * f0,
        gradient: g0.iter().map(|g| scale * g).collect(),
        accepted: None,
        failure: None,
        stop: None,
        finished: None,
    });
    let loss = |p: &[f64]| -> f64 {
        let mut s = shared.borrow_mut();
        if s.stop.is_some() || s.failure.is_some() {
            return f64::NAN;
        }
        if s.at == p {
            return s.value;
        }
        match objective.eval(p) {
            Ok((f, g)) => {
                s.at.clear();
                s.at.extend_from_slice(p);
                s.value = f;
                s.gradient = g;
                f
            }
            Err(e) => {
                s.failure = Some(e);
                f64::NAN
            }
        }
    };
    let gradient = |p: &[f64]| -> Vec<f64> {
        let mut s = shared.borrow_mut();
        if s.at == p {
            return s.gradient.clone();
        }
        // Not asked for by the optimizer (it evaluates the loss first, at the same
        // point), but correct if it were.
        match objective.eval(p) {
            Ok((_, g)) => g,
            Err(e) => {
                s.failure.get_or_insert(e);
                vec![f64::NAN; p.len()]
            }
        }
    };
    let to_given = units.map_or(1.0, |s| s.gradient(&opts.loss));
    let mut iters: Vec<GcpIter> = Vec::new();
    let observer = |event: OptimEvent| {
        let mut s = shared.borrow_mut();
        match event {
            OptimEvent::Accepted {
                value,
                projected_gradient,
                ..
            } => {
                // The accepted point is the line search's last trial, evaluated last.
                debug_assert_eq!(value.to_bits(), s.value.to_bits());
                let point = s.at.clone();
                let loss = match objective.in_given_units(&point, value) {
                    Ok(loss) => loss,
                    Err(e) => {
                        s.failure.get_or_insert(e);
                        return;
                    }
                };
                s.accepted = Some(point);
                let it = GcpIter {
                    iter: iters.len(),
                    loss: Some(loss),
                    undone: None,
                    step: projected_gradient / scale * to_given,
                    accepted: true,
                    seconds: start.elapsed().as_secs_f64(),
                };
                iters.push(it);
                drop(s);
                let stop = if progress(&it).is_break() {
                    Some(format!(
                        "stopped by the caller after iteration {}",
                        it.iter + 1
                    ))
                } else if iters.len() >= opts.max_iters {
                    Some(format!("{} iterations run", opts.max_iters))
                } else {
                    None
                };
                shared.borrow_mut().stop = stop;
            }
            OptimEvent::Finished { reason, .. } => s.finished = Some(reason),
            _ => {}
        }
    };
    let result = optim_lbfgsb_with_gradient_observed(
        v,
        bounds,
        loss,
        gradient,
        control,
        ArithmeticProfile::legacy(),
        observer,
    );
    let s = shared.into_inner();
    if let Some(e) = s.failure {
        return Err(e);
    }
    let (point, stopped) = match (result, s.stop, s.accepted) {
        // Stopped here after an accepted iteration: the optimizer's run ended at the
        // NaN that followed; the model is the accepted point.
        (Err(_), Some(why), Some(point)) => (point, why),
        (Err(e), _, _) => return Err(Error::Numerical(format!("L-BFGS-B: {e}"))),
        (Ok(r), stop, _) => {
            let why = match s.finished {
                Some(TerminationReason::ProjectedGradient) if pgtol == opts.pgtol => {
                    "projected gradient below pgtol".to_string()
                }
                Some(TerminationReason::ProjectedGradient) => {
                    format!("projected gradient below pgtol × the start's, {pgtol:.3e}")
                }
                Some(TerminationReason::RelativeReduction) => {
                    "relative decrease of the loss below factr · ε".to_string()
                }
                Some(TerminationReason::AbnormalLineSearch) => {
                    "the line search found no acceptable step".to_string()
                }
                Some(TerminationReason::NoDescentDirection) => {
                    "no feasible descent direction".to_string()
                }
                _ => stop.unwrap_or_else(|| r.message.clone()),
            };
            (r.par, why)
        }
    };
    let seen = if point == s.at {
        s.value
    } else {
        objective.eval(&point)?.0
    };
    let last = objective.in_given_units(&point, seen)?;
    let mut factors = objective.unflatten(&point);
    if let Some(s) = units {
        s.multiply_factors(&mut factors);
    }
    Ok((factors, last, initial, iters, stopped, Vec::new()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `Σ_all f(x, m)` and its gradient, cell by cell.
    fn brute(x: &CooTensor, a: &[Matrix<f64>], loss: &Loss) -> (f64, Vec<f64>) {
        let dims = x.dims();
        let rank = a[0].cols();
        let mut value = std::collections::HashMap::new();
        for k in 0..x.nnz() {
            value.insert(x.coords(k), x.values()[k]);
        }
        let mut g: Vec<Matrix<f64>> = a.iter().map(|f| Matrix::zeros(f.rows(), rank)).collect();
        let mut f = 0.0;
        let total: usize = dims.iter().product();
        for l in 0..total {
            let mut r = l;
            let c: Vec<u32> = dims
                .iter()
                .map(|&d| {
                    let i = (r % d) as u32;
                    r /= d;
                    i
                })
                .collect();
            let xv = value.get(&c).copied().unwrap_or(0.0);
            let m: f64 = (0..rank)
                .map(|r| {
                    c.iter()
                        .zip(a)
                        .map(|(&i, f)| f.get(i as usize, r))
                        .product::<f64>()
                })
                .sum();
            f += loss.value(xv, m);
            let d = loss.deriv(xv, m);
            for n in 0..dims.len() {
                for r in 0..rank {
                    let p: f64 = c
                        .iter()
                        .zip(a)
                        .enumerate()
                        .filter(|(j, _)| *j != n)
                        .map(|(_, (&i, f))| f.get(i as usize, r))
                        .product();
                    let i = c[n] as usize;
                    let old = g[n].get(i, r);
                    g[n].set(i, r, old + d * p);
                }
            }
        }
        (f, g.iter().flat_map(|g| g.data().iter().copied()).collect())
    }

    #[test]
    fn the_exact_objective_is_the_sum_over_every_cell() {
        let engine = Engine::cpu();
        let x = CooTensor::new(
            vec![4, 3, 5],
            vec![
                vec![0, 1, 3, 2, 0],
                vec![0, 2, 1, 1, 2],
                vec![0, 4, 2, 3, 1],
            ],
            vec![1.0, 3.0, 2.0, 1.0, 4.0],
        )
        .unwrap();
        for loss in [Loss::Gaussian, Loss::Poisson, Loss::PoissonLog, Loss::Gamma] {
            let rank = 2;
            let a: Vec<Matrix<f64>> = Matrix::random_factors(x.dims(), &[rank; 3], 3)
                .iter()
                .map(|f| f.to_f64().map(|v| 0.2 + v))
                .collect();
            let coords: Vec<u32> = (0..x.nnz()).flat_map(|k| x.coords(k)).collect();
            let objective = Objective {
                engine: &engine,
                loss,
                dims: x.dims().to_vec(),
                rank,
                stored: GcpSample::from_parts(x.dims(), coords, x.values().to_vec(), vec![1.0; 5])
                    .unwrap(),
                zeros: ZeroSum::of(loss),
                scale: 1.0,
                given: None,
            };
            let v: Vec<f64> = a.iter().flat_map(|f| f.data().iter().copied()).collect();
            let (f, g) = objective.eval(&v).unwrap();
            assert_eq!(
                f,
                objective.in_given_units(&v, f).unwrap(),
                "{loss}: the run's units"
            );
            let (f_ref, g_ref) = brute(&x, &a, &loss);
            assert!(
                (f - f_ref).abs() <= 1e-10 * f_ref.abs().max(1.0),
                "{loss}: {f} vs {f_ref}"
            );
            for (k, (g, r)) in g.iter().zip(&g_ref).enumerate() {
                assert!(
                    (g - r).abs() <= 1e-10 * r.abs().max(1.0),
                    "{loss} entry {k}: {g} vs {r}"
                );
            }
        }
    }

    #[test]
    fn values_far_from_one_run_divided_and_report_the_given_units_loss() {
        let engine = Engine::cpu();
        let x = CooTensor::new(
            vec![5, 4, 3],
            vec![
                vec![0, 1, 3, 2, 0, 4, 1],
                vec![0, 2, 1, 1, 2, 3, 3],
                vec![0, 2, 2, 1, 1, 0, 2],
            ],
            vec![1.0, 3.0, 2.0, 1.5, 4.0, 0.5, 2.5],
        )
        .unwrap();
        // `c = 2^60`, each factor `2^20`: the divided problem is the one on `X`, bit
        // for bit, so the optimizer takes the same steps.
        let (c, up) = (2f64.powi(60), 2f64.powi(20));
        let (d, i, v) = x.clone().into_parts();
        let y = CooTensor::new(d, i, v.iter().map(|v| v * c).collect()).unwrap();
        let init: Vec<Matrix<f64>> = Matrix::random_factors(x.dims(), &[2; 3], 5)
            .iter()
            .map(|f| f.to_f64().map(|v| 0.2 + v))
            .collect();
        let times = |f: &[Matrix<f64>], k: f64| -> Vec<Matrix<f64>> {
            f.iter().map(|m| m.map(|v| v * k)).collect()
        };
        let init_y = times(&init, up);
        let close = |a: f64, b: f64| (a - b).abs() <= 1e-12 * b.abs().max(1.0);
        for (loss_x, loss_y) in [
            (Loss::Gaussian, Loss::Gaussian),
            (Loss::Gamma, Loss::Gamma),
            (
                Loss::Huber { threshold: 0.5 },
                Loss::Huber { threshold: 0.5 * c },
            ),
        ] {
            let units = ValueScale::of(&y, &loss_y).expect("values 2^60 from 1 are divided");
            assert_eq!((units.exponent, units.order), (20, 3));
            let run = |t: &CooTensor, loss, start: &[Matrix<f64>], units| {
                let opts = GcpOptions {
                    method: super::super::Method::Lbfgs,
                    max_iters: 40,
                    ..GcpOptions::new(2, loss)
                };
                super::run(&engine, t, &opts, start.to_vec(), units, &mut |_| {
                    ControlFlow::Continue(())
                })
                .unwrap()
            };
            let (fx, lx, ix, itx, why_x, _) = run(&x, loss_x, &init, None);
            let (fy, ly, iy, ity, why_y, _) = run(&y, loss_y, &init_y, Some(units));
            assert_eq!((itx.len(), &why_x), (ity.len(), &why_y), "{loss_y}");
            assert!(itx.len() > 1 && lx < ix, "{loss_x}: {lx} from {ix}");
            for (a, b) in times(&fx, up).iter().zip(&fy) {
                assert_eq!(a.data(), b.data(), "{loss_y}: factors");
            }
            // The losses reported are the given values' under the given model, cell by
            // cell; the Gaussian and Huber losses have degree 2 in the units.
            assert!(close(ly, brute(&y, &fy, &loss_y).0), "{loss_y}: final {ly}");
            assert!(
                close(iy, brute(&y, &init_y, &loss_y).0),
                "{loss_y}: start {iy}"
            );
            assert!(close(lx, brute(&x, &fx, &loss_x).0), "{loss_x}: final {lx}");
            // The projected gradient: the divided run's, in the given units.
            let g = units.gradient(&loss_y);
            for (a, b) in itx.iter().zip(&ity) {
                assert!(close(b.step, a.step * g), "{loss_y}: iteration {}", a.iter);
            }
            if loss_x != Loss::Gamma {
                assert!(close(ly, c * c * lx) && close(iy, c * c * ix), "{loss_y}");
                for (a, b) in itx.iter().zip(&ity) {
                    assert!(
                        close(b.loss.unwrap(), c * c * a.loss.unwrap()),
                        "{loss_y}: iteration {}",
                        a.iter
                    );
                }
            }
        }
    }
}
