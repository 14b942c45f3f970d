//! A tensor prepared for an engine ([`Engine::prepare`]): its HLS form(s), built with
//! the device's tuned thresholds and handed to the backend.

use super::profile::ProfileChoice;
use super::{BackendTensor, Engine, ValueCensus, Workload};
use crate::error::{Error, Result};
use crate::hls::{HlsBuilder, HlsTensor, KeyOrder, ValueChoice, ValueType};
use crate::ops::Op;
use crate::tensor::CooTensor;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A tensor prepared for an engine: its HLS form(s) in the backend, one per op asked
/// for (shared when the thresholds agree), plus what the pipelines need of the COO.
pub struct Prepared {
    pub(super) dims: Vec<usize>,
    nnz: usize,
    norm_sq: f64,
    census: ValueCensus,
    parts: Vec<(Op, Arc<BackendTensor>)>,
    thresholds: Vec<(Op, ProfileChoice)>,
    build_time: Duration,
}

impl Prepared {
    /// Mode extents.
    pub fn dims(&self) -> &[usize] {
        &self.dims
    }
    /// Number of modes.
    pub fn order(&self) -> usize {
        self.dims.len()
    }
    /// Nonzeros.
    pub fn nnz(&self) -> usize {
        self.nnz
    }
    /// Squared Frobenius norm of the tensor (FP64, from the input values).
    pub fn norm_sq(&self) -> f64 {
        self.norm_sq
    }
    /// The census of the input values, as read: not as rounded to fp16 for storage,
    /// where 100000.5 becomes 100000 and 1e-30 becomes 0 ([`Engine::value_census`]
    /// counts those).
    pub fn census(&self) -> &ValueCensus {
        &self.census
    }
    /// The backend tensor used for `op`, if the tensor was prepared for it (or, for an
    /// op that runs on another op's form, such as [`Op::Phi`], for that op).
    pub fn part(&self, op: Op) -> Result<&BackendTensor> {
        let find = |op: Op| self.parts.iter().find(|(o, _)| *o == op);
        find(op)
            .or_else(|| find(op.form()))
            .map(|(_, t)| t.as_ref())
            .ok_or_else(|| {
                let also = if op.form() == op {
                    String::new()
                } else {
                    format!(" (nor for {}, whose form it runs on)", op.form())
                };
                Error::InvalidOption(format!("the tensor was not prepared for {op}{also}"))
            })
    }
    /// The HLS form used for `op`.
    pub fn hls(&self, op: Op) -> Result<&HlsTensor> {
        Ok(self.part(op)?.hls())
    }
    /// Bytes the backend holds, counting shared parts once.
    pub fn bytes(&self) -> usize {
        let mut seen: Vec<*const ()> = Vec::new();
        let mut total = 0;
        for (_, t) in &self.parts {
            let p = Arc::as_ptr(t) as *const ();
            if !seen.contains(&p) {
                seen.push(p);
                total += t.bytes();
            }
        }
        total
    }
    /// Time spent building and handing over the HLS form(s).
    pub fn build_time(&self) -> Duration {
        self.build_time
    }
    /// The tile threshold each op was prepared with and where it came from (a tuning
    /// profile, or "given" by the caller), for the caller to report.
    pub fn thresholds(&self) -> &[(Op, ProfileChoice)] {
        &self.thresholds
    }
}

impl Engine {
    /// Prepares `x` for the given workloads with the device's tuned thresholds
    /// ([`Prepared::thresholds`] says which and from where).
    pub fn prepare(&self, x: &CooTensor, workloads: &[Workload]) -> Result<Prepared> {
        let values = self.values().resolve_values(x.values());
        let chosen: Vec<(Op, ProfileChoice)> = workloads
            .iter()
            .map(|&w| (w.op, self.threshold_for(w, values)))
            .collect();
        let with: Vec<(Op, u32)> = chosen.iter().map(|(op, c)| (*op, c.threshold)).collect();
        // The build resolves the engine's choice again (one more pass over the values)
        // so that its report says why, as for a caller's own thresholds.
        let mut p = self.prepare_with_thresholds(x, &with)?;
        p.thresholds = chosen;
        Ok(p)
    }

