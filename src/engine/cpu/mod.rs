//! The rayon CPU backend.
//!
//! Same format and same decomposition of the work as the GPU: the sparse part and the
//! dense tiles are cut into equal shares of nonzeros, one per worker; each worker walks
//! its share in key order (MTTKRP: `walk`, `fixed`; TTMc: `ttmc`) into a private
//! output (no locks or atomics), and the private outputs are summed row-parallel at the
//! end. TTMc outputs too wide to copy per worker (at least 1M floats) are instead cut
//! into row ranges of equal nonzero counts, each worker writing its own rows. fp16
//! values are widened to f32 and accumulated in f32, with subnormal results flushed to
//! zero (`subnormal`). CP-APR's Φ walks the same shares with its own sink (`phi`).
//!
//! MTTKRP and TTMc run row by row instead wherever their groups fit in memory
//! (`mttkrp_rows`, `ttmc_rows`: each mode's nonzeros grouped by row at the first
//! call, no private outputs; faster than the walks on every tensor measured).
//! [`MttkrpKernel::Walk`] in the backend's options forces the walks (for measuring one
//! against the other).
//!
//! The backend owns its rayon thread pool, sized by [`CpuOptions::threads`], and runs
//! every call and every session call inside it.

mod avx512;
mod avx512_mttkrp;
mod cache_sizes;
mod completion;
mod factor_rows;
mod fixed;
pub(crate) mod gcp;
mod gcp_staged;
mod kernel;
mod mttkrp_rows;
mod mttkrp_stream;
mod mttkrp_wide;
mod nt_store;
mod output_copies;
mod padded;

pub use padded::width_for as mttkrp_width;
pub use phi_rows::phi_width;
mod phi;
mod phi_rows;
mod row_groups;
mod row_kernels;
mod row_sums;
mod rows;
mod runs;
mod scaled;
mod sgd;
mod stream_blocks;
mod subnormal;
mod ttmc;
mod ttmc_rows;
mod ttmc_tree3;
mod walk;

pub use cache_sizes::CacheSizes;
pub use kernel::private_output_floats;
pub use mttkrp_stream::add_streamed_to_plan;
pub(crate) use walk::{prefetch_line, prefetch_row};

use super::{CpuOptions, CpuVectors, MttkrpKernel, RunOptions, RunStats};
use crate::error::{Error, Result};
use crate::hls::HlsTensor;
use crate::matrix::Matrix;
use crate::ops::Op;
use std::sync::Arc;

/// The CPU backend: owns a rayon thread pool of the size its options ask for and runs
/// every call inside it.
#[derive(Debug)]
pub struct CpuBackend {
    threads: rayon::ThreadPool,
    opts: CpuOptions,
    /// Private output buffers kept between calls (see `kernel::run`).
    pool: std::sync::Mutex<Vec<Vec<f32>>>,
    /// The blocked MTTKRP's copies kept between calls (see `padded`).
    scratch: std::sync::Mutex<padded::Scratch>,
    /// The row kernels' padded factors kept between calls (see `padded`).
    padded: std::sync::Mutex<padded::PaddedFactors>,
}

impl CpuBackend {
    /// A CPU backend with `opts`; [`Error::InvalidOption`] for 0 threads or when the
    /// operating system refuses to start them.
    pub fn new(opts: CpuOptions) -> Result<Self> {
        opts.check()?;
        let inherited = rayon::current_thread_index().map(|_| rayon::current_num_threads());
        let mut builder = rayon::ThreadPoolBuilder::new()
            .num_threads(opts.threads.or(inherited).unwrap_or(0))
            .thread_name(|i| format!("sptmc-cpu-{i}"));
        // A thread can be a worker of one pool only.
        if opts.use_current_thread && rayon::current_thread_index().is_none() {
            builder = builder.use_current_thread();
        }
        let threads = builder.build().map_err(|e| {
            Error::InvalidOption(format!("the CPU backend's {:?} threads: {e}", opts.threads))
        })?;
        Ok(CpuBackend {
            threads,
            opts,
            pool: std::sync::Mutex::new(Vec::new()),
            scratch: std::sync::Mutex::default(),
            padded: std::sync::Mutex::default(),
        })
    }

    /// The options it was made with.
    pub fn options(&self) -> &CpuOptions {
        &self.opts
    }

    /// Whether its blocked kernels run on AVX-512: asked for ([`CpuVectors::Widest`])
    /// and the CPU has it.
    pub fn wide_vectors(&self) -> bool {
        self.opts.vectors == CpuVectors::Widest && avx512::available()
    }

