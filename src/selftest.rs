//! Self-test: runs every op on every mode at several ranks on a set of tensors with
//! the chosen engine and compares each result to the FP64 reference (DESIGN.md §6).
//! `sptmc selftest` prints the [`SelftestReport`] table; the GPU tests use it too.

use crate::accuracy::{SMAPE_TARGET_PERCENT, compare};
use crate::engine::{Engine, Workload};
use crate::error::Result;
use crate::matrix::Matrix;
use crate::ops::Op;
use crate::reference;
use crate::tensor::CooTensor;
use crate::tensor::generate::{GenSpec, Pattern, generate};
use rand::{Rng, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;
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

/// How a case's random factors are drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FactorKind {
    /// Uniform in `[0.05, 1)`: the usual well-scaled case.
    #[default]
    Uniform,
    /// Log-uniform over `[1e-6, 1)`: six decades inside every column, as CP-ALS
    /// produces on power-law data, where fp16 staging loses what is far below a
    /// column's largest entry. Positive, so that results measure the staging and not
    /// the cancellation of terms against the tensor values' own fp16 rounding.
    LogUniform,
    /// Uniform, then mode 1 scaled by 1e30 and the last mode by 1e-30: products far
    /// outside f32's range unless the kernels rescale.
    Extreme,
}

impl FactorKind {
    /// Seeded factors of this kind, one per mode (the target mode's included, unused).
    pub fn factors(self, dims: &[usize], rank: usize, seed: u64) -> Vec<Matrix> {
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed);
        let order = dims.len();
        dims.iter()
            .enumerate()
            .map(|(m, &d)| {
                Matrix::from_fn(d, rank, |_, _| match self {
                    FactorKind::Uniform => rng.random_range(0.05f32..1.0),
                    FactorKind::LogUniform => 10f32.powf(rng.random_range(-6.0f32..0.0)),
                    FactorKind::Extreme => {
                        let v = rng.random_range(0.05f32..1.0);
                        match m {
                            1 => v * 1e30,
                            _ if m == order - 1 => v * 1e-30,
                            _ => v,
                        }
                    }
                })
            })
            .collect()
    }

    /// Suffix of a case name (empty for the uniform kind).
    fn suffix(self) -> &'static str {
        match self {
            FactorKind::Uniform => "",
            FactorKind::LogUniform => "/log-uniform",
            FactorKind::Extreme => "/extreme",
        }
    }
}

/// The contract's runs: MTTKRP at ranks 8, 16, 32, 64 and TTMc at 8 and 16 (every
/// other mode at that rank).
pub fn default_runs() -> Vec<(Op, usize)> {
    let mut r: Vec<(Op, usize)> = [8, 16, 32, 64].map(|k| (Op::Mttkrp, k)).to_vec();
    r.extend([8, 16].map(|k| (Op::Ttmc, k)));
    r
}

/// Generated 3rd-order tensors of every regime (uniform, power-law, block-dense) with
/// `nnz` nonzeros over `dim`³, plus a 4th-order uniform one (sparse part only), all
/// with uniform factors; then the block-dense and the 4th-order tensors again with
/// log-uniform and with extreme factors (dense tiles and the sparse part both see them).
pub fn generated_cases(dim: usize, nnz: usize, runs: &[(Op, usize)]) -> Result<Vec<SelftestCase>> {
    let specs = [
        ("uniform", vec![dim; 3], Pattern::Uniform),
        ("power-law", vec![dim; 3], Pattern::PowerLaw { alpha: 1.1 }),
        (
            "block-dense",
            vec![dim; 3],
            Pattern::BlockDense {
                tile_nnz: 400,
                dense_share: 0.7,
            },
        ),
        ("uniform-4d", vec![dim / 2 + 1; 4], Pattern::Uniform),
    ];
    let mut cases = Vec::new();
    for (k, (name, dims, pattern)) in specs.into_iter().enumerate() {
        cases.push(SelftestCase {
            name: name.to_string(),
            tensor: generate(&GenSpec {
                dims,
                nnz,
                pattern,
                seed: 0x5e1f + k as u64,
            })?,
            runs: runs.to_vec(),
            factors: FactorKind::Uniform,
        });
    }
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

/// The default case list: [`generated_cases`] at 200³ with 200,000 nonzeros.
pub fn default_cases() -> Result<Vec<SelftestCase>> {
    generated_cases(200, 200_000, &default_runs())
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

/// Seeded factors in `[0.05, 1)`, one per mode (the target mode's included, unused).
pub fn random_factors(dims: &[usize], rank: usize, seed: u64) -> Vec<Matrix> {
    FactorKind::Uniform.factors(dims, rank, seed)
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
                let mut row = SelftestRow {
                    tensor: case.name.clone(),
                    op,
                    mode,
                    rank,
                    smape_percent: None,
                    max_rel_err: None,
                    rel_frobenius: None,
                    time_ms,
                    error: None,
                };
                match checked {
                    Ok(a) => {
                        row.smape_percent = Some(a.smape_percent);
                        row.max_rel_err = Some(a.max_rel_err);
                        row.rel_frobenius = Some(a.rel_frobenius);
                    }
                    Err(e) => row.error = Some(e.to_string()),
                }
                rows.push(row);
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
        let cases = generated_cases(40, 3000, &[(Op::Mttkrp, 8), (Op::Ttmc, 4)]).unwrap();
        let report = run(&Engine::cpu(), &cases).unwrap();
        // 3 three-way and 1 four-way tensor, then block-dense and four-way again with
        // log-uniform and with extreme factors; 2 runs each, one row per mode.
        assert_eq!(report.rows.len(), (3 * 3 + 4) * 2 + 2 * (3 + 4) * 2);
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
