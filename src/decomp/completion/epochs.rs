//! The epochs of one solver at one `λ`: ALS sweeps, CCD++ column passes, SGD passes
//! with the bold driver, each scored on the validation entries ([`Fitter::phase`]).

use super::bias::Layout;
use super::model::rmse_of;
use super::solve::{RowsLoss, column_update, loss_of_rows, solve_rows};
use super::systems::rows_per_call;
use super::{EpochStats, MAX_HALVINGS, Solver};
use crate::engine::{Anchor, CompletionSession, Engine, SgdBias, SgdStep};
use crate::error::{Error, Result};
use crate::matrix::Matrix;
use crate::tensor::CooTensor;
use std::ops::ControlFlow;
use std::time::Instant;

/// ALS judges an extrapolated step from mode 0's systems only where they are at most
/// this many floats per word of the entries (their indices and value): a kept step
/// saves a loss pass, an undone one costs a systems pass less a loss pass, and the
/// systems pass grows with the systems it writes (movielens-100k: 1.2 floats per word,
/// 29 of 44 steps kept, a systems pass 1.4 loss passes long).
const SYSTEMS_PER_ENTRY_WORDS: f64 = 2.0;

/// The largest extrapolation step of ALS and CCD++.
const MAX_BETA: f64 = 8.0;
/// The smallest (an undone step halves `β` down to it).
const MIN_BETA: f64 = 0.25;

/// A run's session and what its epochs share.
pub(super) struct Fitter<'s> {
    pub session: Box<dyn CompletionSession + 's>,
    /// The engine the session runs on: the host work between its calls (the row
    /// solves, the validation RMSE) runs on the same workers ([`Engine::install`]).
    pub engine: &'s Engine,
    /// Per mode, the training entries of every row.
    pub counts: Vec<Vec<u32>>,
    /// Per mode, the rows with training entries, ascending: the rows ALS solves (the
    /// others stay at zero).
    pub active: Vec<Vec<u32>>,
    pub layout: Layout,
    pub solver: Solver,
    pub ccd_inner: usize,
    pub seed: u64,
    /// `μ`, as the session models it.
    pub offset: f64,
    /// Training entries.
    pub nnz: f64,
    /// `λ_b`, the biases' regularization.
    pub bias_lambda: f64,
    /// SGD's learning rate now (the bold driver moves it).
    pub lr: f64,
    /// SGD's rate at the start of every phase.
    pub lr_start: f64,
    /// SGD: the biases' rate over the factors' rate.
    pub bias_rate: f64,
    pub halvings: usize,
    /// ALS and CCD++: the extrapolation step `β` (see [`Fitter::extrapolate`]).
    pub beta: f64,
    pub pinv_solves: usize,
    /// Every epoch run, numbered in order.
    pub epochs: Vec<EpochStats>,
    /// Per mode, the buffer its normal equations or column terms are written to (one
    /// per mode, so that each keeps its shape from epoch to epoch).
    pub scratch: Vec<Matrix>,
    /// The bytes of normal equations one ALS call may build
    /// ([`super::systems::systems_budget`]).
    pub systems_bytes: usize,
    /// The rows' `Σ y²` of the last bias normal equations.
    pub squares: Vec<f64>,
    /// Whether `scratch[0]` holds mode 0's bias normal equations for the session's
    /// factors as they are (built by an accepted extrapolation,
    /// [`Fitter::extrapolate`]): the next ALS sweep starts from them.
    pub mode0_ready: bool,
    /// Whether the caller's callback asked to stop: no further epoch runs.
    pub stopped: bool,
}

/// The best epoch of a phase: its validation RMSE, its number and the factors.
pub(super) struct Best {
    pub rmse: f64,
    pub epoch: usize,
    pub factors: Vec<Matrix>,
}

