//! A small row-major dense matrix: the factor matrices and kernel outputs.
//!
//! Factor rows are gathered by the sparse kernels, so rows are contiguous. Dense linear
//! algebra on these (Grams, solves, SVDs) goes through `faer` in [`crate::decomp`].

use crate::error::{Error, Result};
use rayon::prelude::*;
use wide::f32x8;

/// Bytes of memory this process may still allocate: the smallest of `MemAvailable`,
/// the `ulimit -v`/`-d` room and the cgroup's room ([`crate::memplan::available`]), if
/// any can be read.
pub fn available_memory() -> Option<u64> {
    crate::memplan::available().map(|a| a.bytes)
}

/// Checks that `rows × cols` elements of `elem_bytes` each can be allocated: the count
/// must not overflow and the bytes must fit in the available memory. Used before
/// allocating results whose size comes from user input (ranks, modes), so a rank that is
/// far too large is an error instead of an abort or a machine swapping to a halt.
pub fn check_alloc(what: &str, rows: usize, cols: usize, elem_bytes: usize) -> Result<()> {
    let needed = rows
        .checked_mul(cols)
        .and_then(|n| n.checked_mul(elem_bytes))
        .map(|b| b as u64)
        .unwrap_or(u64::MAX);
    let available = available_memory().unwrap_or(u64::MAX);
    if needed > available {
        return Err(Error::HostMemory {
            what: format!("{what} ({rows} × {cols})"),
            needed,
            available,
        });
    }
    Ok(())
}

/// A row-major `rows × cols` matrix.
///
/// Invariant: `data.len() == rows * cols`. Equality compares shape and data only.
#[derive(Debug, Clone)]
pub struct Matrix<T = f32> {
    rows: usize,
    cols: usize,
    data: Vec<T>,
}

impl<T: PartialEq> PartialEq for Matrix<T> {
    fn eq(&self, other: &Self) -> bool {
        self.rows == other.rows && self.cols == other.cols && self.data == other.data
    }
}

impl<T: Copy + Default> Matrix<T> {
    /// Wraps `data` (row-major) as a `rows × cols` matrix.
    pub fn new(rows: usize, cols: usize, data: Vec<T>) -> Result<Self> {
        if data.len() != rows * cols {
            return Err(Error::shape(
                "matrix data",
                format!("{rows}×{cols} = {} values", rows * cols),
                data.len(),
            ));
        }
        Ok(Matrix {
            rows,
            cols,
            data,
        })
    }

    /// A `rows × cols` matrix of zeros.
    pub fn zeros(rows: usize, cols: usize) -> Self {
        Matrix {
            rows,
            cols,
            data: vec![T::default(); rows * cols],
        }
    }

    /// A matrix whose entry `(i, j)` is `f(i, j)`.
    pub fn from_fn(rows: usize, cols: usize, mut f: impl FnMut(usize, usize) -> T) -> Self {
        let mut data = Vec::with_capacity(rows * cols);
        for i in 0..rows {
            for j in 0..cols {
                data.push(f(i, j));
            }
        }
        Matrix { rows, cols, data }
    }

    /// Number of rows.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Number of columns.
    pub fn cols(&self) -> usize {
        self.cols
    }

    /// `(rows, cols)`.
    pub fn shape(&self) -> (usize, usize) {
        (self.rows, self.cols)
    }

    /// All entries, row-major.
    pub fn data(&self) -> &[T] {
        &self.data
    }

    /// All entries, row-major, mutable.
    pub fn data_mut(&mut self) -> &mut [T] {
        &mut self.data
    }

    /// Row `i`.
    pub fn row(&self, i: usize) -> &[T] {
        &self.data[i * self.cols..(i + 1) * self.cols]
    }

    /// Row `i`, mutable.
    pub fn row_mut(&mut self, i: usize) -> &mut [T] {
        &mut self.data[i * self.cols..(i + 1) * self.cols]
    }

