//! Bias terms carried as factor columns, so that every engine kernel (which fits a CP
//! model) learns them with the factors.
//!
//! A model of rank `R` on a tensor of order `N` with biases is run as a CP model of
//! rank `K = R + N`: column `R + n` holds mode `n`'s bias `b⁽ⁿ⁾` in mode `n` and a fixed
//! 1 in every other mode, so `Σ_{r<K} Π_m A⁽ᵐ⁾[i_m, r] = CP_R(i) + Σ_n b⁽ⁿ⁾[i_n]`. The
//! solvers update, per mode `n`, only the `R` CP columns and column `R + n`; the fixed
//! ones stay at 1 in every row (rows without entries included, so that a prediction
//! there still adds the other modes' biases).

use crate::engine::Anchor;
#[cfg(doc)]
use crate::engine::CompletionSession;
use crate::matrix::Matrix;

/// How the model's columns are laid out in the session's factors.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Layout {
    /// The CP rank `R`.
    pub rank: usize,
    /// The order `N`.
    pub order: usize,
    /// Whether the last `N` columns are biases.
    pub biases: bool,
    /// Per mode, how its CP columns are regularized (empty: all toward 0, weight 1).
    pub anchors: Vec<Anchor>,
    /// Per mode, the model's rows that are not in the session's factors (empty: none):
    /// rows without training entries left out of the run (`compact.rs`). Each counts
    /// as such a row does in the factors: its learned columns zero.
    pub absent: Vec<usize>,
}

impl Layout {
    /// The session's rank: `R`, or `R + N` with biases.
    pub fn width(&self) -> usize {
        self.rank + if self.biases { self.order } else { 0 }
    }

    /// Appends the bias columns to factors of `R` columns (biases 0, fixed columns 1);
    /// without biases, the factors as they are.
    pub fn widen(&self, factors: Vec<Matrix>) -> Vec<Matrix> {
        if !self.biases {
            return factors;
        }
        let (r, k) = (self.rank, self.width());
        factors
            .into_iter()
            .enumerate()
            .map(|(n, f)| {
                Matrix::from_fn(f.rows(), k, |i, c| match c {
                    c if c < r => f.get(i, c),
                    c if c == r + n => 0.0,
                    _ => 1.0,
                })
            })
            .collect()
    }

    /// Sets the learned columns of rows without training entries to zero: the CP
    /// columns and the mode's own bias (the fixed columns stay at 1).
    pub fn zero_empty_rows(&self, factors: &mut [Matrix], counts: &[Vec<u32>]) {
        let (r, k) = (self.rank, self.width());
        for (n, (f, c)) in factors.iter_mut().zip(counts).enumerate() {
            for (row, &cnt) in f.data_mut().chunks_exact_mut(k).zip(c) {
                if cnt == 0 {
                    row[..r].fill(0.0);
                    if self.biases {
                        row[r + n] = 0.0;
                    }
                }
            }
        }
    }

    /// `λ Σ_n w_n ‖CP columns of A⁽ⁿ⁾ − c_n‖² + λ_b Σ_n ‖b⁽ⁿ⁾ − b̄⁽ⁿ⁾‖²` in f64
    /// (`c_n`, `w_n` mode `n`'s [`Layout::anchor`]), `b̄⁽ⁿ⁾` the mean of mode `n`'s
    /// biases ([`Layout::centers`]).
    pub fn penalty(&self, factors: &[Matrix], lambda: f64, bias_lambda: f64) -> f64 {
        let (cp, bias) = self.sq_norms(factors);
        lambda * cp + bias_lambda * bias
    }

    /// How mode `n`'s CP columns are regularized.
    pub fn anchor(&self, n: usize) -> Anchor {
        self.anchors.get(n).copied().unwrap_or(Anchor::ZERO)
    }

    /// Mode `n`'s rows not in the session's factors ([`Layout::absent`]).
    fn absent_rows(&self, n: usize) -> usize {
        self.absent.get(n).copied().unwrap_or(0)
    }

    /// `Σ_n w_n ‖CP columns of A⁽ⁿ⁾ − c_n‖²` and `Σ_n ‖b⁽ⁿ⁾ − b̄⁽ⁿ⁾‖²` in f64, the
    /// absent rows included.
    pub fn sq_norms(&self, factors: &[Matrix]) -> (f64, f64) {
        let (r, k) = (self.rank, self.width());
        let centers = self.centers(factors);
        let (mut cp, mut bias) = (0.0, 0.0);
        for (n, f) in factors.iter().enumerate() {
            let Anchor { value, weight } = self.anchor(n);
            let (c, w) = (f64::from(value), f64::from(weight));
            for row in f.data().chunks_exact(k) {
                cp += w * row[..r]
                    .iter()
                    .map(|&v| (f64::from(v) - c).powi(2))
                    .sum::<f64>();
                if self.biases {
                    bias += (f64::from(row[r + n]) - centers[n]).powi(2);
                }
            }
            // An absent row's learned columns are zero.
            let absent = self.absent_rows(n) as f64;
            cp += absent * w * r as f64 * c * c;
            if self.biases {
                bias += absent * centers[n] * centers[n];
            }
        }
        (cp, bias)
    }

