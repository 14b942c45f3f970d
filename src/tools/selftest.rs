//! Self-test: runs every op on every mode at several ranks on a set of tensors with
//! the chosen engine and compares each result to the FP64 reference (SMAPE within the
//! accuracy contract; NaN or inf is a failure).
//! `sptmc selftest` prints the [`SelftestReport`] table; the GPU tests use it too.
//!
//! [`Op::Completion`] runs its kernels in a completion session: per mode the ALS
//! normal equations and the CCD++ column terms, then the residual (set, with a column
//! taken out), the loss, and one SGD epoch on a diagonal tensor of the case's extents
//! (whose steps touch disjoint rows, so any parallel scheme matches the sequential
//! reference), each a row of the report with its kernel named.
//!
//! A run refused for want of memory (a TTMc output larger than this machine's memory,
//! a tensor beyond the device's) says nothing of accuracy: it is reported as skipped,
//! with the refusal, and does not fail the self-test.

use super::cases::{self, FactorKind};
use crate::accuracy::{Accuracy, SMAPE_TARGET_PERCENT, compare, compare_slices};
use crate::engine::{Engine, Prepared, SgdStep, Workload};
use crate::error::{Error, Result};
use crate::matrix::Matrix;
use crate::memplan::MemoryPlan;
use crate::ops::Op;
use crate::reference;
use crate::tensor::CooTensor;
use std::time::Instant;

/// One tensor to test, with the ops and ranks to run on it.
#[derive(Debug, Clone)]
pub struct SelftestCase {
    /// Name shown in the report.
    pub name: String,
    /// The tensor.
    pub tensor: CooTensor,
    /// `(op, rank)` pairs; for TTMc the rank is used for every other mode.
    pub runs: Vec<(Op, usize)>,
    /// How the factors are drawn.
    pub factors: FactorKind,
}

/// The contract's runs: MTTKRP at ranks 8, 16, 32, 64, TTMc at 8 and 16 (every
/// other mode at that rank), CP-APR's Φ at 16 and 64 and the completion kernels at 16
/// (on cases with uniform factors only: the completion kernels do not rescale, so
/// factors of extreme range overflow their f32 sums on every backend).
pub fn default_runs() -> Vec<(Op, usize)> {
    let mut r: Vec<(Op, usize)> = [8, 16, 32, 64].map(|k| (Op::Mttkrp, k)).to_vec();
    r.extend([8, 16].map(|k| (Op::Ttmc, k)));
    r.extend([16, 64].map(|k| (Op::Phi, k)));
    r.push((Op::Completion, 16));
    r
}

/// The catalog ([`cases::generated`] at `dim`³ with `nnz` nonzeros) with uniform
/// factors, then its block-dense and 4th-order tensors again with log-uniform and with
/// extreme factors (dense tiles and the sparse part both see them).
pub fn generated_cases(dim: usize, nnz: usize, runs: &[(Op, usize)]) -> Result<Vec<SelftestCase>> {
    let mut cases: Vec<SelftestCase> = cases::generated(dim, nnz, 0x5e1f)?
        .into_iter()
        .map(|c| SelftestCase {
            name: c.name,
            tensor: c.tensor,
            runs: runs.to_vec(),
            factors: FactorKind::Uniform,
        })
        .collect();
    for kind in [FactorKind::LogUniform, FactorKind::Extreme] {
        for base in [2, 3] {
            let c = &cases[base];
            cases.push(SelftestCase {
                name: format!("{}{}", c.name, kind.suffix()),
                factors: kind,
                ..c.clone()
            });
        }
    }
    Ok(cases)
}

/// One op on one mode at one rank.
#[derive(Debug, Clone, serde::Serialize)]
pub struct SelftestRow {
    /// Tensor name.
    pub tensor: String,
    /// The op.
    pub op: Op,
    /// The kernel within the op, where the op has several ([`Op::Completion`]:
    /// `normal-eq`, `column-terms`, `residual`, `add-column`, `loss`, `sgd`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kernel: Option<&'static str>,
    /// Target mode.
    pub mode: usize,
    /// Rank (MTTKRP) or rank of every other mode (TTMc).
    pub rank: usize,
    /// The type the tensor's values were stored in (`None`: not prepared).
    pub values: Option<crate::hls::ValueType>,
    /// SMAPE against FP64, in percent (`None` on error).
    pub smape_percent: Option<f64>,
    /// Max relative error.
    pub max_rel_err: Option<f64>,
    /// Relative Frobenius error.
    pub rel_frobenius: Option<f64>,
    /// Time of the engine call, milliseconds.
    pub time_ms: f64,
    /// The error, if the run or the comparison failed (NaN/Inf included).
    pub error: Option<String>,
    /// Why the run was skipped: a refusal for want of memory (then no `error`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub skipped: Option<String>,
}

