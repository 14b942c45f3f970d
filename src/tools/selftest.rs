//! Self-test: runs every op on every mode at several ranks on a set of tensors with
//! the chosen engine and compares each result to the FP64 reference (DESIGN.md §6).
//! `sptmc selftest` prints the [`SelftestReport`] table; the GPU tests use it too.

use super::cases::{self, FactorKind};
use crate::accuracy::{SMAPE_TARGET_PERCENT, compare};
use crate::engine::{Engine, Workload};
use crate::error::Result;
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
/// other mode at that rank) and CP-APR's Φ at 16 and 64.
pub fn default_runs() -> Vec<(Op, usize)> {
    let mut r: Vec<(Op, usize)> = [8, 16, 32, 64].map(|k| (Op::Mttkrp, k)).to_vec();
    r.extend([8, 16].map(|k| (Op::Ttmc, k)));
    r.extend([16, 64].map(|k| (Op::Phi, k)));
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
    /// Target mode.
    pub mode: usize,
    /// Rank (MTTKRP) or rank of every other mode (TTMc).
    pub rank: usize,
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
}

impl SelftestRow {
    /// Within the contract: no error and SMAPE ≤ [`SMAPE_TARGET_PERCENT`].
    pub fn passed(&self) -> bool {
        self.error.is_none()
            && self
                .smape_percent
                .is_some_and(|s| s <= SMAPE_TARGET_PERCENT)
    }
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
    /// Whether every row passed.
    pub fn passed(&self) -> bool {
        !self.rows.is_empty() && self.rows.iter().all(SelftestRow::passed)
    }

    /// The report as JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("plain data serializes")
    }

    /// A text table, one line per row, then a verdict.
    pub fn table(&self) -> String {
        let mut s = format!("backend: {}\n", self.backend);
        s += &format!(
            "{:<24} {:<7} {:>4} {:>4} {:>10} {:>10} {:>10} {:>9}  status\n",
            "tensor", "op", "mode", "rank", "smape%", "max rel", "rel frob", "ms"
        );
        let f = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.2e}"));
        for r in &self.rows {
            s += &format!(
                "{:<24} {:<7} {:>4} {:>4} {:>10} {:>10} {:>10} {:>9.3}  {}\n",
                r.tensor,
                r.op.name(),
                r.mode,
                r.rank,
                f(r.smape_percent),
                f(r.max_rel_err),
                f(r.rel_frobenius),
                r.time_ms,
                match (&r.error, r.passed()) {
                    (Some(e), _) => format!("ERROR {e}"),
                    (None, true) => "ok".into(),
                    (None, false) => format!("FAIL (> {SMAPE_TARGET_PERCENT}%)"),
                }
            );
        }
        let failed = self.rows.iter().filter(|r| !r.passed()).count();
        s += &format!(
            "{}: {} runs, {failed} failed\n",
            if self.passed() { "PASSED" } else { "FAILED" },
            self.rows.len()
        );
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
            let prepared = engine.prepare(x, &[Workload { op, rank }])?;
            for mode in 0..x.order() {
                let factors = case.factors.factors(x.dims(), rank, 17 + mode as u64);
                let start = Instant::now();
                let got = engine.run(op, &prepared, mode, &factors);
                let _ = engine.backend().synchronize();
                let time_ms = start.elapsed().as_secs_f64() * 1e3;
                let checked = got.and_then(|g| {
                    let want = reference::apply(op, x, mode, &factors)?;
                    compare(&want, &g)
                });
                let (a, error) = match checked {
                    Ok(a) => (Some(a), None),
                    Err(e) => (None, Some(e.to_string())),
                };
                rows.push(SelftestRow {
                    tensor: case.name.clone(),
                    op,
                    mode,
                    rank,
                    smape_percent: a.as_ref().map(|a| a.smape_percent),
                    max_rel_err: a.as_ref().map(|a| a.max_rel_err),
                    rel_frobenius: a.as_ref().map(|a| a.rel_frobenius),
                    time_ms,
                    error,
                });
            }
        }
    }
    Ok(SelftestReport {
        backend: engine.backend().describe(),
        rows,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_selftest_passes_on_small_tensors_of_every_regime() {
        let runs = [(Op::Mttkrp, 8), (Op::Ttmc, 4), (Op::Phi, 8)];
        let cases = generated_cases(40, 3000, &runs).unwrap();
        let report = run(&Engine::cpu(), &cases).unwrap();
        // 3 three-way and 1 four-way tensor, then block-dense and four-way again with
        // log-uniform and with extreme factors; 3 runs each, one row per mode.
        assert_eq!(report.rows.len(), (3 * 3 + 4) * 3 + 2 * (3 + 4) * 3);
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
                mode: 0,
                rank: 8,
                smape_percent: Some(0.5),
                max_rel_err: Some(0.1),
                rel_frobenius: Some(0.01),
                time_ms: 1.0,
                error: None,
            }],
        };
        assert!(!report.passed());
        report.rows[0].smape_percent = Some(0.01);
        assert!(report.passed());
        report.rows[0].error = Some("non-finite value".into());
        assert!(!report.passed());
        assert!(report.table().contains("ERROR"));
    }
}