    /// Worker threads of its pool.
    pub fn threads(&self) -> usize {
        self.threads.current_num_threads()
    }

    /// Runs `f` inside the backend's thread pool (at once when called from one of its
    /// workers).
    pub fn install<R: Send>(&self, f: impl FnOnce() -> R + Send) -> R {
        self.threads.install(f)
    }

    /// The device in words: CPU model and thread count.
    pub fn describe(&self) -> String {
        format!("CPU {} ({} threads)", cpu_model(), self.threads())
    }

    /// The identifier tuning profiles are matched against: model and thread count.
    pub fn device_id(&self) -> String {
        format!("cpu:{}:{}t", cpu_model(), self.threads())
    }

    /// Takes an HLS tensor (kept on the host as it is).
    pub fn prepare(&self, hls: Arc<HlsTensor>) -> CpuTensor {
        CpuTensor {
            hls,
            rows: std::sync::OnceLock::new(),
            ttmc_rows: std::sync::OnceLock::new(),
        }
    }

    /// Runs `op` (see [`super::Backend::run`]) inside the backend's pool.
    pub fn run(
        &self,
        op: Op,
        tensor: &CpuTensor,
        mode: usize,
        factors: &[Matrix],
        opts: &RunOptions<'_>,
        out: &mut Matrix,
    ) -> Result<RunStats> {
        if op == Op::Completion {
            return Err(Error::Unsupported(
                "the completion kernels run in a completion session".into(),
            ));
        }
        if opts.launch != super::Launch::Fused {
            return Err(Error::Unsupported(format!(
                "the CPU backend has no {} launch",
                opts.launch
            )));
        }
        self.install(|| self.run_here(op, tensor, mode, factors, opts, out))
    }

    /// [`CpuBackend::run`] on the current thread's pool.
    fn run_here(
        &self,
        op: Op,
        tensor: &CpuTensor,
        mode: usize,
        factors: &[Matrix],
        opts: &RunOptions<'_>,
        out: &mut Matrix,
    ) -> Result<RunStats> {
        let hls = tensor.hls();
        if op == Op::Phi {
            zero(out);
            let log_term = phi::run(hls, mode, factors, opts.phi, out);
            return Ok(RunStats {
                log_term,
                ..RunStats::default()
            });
        }
        let factors = scaled::Rescaled::new(factors, mode, opts.col_max);
        if op == Op::Ttmc
            && let Some(rows) = tensor.row_ttmc(self.opts.mttkrp)
        {
            // Every entry is written; the groups hold values already scaled.
            rows.run(mode, factors.factors(), out);
            factors.unscale(op, mode, 1.0, out);
            return Ok(RunStats::default());
        }
        // Ranks below 64 between the specialized widths: the row kernels read the
        // factors padded to the next width, kept between calls (`padded`).
        let (r, order) = (out.cols(), hls.dims().len());
        let width = padded::factor_width(r, order);
        let row_kernels = (op == Op::Mttkrp)
            .then(|| tensor.row_mttkrp(self.opts.mttkrp))
            .flatten();
        if width != r
            && let Some(rows) = row_kernels
        {
            let mut held = self.padded.lock().unwrap_or_else(|e| e.into_inner());
            let keys = opts.versions.filter(|_| factors.as_given());
            held.refresh(factors.factors(), mode, width, keys);
            // Every entry is written; the groups hold values already scaled.
            rows.run(mode, held.factors(), out, self.wide_vectors());
            drop(held);
            factors.unscale(op, mode, 1.0, out);
            return Ok(RunStats::default());
        }
        // Other ranks between the specialized widths run in column blocks (`padded`),
        // but for 48, which the row kernels (not the walk) are compiled for.
        let rows = hls.dims().iter().sum();
        let in_rows = row_kernels.is_some() && factor_rows::lanes(r) == r;
        let blocks = (op == Op::Mttkrp && !in_rows)
            .then(|| padded::column_blocks(out.cols(), hls.nnz(), rows))
            .flatten();
        let scale = match blocks {
            None => self.sum_into(op, tensor, mode, factors.factors(), out),
            Some(blocks) => {
                let mut scratch =
                    std::mem::take(&mut *self.scratch.lock().unwrap_or_else(|e| e.into_inner()));
                let (mut scale, mut widest) = (1.0, 0);
                for b in blocks {
                    let width = b.width;
                    let copies = padded::pad_factors(
                        factors.factors(),
                        mode,
                        b.cols.clone(),
                        width,
                        &mut scratch,
                    );
                    let mut wide = scratch.take(out.rows(), width);
                    scale = self.sum_into(op, tensor, mode, &copies, &mut wide);
                    padded::narrow_into(&wide, b.cols, out);
                    scratch.give(wide);
                    (copies.into_iter().enumerate())
                        .filter(|&(m, _)| m != mode)
                        .for_each(|(_, c)| scratch.give(c));
                    widest = widest.max(width);
                }
                scratch.keep_width(widest);
                *self.scratch.lock().unwrap_or_else(|e| e.into_inner()) = scratch;
                scale
            }
        };
        factors.unscale(op, mode, scale, out);
        Ok(RunStats::default())
    }

