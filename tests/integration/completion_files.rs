//! Completion's model folders and what `sptmc complete` reports about its choices:
//! biases written and read back with the same predictions, a folder from before the
//! biases (format 1) still loading, a newer format refused by name; the chosen λ on
//! stderr and in `--json`; the warning when the model is no better than the bias
//! baseline.

use crate::common;

use sptmc::decomp::completion::files;
use sptmc::decomp::{CompletionModel, Solver};
use sptmc::{Error, Matrix};
use std::path::Path;
use std::process::Output;

fn model(biases: bool) -> CompletionModel {
    let f = Matrix::random_factors(&[5, 4, 3], &[2, 2, 2], 9);
    let b = if biases {
        vec![
            vec![0.5, -0.25, 0.0, 1.0, 0.125],
            vec![0.1, 0.2, 0.3, 0.4],
            vec![-1.0, 0.0, 1.0],
        ]
    } else {
        Vec::new()
    };
    CompletionModel::from_parts(Solver::Als, 3.5, f, b).unwrap()
}

#[test]
fn biases_are_written_and_read_back_with_the_same_predictions() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("m");
    let m = model(true);
    files::write(&dir, &m, &serde_json::json!({"note": "kept"})).unwrap();
    assert!(dir.join("bias-2.txt").exists());
    let back = files::read(&dir).unwrap();
    assert_eq!(back.biases.len(), 3);
    for c in [[0u32, 0, 0], [4, 3, 2], [1, 2, 0]] {
        let (a, b) = (m.predict(&c).unwrap(), back.predict(&c).unwrap());
        assert!((a - b).abs() < 1e-6, "{c:?}: {a} vs {b}");
    }
    // The bias terms are in the prediction: without them it differs by their sum.
    let plain = CompletionModel::from_parts(Solver::Als, 3.5, m.factors.clone(), vec![]).unwrap();
    let d = m.predict(&[3, 3, 2]).unwrap() - plain.predict(&[3, 3, 2]).unwrap();
    assert!((d - (1.0 + 0.4 + 1.0)).abs() < 1e-12, "{d}");
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("model.json")).unwrap()).unwrap();
    assert_eq!(json["format"], 2);
    assert_eq!(json["note"], "kept");
}

#[test]
fn a_format_1_folder_loads_and_a_newer_format_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("m");
    let m = model(false);
    files::write(&dir, &m, &serde_json::json!({})).unwrap();
    // What format 1 wrote: no `format`, no `biases`.
    let path = dir.join("model.json");
    let mut v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let obj = v.as_object_mut().unwrap();
    obj.remove("format");
    obj.remove("biases");
    std::fs::write(&path, v.to_string()).unwrap();
    let back = files::read(&dir).unwrap();
    assert!(back.biases.is_empty());
    assert_eq!(
        back.predict(&[1, 1, 1]).unwrap(),
        m.predict(&[1, 1, 1]).unwrap()
    );
    v["format"] = serde_json::json!(3);
    std::fs::write(&path, v.to_string()).unwrap();
    match files::read(&dir) {
        Err(Error::InvalidOption(msg)) => assert!(msg.contains("format 3 is newer"), "{msg}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn bias_files_of_the_wrong_length_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("m");
    files::write(&dir, &model(true), &serde_json::json!({})).unwrap();
    std::fs::write(dir.join("bias-1.txt"), "1\n2\n").unwrap();
    let err = files::read(&dir).unwrap_err().to_string();
    assert!(err.contains("bias-1.txt"), "{err}");
}

fn sptmc(args: &[&str], cache: &Path) -> Output {
    let mut c = common::sptmc_command(cache);
    c.args(args).arg("--backend").arg("cpu");
    common::output_within(c, 300)
}

#[test]
fn complete_reports_the_chosen_lambda_and_warns_when_no_better_than_the_baseline() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    // Pure noise around per-row offsets: nothing for the CP part to learn.
    let mut lines = String::new();
    let mut state = 12345u64;
    for i in 1..=30 {
        for j in 1..=25 {
            for k in 1..=4 {
                state = state
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                if state >> 62 == 0 {
                    continue;
                }
                let noise = ((state >> 11) as f64 / (1u64 << 53) as f64) - 0.5;
                lines.push_str(&format!(
                    "{i} {j} {k} {}\n",
                    3.0 + 0.1 * (i % 3) as f64 + noise
                ));
            }
        }
    }
    let f = dir.join("noise.tns");
    std::fs::write(&f, lines).unwrap();
    let o = sptmc(
        &[
            "complete",
            f.to_str().unwrap(),
            "--rank",
            "4",
            "--json",
            "--epochs",
            "20",
        ],
        dir,
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(v["lambda_chosen"], true);
    assert!(!v["lambda_path"].as_array().unwrap().is_empty());
    let lambda = v["lambda"].as_f64().unwrap();
    assert!(lambda > 0.0 && lambda.is_finite());
    assert!(stderr.contains("chosen on validation"), "{stderr}");
    // Warned of unless the model beats both baselines on validation.
    let (val, base, mean) = (
        v["validation_rmse"].as_f64().unwrap(),
        v["baseline_validation_rmse"].as_f64().unwrap(),
        v["mean_baseline_validation_rmse"].as_f64().unwrap(),
    );
    assert_eq!(v["warning"].is_null(), val < base.min(mean), "{v}");
    // With λ given the path is skipped and the bias terms can be turned off; so large
    // a λ leaves the training mean alone, worse than the per-row offsets: a warning.
    let o = sptmc(
        &[
            "complete",
            f.to_str().unwrap(),
            "--rank",
            "4",
            "--json",
            "--epochs",
            "3",
            "--lambda",
            "1e6",
            "--no-biases",
        ],
        dir,
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(v["lambda"], 1e6);
    assert_eq!(v["lambda_chosen"], false);
    assert_eq!(v["biases"], false);
    assert!(v["lambda_path"].as_array().unwrap().is_empty());
    assert!(v["warning"].as_str().unwrap().contains("no better"), "{v}");
    assert!(
        stderr.contains("sptmc: warning: the model's validation RMSE"),
        "{stderr}"
    );
}

// Values with no structure at all on rows of one or two entries: the per-row biases
// fit noise and lose to the training mean, and so does the model; the warning names
// the mean, which the bias baseline alone did not catch.
#[test]
fn complete_warns_when_no_better_than_the_global_mean() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let mut lines = String::new();
    let mut state = 777u64;
    let mut next = |n: u64| {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (state >> 33) % n
    };
    for _ in 0..4000 {
        let (i, j, k) = (next(3000) + 1, next(3000) + 1, next(5) + 1);
        lines.push_str(&format!("{i} {j} {k} {}\n", 1 + next(4)));
    }
    let f = dir.join("flat.tns");
    std::fs::write(&f, lines).unwrap();
    let args = ["complete", f.to_str().unwrap(), "--rank", "4", "--json"];
    let o = sptmc(&args, dir);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let rmse = |k: &str| v[k].as_f64().unwrap();
    assert!(
        rmse("mean_baseline_validation_rmse") < rmse("baseline_validation_rmse"),
        "{v}"
    );
    assert!(
        rmse("validation_rmse") >= rmse("mean_baseline_validation_rmse"),
        "{v}"
    );
    let w = v["warning"].as_str().unwrap();
    assert!(
        w.contains("no better than the global mean baseline's"),
        "{w}"
    );
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(
        stderr.contains("sptmc: warning: the model's validation RMSE"),
        "{stderr}"
    );
}
