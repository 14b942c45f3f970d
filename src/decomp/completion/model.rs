//! The fitted completion model and what it is measured with: predictions, RMSEs, the
//! deterministic train/validation/test split and the mean and bias baselines.

use super::{EpochStats, Solver};
use crate::error::{Error, Result};
use crate::matrix::Matrix;
use crate::tensor::CooTensor;
use rand::SeedableRng;
use rand::seq::SliceRandom;
use rayon::prelude::*;
/// A completion model and how it was reached.
#[derive(Debug, Clone, PartialEq)]
pub struct CompletionModel {
    /// The solver that fitted it.
    pub solver: Solver,
    /// `μ`: the mean of the training values as stored, or 0 (uncentered).
    pub offset: f64,
    /// One `I_m × R` factor per mode (those of the best epoch).
    pub factors: Vec<Matrix>,
    /// One bias per row of every mode (`I_m` values per mode), or none (empty) for a
    /// model without bias terms.
    pub biases: Vec<Vec<f64>>,
    /// The `λ` the model was fitted with (given, or chosen on validation).
    pub lambda: f64,
    /// The biases' regularization `λ_b`.
    pub bias_lambda: f64,
    /// SGD's initial learning rate (given, or from the data); `None` for the others.
    pub learning_rate: Option<f64>,
    /// The λ path that chose `lambda` (empty when it was given).
    pub lambda_path: Vec<PathPoint>,
    /// Every epoch run, in order (the λ path's included).
    pub epochs: Vec<EpochStats>,
    /// The epoch whose factors these are (lowest validation RMSE).
    pub best_epoch: usize,
    /// Per mode, the rows with no training entry (kept at zero).
    pub empty_rows: Vec<usize>,
    /// ALS row solves that fell back to the pseudo-inverse.
    pub pinv_solves: usize,
}

/// One point of the λ path: its `λ`, the lowest validation RMSE it reached and the
/// epochs it ran.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct PathPoint {
    /// The point's `λ`.
    pub lambda: f64,
    /// Its best validation RMSE.
    pub validation_rmse: f64,
    /// The epochs it ran.
    pub epochs: usize,
}

impl CompletionModel {
    /// A model from its offset, factors and biases (e.g. read back from files): one
    /// factor per mode (at least two), all of one rank ≥ 1, every value finite; the
    /// biases empty or one finite value per row of every mode. No epochs; `lambda` 0.
    pub fn from_parts(
        solver: Solver,
        offset: f64,
        factors: Vec<Matrix>,
        biases: Vec<Vec<f64>>,
    ) -> Result<Self> {
        if factors.len() < 2 {
            return Err(Error::shape(
                "completion factors",
                "≥ 2 modes",
                factors.len(),
            ));
        }
        let dims: Vec<usize> = factors.iter().map(Matrix::rows).collect();
        crate::engine::completion::check_factors(&dims, &factors)?;
        if !offset.is_finite() {
            return Err(Error::NonFinite(format!("completion offset {offset}")));
        }
        if !biases.is_empty() {
            if biases.len() != dims.len() {
                return Err(Error::shape("completion biases", dims.len(), biases.len()));
            }
            for (m, (b, &d)) in biases.iter().zip(&dims).enumerate() {
                if b.len() != d {
                    return Err(Error::shape(format!("biases of mode {m}"), d, b.len()));
                }
                if let Some(v) = b.iter().find(|v| !v.is_finite()) {
                    return Err(Error::NonFinite(format!("bias of mode {m} is {v}")));
                }
            }
        }
        Ok(CompletionModel {
            solver,
            offset,
            empty_rows: vec![0; factors.len()],
            factors,
            biases,
            lambda: 0.0,
            bias_lambda: 0.0,
            learning_rate: None,
            lambda_path: Vec::new(),
            epochs: Vec::new(),
            best_epoch: 0,
            pinv_solves: 0,
        })
    }

    /// The rank.
    pub fn rank(&self) -> usize {
        self.factors.first().map_or(0, Matrix::cols)
    }

    /// The extents the model covers.
    pub fn dims(&self) -> Vec<usize> {
        self.factors.iter().map(Matrix::rows).collect()
    }

    /// The best epoch's statistics.
    pub fn best(&self) -> Option<&EpochStats> {
        self.epochs.get(self.best_epoch)
    }

    /// The prediction at `coords` (0-based): `μ + Σ_m b_m[i_m] + Σ_r Π_m A_m[i_m, r]`.
    pub fn predict(&self, coords: &[u32]) -> Result<f64> {
        check_coords(&self.factors, coords)?;
        Ok(self.at(coords))
    }

