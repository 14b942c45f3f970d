//! FP64 reference implementations of MTTKRP, TTMc and CP-APR's Φ on COO, and of the
//! Poisson log-likelihood of a CP model: the gold standard every backend is checked
//! against. Simple and obviously right; not fast.

pub mod completion;

use crate::error::Result;
use crate::matrix::Matrix;
use crate::ops::{Op, output_shape};
use crate::tensor::CooTensor;

/// FP64 MTTKRP of `x` on `mode` (see [`crate::ops`] for the definition).
pub fn mttkrp<T: Copy + Default + Into<f64>>(
    x: &CooTensor,
    mode: usize,
    factors: &[Matrix<T>],
) -> Result<Matrix<f64>> {
    apply(Op::Mttkrp, x, mode, factors)
}

/// FP64 TTMc of `x` on `mode` (see [`crate::ops`] for the definition and column order).
pub fn ttmc<T: Copy + Default + Into<f64>>(
    x: &CooTensor,
    mode: usize,
    factors: &[Matrix<T>],
) -> Result<Matrix<f64>> {
    apply(Op::Ttmc, x, mode, factors)
}

/// FP64 `op` of `x` on `mode` (Φ with the default floor
/// [`PhiParams::DEFAULT_EPS`](crate::engine::PhiParams::DEFAULT_EPS), as
/// [`crate::engine::Engine::run`] uses).
pub fn apply<T: Copy + Default + Into<f64>>(
    op: Op,
    x: &CooTensor,
    mode: usize,
    factors: &[Matrix<T>],
) -> Result<Matrix<f64>> {
    if op == Op::Phi {
        let eps = f64::from(crate::engine::PhiParams::DEFAULT_EPS);
        return Ok(phi(x, mode, factors, eps)?.0);
    }
    let (rows, cols) = output_shape(op, x.dims(), mode, factors)?;
    let mut out = Matrix::<f64>::zeros(rows, cols);
    let others: Vec<usize> = (0..x.order()).filter(|&m| m != mode).collect();
    let mut acc = vec![0f64; cols];
    for k in 0..x.nnz() {
        let v = x.values()[k];
        match op {
            Op::Mttkrp | Op::Completion => {
                acc.fill(v);
                for &m in &others {
                    let row = factors[m].row(x.indices(m)[k] as usize);
                    for (a, &f) in acc.iter_mut().zip(row) {
                        *a *= f.into();
                    }
                }
            }
            Op::Phi => unreachable!("Φ returned above"),
            Op::Ttmc => {
                // Build the Kronecker product of the gathered rows, last mode fastest.
                acc[0] = v;
                let mut len = 1;
                for &m in &others {
                    let row = factors[m].row(x.indices(m)[k] as usize);
                    let r = row.len();
                    for p in (0..len).rev() {
                        let a = acc[p];
                        for (q, &f) in row.iter().enumerate() {
                            acc[p * r + q] = a * f.into();
                        }
                    }
                    len *= r;
                }
            }
        }
        let out_row = out.row_mut(x.indices(mode)[k] as usize);
        for (o, a) in out_row.iter_mut().zip(&acc) {
            *o += a;
        }
    }
    Ok(out)
}

/// The product of the other modes' factor rows at nonzero `k` (all ones for order 1).
fn pi_row<T: Copy + Default + Into<f64>>(
    x: &CooTensor,
    k: usize,
    mode: usize,
    factors: &[Matrix<T>],
    pi: &mut [f64],
) {
    pi.fill(1.0);
    for (m, f) in factors.iter().enumerate() {
        if m == mode {
            continue;
        }
        let row = f.row(x.indices(m)[k] as usize);
        for (p, &v) in pi.iter_mut().zip(row) {
            *p *= v.into();
        }
    }
}

/// FP64 Φ of `x` on `mode` with the floor `eps` (see [`crate::ops`]): `factors[mode]`
/// is `B`. Returns Φ and `Σ x · ln max(μ, ε)` over the nonzeros.
pub fn phi<T: Copy + Default + Into<f64>>(
    x: &CooTensor,
    mode: usize,
    factors: &[Matrix<T>],
    eps: f64,
) -> Result<(Matrix<f64>, f64)> {
    let (rows, cols) = output_shape(Op::Phi, x.dims(), mode, factors)?;
    let mut out = Matrix::<f64>::zeros(rows, cols);
    let mut pi = vec![0f64; cols];
    let mut log_term = 0.0;
    for k in 0..x.nnz() {
        pi_row(x, k, mode, factors, &mut pi);
        let i = x.indices(mode)[k] as usize;
        let b = factors[mode].row(i);
        let mu: f64 = b.iter().zip(&pi).map(|(&b, &p)| b.into() * p).sum();
        let mu = mu.max(eps);
        let v = x.values()[k];
        log_term += v * mu.ln();
        let w = v / mu;
        for (o, &p) in out.row_mut(i).iter_mut().zip(&pi) {
            *o += w * p;
        }
    }
    Ok((out, log_term))
}

/// The Poisson log-likelihood, without the `log x!` constant, of the CP model
/// `Σ_r weights[r] ∘_m factors[m][:, r]` for `x`: `Σ x log μ − Σ μ` (pyttb's
/// `tt_loglikelihood`), the first sum over the nonzeros and the second, over every cell,
/// as `Σ_r weights[r] Π_m Σ_i factors[m][i, r]`. A model value below `eps` at a nonzero
/// counts as `eps` (pyttb would give −∞).
pub fn log_likelihood<T: Copy + Default + Into<f64>>(
    x: &CooTensor,
    weights: &[f64],
    factors: &[Matrix<T>],
    eps: f64,
) -> Result<f64> {
    let r = weights.len();
    if factors.len() != x.order() {
        return Err(crate::Error::shape("factor list", x.order(), factors.len()));
    }
    for (m, f) in factors.iter().enumerate() {
        if f.shape() != (x.dims()[m], r) {
            return Err(crate::Error::shape(
                format!("factor of mode {m}"),
                format!("{}×{r}", x.dims()[m]),
                format!("{}×{}", f.rows(), f.cols()),
            ));
        }
    }
    let mut data = 0.0;
    let mut pi = vec![0f64; r];
    for k in 0..x.nnz() {
        pi.copy_from_slice(weights);
        for (m, f) in factors.iter().enumerate() {
            for (p, &v) in pi.iter_mut().zip(f.row(x.indices(m)[k] as usize)) {
                *p *= v.into();
            }
        }
        let mu: f64 = pi.iter().sum();
        data += x.values()[k] * mu.max(eps).ln();
    }
    let mut total = 0.0;
    for (c, &w) in weights.iter().enumerate() {
        let mut prod = w;
        for f in factors {
            prod *= (0..f.rows()).map(|i| f.get(i, c).into()).sum::<f64>();
        }
        total += prod;
    }
    Ok(data - total)
}
