//! FP64 reference implementations of MTTKRP and TTMc on COO: the gold standard every
//! backend is checked against. Simple and obviously right; not fast.

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

/// FP64 `op` of `x` on `mode`.
pub fn apply<T: Copy + Default + Into<f64>>(
    op: Op,
    x: &CooTensor,
    mode: usize,
    factors: &[Matrix<T>],
) -> Result<Matrix<f64>> {
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