    /// [`CompletionModel::predict`] at coordinates in range.
    fn at(&self, c: &[u32]) -> f64 {
        let bias: f64 = (self.biases.iter().zip(c))
            .map(|(b, &i)| b[i as usize])
            .sum();
        self.offset + bias + model_at(&self.factors, c)
    }

    /// The RMSE of the model's predictions over the entries of `x` (`None` when `x`
    /// holds none). `x` must have the model's order and no index beyond its extents.
    pub fn rmse(&self, x: &CooTensor) -> Result<Option<f64>> {
        check_covers(&self.dims(), x)?;
        Ok(rmse_with(x, |c| self.at(c)))
    }
}

/// Checks that `coords` has one index per mode of `factors`, each in range.
fn check_coords(factors: &[Matrix], coords: &[u32]) -> Result<()> {
    if coords.len() != factors.len() {
        return Err(Error::shape("coordinates", factors.len(), coords.len()));
    }
    for (m, (&i, f)) in coords.iter().zip(factors).enumerate() {
        if i as usize >= f.rows() {
            return Err(Error::InvalidOption(format!(
                "index {i} in mode {m} is beyond the model's length {}",
                f.rows()
            )));
        }
    }
    Ok(())
}

/// `Σ_r Π_m F_m[c_m, r]` in f64 (coordinates in range).
fn model_at(factors: &[Matrix], c: &[u32]) -> f64 {
    let r = factors[0].cols();
    // The rows' products column by column, four partial sums (no buffer of products
    // to clear per entry; one chain of `r` dependent additions bounded the validation
    // RMSE by the adder's latency). Up to 8 modes' rows on the stack.
    let mut stack: [&[f32]; 8] = [&[]; 8];
    let mut heap = Vec::new();
    let rows: &[&[f32]] = if factors.len() <= stack.len() {
        for ((s, f), &i) in stack.iter_mut().zip(factors).zip(c) {
            *s = f.row(i as usize);
        }
        &stack[..factors.len()]
    } else {
        heap.extend(factors.iter().zip(c).map(|(f, &i)| f.row(i as usize)));
        &heap
    };
    let (first, rest) = rows.split_first().expect("at least one mode");
    let product = |k: usize| {
        rest.iter()
            .fold(f64::from(first[k]), |p, row| p * f64::from(row[k]))
    };
    let mut lanes = [0f64; 4];
    let quads = r / 4 * 4;
    for k in (0..quads).step_by(4) {
        // Four columns at once, the modes' rows outermost (one f64 vector per step;
        // the same products, in the same order, as `product`).
        let mut p: [f64; 4] = std::array::from_fn(|t| f64::from(first[k + t]));
        for row in rest {
            let v = &row[k..k + 4];
            for (pt, &vt) in p.iter_mut().zip(v) {
                *pt *= f64::from(vt);
            }
        }
        for (l, pt) in lanes.iter_mut().zip(p) {
            *l += pt;
        }
    }
    let tail: f64 = (quads..r).map(product).sum();
    (lanes[0] + lanes[1]) + (lanes[2] + lanes[3]) + tail
}

/// Checks that `x` has `dims.len()` modes and no index beyond `dims`.
fn check_covers(dims: &[usize], x: &CooTensor) -> Result<()> {
    if x.order() != dims.len() {
        return Err(Error::shape("tensor order", dims.len(), x.order()));
    }
    for (m, &d) in dims.iter().enumerate() {
        if x.dims()[m] > d
            && let Some(&i) = x.indices(m).iter().find(|&&i| i as usize >= d)
        {
            return Err(Error::InvalidOption(format!(
                "index {i} in mode {m} is beyond the model's length {d}"
            )));
        }
    }
    Ok(())
}

/// The RMSE of `offset + CP(factors)` over `x` (`None` when empty); f64, in parallel
/// over fixed chunks summed in order (deterministic).
pub(super) fn rmse_of(offset: f64, factors: &[Matrix], x: &CooTensor) -> Option<f64> {
    rmse_with(x, |c| offset + model_at(factors, c))
}

/// The RMSE of `predict` over the entries of `x` (`None` when empty).
fn rmse_with(x: &CooTensor, predict: impl Fn(&[u32]) -> f64 + Sync) -> Option<f64> {
    let n = x.nnz();
    if n == 0 {
        return None;
    }
    const CHUNK: usize = 1024;
    let parts: Vec<f64> = (0..n.div_ceil(CHUNK))
        .into_par_iter()
        .map(|k| {
            let mut c = vec![0u32; x.order()];
            let mut s = 0.0;
            for e in k * CHUNK..((k + 1) * CHUNK).min(n) {
                for (m, cm) in c.iter_mut().enumerate() {
                    *cm = x.indices(m)[e];
                }
                let d = x.values()[e] - predict(&c);
                s += d * d;
            }
            s
        })
        .collect();
    Some((parts.iter().sum::<f64>() / n as f64).sqrt())
}