impl SelftestRow {
    /// The op, and the kernel where the op has several (`completion:loss`).
    pub fn label(&self) -> String {
        match self.kernel {
            Some(k) => format!("{}:{k}", self.op.name()),
            None => self.op.name().to_string(),
        }
    }

    /// Within the contract: no error and SMAPE ≤ [`SMAPE_TARGET_PERCENT`].
    pub fn passed(&self) -> bool {
        self.error.is_none()
            && self
                .smape_percent
                .is_some_and(|s| s <= SMAPE_TARGET_PERCENT)
    }

    /// Ran and missed the contract (a skipped row did not run).
    pub fn failed(&self) -> bool {
        self.skipped.is_none() && !self.passed()
    }

    /// A row of `op` on `mode` at `rank` from the outcome of its check: the accuracy,
    /// a skip (a refusal for want of memory) or an error.
    fn from_outcome(
        tensor: &str,
        op: Op,
        kernel: Option<&'static str>,
        (mode, rank): (usize, usize),
        time_ms: f64,
        checked: Result<Accuracy>,
    ) -> SelftestRow {
        let (a, error, skipped) = match checked {
            Ok(a) => (Some(a), None, None),
            Err(e) if is_memory_refusal(&e) => (None, None, Some(e.to_string())),
            Err(e) => (None, Some(e.to_string()), None),
        };
        SelftestRow {
            tensor: tensor.to_string(),
            op,
            kernel,
            mode,
            rank,
            values: None,
            smape_percent: a.as_ref().map(|a| a.smape_percent),
            max_rel_err: a.as_ref().map(|a| a.max_rel_err),
            rel_frobenius: a.as_ref().map(|a| a.rel_frobenius),
            time_ms,
            error,
            skipped,
        }
    }
}

/// Whether `e` refuses a run for want of memory (host, device or the memory plan).
fn is_memory_refusal(e: &Error) -> bool {
    matches!(
        e,
        Error::HostMemory { .. } | Error::Memory { .. } | Error::DeviceMemory { .. }
    )
}

/// All rows of a self-test run.
#[derive(Debug, Clone, serde::Serialize)]
pub struct SelftestReport {
    /// The backend in words.
    pub backend: String,
    /// One row per tensor, op, mode and rank.
    pub rows: Vec<SelftestRow>,
}

impl SelftestReport {
    /// Whether every row that ran passed (and at least one ran); skipped rows fail
    /// nothing.
    pub fn passed(&self) -> bool {
        self.rows.iter().any(|r| r.skipped.is_none()) && !self.rows.iter().any(SelftestRow::failed)
    }

    /// The rows skipped for want of memory.
    pub fn skipped(&self) -> impl Iterator<Item = &SelftestRow> {
        self.rows.iter().filter(|r| r.skipped.is_some())
    }

    /// The report as JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("plain data serializes")
    }

    /// A text table, one line per row, then a verdict.
    pub fn table(&self) -> String {
        let mut s = format!("backend: {}\n", self.backend);
        s += &format!(
            "{:<24} {:<23} {:>4} {:>4} {:>6} {:>10} {:>10} {:>10} {:>9}  status\n",
            "tensor", "op", "mode", "rank", "values", "smape%", "max rel", "rel frob", "ms"
        );
        let f = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.2e}"));
        for r in &self.rows {
            s += &format!(
                "{:<24} {:<23} {:>4} {:>4} {:>6} {:>10} {:>10} {:>10} {:>9.3}  {}\n",
                r.tensor,
                r.label(),
                r.mode,
                r.rank,
                r.values.map_or("-", |v| v.name()),
                f(r.smape_percent),
                f(r.max_rel_err),
                f(r.rel_frobenius),
                r.time_ms,
                match (&r.error, &r.skipped, r.passed()) {
                    (Some(e), _, _) => format!("ERROR {e}"),
                    (None, Some(why), _) => format!("SKIPPED {why}"),
                    (None, None, true) => "ok".into(),
                    (None, None, false) => format!("FAIL (> {SMAPE_TARGET_PERCENT}%)"),
                }
            );
        }
        let failed = self.rows.iter().filter(|r| r.failed()).count();
        let skipped = self.skipped().count();
        let ran = self.rows.len() - skipped;
        s += &format!(
            "{}: {ran} runs, {failed} failed",
            if self.passed() { "PASSED" } else { "FAILED" },
        );
        if skipped > 0 {
            s += &format!(
                "; {skipped} skipped for want of memory (see SKIPPED above; not accuracy failures)"
            );
        }
        s += "\n";
        s
    }
}

