//! The rayon CPU backend.

use super::{Backend, BackendKind, BackendTensor};
use crate::error::Result;
use crate::hls::HlsTensor;
use crate::matrix::Matrix;
use crate::ops::Op;
use std::any::Any;
use std::sync::Arc;

/// The CPU backend: runs on rayon's current pool (`RAYON_NUM_THREADS` applies).
#[derive(Debug, Default)]
pub struct CpuBackend {}

impl CpuBackend {
    /// A CPU backend.
    pub fn new() -> Self {
        CpuBackend {}
    }
}

/// A tensor held by the CPU backend.
pub struct CpuTensor {
    hls: Arc<HlsTensor>,
}

impl BackendTensor for CpuTensor {
    fn hls(&self) -> &HlsTensor {
        &self.hls
    }
    fn bytes(&self) -> usize {
        self.hls.bytes()
    }
    fn as_any(&self) -> &dyn Any {
        self
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

impl Backend for CpuBackend {
    fn kind(&self) -> BackendKind {
        BackendKind::Cpu
    }
    fn describe(&self) -> String {
        format!(
            "CPU {} ({} threads)",
            cpu_model(),
            rayon::current_num_threads()
        )
    }
    fn device_id(&self) -> String {
        format!("cpu:{}:{}t", cpu_model(), rayon::current_num_threads())
    }
    fn prepare(&self, hls: Arc<HlsTensor>) -> Result<Box<dyn BackendTensor>> {
        Ok(Box::new(CpuTensor { hls }))
    }
    fn run(
        &self,
        op: Op,
        tensor: &dyn BackendTensor,
        mode: usize,
        factors: &[Matrix],
        out: &mut Matrix,
    ) -> Result<()> {
        let hls = tensor.hls();
        let scale = hls.scale();
        let others: Vec<usize> = (0..hls.order()).filter(|&m| m != mode).collect();
        let cols = out.cols();
        let mut acc = vec![0f32; cols];
        hls.for_each_nonzero(|c, v| {
            let v = v.to_f32() * scale;
            match op {
                Op::Mttkrp => {
                    acc.fill(v);
                    for &m in &others {
                        for (a, &f) in acc.iter_mut().zip(factors[m].row(c[m] as usize)) {
                            *a *= f;
                        }
                    }
                }
                Op::Ttmc => {
                    acc[0] = v;
                    let mut len = 1;
                    for &m in &others {
                        let row = factors[m].row(c[m] as usize);
                        let r = row.len();
                        for p in (0..len).rev() {
                            let a = acc[p];
                            for (q, &f) in row.iter().enumerate() {
                                acc[p * r + q] = a * f;
                            }
                        }
                        len *= r;
                    }
                }
            }
            for (o, a) in out.row_mut(c[mode] as usize).iter_mut().zip(&acc) {
                *o += a;
            }
        });
        Ok(())
    }
}