/// A deterministic split of a tensor's entries into training, validation and test
/// sets (each keeps the tensor's extents and its entries in their original order).
#[derive(Debug, Clone, PartialEq)]
pub struct Split {
    /// The training entries.
    pub train: CooTensor,
    /// The validation entries (early stopping).
    pub validation: CooTensor,
    /// The test entries (reported, never used for fitting).
    pub test: CooTensor,
}

/// Splits the entries of `x` by `fractions` (train, validation, test: each ≥ 0, summing
/// to 1 within 1e-6): the entries are shuffled by a generator seeded with `seed`
/// (Xoshiro256++), the first `round(f_train·n)` go to training, the next
/// `round(f_validation·n)` to validation, the rest to test. Same `x`, fractions and
/// seed, same split, on every machine. An empty training set is an error.
pub fn split(x: &CooTensor, fractions: [f64; 3], seed: u64) -> Result<Split> {
    if fractions.iter().any(|f| !(f.is_finite() && *f >= 0.0)) {
        return Err(Error::InvalidOption(format!(
            "split fractions must be numbers ≥ 0, got {fractions:?}"
        )));
    }
    let total: f64 = fractions.iter().sum();
    if (total - 1.0).abs() > 1e-6 {
        return Err(Error::InvalidOption(format!(
            "split fractions must add up to 1, got {fractions:?} (sum {total})"
        )));
    }
    let n = x.nnz();
    let n_train = ((fractions[0] * n as f64).round() as usize).min(n);
    let n_val = ((fractions[1] * n as f64).round() as usize).min(n - n_train);
    if n_train == 0 {
        return Err(Error::InvalidOption(format!(
            "the split {fractions:?} of {n} entries leaves no training entry"
        )));
    }
    let mut perm: Vec<usize> = (0..n).collect();
    let mut rng = rand_xoshiro::Xoshiro256PlusPlus::seed_from_u64(seed);
    perm.shuffle(&mut rng);
    let part = |sel: &mut [usize]| -> Result<CooTensor> {
        sel.sort_unstable();
        let indices = (0..x.order())
            .map(|m| sel.iter().map(|&e| x.indices(m)[e]).collect())
            .collect();
        let values = sel.iter().map(|&e| x.values()[e]).collect();
        CooTensor::new(x.dims().to_vec(), indices, values)
    };
    let (train, rest) = perm.split_at_mut(n_train);
    let (val, test) = rest.split_at_mut(n_val);
    Ok(Split {
        train: part(train)?,
        validation: part(val)?,
        test: part(test)?,
    })
}

/// The simple baselines every completion run is compared with, fitted to the training
/// entries: the global mean `μ`, and `μ + b⁽⁰⁾[i_0] + b⁽¹⁾[i_1]` (per-user + per-item
/// bias: modes 0 and 1), each bias the regularized mean of the residual of its row
/// (`Σ (x − μ − other bias) / (BIAS_REG + count)`), alternated [`BIAS_SWEEPS`] times.
#[derive(Debug, Clone, PartialEq)]
pub struct Baselines {
    /// The mean of the training values.
    pub mean: f64,
    /// Per mode 0 and 1, the indices with training entries, ascending (memory follows
    /// the entries, not the extents, which may be near 2^32).
    used: [Vec<u32>; 2],
    /// Their biases, in that order (a row without training entries has bias 0).
    bias: [Vec<f64>; 2],
}

/// Regularization of the bias baseline (a row's bias shrinks toward 0 like a mean with
/// this many extra entries at 0).
pub const BIAS_REG: f64 = 5.0;
/// Alternating sweeps of the bias baseline.
pub const BIAS_SWEEPS: usize = 10;