/// Runs every case's ops on every mode with `engine` and compares with FP64. Errors of
/// single runs are recorded in the report; only preparing a tensor can fail the call.
pub fn run(engine: &Engine, cases: &[SelftestCase]) -> Result<SelftestReport> {
    let mut rows = Vec::new();
    for case in cases {
        let x = &case.tensor;
        for &(op, rank) in &case.runs {
            // A run refused for want of memory is a row that says so (a skip).
            let skipped = |mode: usize, e: Error| {
                SelftestRow::from_outcome(&case.name, op, None, (mode, rank), 0.0, Err(e))
            };
            let prepared = match engine.prepare(x, &[Workload { op, rank }]) {
                Ok(p) => p,
                Err(e) if is_memory_refusal(&e) => {
                    rows.push(skipped(0, e));
                    continue;
                }
                Err(e) => return Err(e),
            };
            // Every row of this preparation runs on its values' type.
            let first = rows.len();
            let stored = prepared.hls(op).ok().map(|h| h.value_type());
            let tag = |rows: &mut Vec<SelftestRow>| {
                for r in &mut rows[first..] {
                    r.values = stored;
                }
            };
            if op == Op::Completion {
                if case.factors == FactorKind::Uniform {
                    completion_rows(engine, &case.name, &prepared, rank, &mut rows)?;
                }
                tag(&mut rows);
                continue;
            }
            for mode in 0..x.order() {
                // The factors, the result and the reference's, planned before any of
                // them is allocated.
                let ranks = vec![rank; x.order()];
                let plan = MemoryPlan::kernel(op, x.dims(), mode, &ranks, true, false);
                if let Err(e) = plan.check() {
                    rows.push(skipped(mode, e));
                    continue;
                }
                let factors = case.factors.factors(x.dims(), rank, 17 + mode as u64);
                let start = Instant::now();
                let got = engine.run(op, &prepared, mode, &factors);
                let _ = engine.backend().synchronize();
                let time_ms = start.elapsed().as_secs_f64() * 1e3;
                let checked = got.and_then(|g| {
                    let want = reference::apply(op, x, mode, &factors)?;
                    compare(&want, &g)
                });
                let row = (mode, rank);
                rows.push(SelftestRow::from_outcome(
                    &case.name, op, None, row, time_ms, checked,
                ));
            }
            tag(&mut rows);
        }
    }
    Ok(SelftestReport {
        backend: engine.backend().describe(),
        rows,
    })
}

/// The tensor as a completion session sees it: its nonzeros in the session's order,
/// with the values as stored (so that the fp16 rounding of the values is not counted
/// as the kernels' error).
fn in_session_order(p: &Prepared) -> Result<CooTensor> {
    let hls = p.hls(Op::Completion)?;
    let mut entries = Vec::with_capacity(hls.nnz());
    hls.for_each_nonzero(|c, v| entries.push((c.to_vec(), v)));
    CooTensor::from_entries(hls.dims().to_vec(), entries)
}

/// Runs `f`, adding its milliseconds (after a device synchronization) to `ms`.
fn timed<T>(engine: &Engine, ms: &mut f64, f: impl FnOnce() -> Result<T>) -> Result<T> {
    let start = Instant::now();
    let r = f();
    let _ = engine.backend().synchronize();
    *ms += start.elapsed().as_secs_f64() * 1e3;
    r
}

/// One row of a completion kernel: `check` runs it (timing the kernel's call into the
/// `f64` it is given, with [`timed`]) and compares with FP64.
fn completion_row(
    tensor: &str,
    kernel: &'static str,
    mode: usize,
    rank: usize,
    check: impl FnOnce(&mut f64) -> Result<Accuracy>,
) -> SelftestRow {
    let mut time_ms = 0.0;
    let checked = check(&mut time_ms);
    let row = (mode, rank);
    SelftestRow::from_outcome(tensor, Op::Completion, Some(kernel), row, time_ms, checked)
}