impl Fitter<'_> {
    /// Runs up to `max_epochs` epochs at `lambda` from the session's factors, scoring
    /// each on `validation`; stops after `patience` epochs without a lower validation
    /// RMSE (SGD: epochs it undid do not count), or when `control` breaks (then [`Fitter::stopped`] is set and no later
    /// phase runs). Returns the phase's best epoch, `None` when none ran.
    pub fn phase(
        &mut self,
        lambda: f64,
        max_epochs: usize,
        patience: usize,
        validation: &CooTensor,
        control: &mut dyn FnMut(&EpochStats) -> ControlFlow<()>,
    ) -> Result<Option<Best>> {
        let mut best: Option<Best> = None;
        // Epochs since the best, undone ones not counted.
        let mut since_best = 0;
        // A new phase may take larger steps than the last one ended with (a new λ
        // moves the minimum), never larger than the initial rate.
        self.lr = self.lr_start.min(4.0 * self.lr);
        self.halvings = 0;
        let mut prev_objective = {
            let f = self.session.factors()?;
            self.session.loss()? + self.layout.penalty(&f, lambda, self.bias_lambda)
        };
        for _ in 0..max_epochs {
            if self.stopped {
                break;
            }
            let start = Instant::now();
            let mut kernel = 0.0;
            let (rate, undone, known) = self.epoch(lambda, &mut prev_objective, &mut kernel)?;
            let f = self.session.factors()?;
            let loss = match known {
                Some(loss) => loss,
                None => self.session.loss()?,
            };
            let offset = self.offset;
            let validation_rmse = (self.engine)
                .install(|| rmse_of(offset, &f, validation))
                .expect("validation has entries");
            if !validation_rmse.is_finite() {
                return Err(Error::NonFinite(format!(
                    "validation RMSE {validation_rmse} after epoch {}",
                    self.epochs.len()
                )));
            }
            let stats = EpochStats {
                epoch: self.epochs.len(),
                lambda,
                train_rmse: (loss / self.nnz).sqrt(),
                validation_rmse,
                objective: loss + self.layout.penalty(&f, lambda, self.bias_lambda),
                learning_rate: rate,
                undone,
                seconds_kernel: kernel,
                seconds: start.elapsed().as_secs_f64(),
            };
            self.stopped = control(&stats).is_break();
            self.epochs.push(stats);
            match &best {
                Some(_) if undone => {}
                Some(b) if validation_rmse >= b.rmse => {
                    since_best += 1;
                    if since_best >= patience {
                        break;
                    }
                }
                _ => {
                    since_best = 0;
                    best = Some(Best {
                        rmse: validation_rmse,
                        epoch: self.epochs.len() - 1,
                        factors: f,
                    });
                }
            }
        }
        Ok(best)
    }

    /// One epoch at `lambda`; SGD's rate (SGD only), whether the epoch was undone, and
    /// the loss of the factors it leaves where it computed that (ALS and CCD++ always,
    /// SGD when the epoch was kept).
    fn epoch(
        &mut self,
        lambda: f64,
        prev_objective: &mut f64,
        kernel: &mut f64,
    ) -> Result<(Option<f64>, bool, Option<f64>)> {
        let mut timed = |f: &mut dyn FnMut() -> Result<()>| -> Result<()> {
            let t = Instant::now();
            let r = f();
            *kernel += t.elapsed().as_secs_f64();
            r
        };
        let layout = self.layout.clone();
        let before = match self.solver {
            Solver::Als | Solver::Ccd => Some(self.session.factors()?),
            Solver::Sgd => None,
        };
        let s = &mut self.session;
        let scratch = &mut self.scratch;
        let engine = self.engine;
        let out = match self.solver {
            Solver::Als => {
                // Each mode's mean bias as the sweep reaches it: a mode's factor does not
                // change before its own update.
                let centers = before.as_deref().map(|f| layout.centers(f));
                let last = self.counts.len() - 1;
                let mut loss = None;
                for (mode, count) in self.counts.iter().enumerate() {
                    let (ne, squares) = (&mut scratch[mode], &mut self.squares);
                    // The mode's own λ and the value its CP columns are shrunk toward;
                    // the bias is shrunk toward the mode's mean bias.
                    let Anchor { value, weight } = layout.anchor(mode);
                    let lambda = lambda * f64::from(weight);
                    let diagonal = layout.diagonal(lambda, self.bias_lambda);
                    let mut toward = vec![f64::from(value); layout.rank];
                    if layout.biases {
                        toward.push(centers.as_ref().expect("ALS keeps the factors before")[mode]);
                    }
                    let w = toward.len();
                    let active = &self.active[mode];
                    // Mode 0's systems may be built already, for the factors as they are
                    // (only where one call builds them all: `ahead_loss`).
                    let ready = mode == 0 && std::mem::take(&mut self.mode0_ready);
                    let per_call = rows_per_call(self.systems_bytes, &layout);
                    let mut a = Matrix::zeros(count.len(), w);
                    // The sweep's loss from its last mode's systems, where the backend
                    // gave the targets' squares for every call.
                    let mut mode_loss =
                        (mode == last && layout.biases).then_some(RowsLoss::default());
                    for rows in active.chunks(per_call) {
                        if layout.biases {
                            if !(ready && rows.len() == active.len()) {
                                timed(&mut || {
                                    s.bias_normal_equations(mode, layout.rank, rows, ne, squares)
                                        .map(|_| ())
                                })?;
                            }
                        } else {
                            timed(&mut || s.normal_equations(mode, rows, ne).map(|_| ()))?;
                        }
                        let n: Vec<u32> = rows.iter().map(|&i| count[i as usize]).collect();
                        let (part, pinv) =
                            engine.install(|| solve_rows(ne, w, &diagonal, &toward, &n))?;
                        self.pinv_solves += pinv;
                        mode_loss = match mode_loss {
                            Some(l) if squares.len() == rows.len() => Some(
                                l.plus(&engine.install(|| loss_of_rows(ne, w, &part, squares))),
                            ),
                            _ => None,
                        };
                        let dst = a.data_mut();
                        for (&i, x) in rows.iter().zip(part.data().chunks_exact(w)) {
                            let i = i as usize;
                            dst[i * w..(i + 1) * w].copy_from_slice(x);
                        }
                    }
                    if mode == last {
                        // Near an exact fit, the loss is taken from the entries instead.
                        loss = mode_loss.and_then(|l| l.trusted());
                    }
                    let a = if layout.biases {
                        layout.expand(&a, mode)
                    } else {
                        a
                    };
                    timed(&mut || s.set_factor(mode, &a).map(|_| ()))?;
                }
                (None, false, loss)
            }
            Solver::Ccd => {
                timed(&mut || s.reset_residual().map(|_| ()))?;
                // The biases first (one exact update each), then the CP columns.
                let bias_cols = (0..layout.order)
                    .filter(|_| layout.biases)
                    .map(|n| (layout.rank + n, Some(n)));
                let columns: Vec<(usize, Option<usize>)> = bias_cols
                    .chain((0..layout.rank).map(|c| (c, None)))
                    .collect();
                for (col, bias_of) in columns {
                    timed(&mut || s.add_column(col, 1.0).map(|_| ()))?;
                    let (modes, sweeps, lam): (Vec<usize>, usize, f64) = match bias_of {
                        Some(n) => (vec![n], 1, self.bias_lambda),
                        None => ((0..layout.order).collect(), self.ccd_inner, lambda),
                    };
                    let bias_center = match bias_of {
                        Some(n) => layout.centers(&s.factors()?)[n],
                        None => 0.0,
                    };
                    for _ in 0..sweeps {
                        for &mode in &modes {
                            let scratch = &mut scratch[mode];
                            let (center, lam) = match bias_of {
                                Some(_) => (bias_center, lam),
                                None => {
                                    let a = layout.anchor(mode);
                                    (f64::from(a.value), lam * f64::from(a.weight))
                                }
                            };
                            timed(&mut || s.column_terms(mode, col, scratch).map(|_| ()))?;
                            let v = column_update(scratch, lam, center, &self.counts[mode]);
                            timed(&mut || s.set_column(mode, col, &v).map(|_| ()))?;
                        }
                    }
                    timed(&mut || s.add_column(col, -1.0).map(|_| ()))?;
                }
                (None, false, None)
            }
            Solver::Sgd => {
                let before = s.factors()?;
                let lr = self.lr;
                let step = SgdStep {
                    learning_rate: lr as f32,
                    lambda: lambda as f32,
                    seed: self.seed.wrapping_add(self.epochs.len() as u64),
                    shuffle: true,
                    bias: layout.biases.then(|| SgdBias {
                        learning_rate: (lr * self.bias_rate) as f32,
                        lambda: self.bias_lambda as f32,
                        centers: layout.centers(&before).iter().map(|&c| c as f32).collect(),
                    }),
                    anchors: layout.anchors.clone(),
                };
                let mut outcome = Ok(());
                timed(&mut || {
                    outcome = s.sgd_epoch(&step).map(|_| ());
                    Ok(())
                })?;
                // The loss and the objective of the factors the epoch leaves.
                let judged = match outcome {
                    Ok(()) => match s.loss() {
                        Ok(l) => Some((
                            l,
                            l + layout.penalty(&s.factors()?, lambda, self.bias_lambda),
                        )),
                        Err(Error::NonFinite(_)) => None,
                        Err(e) => return Err(e),
                    },
                    Err(Error::NonFinite(_)) => None,
                    Err(e) => return Err(e),
                };
                match judged {
                    Some((loss, o)) if o.is_finite() && o <= *prev_objective => {
                        *prev_objective = o;
                        self.lr *= 1.05;
                        self.halvings = 0;
                        // The kept epoch's loss is known: the caller need not pass
                        // over the entries again.
                        (Some(lr), false, Some(loss))
                    }
                    _ => {
                        for (m, f) in before.iter().enumerate() {
                            s.set_factor(m, f)?;
                        }
                        self.lr *= 0.5;
                        self.halvings += 1;
                        if self.halvings > MAX_HALVINGS {
                            return Err(Error::Numerical(format!(
                                "SGD: {MAX_HALVINGS} epochs in a row raised the objective or overflowed, down to learning rate {:e}",
                                self.lr
                            )));
                        }
                        (Some(lr), true, None)
                    }
                }
            }
        };
        let (rate, undone, swept) = out;
        let loss = match before {
            Some(before) => {
                let t = Instant::now();
                let loss = self.extrapolate(&before, lambda, swept)?;
                *kernel += t.elapsed().as_secs_f64();
                Some(loss)
            }
            None => swept,
        };
        Ok((rate, undone, loss))
    }

    /// ALS and CCD++ cross long flat stretches ("swamps") of the objective in small
    /// steps; after each sweep, try moving on along the sweep's step: `A + β (A −
    /// A_before)`, kept when it lowers the objective (then `β` grows by half, up to
    /// [`MAX_BETA`]), else undone (then `β` halves, down to [`MIN_BETA`]). The fixed
    /// bias columns do not move (their step is 0); rows without entries stay at zero.
    /// `swept` is the loss after the sweep where the sweep computed it. Returns the
    /// loss of the factors it leaves.
    fn extrapolate(&mut self, before: &[Matrix], lambda: f64, swept: Option<f64>) -> Result<f64> {
        let after = self.session.factors()?;
        let base_loss = match swept {
            Some(l) => l,
            None => self.session.loss()?,
        };
        let base = base_loss + self.layout.penalty(&after, lambda, self.bias_lambda);
        let beta = self.beta as f32;
        let ahead: Vec<Matrix> = after
            .iter()
            .zip(before)
            .map(|(a, b)| {
                let mut m = a.clone();
                for (x, &y) in m.data_mut().iter_mut().zip(b.data()) {
                    *x += beta * (*x - y);
                }
                m
            })
            .collect();
        if ahead
            .iter()
            .any(|m| m.data().iter().any(|v| !v.is_finite()))
        {
            self.beta = (self.beta * 0.5).max(MIN_BETA);
            return Ok(base_loss);
        }
        self.set_factors(&ahead)?;
        let tried_loss = match self.ahead_loss(&ahead, swept.is_some()) {
            Ok(l) => l,
            Err(Error::NonFinite(_)) => f64::INFINITY,
            Err(e) => return Err(e),
        };
        let tried = tried_loss + self.layout.penalty(&ahead, lambda, self.bias_lambda);
        if tried < base {
            self.beta = (self.beta * 1.5).min(MAX_BETA);
            Ok(tried_loss)
        } else {
            self.set_factors(&after)?;
            self.beta = (self.beta * 0.5).max(MIN_BETA);
            Ok(base_loss)
        }
    }

    /// The loss of the extrapolated factors `ahead`, which the session holds. Where
    /// ALS's sweep took its loss from the bias systems (`from_systems`), so does this:
    /// mode 0's systems for `ahead`'s other modes, then `Σ_i (Σ y² − 2aᵀb + aᵀGa)` at
    /// mode 0's own extrapolated rows. Those systems are the next sweep's first step
    /// whenever the step is kept, so the pass that judges the step is not spent (a
    /// pass over the entries for the loss costs about as much as one for the systems).
    /// Otherwise a pass over the entries: also where mode 0's systems outweigh the
    /// entries (more than twice their indices and values, [`SYSTEMS_PER_ENTRY_WORDS`]),
    /// since writing them makes a systems pass several loss passes long, and a step
    /// that is undone then costs more than the kept ones save (a generated tensor of
    /// 300 000 users, 2.4 M entries: 367 MB of systems, +13 % per epoch).
    fn ahead_loss(&mut self, ahead: &[Matrix], from_systems: bool) -> Result<f64> {
        let w = self.layout.rank + 1;
        let rows = &self.active[0];
        let systems = rows.len() as f64 * (w * w + w) as f64;
        let entry_words = self.nnz * (self.counts.len() + 1) as f64;
        if !(from_systems
            && self.solver == Solver::Als
            && self.layout.biases
            && systems <= SYSTEMS_PER_ENTRY_WORDS * entry_words
            && rows.len() <= rows_per_call(self.systems_bytes, &self.layout))
        {
            return self.session.loss();
        }
        let (rank, ne) = (self.layout.rank, &mut self.scratch[0]);
        self.session
            .bias_normal_equations(0, rank, rows, ne, &mut self.squares)?;
        if self.squares.len() != ne.rows() {
            return self.session.loss();
        }
        // The rows without entries add nothing to the loss.
        let own = Matrix::from_fn(rows.len(), rank + 1, |k, c| {
            ahead[0].get(rows[k] as usize, if c < rank { c } else { rank })
        });
        let (ne, squares) = (&self.scratch[0], &self.squares);
        let loss = self
            .engine
            .install(|| loss_of_rows(ne, rank + 1, &own, squares));
        // Kept by the caller only if the step is: `set_factors` clears it otherwise.
        self.mode0_ready = true;
        match loss.trusted() {
            Some(l) => Ok(l),
            None => self.session.loss(),
        }
    }

    /// Sets the session's factors (mode 0's prepared systems, if any, no longer hold).
    pub fn set_factors(&mut self, factors: &[Matrix]) -> Result<()> {
        self.mode0_ready = false;
        for (m, f) in factors.iter().enumerate() {
            self.session.set_factor(m, f)?;
        }
        Ok(())
    }
}
