//! A small row-major dense matrix: the factor matrices and kernel outputs.
//!
//! Factor rows are gathered by the sparse kernels, so rows are contiguous. Dense linear
//! algebra on these (Grams, solves, SVDs) goes through `faer` in [`crate::decomp`].

use crate::error::{Error, Result};
use crate::random::fill_random;
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

/// Where a matrix's first entry sits: on a 64-byte boundary, the size of a cache line.
///
/// The sparse kernels gather whole factor rows (128 bytes at rank 32) with 32-byte
/// vector loads; on a boundary no load of a row at rank 8, 16, 32 or 64 straddles two
/// cache lines. The allocator only promises 16 bytes, so where a matrix landed used to
/// decide, from run to run and build to build, whether half the loads of a factor were
/// split: 8–15 % of the row-by-row MTTKRP on the small shared tensors
/// (bench/results/2026-11-24-cpu-aligned-factors).
pub const ALIGN_BYTES: usize = 64;

/// Bytes of a huge page (x86-64 and aarch64 Linux with 4 KiB base pages).
pub const HUGE_PAGE_BYTES: usize = 2 << 20;

/// Asks the kernel to back the whole 2 MiB pages inside `buf` with transparent huge
/// pages (`madvise(MADV_HUGEPAGE)`), for buffers of at least two of them.
///
/// A factor of a long mode (1.5 M rows × rank 32 is 192 MB) is gathered at random
/// rows. On 4 KiB pages nearly every such gather also misses the TLB, whose second
/// level covers a few MiB, and the page walk is one more dependent trip to memory
/// (two-dimensional in a virtual machine). On 2 MiB pages the same TLB covers
/// gigabytes. Linux's default policy (`madvise`) grants huge pages only where asked;
/// under `never` the advice does nothing, and where it fails the buffer stays on base
/// pages: it is advice, never an error. Pages already touched are collapsed later,
/// if at all, by the kernel's background thread, so the advice is given before the
/// buffer is written.
pub fn advise_huge_pages<T>(buf: &[T]) {
    let bytes = std::mem::size_of_val(buf);
    if bytes < 2 * HUGE_PAGE_BYTES {
        return;
    }
    #[cfg(target_os = "linux")]
    {
        let start = buf.as_ptr() as usize;
        let first = start.next_multiple_of(HUGE_PAGE_BYTES);
        let end = (start + bytes) / HUGE_PAGE_BYTES * HUGE_PAGE_BYTES;
        if end > first {
            // SAFETY: the range lies inside `buf`'s allocation, on page boundaries;
            // MADV_HUGEPAGE changes how pages are backed, never their contents.
            unsafe {
                libc::madvise(first as *mut libc::c_void, end - first, libc::MADV_HUGEPAGE);
            }
        }
    }
}

/// `len` zeros (default values) in a vector marked for huge pages before anything is
/// written to it ([`advise_huge_pages`]), for large arrays written and read at
/// scattered places.
pub fn zeroed_on_huge_pages<T: Copy + Default>(len: usize) -> Vec<T> {
    let v = vec![T::default(); len];
    advise_huge_pages(&v);
    v
}

/// Row-major storage whose first element is aligned to [`ALIGN_BYTES`] (where the
/// element size divides it), in safe code: a vector with room for the padding, and the
/// offset of the aligned start in it.
#[derive(Debug)]
struct Storage<T> {
    buf: Vec<T>,
    start: usize,
    len: usize,
}

impl<T: Copy + Default> Storage<T> {
    /// Elements of padding that leave room to align the start.
    fn pad() -> usize {
        match std::mem::size_of::<T>() {
            0 => 0,
            s if ALIGN_BYTES.is_multiple_of(s) => ALIGN_BYTES / s - 1,
            _ => 0,
        }
    }

    /// `len` default values (zeros). A large one is marked for huge pages first
    /// ([`advise_huge_pages`]): its zero pages are not touched until written.
    fn zeroed(len: usize) -> Self {
        let buf = vec![T::default(); len + Self::pad()];
        advise_huge_pages(&buf);
        let start = buf.as_ptr().align_offset(ALIGN_BYTES);
        // An allocation that cannot be aligned (an element size that does not divide
        // the boundary) starts at 0.
        let start = if start <= Self::pad() { start } else { 0 };
        Storage { buf, start, len }
    }