    /// MTTKRP or TTMc of `mode` into `target`, every entry written: from the row groups
    /// where the tensor has them for `op`, else by the walk. Returns the scale the
    /// result still needs (the walk sums stored values and leaves the tensor's scale to
    /// the end; the groups hold values already scaled).
    fn sum_into(
        &self,
        op: Op,
        tensor: &CpuTensor,
        mode: usize,
        factors: &[Matrix],
        target: &mut Matrix,
    ) -> f32 {
        let hls = tensor.hls();
        let rows = (op == Op::Mttkrp)
            .then(|| tensor.row_mttkrp(self.opts.mttkrp))
            .flatten();
        match rows {
            Some(rows) => {
                // Every entry is written, none accumulated into: no zeroing pass (on a
                // mode of 1.5 M rows at rank 32, 192 MB written once more).
                rows.run(mode, factors, target, self.wide_vectors());
                1.0
            }
            None => {
                zero(target);
                kernel::run(op, hls, mode, factors, target, &self.pool);
                hls.scale()
            }
        }
    }

    /// A Φ session on `tensor` for factors of rank `rank` whose calls run inside the
    /// backend's pool; `None` where its buffers would not fit in memory.
    pub(crate) fn phi_session<'a>(
        &'a self,
        tensor: &'a CpuTensor,
        rank: usize,
    ) -> Result<Option<Box<dyn super::PhiSession + 'a>>> {
        if self.opts.phi == super::PhiKernel::PerCall {
            return Ok(None);
        }
        let made = self.install(|| phi_rows::CpuPhi::new(tensor.hls(), rank))?;
        Ok(made.map(|inner| {
            Box::new(Pooled {
                backend: self,
                inner,
            }) as Box<dyn super::PhiSession + 'a>
        }))
    }

    /// A completion session on `tensor` whose calls run inside the backend's pool.
    pub(crate) fn completion_session<'a>(
        &'a self,
        tensor: &'a CpuTensor,
        factors: &[Matrix],
        offset: f32,
    ) -> Result<Box<dyn super::CompletionSession + 'a>> {
        let wide = self.wide_vectors();
        let inner =
            self.install(|| completion::CpuCompletion::new(tensor.hls(), factors, offset, wide))?;
        Ok(Box::new(Pooled {
            backend: self,
            inner,
        }))
    }
}

/// A tensor held by the CPU backend.
pub struct CpuTensor {
    hls: Arc<HlsTensor>,
    /// The row-grouped MTTKRP, made at the first MTTKRP call (`None` where the groups
    /// would not fit in memory, or the walk is asked for).
    rows: std::sync::OnceLock<Option<Box<mttkrp_rows::RowMttkrp>>>,
    /// The row-grouped TTMc, made at the first TTMc call (`None` where the groups
    /// would not fit in memory, or the walk is asked for).
    ttmc_rows: std::sync::OnceLock<Option<Box<ttmc_rows::RowTtmc>>>,
}

impl CpuTensor {
    /// The host-side HLS form.
    pub fn hls(&self) -> &HlsTensor {
        &self.hls
    }

    /// Bytes of its HLS form.
    pub fn bytes(&self) -> usize {
        self.hls.bytes()
    }

    /// Bytes of the form a kernel of `op` at rank `rank` reads for target `mode`: the
    /// row groups it streams where MTTKRP or TTMc runs row by row (built by the first
    /// call), else the HLS form.
    pub fn form_bytes(&self, op: Op, mode: usize, rank: usize) -> usize {
        match (op, self.rows.get(), self.ttmc_rows.get()) {
            (Op::Mttkrp, Some(Some(rows)), _) => rows.form_bytes(mode, rank),
            (Op::Ttmc, _, Some(Some(rows))) => rows.form_bytes(mode),
            _ => self.hls.bytes(),
        }
    }