    /// Entry `(i, j)`.
    pub fn get(&self, i: usize, j: usize) -> T {
        self.data[i * self.cols + j]
    }

    /// Sets entry `(i, j)`.
    pub fn set(&mut self, i: usize, j: usize, v: T) {
        self.data[i * self.cols + j] = v;
    }

    /// Consumes the matrix, giving back its row-major data.
    pub fn into_data(self) -> Vec<T> {
        self.data
    }

    /// Applies `f` to every entry, giving a matrix of another element type.
    pub fn map<U: Copy + Default>(&self, f: impl Fn(T) -> U) -> Matrix<U> {
        Matrix {
            rows: self.rows,
            cols: self.cols,
            data: self.data.iter().map(|&x| f(x)).collect(),
        }
    }
}

impl Matrix<f32> {
    /// Largest magnitude of every column, scanned in parallel (the CPU kernels run it on
    /// every call that is not given the maxima, over every factor: it must cost little
    /// next to the walk).
    pub fn column_max_abs(&self) -> Vec<f32> {
        let f = self;
        let cols = f.cols().max(1);
        f.data()
            .par_chunks(cols * 4096)
            .map(|block| {
                // Eight columns at a time in registers (a scalar loop over a row compiled
                // to masked stores per element); the columns past a multiple of 8 scalar.
                let wide_cols = cols / 8 * 8;
                let mut lanes = vec![f32x8::ZERO; wide_cols / 8];
                let mut c = vec![0f32; cols];
                for row in block.chunks_exact(cols) {
                    for (m, x) in lanes.iter_mut().zip(row.chunks_exact(8)) {
                        let x = f32x8::from(<[f32; 8]>::try_from(x).expect("8 lanes"));
                        *m = m.max(x.abs());
                    }
                    for (m, &x) in c[wide_cols..].iter_mut().zip(&row[wide_cols..]) {
                        let a = x.abs();
                        *m = if a > *m { a } else { *m };
                    }
                }
                for (k, l) in lanes.iter().enumerate() {
                    c[k * 8..k * 8 + 8].copy_from_slice(&l.to_array());
                }
                c
            })
            .reduce(
                || vec![0f32; cols],
                |mut a, b| {
                    for (x, y) in a.iter_mut().zip(b) {
                        *x = if y > *x { y } else { *x };
                    }
                    a
                },
            )
    }

    /// A matrix with entries drawn uniformly from `[0, 1)` by a seeded generator, the
    /// usual initialization of CP and Tucker factors.
    pub fn random(rows: usize, cols: usize, seed: u64) -> Self {
        use rand::{Rng, SeedableRng};
        let mut rng = rand_xoshiro::Xoshiro256PlusPlus::seed_from_u64(seed);
        Matrix::from_fn(rows, cols, |_, _| rng.random::<f32>())
    }

    /// Seeded random factors, one per mode of a tensor of extents `dims`, mode `m`
    /// `Matrix::random(dims[m], ranks[m], seed + m)` (wrapping add): the one way factors
    /// are drawn, by the decompositions' initialization, the raw kernel commands, the
    /// tools and the tests, so the same seed gives the same factors everywhere.
    ///
    /// # Panics
    /// When `ranks` does not hold one rank per mode.
    pub fn random_factors(dims: &[usize], ranks: &[usize], seed: u64) -> Vec<Self> {
        assert_eq!(dims.len(), ranks.len(), "one rank per mode");
        dims.iter()
            .zip(ranks)
            .enumerate()
            .map(|(m, (&d, &r))| Matrix::random(d, r, seed.wrapping_add(m as u64)))
            .collect()
    }

    /// Widens to f64.
    pub fn to_f64(&self) -> Matrix<f64> {
        self.map(|x| x as f64)
    }
}

impl Matrix<f64> {
    /// Narrows to f32.
    pub fn to_f32(&self) -> Matrix<f32> {
        self.map(|x| x as f32)
    }
}