impl Baselines {
    /// Fits both baselines to `train` (order ≥ 2, at least one entry).
    pub fn fit(train: &CooTensor) -> Result<Self> {
        if train.order() < 2 || train.nnz() == 0 {
            return Err(Error::InvalidTensor(format!(
                "baselines need a tensor of order ≥ 2 with entries, got order {} with {}",
                train.order(),
                train.nnz()
            )));
        }
        let n = train.nnz();
        let mean = train.values().iter().sum::<f64>() / n as f64;
        // Each entry's row among its mode's used indices.
        let mut used: [Vec<u32>; 2] = Default::default();
        let mut at: [Vec<usize>; 2] = Default::default();
        for m in 0..2 {
            let idx = train.indices(m);
            let mut list = idx.to_vec();
            list.sort_unstable();
            list.dedup();
            at[m] = (idx.iter())
                .map(|i| list.binary_search(i).expect("listed above"))
                .collect();
            used[m] = list;
        }
        let mut bias = [vec![0.0; used[0].len()], vec![0.0; used[1].len()]];
        for _ in 0..BIAS_SWEEPS {
            for m in 0..2 {
                let o = 1 - m;
                let mut sum = vec![0.0; used[m].len()];
                let mut cnt = vec![0.0; used[m].len()];
                for ((&i, &j), &v) in at[m].iter().zip(&at[o]).zip(train.values()) {
                    sum[i] += v - mean - bias[o][j];
                    cnt[i] += 1.0;
                }
                bias[m] = sum
                    .iter()
                    .zip(&cnt)
                    .map(|(s, c)| s / (BIAS_REG + c))
                    .collect();
            }
        }
        Ok(Baselines { mean, used, bias })
    }

    /// The bias of index `i` of mode `m` (0 or 1): 0 where it has no training entries.
    pub fn bias(&self, m: usize, i: u32) -> f64 {
        self.used[m]
            .binary_search(&i)
            .map_or(0.0, |k| self.bias[m][k])
    }

    /// The RMSE of the global mean over `x` (`None` when empty).
    pub fn mean_rmse(&self, x: &CooTensor) -> Option<f64> {
        rmse_with(x, |_| self.mean)
    }

    /// The RMSE of the bias baseline over `x` (`None` when empty; an index beyond the
    /// training extents has bias 0).
    pub fn bias_rmse(&self, x: &CooTensor) -> Option<f64> {
        rmse_with(x, |c| self.mean + self.bias(0, c[0]) + self.bias(1, c[1]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The biases of the used indices are those of the dense sweeps over every index
    /// (written out here), and an extent near 2^32 costs memory for the entries only.
    #[test]
    fn baselines_match_dense_sweeps_and_follow_the_entries_not_the_extents() {
        let dims = vec![9usize, 7, 3];
        let idx = vec![
            vec![0u32, 0, 2, 5, 5, 8, 8, 8],
            vec![1u32, 6, 1, 0, 3, 3, 6, 2],
            vec![0u32, 1, 2, 0, 1, 2, 0, 1],
        ];
        let vals = vec![4.0, 3.5, 1.0, 2.0, 5.0, 3.0, 4.5, 2.5];
        let x = CooTensor::new(dims.clone(), idx.clone(), vals.clone()).unwrap();
        let b = Baselines::fit(&x).unwrap();
        let n = vals.len();
        let mean = vals.iter().sum::<f64>() / n as f64;
        let mut dense = [vec![0.0; dims[0]], vec![0.0; dims[1]]];
        for _ in 0..BIAS_SWEEPS {
            for m in 0..2 {
                let o = 1 - m;
                let (mut sum, mut cnt) = (vec![0.0; dims[m]], vec![0.0; dims[m]]);
                for e in 0..n {
                    let (i, j) = (idx[m][e] as usize, idx[o][e] as usize);
                    sum[i] += vals[e] - mean - dense[o][j];
                    cnt[i] += 1.0;
                }
                dense[m] = (0..dims[m]).map(|i| sum[i] / (BIAS_REG + cnt[i])).collect();
            }
        }
        assert_eq!(b.mean, mean);
        for (m, biases) in dense.iter().enumerate() {
            for (i, &want) in biases.iter().enumerate() {
                assert_eq!(b.bias(m, i as u32), want, "mode {m} index {i}");
            }
        }
        assert!(dense[0][1] == 0.0 && dense[0][0] != 0.0);

        // The same entries with mode 0's largest index moved to 2^32 − 1.
        let far = u32::MAX;
        let mut idx_far = idx.clone();
        for i in idx_far[0].iter_mut().filter(|i| **i == 8) {
            *i = far;
        }
        let x_far = CooTensor::new(vec![far as usize + 1, 7, 3], idx_far, vals).unwrap();
        let b_far = Baselines::fit(&x_far).unwrap();
        assert_eq!(b_far.bias(0, far), dense[0][8]);
        assert_eq!(b_far.bias(0, 8), 0.0);
        assert_eq!(b_far.bias_rmse(&x_far), b.bias_rmse(&x));
    }
}
