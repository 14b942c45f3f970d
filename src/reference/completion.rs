//! FP64 references of the completion kernels ([`crate::engine::completion`]) on COO:
//! entry `k` of the tensor is nonzero `k` (to compare with a session, list the
//! nonzeros in the session's order, [`crate::hls::HlsTensor::for_each_nonzero`]).
//! Every value is observed; `offset` is the model's constant `μ`.

use crate::error::{Error, Result};
use crate::matrix::Matrix;
use crate::tensor::CooTensor;

/// Checks the factors against `x` (one per mode, mode `n` of `dims[n]` rows, one
/// rank ≥ 1) and returns the rank.
fn rank_of(x: &CooTensor, factors: &[Matrix<f64>]) -> Result<usize> {
    let rank = factors.first().map_or(0, Matrix::cols);
    if factors.len() != x.order() || rank == 0 {
        return Err(Error::shape(
            "completion factors",
            format!("{} matrices of one rank ≥ 1", x.order()),
            format!("{} matrices", factors.len()),
        ));
    }
    for (m, f) in factors.iter().enumerate() {
        if f.shape() != (x.dims()[m], rank) {
            return Err(Error::shape(
                format!("completion factor of mode {m}"),
                format!("{}×{rank}", x.dims()[m]),
                format!("{}×{}", f.rows(), f.cols()),
            ));
        }
    }
    Ok(rank)
}

/// `Π_{m ∉ skip} F_m[c_m, r]` for every `r`, into `out`.
fn product(x: &CooTensor, k: usize, factors: &[Matrix<f64>], skip: Option<usize>, out: &mut [f64]) {
    out.fill(1.0);
    for (m, f) in factors.iter().enumerate() {
        if Some(m) == skip {
            continue;
        }
        for (o, &a) in out.iter_mut().zip(f.row(x.indices(m)[k] as usize)) {
            *o *= a;
        }
    }
}

/// The normal equations of every row of `mode`: row `i` holds `G_i = Σ k kᵀ`
/// (row-major `R × R`), then `b_i = Σ (x − offset) k` (`R`), `k` the product of the
/// other modes' rows.
pub fn normal_equations(
    x: &CooTensor,
    mode: usize,
    factors: &[Matrix<f64>],
    offset: f64,
) -> Result<Matrix<f64>> {
    x.check_mode(mode)?;
    let r = rank_of(x, factors)?;
    let w = r * r + r;
    let mut out = Matrix::<f64>::zeros(x.dims()[mode], w);
    let mut k = vec![0f64; r];
    for e in 0..x.nnz() {
        product(x, e, factors, Some(mode), &mut k);
        let v = x.values()[e] - offset;
        let row = out.row_mut(x.indices(mode)[e] as usize);
        for a in 0..r {
            for b in 0..r {
                row[a * r + b] += k[a] * k[b];
            }
            row[r * r + a] += v * k[a];
        }
    }
    Ok(out)
}

/// The normal equations of the bias layout (`CompletionSession::bias_normal_equations`):
/// factors of `rank + N` columns, column `rank + m` mode `m`'s bias there and 1 in
/// every other mode. Row `i` of `mode` holds the `w = rank + 1` unknowns' `G_i`
/// (row-major, the CP columns then the mode's bias column), then `b_i`; the other bias
/// columns, held fixed, are moved to the right-hand side with their values.
pub fn bias_normal_equations(
    x: &CooTensor,
    mode: usize,
    factors: &[Matrix<f64>],
    rank: usize,
    offset: f64,
) -> Result<Matrix<f64>> {
    let full = normal_equations(x, mode, factors, offset)?;
    let k = factors[0].cols();
    if rank + x.order() != k {
        return Err(Error::InvalidRank(format!(
            "a bias layout of CP rank {rank} on an order-{} tensor has {} columns, not {k}",
            x.order(),
            rank + x.order()
        )));
    }
    let w = rank + 1;
    let free: Vec<usize> = (0..rank).chain([rank + mode]).collect();
    let mut out = Matrix::<f64>::zeros(full.rows(), w * w + w);
    for i in 0..full.rows() {
        let (src, dst) = (full.row(i), out.row_mut(i));
        for (p, &fp) in free.iter().enumerate() {
            for (q, &fq) in free.iter().enumerate() {
                dst[p * w + q] = src[fp * k + fq];
            }
            // The fixed columns' part: G times their values in this mode.
            let moved: f64 = (rank..k)
                .filter(|&c| c != rank + mode)
                .map(|c| src[fp * k + c] * factors[mode].row(i)[c])
                .sum();
            dst[w * w + p] = src[k * k + fp] - moved;
        }
    }
    Ok(out)
}