    /// Takes `data` as it is where it is already aligned (or nothing can be), else
    /// copies it to an aligned place.
    fn from_vec(data: Vec<T>) -> Self {
        let aligned = data.as_ptr().align_offset(ALIGN_BYTES) == 0 || Self::pad() == 0;
        if aligned {
            let len = data.len();
            return Storage {
                buf: data,
                start: 0,
                len,
            };
        }
        let mut s = Self::zeroed(data.len());
        s.as_mut_slice().copy_from_slice(&data);
        s
    }

    fn as_slice(&self) -> &[T] {
        &self.buf[self.start..self.start + self.len]
    }

    fn as_mut_slice(&mut self) -> &mut [T] {
        &mut self.buf[self.start..self.start + self.len]
    }

    /// `len` entries in this allocation where it holds them (the values left in it
    /// stay), else in a new zeroed one.
    fn resize_within(&mut self, len: usize) {
        if self.holds(len) {
            self.len = len;
        } else {
            // The old allocation goes first: never both at once.
            *self = Storage::zeroed(0);
            *self = Self::zeroed(len);
        }
    }

    /// Whether `len` entries fit in this allocation.
    fn holds(&self, len: usize) -> bool {
        self.start + len <= self.buf.len()
    }

    /// The entries as a vector, in the same allocation (moved to its front): no
    /// second copy of a large result is made.
    fn into_vec(mut self) -> Vec<T> {
        self.buf.copy_within(self.start..self.start + self.len, 0);
        self.buf.truncate(self.len);
        self.buf
    }
}

impl<T: Copy + Default> Clone for Storage<T> {
    /// A copy at an aligned place of its own.
    fn clone(&self) -> Self {
        let mut s = Self::zeroed(self.len);
        s.as_mut_slice().copy_from_slice(self.as_slice());
        s
    }
}

/// A row-major `rows × cols` matrix whose first entry is aligned to [`ALIGN_BYTES`].
///
/// Invariant: `rows * cols` entries. Equality compares shape and data only.
#[derive(Debug)]
pub struct Matrix<T = f32> {
    rows: usize,
    cols: usize,
    data: Storage<T>,
}

impl<T: Copy + Default> Clone for Matrix<T> {
    fn clone(&self) -> Self {
        Matrix {
            rows: self.rows,
            cols: self.cols,
            data: self.data.clone(),
        }
    }
}