    /// The row-grouped TTMc where it is the kernel for this tensor (as for MTTKRP, the
    /// backend's options fix `kernel` for the tensor's life).
    fn row_ttmc(&self, kernel: MttkrpKernel) -> Option<&ttmc_rows::RowTtmc> {
        self.ttmc_rows
            .get_or_init(|| {
                (kernel == MttkrpKernel::Rows)
                    .then(|| ttmc_rows::RowTtmc::new(&self.hls).ok().flatten())
                    .flatten()
                    .map(Box::new)
            })
            .as_deref()
    }

    /// The row-grouped MTTKRP where it is the kernel for this tensor (the backend's
    /// options fix `kernel` for the tensor's life).
    fn row_mttkrp(&self, kernel: MttkrpKernel) -> Option<&mttkrp_rows::RowMttkrp> {
        self.rows
            .get_or_init(|| {
                // Groups that cannot be allocated leave the walk, which needs none.
                (kernel == MttkrpKernel::Rows)
                    .then(|| mttkrp_rows::RowMttkrp::new(&self.hls).ok().flatten())
                    .flatten()
                    .map(Box::new)
            })
            .as_deref()
    }
}

/// A CPU session whose every call runs inside its backend's thread pool.
struct Pooled<'a, S> {
    backend: &'a CpuBackend,
    inner: S,
}

impl<S: super::PhiSession + Send> super::PhiSession for Pooled<'_, S> {
    fn fix(&mut self, mode: usize, factors: &[&[f64]]) -> Result<RunStats> {
        let inner = &mut self.inner;
        self.backend.install(|| inner.fix(mode, factors))
    }
    fn phi(&mut self, b: &[f64], params: super::PhiParams, out: &mut [f64]) -> Result<RunStats> {
        let inner = &mut self.inner;
        self.backend.install(|| inner.phi(b, params, out))
    }
    fn mu_inner(
        &mut self,
        b: &mut [f64],
        params: super::PhiParams,
        max_inner: usize,
        tol: f64,
        out: &mut [f64],
    ) -> Result<super::phi::MuInner> {
        let inner = &mut self.inner;
        self.backend
            .install(|| inner.mu_inner(b, params, max_inner, tol, out))
    }
}

impl<S: super::CompletionSession + Send> super::CompletionSession for Pooled<'_, S> {
    fn rank(&self) -> usize {
        self.inner.rank()
    }
    fn factors(&mut self) -> Result<Vec<Matrix>> {
        let inner = &mut self.inner;
        self.backend.install(|| inner.factors())
    }
    fn set_factor(&mut self, mode: usize, factor: &Matrix) -> Result<RunStats> {
        let inner = &mut self.inner;
        self.backend.install(|| inner.set_factor(mode, factor))
    }
    fn set_column(&mut self, mode: usize, col: usize, values: &[f32]) -> Result<RunStats> {
        let inner = &mut self.inner;
        self.backend.install(|| inner.set_column(mode, col, values))
    }
    fn normal_equations(
        &mut self,
        mode: usize,
        rows: &[u32],
        out: &mut Matrix,
    ) -> Result<RunStats> {
        let inner = &mut self.inner;
        self.backend
            .install(|| inner.normal_equations(mode, rows, out))
    }
    fn bias_normal_equations(
        &mut self,
        mode: usize,
        rank: usize,
        rows: &[u32],
        out: &mut Matrix,
        squares: &mut Vec<f64>,
    ) -> Result<RunStats> {
        let inner = &mut self.inner;
        self.backend
            .install(|| inner.bias_normal_equations(mode, rank, rows, out, squares))
    }
    fn reset_residual(&mut self) -> Result<RunStats> {
        let inner = &mut self.inner;
        self.backend.install(|| inner.reset_residual())
    }
    fn add_column(&mut self, col: usize, sign: f32) -> Result<RunStats> {
        let inner = &mut self.inner;
        self.backend.install(|| inner.add_column(col, sign))
    }
    fn column_terms(&mut self, mode: usize, col: usize, out: &mut Matrix) -> Result<RunStats> {
        let inner = &mut self.inner;
        self.backend.install(|| inner.column_terms(mode, col, out))
    }
    fn residual(&mut self) -> Result<Vec<f32>> {
        let inner = &mut self.inner;
        self.backend.install(|| inner.residual())
    }
    fn sgd_epoch(&mut self, step: &super::SgdStep) -> Result<RunStats> {
        let inner = &mut self.inner;
        self.backend.install(|| inner.sgd_epoch(step))
    }
    fn loss(&mut self) -> Result<f64> {
        let inner = &mut self.inner;
        self.backend.install(|| inner.loss())
    }
}