/// The completion kernels on `prepared` at rank `rank` against FP64 (see the module
/// docs), one row each. A session that cannot start fails every row.
fn completion_rows(
    engine: &Engine,
    name: &str,
    prepared: &Prepared,
    rank: usize,
    rows: &mut Vec<SelftestRow>,
) -> Result<()> {
    // The factors in f32 and in f64, and the kernels' results, planned first.
    let ranks = vec![rank; prepared.order()];
    let plan = MemoryPlan::kernel(Op::Completion, prepared.dims(), 0, &ranks, true, false);
    if let Err(e) = plan.check() {
        rows.push(completion_row(name, "all", 0, rank, |_| Err(e)));
        return Ok(());
    }
    let x = in_session_order(prepared)?;
    let factors = FactorKind::Uniform.factors(x.dims(), rank, 29);
    let wide: Vec<Matrix<f64>> = factors.iter().map(Matrix::to_f64).collect();
    let offset = 0.25f32;
    let mut session = match engine.completion_session(prepared, &factors, offset) {
        Ok(s) => s,
        Err(e) => {
            for kernel in ["normal-eq", "residual", "loss", "sgd"] {
                let e = e.to_string();
                rows.push(completion_row(name, kernel, 0, rank, |_| {
                    Err(crate::Error::InvalidOption(e))
                }));
            }
            return Ok(());
        }
    };
    let mu = f64::from(offset);
    let mut out = Matrix::zeros(1, 1);
    for mode in 0..x.order() {
        rows.push(completion_row(name, "normal-eq", mode, rank, |ms| {
            timed(engine, ms, || {
                session.normal_equations(mode, &all_rows(x.dims()[mode]), &mut out)
            })?;
            let want = reference::completion::normal_equations(&x, mode, &wide, mu)?;
            compare(&want, &out)
        }));
    }
    let mut res = Vec::new();
    rows.push(completion_row(name, "residual", 0, rank, |ms| {
        timed(engine, ms, || session.reset_residual())?;
        res = reference::completion::residual(&x, &wide, mu)?;
        compare_slices(&res, &session.residual()?)
    }));
    // Column `col` out of the model: the residual grows by its product.
    let col = rank / 2;
    rows.push(completion_row(name, "add-column", 0, rank, |ms| {
        timed(engine, ms, || session.add_column(col, 1.0))?;
        for (e, r) in res.iter_mut().enumerate() {
            *r += (0..x.order())
                .map(|m| wide[m].get(x.indices(m)[e] as usize, col))
                .product::<f64>();
        }
        compare_slices(&res, &session.residual()?)
    }));
    for mode in 0..x.order() {
        rows.push(completion_row(name, "column-terms", mode, rank, |ms| {
            timed(engine, ms, || session.column_terms(mode, col, &mut out))?;
            let want = reference::completion::column_terms(&x, &res, mode, col, &wide)?;
            compare(&want, &out)
        }));
    }
    rows.push(completion_row(name, "loss", 0, rank, |ms| {
        let loss = timed(engine, ms, || session.loss())?;
        compare_slices(&[reference::completion::loss(&x, &wide, mu)?], &[loss])
    }));
    drop(session);
    rows.push(completion_row(name, "sgd", 0, rank, |ms| {
        sgd_on_the_diagonal(engine, x.dims(), rank, ms)
    }));
    Ok(())
}

/// One SGD epoch on the diagonal `(i, i, …)` of a tensor of extents `dims`, whose
/// steps touch disjoint rows, against the sequential FP64 epoch: every factor entry.
fn sgd_on_the_diagonal(
    engine: &Engine,
    dims: &[usize],
    rank: usize,
    ms: &mut f64,
) -> Result<Accuracy> {
    let n = dims.iter().copied().min().unwrap_or(0) as u32;
    let diag = CooTensor::from_entries(
        dims.to_vec(),
        (0..n).map(|i| (vec![i; dims.len()], 1.0 + f64::from(i % 7) / 4.0)),
    )?;
    let p = engine.prepare(
        &diag,
        &[Workload {
            op: Op::Completion,
            rank,
        }],
    )?;
    let x = in_session_order(&p)?;
    let f = FactorKind::Uniform.factors(dims, rank, 31);
    let mut want: Vec<Matrix<f64>> = f.iter().map(Matrix::to_f64).collect();
    let mut s = engine.completion_session(&p, &f, 0.5)?;
    let step = SgdStep {
        learning_rate: 0.05,
        lambda: 0.1,
        seed: 7,
        shuffle: true,
        bias: None,
        anchors: Vec::new(),
    };
    timed(engine, ms, || s.sgd_epoch(&step))?;
    reference::completion::sgd_epoch(&x, &mut want, 0.5, 0.05, 0.1)?;
    let got: Vec<f32> = s
        .factors()?
        .iter()
        .flat_map(|m| m.data().to_vec())
        .collect();
    let want: Vec<f64> = want.iter().flat_map(|m| m.data().to_vec()).collect();
    compare_slices(&want, &got)
}

