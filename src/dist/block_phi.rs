//! One rank's Φ of its block for distributed CP-APR ([`super::cp_apr`]): the rows of
//! the fixed mode's slab, a partial sum over the block's nonzeros that the layer then
//! reduces to the rows' owners.
//!
//! Two paths, as in the single process ([`crate::decomp::cp_apr()`]): the backend's f64
//! session ([`PhiRun`], the CPU's) where it offers one, and otherwise [`Op::Phi`] per
//! call in f32 (CUDA; the CPU when the session's buffers do not fit or its options ask
//! for it), with f32 copies of the slabs that are marked changed only when they are, so
//! that a device keeping copies uploads only the target rows at each inner iteration.
//! A rank without nonzeros gives zeros.

use crate::decomp::cp_apr::{fill_patterns, to_f32};
use crate::engine::{Call, Engine, FactorVersions, PhiParams, PhiRun, Prepared};
use crate::error::{Error, Result};
use crate::matrix::Matrix;
use crate::ops::Op;
use rayon::prelude::*;
use std::time::Instant;

/// Φ of the rank's block for the slab of the fixed mode, into [`BlockPhi::out`] (f64).
pub(super) struct BlockPhi<'a> {
    path: Path<'a>,
    /// The last Φ: the fixed mode's slab rows × the rank.
    pub(super) out: Vec<f64>,
    /// Seconds in the backend's calls.
    pub(super) kernel: f64,
    /// Bytes to and from the device.
    pub(super) to_device: u64,
    pub(super) from_device: u64,
}

enum Path<'a> {
    Session(PhiRun<'a>),
    PerCall(Box<PerCall<'a>>),
    Empty,
}

/// [`Op::Phi`] per call: the f32 copies of the slabs (`eng[m]`, slab rows × rank) and
/// which of them changed since the last call.
struct PerCall<'a> {
    engine: &'a Engine,
    x: &'a Prepared,
    rank: usize,
    eng: Vec<Matrix>,
    versions: FactorVersions,
    mode: Option<usize>,
    out: Matrix,
    /// The other slabs' 0/1 patterns for [`BlockPhi::support`].
    pattern: Vec<Matrix>,
}

impl<'a> BlockPhi<'a> {
    /// Φ of the prepared block `x` at rank `rank` (none: the rank has no nonzeros),
    /// through `run` (the engine's session) where there is one, per call otherwise.
    pub(super) fn new(
        engine: &'a Engine,
        x: Option<&'a Prepared>,
        run: Option<PhiRun<'a>>,
        rank: usize,
    ) -> Self {
        let path = match (x, run) {
            (_, Some(run)) => Path::Session(run),
            (Some(x), None) => Path::PerCall(Box::new(PerCall {
                engine,
                x,
                rank,
                eng: x.dims().iter().map(|_| Matrix::zeros(0, rank)).collect(),
                versions: engine.factor_versions(x.dims().len()),
                mode: None,
                out: Matrix::zeros(0, 0),
                pattern: Vec::new(),
            })),
            (None, None) => Path::Empty,
        };
        BlockPhi {
            path,
            out: Vec::new(),
            kernel: 0.0,
            to_device: 0,
            from_device: 0,
        }
    }

    /// Fixes Φ on `mode` with the other modes' slabs (f64, slab rows × rank each).
    pub(super) fn fix(&mut self, mode: usize, slabs: &[Vec<f64>]) -> Result<()> {
        let t = Instant::now();
        let got = match &mut self.path {
            Path::Session(run) => {
                let all: Vec<&[f64]> = slabs.iter().map(Vec::as_slice).collect();
                run.fix(mode, &all).map(|_| ())
            }
            Path::PerCall(p) => {
                for (m, s) in slabs.iter().enumerate() {
                    if m != mode && p.copy(m, s) {
                        p.versions.changed(m);
                    }
                }
                p.mode = Some(mode);
                Ok(())
            }
            Path::Empty => Ok(()),
        };
        self.kernel += t.elapsed().as_secs_f64();
        got
    }