    /// The form [`Engine::prepare`] builds of `x` for `w`, found in one pass over the
    /// values for a memory plan made before the build: its tile threshold and the type
    /// its values are stored in.
    pub fn form_for(&self, x: &CooTensor, w: Workload) -> (u32, ValueType) {
        let values = self.values().resolve_values(x.values());
        (self.threshold_for(w, values).threshold, values)
    }

    /// Prepares `x` with explicit thresholds per op (for the tuner and benches).
    pub fn prepare_with_thresholds(&self, x: &CooTensor, with: &[(Op, u32)]) -> Result<Prepared> {
        self.prepare_with_values(x, with, self.values())
    }

    /// [`Engine::prepare_with_thresholds`] with the values stored as `values` chooses
    /// instead of as the engine does ([`Engine::with_values`]).
    pub fn prepare_with_values(
        &self,
        x: &CooTensor,
        with: &[(Op, u32)],
        values: ValueChoice,
    ) -> Result<Prepared> {
        self.install(|| self.prepare_here(x, with, values))
    }

    /// [`Engine::prepare_with_values`] on the current thread's pool.
    fn prepare_here(
        &self,
        x: &CooTensor,
        with: &[(Op, u32)],
        values: ValueChoice,
    ) -> Result<Prepared> {
        if with.is_empty() {
            return Err(Error::InvalidOption("prepare needs at least one op".into()));
        }
        let start = Instant::now();
        // Ops whose kernels walk the same key order share one build (and, where their
        // thresholds classify every tile alike, one form). When the shortest-first
        // order is the mode order anyway, every op shares it.
        let by_extent_is_mode_order = KeyOrder::ByExtent
            .layout(x.dims())
            .is_ok_and(|l| l.is_mode_order());
        let order_of = |op: Op| {
            if by_extent_is_mode_order {
                KeyOrder::ByExtent
            } else {
                KeyOrder::for_op(op.form())
            }
        };
        let mut parts: Vec<(Op, Arc<BackendTensor>)> = Vec::with_capacity(with.len());
        for order in [KeyOrder::ByExtent, KeyOrder::Mode] {
            let mine: Vec<(Op, u32)> = with
                .iter()
                .copied()
                .filter(|&(op, _)| order_of(op) == order)
                .collect();
            if mine.is_empty() {
                continue;
            }
            let mut thresholds: Vec<u32> = mine.iter().map(|w| w.1).collect();
            thresholds.sort_unstable();
            thresholds.dedup();
            let built = HlsBuilder::build_many_in(x, &thresholds, order, values)?;
            let mut handed: Vec<Arc<BackendTensor>> = Vec::with_capacity(built.len());
            for h in built {
                // Thresholds that classify every tile alike give the same form: a higher
                // threshold's dense tiles are a subset of a lower one's, so equal counts
                // mean equal sets. Hand it over once (the tensor's memory is not doubled
                // when two ops' thresholds differ but no tile lies between them).
                let same = handed
                    .last()
                    .filter(|prev| prev.hls().stats().dense_tiles == h.stats().dense_tiles)
                    .cloned();
                match same {
                    Some(prev) => handed.push(prev),
                    None => handed.push(Arc::new(self.backend.prepare(Arc::new(h))?)),
                }
            }
            for (op, t) in mine {
                let i = thresholds.binary_search(&t).expect("threshold was built");
                parts.push((op, handed[i].clone()));
            }
        }
        // In the order asked for.
        parts.sort_by_key(|(op, _)| {
            with.iter()
                .position(|&(o, _)| o == *op)
                .expect("every part comes from `with`")
        });
        Ok(Prepared {
            dims: x.dims().to_vec(),
            nnz: parts[0].1.hls().nnz(),
            norm_sq: x.norm_sq(),
            census: ValueCensus::of_values(x.values().iter().copied()),
            parts,
            thresholds: with
                .iter()
                .map(|&(op, t)| {
                    (
                        op,
                        ProfileChoice {
                            threshold: t,
                            source: "given".into(),
                        },
                    )
                })
                .collect(),
            build_time: start.elapsed(),
        })
    }
}
