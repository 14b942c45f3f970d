//! Sessions: kernels that keep state where the tensor lives across many calls (CP-ALS
//! with the factors on the device, CP-APR's Φ with fixed other modes, completion with
//! its factors and residual), opened through one entry point, [`Engine::session`].
//!
//! A kind of session is a type implementing [`SessionKind`]: what it takes, what it
//! gives, which prepared form it runs on and how each backend opens it. Adding a kind
//! is one more implementation; the [`Backend`] enum does not change.

use super::cpu::{CpuBackend, CpuTensor};
use super::cuda::{CudaBackend, CudaTensor};
use super::{
    Backend, BackendTensor, CompletionSession, CpSession, Engine, Launch, PhiSession, Prepared,
};
use crate::error::Result;
use crate::matrix::Matrix;
use crate::ops::Op;

/// A kind of session, opened by [`Engine::session`] on every backend variant.
pub trait SessionKind {
    /// What opening one takes (borrowed for the call only).
    type Args<'x>;
    /// What opening one gives, borrowing the engine and the prepared tensor.
    type Session<'a>;
    /// The op whose prepared form the session runs on ([`Prepared::part`]).
    const OP: Op;
    /// Opens one on the CPU backend.
    fn open_cpu<'a>(
        backend: &'a CpuBackend,
        tensor: &'a CpuTensor,
        args: Self::Args<'_>,
    ) -> Result<Self::Session<'a>>;
    /// Opens one on the CUDA backend, whose kernels launch with `launch`.
    fn open_cuda<'a>(
        backend: &'a CudaBackend,
        tensor: &'a CudaTensor,
        args: Self::Args<'_>,
        launch: Launch,
    ) -> Result<Self::Session<'a>>;
}

impl Engine {
    /// Opens a session of kind `K` on `p` (see [`SessionKind`]); the callers' checks
    /// of `args` come first (the wrappers [`Engine::cp_session`],
    /// [`Engine::phi_run`] and [`Engine::completion_session`] make them).
    pub fn session<'a, K: SessionKind>(
        &'a self,
        p: &'a Prepared,
        args: K::Args<'_>,
    ) -> Result<K::Session<'a>> {
        let tensor = p.part(K::OP)?;
        match (self.backend(), tensor) {
            (Backend::Cpu(b), BackendTensor::Cpu(t)) => K::open_cpu(b, t, args),
            (Backend::Cuda(b), BackendTensor::Cuda(t)) => K::open_cuda(b, t, args, self.launch()),
            (b, t) => Err(super::backend::foreign(b.kind(), t)),
        }
    }
}

/// CP-ALS with the factors kept where the kernels run ([`CpSession`]); `None` where
/// the backend has no such path (the CPU: the decomposition updates its factors on the
/// host), its options turn it off, or not for this shape. Args: the initial factors.
pub struct CpKind;

impl SessionKind for CpKind {
    type Args<'x> = &'x [Matrix];
    type Session<'a> = Option<Box<dyn CpSession + 'a>>;
    const OP: Op = Op::Mttkrp;
    fn open_cpu<'a>(
        _: &'a CpuBackend,
        _: &'a CpuTensor,
        _: &[Matrix],
    ) -> Result<Self::Session<'a>> {
        Ok(None)
    }
    fn open_cuda<'a>(
        backend: &'a CudaBackend,
        tensor: &'a CudaTensor,
        factors: &[Matrix],
        launch: Launch,
    ) -> Result<Self::Session<'a>> {
        backend.cp_session(tensor, factors, launch)
    }
}

/// CP-APR's Φ with a fixed mode and fixed other factors ([`PhiSession`]); `None` where
/// the backend has no such path (CUDA today) or its buffers would not fit in memory.
/// Args: the rank.
pub struct PhiKind;

impl SessionKind for PhiKind {
    type Args<'x> = usize;
    type Session<'a> = Option<Box<dyn PhiSession + 'a>>;
    const OP: Op = Op::Phi;
    fn open_cpu<'a>(
        backend: &'a CpuBackend,
        tensor: &'a CpuTensor,
        rank: usize,
    ) -> Result<Self::Session<'a>> {
        backend.phi_session(tensor, rank)
    }
    fn open_cuda<'a>(
        _: &'a CudaBackend,
        _: &'a CudaTensor,
        _: usize,
        _: Launch,
    ) -> Result<Self::Session<'a>> {
        Ok(None)
    }
}

/// Tensor completion with the factors (and CCD++'s residual) kept where the kernels
/// run ([`CompletionSession`]). Args: the initial factors and the model's offset.
pub struct CompletionKind;

impl SessionKind for CompletionKind {
    type Args<'x> = (&'x [Matrix], f32);
    type Session<'a> = Box<dyn CompletionSession + 'a>;
    const OP: Op = Op::Completion;
    fn open_cpu<'a>(
        backend: &'a CpuBackend,
        tensor: &'a CpuTensor,
        (factors, offset): (&[Matrix], f32),
    ) -> Result<Self::Session<'a>> {
        backend.completion_session(tensor, factors, offset)
    }
    fn open_cuda<'a>(
        backend: &'a CudaBackend,
        tensor: &'a CudaTensor,
        (factors, offset): (&[Matrix], f32),
        _: Launch,
    ) -> Result<Self::Session<'a>> {
        backend.completion_session(tensor, factors, offset)
    }
}