/// Every row of `mode`'s `Σ y²` in the bias layout of [`bias_normal_equations`]: `y =
/// x − offset −` the other modes' biases (their columns `rank + m`).
pub fn bias_target_squares(
    x: &CooTensor,
    mode: usize,
    factors: &[Matrix<f64>],
    rank: usize,
    offset: f64,
) -> Result<Vec<f64>> {
    rank_of(x, factors)?;
    let mut out = vec![0f64; x.dims()[mode]];
    for e in 0..x.nnz() {
        let moved: f64 = (0..x.order())
            .filter(|&m| m != mode)
            .map(|m| factors[m].row(x.indices(m)[e] as usize)[rank + m])
            .sum();
        let y = x.values()[e] - offset - moved;
        out[x.indices(mode)[e] as usize] += y * y;
    }
    Ok(out)
}

/// The residual `x − offset − Σ_r Π_m F_m[c_m, r]` of every entry.
pub fn residual(x: &CooTensor, factors: &[Matrix<f64>], offset: f64) -> Result<Vec<f64>> {
    let r = rank_of(x, factors)?;
    let mut k = vec![0f64; r];
    Ok((0..x.nnz())
        .map(|e| {
            product(x, e, factors, None, &mut k);
            x.values()[e] - offset - k.iter().sum::<f64>()
        })
        .collect())
}

/// `Σ (x − offset − m)²` over the entries.
pub fn loss(x: &CooTensor, factors: &[Matrix<f64>], offset: f64) -> Result<f64> {
    Ok(residual(x, factors, offset)?.iter().map(|e| e * e).sum())
}

/// For every row `i` of `mode`, `Σ e k` and `Σ k²` with `e = residual[entry]` and
/// `k = Π_{m≠mode} F_m[c_m, col]`.
pub fn column_terms(
    x: &CooTensor,
    residual: &[f64],
    mode: usize,
    col: usize,
    factors: &[Matrix<f64>],
) -> Result<Matrix<f64>> {
    x.check_mode(mode)?;
    let r = rank_of(x, factors)?;
    if col >= r || residual.len() != x.nnz() {
        return Err(Error::shape(
            "column terms",
            format!("a column < {r} and {} residuals", x.nnz()),
            format!("column {col} and {} residuals", residual.len()),
        ));
    }
    let mut out = Matrix::<f64>::zeros(x.dims()[mode], 2);
    for (e, &res) in residual.iter().enumerate() {
        let mut k = 1.0;
        for (m, f) in factors.iter().enumerate() {
            if m != mode {
                k *= f.get(x.indices(m)[e] as usize, col);
            }
        }
        let row = out.row_mut(x.indices(mode)[e] as usize);
        row[0] += res * k;
        row[1] += k * k;
    }
    Ok(out)
}

/// How many entries every row of every mode holds.
pub fn row_counts(x: &CooTensor) -> Vec<Vec<u32>> {
    (0..x.order())
        .map(|m| {
            let mut c = vec![0u32; x.dims()[m]];
            for &i in x.indices(m) {
                c[i as usize] += 1;
            }
            c
        })
        .collect()
}

/// One SGD pass over the entries in their order: at entry `x` at `c`, with
/// `e = x − offset − m(c)`, every mode's row `a` moves to
/// `a + η (e k − λ / n(c_m) · a)`, `k` the product of the other modes' rows as they
/// were before the step and `n(c_m)` the entries of row `c_m` of mode `m` (so that a
/// pass spreads `λ‖A‖²` over the entries).
pub fn sgd_epoch(
    x: &CooTensor,
    factors: &mut [Matrix<f64>],
    offset: f64,
    learning_rate: f64,
    lambda: f64,
) -> Result<()> {
    let r = rank_of(x, factors)?;
    let counts = row_counts(x);
    let n = x.order();
    let mut old = vec![0f64; n * r];
    for e in 0..x.nnz() {
        for m in 0..n {
            old[m * r..(m + 1) * r].copy_from_slice(factors[m].row(x.indices(m)[e] as usize));
        }
        let pred: f64 = (0..r)
            .map(|c| (0..n).map(|m| old[m * r + c]).product::<f64>())
            .sum();
        let err = x.values()[e] - offset - pred;
        for m in 0..n {
            let i = x.indices(m)[e] as usize;
            let reg = lambda / f64::from(counts[m][i]);
            let row = factors[m].row_mut(i);
            for c in 0..r {
                let k: f64 = (0..n)
                    .filter(|&mm| mm != m)
                    .map(|mm| old[mm * r + c])
                    .product();
                let a0 = old[m * r + c];
                row[c] = a0 + learning_rate * (err * k - reg * a0);
            }
        }
    }
    Ok(())
}