    /// Per mode, the mean `b̄⁽ⁿ⁾` of its biases over every row (the absent ones, at 0,
    /// included), toward which they are
    /// shrunk (0 without biases). A mode's mean bias is a constant the regularization
    /// leaves free: shrinking the biases toward 0 instead would pull the model toward
    /// `μ`, which fights a CP part whose own mean is not the training mean (a
    /// nonnegative low-rank tensor fitted at its own rank stopped at 1.38 σ that way).
    pub fn centers(&self, factors: &[Matrix]) -> Vec<f64> {
        let (r, k) = (self.rank, self.width());
        factors
            .iter()
            .enumerate()
            .map(|(n, f)| {
                if !self.biases || f.rows() == 0 {
                    return 0.0;
                }
                let sum: f64 = f
                    .data()
                    .chunks_exact(k)
                    .map(|row| f64::from(row[r + n]))
                    .sum();
                sum / (f.rows() + self.absent_rows(n)) as f64
            })
            .collect()
    }

    /// The weight of every CP column: `Π_n ‖A⁽ⁿ⁾[:, r]‖`.
    pub fn weights(&self, factors: &[Matrix]) -> Vec<f64> {
        let (r, k) = (self.rank, self.width());
        let mut w = vec![1.0; r];
        for f in factors {
            let mut sq = vec![0.0; r];
            for row in f.data().chunks_exact(k) {
                for (s, &v) in sq.iter_mut().zip(&row[..r]) {
                    *s += f64::from(v).powi(2);
                }
            }
            for (w, s) in w.iter_mut().zip(sq) {
                *w *= s.sqrt();
            }
        }
        w
    }

    /// Copies CP column `r` of every mode from `from` (same layout) where its weight
    /// has fallen below `share` of `from`'s: a component shrunk to zero sits at a
    /// saddle no solver leaves quickly. Returns how many were restarted.
    pub fn revive(&self, factors: &mut [Matrix], from: &[Matrix], share: f64) -> usize {
        let (r, k) = (self.rank, self.width());
        let (now, then) = (self.weights(factors), self.weights(from));
        let dead: Vec<usize> = (0..r).filter(|&c| now[c] < share * then[c]).collect();
        for (f, g) in factors.iter_mut().zip(from) {
            for (a, b) in f
                .data_mut()
                .chunks_exact_mut(k)
                .zip(g.data().chunks_exact(k))
            {
                for &c in &dead {
                    a[c] = b[c];
                }
            }
        }
        dead.len()
    }

    /// The model's parts: the `R` CP columns of every mode and (with biases) every
    /// mode's bias, in f64.
    pub fn split(&self, factors: &[Matrix]) -> (Vec<Matrix>, Vec<Vec<f64>>) {
        let r = self.rank;
        let cp = factors
            .iter()
            .map(|f| Matrix::from_fn(f.rows(), r, |i, c| f.get(i, c)))
            .collect();
        let biases = if self.biases {
            factors
                .iter()
                .enumerate()
                .map(|(n, f)| (0..f.rows()).map(|i| f64::from(f.get(i, r + n))).collect())
                .collect()
        } else {
            Vec::new()
        };
        (cp, biases)
    }

    /// The regularization of the `R + 1` unknowns of
    /// [`CompletionSession::bias_normal_equations`] (or the `R` columns without
    /// biases).
    pub fn diagonal(&self, lambda: f64, bias_lambda: f64) -> Vec<f64> {
        let mut d = vec![lambda; self.rank];
        if self.biases {
            d.push(bias_lambda);
        }
        d
    }

    /// The factor of mode `n` at rank `K` from the solved unknowns of
    /// [`CompletionSession::bias_normal_equations`] (`I × (R + 1)`): the fixed columns
    /// at 1.
    pub fn expand(&self, solved: &Matrix, n: usize) -> Matrix {
        let r = self.rank;
        Matrix::from_fn(solved.rows(), self.width(), |i, c| match c {
            c if c < r => solved.get(i, c),
            c if c == r + n => solved.get(i, r),
            _ => 1.0,
        })
    }
}