    /// Φ of the block with target rows `b` (the fixed mode's slab), its log term when
    /// `params` asks for it (0 otherwise).
    pub(super) fn phi(&mut self, b: &[f64], params: PhiParams) -> Result<f64> {
        let t = Instant::now();
        let got = match &mut self.path {
            Path::Session(run) => run.phi(b, params, &mut self.out).map(|s| {
                self.to_device += s.bytes_to_device;
                self.from_device += s.bytes_from_device;
                s.log_term.unwrap_or(0.0)
            }),
            Path::PerCall(p) => p.phi(b, params, &mut self.out).map(|(log, to, from)| {
                self.to_device += to;
                self.from_device += from;
                log
            }),
            Path::Empty => {
                self.out.clear();
                self.out.resize(b.len(), 0.0);
                Ok(0.0)
            }
        };
        self.kernel += t.elapsed().as_secs_f64();
        got
    }

    /// The block's MTTKRP of mode `mode` over the other slabs' 0/1 patterns (1 where
    /// an entry is positive), into `out` (slab rows × rank, f64): positive on the rows
    /// where Φ is positive in exact arithmetic, which tells the f32 Φ's underflows to 0
    /// from true zeros. Zeros on a rank without nonzeros.
    pub(super) fn support(
        &mut self,
        mode: usize,
        slabs: &[Vec<f64>],
        out: &mut Vec<f64>,
    ) -> Result<()> {
        let t = Instant::now();
        let rows = slabs[mode].len();
        let got = match &mut self.path {
            Path::PerCall(p) => p.support(mode, slabs, out),
            Path::Session(_) | Path::Empty => {
                out.clear();
                out.resize(rows, 0.0);
                Ok(())
            }
        };
        self.kernel += t.elapsed().as_secs_f64();
        got
    }
}

impl PerCall<'_> {
    /// Copies `slab` into `eng[m]` in f32; whether that changed it.
    fn copy(&mut self, m: usize, slab: &[f64]) -> bool {
        let rows = slab.len() / self.rank;
        let e = &mut self.eng[m];
        if e.shape() != (rows, self.rank) {
            *e = Matrix::zeros(rows, self.rank);
            to_f32(slab, e.data_mut());
            return true;
        }
        e.data_mut()
            .par_chunks_mut(1 << 16)
            .zip(slab.par_chunks(1 << 16))
            .map(|(d, s)| {
                let mut changed = false;
                for (d, &s) in d.iter_mut().zip(s) {
                    let v = s as f32;
                    changed |= d.to_bits() != v.to_bits();
                    *d = v;
                }
                changed
            })
            .reduce(|| false, |a, b| a | b)
    }

    fn phi(&mut self, b: &[f64], params: PhiParams, out: &mut Vec<f64>) -> Result<(f64, u64, u64)> {
        let mode = self
            .mode
            .ok_or_else(|| Error::InvalidOption("Φ before its mode was fixed".into()))?;
        // B is new at every call.
        self.copy(mode, b);
        self.versions.changed(mode);
        let call = Call {
            col_max: None,
            check_finite: true,
            phi: params,
            versions: Some(&self.versions),
        };
        let stats =
            self.engine
                .run_into_with(Op::Phi, self.x, mode, &self.eng, &call, &mut self.out)?;
        widen(self.out.data(), out);
        let log = if params.log_term {
            stats.log_term.ok_or_else(|| {
                Error::Unsupported(format!(
                    "the {} backend gave no log term for Φ",
                    self.engine.kind()
                ))
            })?
        } else {
            0.0
        };
        Ok((log, stats.bytes_to_device, stats.bytes_from_device))
    }

    fn support(&mut self, mode: usize, slabs: &[Vec<f64>], out: &mut Vec<f64>) -> Result<()> {
        fill_patterns(mode, slabs, self.rank, &mut self.pattern);
        let mut got = Matrix::zeros(0, 0);
        self.engine
            .run_into(Op::Mttkrp, self.x, mode, &self.pattern, &mut got)?;
        widen(got.data(), out);
        Ok(())
    }
}

fn widen(src: &[f32], dst: &mut Vec<f64>) {
    dst.clear();
    dst.par_extend(src.par_iter().map(|&v| f64::from(v)));
}