impl<T: Copy + Default + PartialEq> PartialEq for Matrix<T> {
    fn eq(&self, other: &Self) -> bool {
        self.rows == other.rows && self.cols == other.cols && self.data() == other.data()
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
            data: Storage::from_vec(data),
        })
    }

    /// A `rows × cols` matrix of zeros.
    pub fn zeros(rows: usize, cols: usize) -> Self {
        Matrix {
            rows,
            cols,
            data: Storage::zeroed(rows * cols),
        }
    }

    /// A matrix whose entry `(i, j)` is `f(i, j)`.
    pub fn from_fn(rows: usize, cols: usize, mut f: impl FnMut(usize, usize) -> T) -> Self {
        let mut m = Matrix::zeros(rows, cols);
        let mut entries = m.data.as_mut_slice().iter_mut();
        for i in 0..rows {
            for j in 0..cols {
                *entries.next().expect("rows × cols entries") = f(i, j);
            }
        }
        m
    }

    /// This matrix with `cols` columns: its first `cols`, then zero columns up to
    /// `cols` where it has fewer.
    pub fn with_columns(&self, cols: usize) -> Self {
        let mut out = Matrix::zeros(self.rows, cols);
        let keep = cols.min(self.cols);
        if keep > 0 {
            let rows = out.data.as_mut_slice().chunks_exact_mut(cols);
            for (o, a) in rows.zip(self.data().chunks_exact(self.cols)) {
                o[..keep].copy_from_slice(&a[..keep]);
            }
        }
        out
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
        self.data.as_slice()
    }

    /// All entries, row-major, mutable.
    pub fn data_mut(&mut self) -> &mut [T] {
        self.data.as_mut_slice()
    }

    /// Row `i`.
    pub fn row(&self, i: usize) -> &[T] {
        &self.data()[i * self.cols..(i + 1) * self.cols]
    }

    /// Row `i`, mutable.
    pub fn row_mut(&mut self, i: usize) -> &mut [T] {
        let cols = self.cols;
        &mut self.data_mut()[i * cols..(i + 1) * cols]
    }

    /// Entry `(i, j)`.
    pub fn get(&self, i: usize, j: usize) -> T {
        self.data()[i * self.cols + j]
    }

    /// Sets entry `(i, j)`.
    pub fn set(&mut self, i: usize, j: usize, v: T) {
        let cols = self.cols;
        self.data_mut()[i * cols + j] = v;
    }

    /// Makes this a `rows × cols` matrix for a result that overwrites every entry:
    /// in the allocation it has where that holds `rows × cols` entries (its entries
    /// then any values), else in a new one of zeros. A buffer that serves outputs of
    /// several shapes in turn is allocated, and its pages touched, once for the
    /// largest.
    pub fn reshape_for_overwrite(&mut self, rows: usize, cols: usize) {
        self.data.resize_within(rows * cols);
        self.rows = rows;
        self.cols = cols;
    }

    /// Whether [`Matrix::reshape_for_overwrite`] to `rows × cols` keeps this
    /// allocation.
    pub fn holds(&self, rows: usize, cols: usize) -> bool {
        rows.checked_mul(cols)
            .is_some_and(|len| self.data.holds(len))
    }

    /// Keeps only the rows `keep` (ascending), moved in place to the front in that
    /// order: no second copy of the rows is made, and the allocation stays.
    pub fn keep_rows(&mut self, keep: &[usize]) {
        debug_assert!(keep.windows(2).all(|w| w[0] < w[1]));
        let c = self.cols;
        let data = self.data.as_mut_slice();
        for (r, &i) in keep.iter().enumerate() {
            // Rows only move towards the front (`i ≥ r`): none is overwritten before
            // it is moved.
            if i != r {
                data.copy_within(i * c..(i + 1) * c, r * c);
            }
        }
        self.data.resize_within(keep.len() * c);
        self.rows = keep.len();
    }

    /// Consumes the matrix, giving back its row-major data.
    pub fn into_data(self) -> Vec<T> {
        self.data.into_vec()
    }

    /// Applies `f` to every entry, giving a matrix of another element type.
    pub fn map<U: Copy + Default>(&self, f: impl Fn(T) -> U) -> Matrix<U> {
        let mut m = Matrix::zeros(self.rows, self.cols);
        for (o, &x) in m.data_mut().iter_mut().zip(self.data()) {
            *o = f(x);
        }
        m
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
    /// usual initialization of CP and Tucker factors: its row-major entries are
    /// [`fill_random`]`(_, seed, 0)`, drawn in parallel, the same on any thread count.
    pub fn random(rows: usize, cols: usize, seed: u64) -> Self {
        let mut m = Matrix::zeros(rows, cols);
        fill_random(m.data_mut(), seed, 0);
        m
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

#[cfg(test)]
mod tests {
    use super::*;

    fn aligned<T: Copy + Default>(m: &Matrix<T>) -> bool {
        m.data().as_ptr().align_offset(ALIGN_BYTES) == 0
    }

    /// The `VmFlags` line of the mapping of this process that holds `addr`, from
    /// `/proc/self/smaps`.
    fn vm_flags_at(addr: usize) -> Option<String> {
        let smaps = std::fs::read_to_string("/proc/self/smaps").ok()?;
        let mut inside = false;
        for line in smaps.lines() {
            if let Some((range, _)) = line.split_once(' ')
                && let Some((a, b)) = range.split_once('-')
                && let (Ok(a), Ok(b)) = (usize::from_str_radix(a, 16), usize::from_str_radix(b, 16))
            {
                inside = (a..b).contains(&addr);
            } else if inside && let Some(flags) = line.strip_prefix("VmFlags:") {
                return Some(flags.trim().to_string());
            }
        }
        None
    }

    #[test]
    fn with_columns_pads_with_zeros_and_keeps_the_first_columns() {
        let m = Matrix::from_fn(3, 2, |i, j| (10 * i + j + 1) as f32);
        let wide = m.with_columns(5);
        assert_eq!(wide.shape(), (3, 5));
        assert_eq!(wide.row(2), &[21.0, 22.0, 0.0, 0.0, 0.0]);
        assert_eq!(wide.with_columns(2), m);
        assert_eq!(m.with_columns(1).data(), &[1.0, 11.0, 21.0]);
        assert_eq!(m.with_columns(0).shape(), (3, 0));
    }

    #[test]
    fn a_large_matrix_is_marked_for_huge_pages() {
        if !std::path::Path::new("/sys/kernel/mm/transparent_hugepage").exists() {
            eprintln!("SKIPPED: this kernel has no transparent huge pages");
            return;
        }
        // 8 MiB: at least three whole huge pages wherever it lands.
        let large = Matrix::<f32>::zeros(2048, 1024);
        let inner = (large.data().as_ptr() as usize).next_multiple_of(HUGE_PAGE_BYTES);
        let flags = vm_flags_at(inner).expect("the matrix's mapping in /proc/self/smaps");
        assert!(flags.split(' ').any(|f| f == "hg"), "VmFlags: {flags}");
        assert_eq!(large.data()[2048 * 1024 - 1], 0.0);
        // A buffer under two huge pages is left alone: its mapping may be the heap's,
        // shared with others (so no flag can be asserted on it), and the call returns.
        advise_huge_pages(&[0u8; 4096]);
        advise_huge_pages::<f32>(&[]);
    }

    #[test]
    fn every_matrix_starts_on_a_cache_line_and_keeps_its_entries() {
        for (rows, cols) in [(0, 0), (1, 1), (3, 5), (97, 32), (1000, 17)] {
            let a = Matrix::random(rows, cols, 3);
            let b = Matrix::from_fn(rows, cols, |i, j| (i * cols + j) as f32);
            let v: Vec<f32> = (0..rows * cols).map(|k| k as f32).collect();
            let c = Matrix::new(rows, cols, v.clone()).unwrap();
            let all = [
                a.clone(),
                b.clone(),
                c.clone(),
                Matrix::zeros(rows, cols),
                a.map(|x| x * 2.0),
            ];
            assert!(all.iter().all(aligned), "{rows}×{cols}");
            assert!(aligned(&a.to_f64()) && aligned(&a.to_f64().to_f32()));
            assert_eq!(c.data(), &v[..]);
            assert_eq!(b, c, "equality reads shape and entries, not the padding");
            assert_eq!(c.clone().into_data(), v);
            if rows * cols > 0 {
                let mut d = b.clone();
                d.set(rows - 1, cols - 1, -1.0);
                assert_ne!(d, b);
                assert_eq!(d.row(rows - 1)[cols - 1], -1.0);
                let n = rows * cols - 1;
                assert_eq!(d.data()[..n], b.data()[..n], "only the last entry changed");
            }
        }
        assert!(Matrix::new(2, 2, vec![0f32; 3]).is_err());
    }

    #[test]
    fn a_vector_off_the_boundary_is_moved_onto_it() {
        // Small allocations come 16 bytes apart at best: of eight kept at once, some
        // start off a 64-byte boundary.
        let vs: Vec<Vec<f32>> = (0..8).map(|k| vec![k as f32; 6]).collect();
        assert!(vs.iter().any(|v| v.as_ptr().align_offset(ALIGN_BYTES) != 0));
        for v in vs {
            let m = Matrix::new(2, 3, v.clone()).unwrap();
            assert!(aligned(&m));
            assert_eq!(m.data(), &v[..]);
            assert_eq!(m.into_data(), v);
        }
    }

    /// One buffer for outputs of several shapes: smaller ones and the largest again
    /// stay in its allocation, a larger one moves it; rows kept stay in order.
    #[test]
    fn a_buffer_serves_smaller_shapes_in_place_and_keeps_rows_in_place() {
        let mut m = Matrix::<f32>::from_fn(6, 4, |i, j| (10 * i + j) as f32);
        let at = m.data().as_ptr();
        m.reshape_for_overwrite(2, 3);
        assert_eq!(
            (m.shape(), m.data().len(), m.data().as_ptr()),
            ((2, 3), 6, at)
        );
        m.reshape_for_overwrite(4, 6);
        assert_eq!((m.shape(), m.data().as_ptr()), ((4, 6), at));
        // More than the 24 entries and the alignment's padding.
        m.reshape_for_overwrite(7, 7);
        assert_eq!(m.shape(), (7, 7));
        assert!(
            aligned(&m) && m.data().iter().all(|&v| v == 0.0),
            "a new buffer"
        );
        let mut m = Matrix::<f64>::from_fn(6, 3, |i, j| (10 * i + j) as f64);
        let at = m.data().as_ptr();
        m.keep_rows(&[0, 2, 5]);
        assert_eq!(m.shape(), (3, 3));
        assert_eq!(m.data(), &[0., 1., 2., 20., 21., 22., 50., 51., 52.]);
        assert_eq!(m.data().as_ptr(), at);
        m.keep_rows(&[]);
        assert_eq!(m.shape(), (0, 3));
    }
}
