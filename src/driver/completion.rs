//! What a completion run reports beyond its model: the comparison with the bias
//! baseline on validation (and the warning when the model is no better), and the
//! summary both the command line's `--json` and the Python result are built from.

use super::fit::CompletionReport;
use super::options::CompletionJob;
use crate::error::Result;
use crate::tensor::CooTensor;
use serde_json::{Value, json};

impl CompletionReport {
    /// The bias baseline's RMSE over the validation entries of `job`.
    pub fn baseline_validation_rmse(&self, job: &CompletionJob) -> f64 {
        job.baselines
            .bias_rmse(job.validation)
            .unwrap_or(f64::INFINITY)
    }

    /// Set when the model's validation RMSE is no lower than the better baseline's
    /// (per-row biases, or the training mean alone, which the biases can lose to on
    /// rows of few entries): its predictions add nothing to that baseline.
    pub fn warning(&self, job: &CompletionJob) -> Option<String> {
        let bias = self.baseline_validation_rmse(job);
        let mean = (job.baselines.mean_rmse(job.validation)).unwrap_or(f64::INFINITY);
        let (baseline, what, adds) = if mean < bias {
            (mean, "global mean", "the training mean")
        } else {
            (bias, "user+item bias", "per-row means")
        };
        let best = self
            .model
            .best()
            .map_or(f64::INFINITY, |b| b.validation_rmse);
        (best >= baseline).then(|| {
            format!(
                "the model's validation RMSE {} is no better than the {what} baseline's {}: its predictions add nothing to {adds} (try another rank or solver)",
                super::sig5(best),
                super::sig5(baseline)
            )
        })
    }

    /// The run as JSON, as `--json` prints it and `model.json` holds it: the tensor
    /// named `name` (`how` its entries were split), the options of `job` (the chosen
    /// `lambda` and its path), every RMSE with the baselines' on validation and on
    /// `test`, the warning, every epoch.
    pub fn summary(
        &self,
        job: &CompletionJob,
        name: &str,
        how: &str,
        train: &CooTensor,
        test: &CooTensor,
    ) -> Result<Value> {
        let (m, o) = (&self.model, &job.options);
        let best = m.best().ok_or_else(|| {
            crate::Error::Numerical("the completion run reported no epoch".into())
        })?;
        let b = &job.baselines;
        Ok(json!({
            "kind": "completion",
            "tensor": name,
            "data": how,
            "solver": o.solver.name(),
            "rank": o.rank,
            "lambda": m.lambda,
            "lambda_chosen": o.lambda.is_none(),
            "lambda_path": m.lambda_path,
            "biases": o.biases,
            "bias_lambda": o.bias_lambda,
            "seed": o.seed,
            "center": o.center,
            "learning_rate": m.learning_rate,
            "learning_rate_chosen": m.learning_rate.is_some() && o.learning_rate.is_none(),
            "dims": train.dims(),
            "offset": m.offset,
            "train_nnz": train.nnz(),
            "validation_nnz": job.validation.nnz(),
            "test_nnz": test.nnz(),
            "backend": self.backend,
            "values": self.values,
            "values_scaled_by_2_to_the": job.scale.map(|s| s.values_power()),
            "train_rmse": best.train_rmse,
            "validation_rmse": best.validation_rmse,
            "test_rmse": m.rmse(test)?,
            "baseline_test_rmse": b.bias_rmse(test),
            "mean_baseline_test_rmse": b.mean_rmse(test),
            "baseline_validation_rmse": self.baseline_validation_rmse(job),
            "mean_baseline_validation_rmse": b.mean_rmse(job.validation),
            "warning": self.warning(job),
            "best_epoch": m.best_epoch,
            "epochs_run": m.epochs.len(),
            "empty_rows": m.empty_rows,
            "pinv_solves": m.pinv_solves,
            "seconds": self.seconds,
            "seconds_per_epoch": self.seconds / m.epochs.len().max(1) as f64,
            "epochs": m.epochs,
        }))
    }
}