/// Every row of a mode of `len` rows, as a list of rows.
fn all_rows(len: usize) -> Vec<u32> {
    (0..len).map(|i| i as u32).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_selftest_passes_on_small_tensors_of_every_regime() {
        let runs = [
            (Op::Mttkrp, 8),
            (Op::Ttmc, 4),
            (Op::Phi, 8),
            (Op::Completion, 8),
        ];
        let cases = generated_cases(40, 3000, &runs).unwrap();
        let report = run(&Engine::cpu(), &cases).unwrap();
        // 3 three-way and 1 four-way tensor, then block-dense and four-way again with
        // log-uniform and with extreme factors; 3 runs each, one row per mode; the
        // completion kernels on the uniform ones: normal equations and column terms
        // per mode, residual, add-column, loss and SGD.
        let completion = 3 * (2 * 3 + 4) + (2 * 4 + 4);
        assert_eq!(
            report.rows.len(),
            (3 * 3 + 4) * 3 + 2 * (3 + 4) * 3 + completion
        );
        assert!(report.table().contains("completion:normal-eq"));
        assert!(report.passed(), "{}", report.table());
        assert!(report.table().contains("PASSED"));
        let json: serde_json::Value = serde_json::from_str(&report.to_json()).unwrap();
        assert_eq!(json["rows"].as_array().unwrap().len(), report.rows.len());
    }

    #[test]
    fn a_bad_row_fails_the_report() {
        let mut report = SelftestReport {
            backend: "test".into(),
            rows: vec![SelftestRow {
                tensor: "t".into(),
                op: Op::Mttkrp,
                kernel: None,
                mode: 0,
                rank: 8,
                values: None,
                smape_percent: Some(0.5),
                max_rel_err: Some(0.1),
                rel_frobenius: Some(0.01),
                time_ms: 1.0,
                error: None,
                skipped: None,
            }],
        };
        assert!(!report.passed());
        report.rows[0].smape_percent = Some(0.01);
        assert!(report.passed());
        report.rows[0].error = Some("non-finite value".into());
        assert!(!report.passed());
        assert!(report.table().contains("ERROR"));
    }

    /// A TTMc whose output cannot fit in memory (rank 4096 on a 4th-order tensor: each
    /// output row holds 4096³ entries) is skipped with the refusal, not failed; the
    /// others still run and pass. A report of skips alone has not passed.
    #[test]
    fn memory_refusals_are_skips_not_failures() {
        let cases = generated_cases(20, 500, &[(Op::Mttkrp, 4)]).unwrap();
        let four = cases
            .iter()
            .find(|c| c.tensor.order() == 4)
            .unwrap()
            .clone();
        let case = SelftestCase {
            runs: vec![(Op::Mttkrp, 4), (Op::Ttmc, 4096), (Op::Ttmc, 2)],
            ..four
        };
        let report = run(&Engine::cpu(), &[case]).unwrap();
        let skipped: Vec<&SelftestRow> = report.skipped().collect();
        assert!(!skipped.is_empty(), "{}", report.table());
        for r in &skipped {
            assert_eq!((r.op, r.rank), (Op::Ttmc, 4096));
            assert!(r.error.is_none() && !r.failed());
            assert!(r.skipped.as_ref().unwrap().contains("memory"), "{r:?}");
        }
        assert!(report.passed(), "{}", report.table());
        let table = report.table();
        assert!(table.contains("SKIPPED") && table.contains("skipped for want of memory"));
        let json: serde_json::Value = serde_json::from_str(&report.to_json()).unwrap();
        let rows = json["rows"].as_array().unwrap();
        assert!(rows.iter().any(|r| r["skipped"].is_string()));
        // Skips alone: nothing ran, nothing passed.
        let only = SelftestReport {
            backend: "test".into(),
            rows: skipped.into_iter().cloned().collect(),
        };
        assert!(!only.passed());
    }
}