/// Zeroes `out`, in parallel when large: a TTMc output can be hundreds of MB, more than
/// one core clears at memory speed.
fn zero(out: &mut Matrix) {
    use rayon::prelude::*;
    let data = out.data_mut();
    if data.len() >= 1 << 22 {
        data.par_chunks_mut(1 << 16).for_each(|c| c.fill(0.0));
    } else {
        data.fill(0.0);
    }
}

/// The CPU model name from /proc/cpuinfo, if readable.
pub fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_string())
        })
        .unwrap_or_else(|| std::env::consts::ARCH.to_string())
}

/// Test cases of the row kernels: a generated tensor of `dims` with `nnz` nonzeros of
/// `pattern` (seed `seed`) and its HLS form at tile threshold `threshold`.
#[cfg(test)]
fn generated_case(
    dims: &[usize],
    nnz: usize,
    pattern: crate::tensor::generate::Pattern,
    threshold: u32,
    seed: u64,
) -> (crate::tensor::CooTensor, HlsTensor) {
    use crate::tensor::generate::{GenSpec, generate};
    let x = generate(&GenSpec {
        dims: dims.to_vec(),
        nnz,
        pattern,
        seed,
    })
    .unwrap();
    let hls = crate::hls::HlsBuilder::new(threshold).build(&x).unwrap();
    (x, hls)
}

/// Test case of the sums in runs ([`runs`]): a tensor of `dims` (the first at least 3)
/// whose rows 0 and 1 of mode 0 hold 50 000 nonzeros each and row 2 holds 40, every
/// value 0.1, at distinct cells (`dims[1..]`'s cells must number at least 50 000 and
/// not be a multiple of 13), with its HLS form (no dense tiles).
#[cfg(test)]
fn dense_rows_case(dims: &[usize]) -> (crate::tensor::CooTensor, HlsTensor) {
    let cells: usize = dims[1..].iter().product();
    let mut entries = Vec::new();
    for (i, n) in [(0u32, 50_000usize), (1, 50_000), (2, 40)] {
        for t in 0..n {
            // Distinct cells: 13 is prime to their count.
            let mut c = (i as usize * 7 + t * 13) % cells;
            let mut at = vec![i];
            for &e in dims[1..].iter().rev() {
                at.push((c % e) as u32);
                c /= e;
            }
            at[1..].reverse();
            entries.push((at, 0.1));
        }
    }
    let x = crate::tensor::CooTensor::from_entries(dims.to_vec(), entries).unwrap();
    let hls = crate::hls::HlsBuilder::new(u32::MAX).build(&x).unwrap();
    (x, hls)
}

/// Asserts every entry of `got` within `(terms) u Σ|t|` of `want` (`u = 2⁻²⁴`, with
/// 1 % for second-order terms), `scale` holding `Σ|t|` per entry: the bound of a sum
/// whose every term passes through at most `terms` roundings. `what` names the case.
#[cfg(test)]
fn assert_within_sum_bound(
    want: &Matrix<f64>,
    scale: &Matrix<f64>,
    got: &Matrix,
    terms: usize,
    what: &str,
) {
    let gamma = terms as f64 * (f64::from(f32::EPSILON) / 2.0) * 1.01;
    for (k, ((&w, &s), &g)) in (want.data().iter().zip(scale.data()).zip(got.data())).enumerate() {
        let err = (f64::from(g) - w).abs();
        assert!(
            err <= gamma * s,
            "{what} entry {k}: {g} for {w}, error {err:.3e} past {:.3e}",
            gamma * s
        );
    }
}

/// Factors of `ranks` (seed `seed`) whose column 0 is all ones (where an f32 sum
/// drifts) and the others uniform in [-1, 1) (mixed signs), and their absolute values
/// (whose MTTKRP or TTMc is `Σ |t|`, what a sum's error bound scales with).
#[cfg(test)]
fn ones_and_mixed_signs(dims: &[usize], ranks: &[usize], seed: u64) -> (Vec<Matrix>, Vec<Matrix>) {
    let f: Vec<Matrix> = (Matrix::random_factors(dims, ranks, seed).iter())
        .map(|m| {
            Matrix::from_fn(m.rows(), m.cols(), |i, c| match c {
                0 => 1.0,
                _ => 2.0 * m.get(i, c) - 1.0,
            })
        })
        .collect();
    let abs = f.iter().map(|m| m.map(f32::abs)).collect();
    (f, abs)
}
