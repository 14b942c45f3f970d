//! The memory check and the tensor's preparation, with reuse of a form kept from an
//! earlier call.

use crate::engine::profile::ProfileChoice;
use crate::engine::{Engine, Prepared, Workload};
use crate::error::Result;
use crate::hls::HlsStats;
use crate::memplan::MemoryPlan;
use crate::ops::Op;
use crate::tensor::CooTensor;
use std::sync::Arc;

/// Where prepared forms of one tensor are kept between calls (the Python `Tensor`
/// keeps them; the command line runs once and keeps none: [`NoForms`]).
pub trait Forms: Sync {
    /// The form kept for `op` at tile threshold `threshold` on `engine`, if any.
    fn find(&self, engine: &Engine, op: Op, threshold: u32) -> Option<Arc<Prepared>>;

    /// Keeps `prepared`, the form for `op` at `threshold` on `engine`.
    fn keep(&self, engine: &Engine, op: Op, threshold: u32, prepared: &Arc<Prepared>);
}

/// Keeps nothing: every run prepares its tensor.
pub struct NoForms;

impl Forms for NoForms {
    fn find(&self, _: &Engine, _: Op, _: u32) -> Option<Arc<Prepared>> {
        None
    }

    fn keep(&self, _: &Engine, _: Op, _: u32, _: &Arc<Prepared>) {}
}

/// A tensor prepared for a run, and what the preparation chose.
pub struct Preparation {
    /// The prepared tensor.
    pub prepared: Arc<Prepared>,
    /// The op and rank it was prepared for.
    pub workload: Workload,
    /// Whether it was built now (`false`: a kept form was reused).
    pub built: bool,
}

impl Preparation {
    /// The tile threshold each op got and where it came from (a profile file, or the
    /// built-in default).
    pub fn thresholds(&self) -> &[(Op, ProfileChoice)] {
        self.prepared.thresholds()
    }

    /// The statistics of the HLS form the run uses: its tiles, and the precision its
    /// values lost to fp16 storage.
    pub fn stats(&self) -> Result<&HlsStats> {
        Ok(self.prepared.hls(self.workload.op)?.stats())
    }
}

/// Checks `plan` (what the run allocates) plus, unless `forms` holds a form of `x` for
/// `workload`, the preparation's memory, in one check; then prepares `x` with the tile
/// threshold tuned for `workload` on `engine` and hands the new form to `forms`.
pub fn prepare(
    engine: &Engine,
    x: &CooTensor,
    workload: Workload,
    mut plan: MemoryPlan,
    forms: &dyn Forms,
) -> Result<Preparation> {
    let (threshold, values) = engine.form_for(x, workload);
    let kept = forms.find(engine, workload.op, threshold);
    let build = kept.is_none().then_some((threshold, workload.op, values));
    plan.add_run_on_tensor(x.dims(), x.nnz(), engine.workers(), build);
    plan.check()?;
    if let Some(prepared) = kept {
        return Ok(Preparation {
            prepared,
            workload,
            built: false,
        });
    }
    let prepared = Arc::new(engine.prepare(x, &[workload])?);
    forms.keep(engine, workload.op, threshold, &prepared);
    Ok(Preparation {
        prepared,
        workload,
        built: true,
    })
}
