//! `sptmc gcp`: a run with per-epoch lines, `--json` and `--out`; the full-gradient
//! method; bad options and data a loss cannot model as one error line.

use crate::common;

use common::{assert_one_error_line, output_within, sptmc_command};
use std::path::Path;

/// A small count tensor as .tns text.
fn counts(dir: &Path, negative: bool) -> std::path::PathBuf {
    let mut text = String::new();
    for i in 1..=8 {
        for j in 1..=6 {
            for k in 1..=5 {
                if (i * 7 + j * 3 + k) % 4 == 0 {
                    let v = if negative && i == 3 {
                        -1
                    } else {
                        1 + (i + j + k) % 3
                    };
                    text.push_str(&format!("{i} {j} {k} {v}\n"));
                }
            }
        }
    }
    let p = dir.join(if negative { "neg.tns" } else { "counts.tns" });
    std::fs::write(&p, text).unwrap();
    p
}

#[test]
fn gcp_runs_reports_each_epoch_and_writes_its_model() {
    let dir = tempfile::tempdir().unwrap();
    let x = counts(dir.path(), false);
    let out = dir.path().join("model");
    let mut cmd = sptmc_command(dir.path());
    cmd.args([
        "gcp",
        x.to_str().unwrap(),
        "--rank",
        "2",
        "--loss",
        "poisson-log",
    ])
    .args([
        "--epochs",
        "3",
        "--epoch-iters",
        "20",
        "--rate",
        "0.01",
        "--backend",
        "cpu",
    ])
    .args(["--threads", "2", "--out", out.to_str().unwrap()]);
    let o = output_within(cmd, 120);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert_eq!(err.matches("  epoch = ").count(), 3, "{err}");
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.contains("GCP rank 2 (poisson-log loss, sgd): final loss"),
        "{text}"
    );
    for f in [
        "weights.txt",
        "factor-0.txt",
        "factor-1.txt",
        "factor-2.txt",
        "model.json",
    ] {
        assert!(out.join(f).exists(), "{f} missing");
    }
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("model.json")).unwrap()).unwrap();
    assert_eq!(json["kind"], "gcp");
    assert_eq!(json["loss"], "poisson-log");
    assert_eq!(json["iterations"].as_array().unwrap().len(), 3);
    assert!(json["final_loss"].as_f64().unwrap() < json["initial_loss"].as_f64().unwrap());

    // --json, L-BFGS-B from the written model.
    let mut cmd = sptmc_command(dir.path());
    cmd.args([
        "gcp",
        x.to_str().unwrap(),
        "--rank",
        "2",
        "--loss",
        "gaussian",
    ])
    .args([
        "--method",
        "lbfgs",
        "--max-iters",
        "30",
        "--backend",
        "cpu",
        "--json",
    ])
    .args(["--init", out.to_str().unwrap()]);
    let o = output_within(cmd, 120);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let json: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(json["method"], "lbfgs");
    assert!(json["final_loss"].as_f64().unwrap() <= json["initial_loss"].as_f64().unwrap());
}

/// `--out` then `--init` resumes the model: the weights are read with the factors, so
/// the second run starts at the loss the first ended with (L-BFGS-B: exact losses).
#[test]
fn a_written_model_given_as_init_resumes_at_its_loss() {
    let dir = tempfile::tempdir().unwrap();
    let x = counts(dir.path(), false);
    let out = dir.path().join("model");
    let run = |extra: &[&str]| -> serde_json::Value {
        let mut cmd = sptmc_command(dir.path());
        cmd.args([
            "gcp",
            x.to_str().unwrap(),
            "--rank",
            "2",
            "--loss",
            "poisson",
        ])
        .args(["--method", "lbfgs", "--backend", "cpu", "--json"])
        .args(extra);
        let o = output_within(cmd, 120);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        serde_json::from_slice(&o.stdout).unwrap()
    };
    let first = run(&["--max-iters", "20", "--out", out.to_str().unwrap()]);
    let again = run(&["--max-iters", "3", "--init", out.to_str().unwrap()]);
    let (end, start) = (
        first["final_loss"].as_f64().unwrap(),
        again["initial_loss"].as_f64().unwrap(),
    );
    // The model as written: 17 significant digits, rounded once per entry.
    assert!((start - end).abs() <= 1e-12 * end.abs(), "{start} vs {end}");
}

#[test]
fn bad_options_and_data_are_one_error_line() {
    let dir = tempfile::tempdir().unwrap();
    let x = counts(dir.path(), false);
    let neg = counts(dir.path(), true);
    // A vector: any R vectors that sum to it are a model (it ran and reported a loss
    // of 0).
    let vector = dir.path().join("vector.tns");
    std::fs::write(&vector, "1 1.0\n2 2.0\n3 0.5\n").unwrap();
    let cases: [(&Path, &[&str], &[&str]); 6] = [
        (&vector, &["--loss", "gaussian"], &["order ≥ 2", "order 1"]),
        (&x, &["--loss", "cauchy"], &["unknown loss", "cauchy"]),
        (
            &x,
            &["--loss", "bernoulli-logit"],
            &["bernoulli-logit", "binary"],
        ),
        (&neg, &["--loss", "gamma"], &["gamma", "nonnegative", "-1"]),
        (&x, &["--loss", "huber"], &["huber", "loss_param"]),
        (&x, &["--loss", "poisson", "--rate", "0"], &["rate"]),
    ];
    for (file, args, words) in cases {
        let mut cmd = sptmc_command(dir.path());
        cmd.args([
            "gcp",
            file.to_str().unwrap(),
            "--backend",
            "cpu",
            "--epochs",
            "1",
        ])
        .args(args);
        assert_one_error_line(&output_within(cmd, 60), words);
    }
}

/// The count tensor with every value multiplied by `times`, as .tns text.
fn scaled(dir: &Path, times: f64) -> std::path::PathBuf {
    let text = std::fs::read_to_string(counts(dir, false)).unwrap();
    let lines: Vec<String> = text
        .lines()
        .map(|l| {
            let (c, v) = l.rsplit_once(' ').unwrap();
            format!("{c} {:e}", v.parse::<f64>().unwrap() * times)
        })
        .collect();
    let p = dir.join(format!("times-{times:e}.tns"));
    std::fs::write(&p, lines.join("\n") + "\n").unwrap();
    p
}

/// `sptmc gcp FILE --json` with a few short epochs: the summary.
fn gcp_json(dir: &Path, file: &Path, loss: &str) -> serde_json::Value {
    gcp_json_with(
        dir,
        file,
        loss,
        &["--epochs", "3", "--epoch-iters", "20", "--rate", "0.01"],
    )
}

/// `sptmc gcp FILE --json` with `args`: the summary.
fn gcp_json_with(dir: &Path, file: &Path, loss: &str, args: &[&str]) -> serde_json::Value {
    let mut cmd = sptmc_command(dir);
    cmd.args(["gcp", file.to_str().unwrap(), "--rank", "2", "--loss", loss])
        .args(args)
        .args(["--backend", "cpu", "--threads", "2", "--json"]);
    let o = output_within(cmd, 120);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    serde_json::from_slice(&o.stdout).unwrap()
}

#[test]
fn gcp_sgd_moves_values_far_from_one_and_reports_them_in_their_units() {
    let dir = tempfile::tempdir().unwrap();
    let unit = gcp_json(dir.path(), &counts(dir.path(), false), "gaussian");
    assert_eq!(unit["value_scale"], 1.0);
    // Values times 1e30 and 1e-30: without the run's power of two, Adam's steps left
    // the first far below the factors' entries and the second's gradients below ε,
    // and neither estimate moved.
    for times in [1e30, 1e-30] {
        let j = gcp_json(dir.path(), &scaled(dir.path(), times), "gaussian");
        let (f, f0) = (
            j["final_loss"].as_f64().unwrap(),
            j["initial_loss"].as_f64().unwrap(),
        );
        let c = j["value_scale"].as_f64().unwrap();
        assert!(
            c != 1.0 && c.log2().fract() == 0.0,
            "{times:e}: value_scale {c}"
        );
        assert!(f < 0.99 * f0, "{times:e}: {f} from {f0}");
        // The losses are the given values': about `times²` the unit run's.
        let ratio = f / unit["final_loss"].as_f64().unwrap() / (times * times);
        assert!((0.5..2.0).contains(&ratio), "{times:e}: ratio {ratio}");
    }
}

#[test]
fn gcp_lbfgs_runs_values_far_from_one_as_it_runs_unit_values() {
    let dir = tempfile::tempdir().unwrap();
    let lbfgs = ["--method", "lbfgs", "--max-iters", "60"];
    let run = |file: &Path| gcp_json_with(dir.path(), file, "gamma", &lbfgs);
    let unit = run(&counts(dir.path(), false));
    let iterations = |j: &serde_json::Value| j["iterations"].as_array().unwrap().len();
    let drop = |j: &serde_json::Value| {
        j["initial_loss"].as_f64().unwrap() - j["final_loss"].as_f64().unwrap()
    };
    assert_eq!(unit["value_scale"], 1.0);
    assert!(iterations(&unit) > 5 && drop(&unit) > 0.0, "{unit}");
    // At 1e30 the Gamma loss carries every cell's log 1e30, beside which scipy's
    // relative-decrease test stopped the run in the given units after one iteration.
    // Divided by a power of two, the run is the unit one up to the remaining factor
    // (within 2^1.5) and ε: the loss falls by about as much.
    for times in [1e30, 1e-30] {
        let j = run(&scaled(dir.path(), times));
        let c = j["value_scale"].as_f64().unwrap();
        assert!(
            c != 1.0 && c.log2().fract() == 0.0,
            "{times:e}: value_scale {c}"
        );
        assert!(
            iterations(&j) > 5,
            "{times:e}: {} iterations",
            iterations(&j)
        );
        if times > 1.0 {
            let ratio = drop(&j) / drop(&unit);
            assert!((0.5..2.0).contains(&ratio), "{times:e}: drop ratio {ratio}");
        }
    }
}

/// `sptmc gcp FILE` with `args` on a count tensor of 1500 nonzeros with every value
/// multiplied by `times`: its stderr and its stdout.
fn run_many(dir: &Path, times: f64, args: &[&str]) -> (String, String) {
    let mut text = String::new();
    for (i, j, k) in
        (1..=20).flat_map(|i| (1..=15).flat_map(move |j| (1..=10).map(move |k| (i, j, k))))
    {
        if (i + j + k) % 2 == 0 {
            text += &format!("{i} {j} {k} {}\n", (1 + (i * j + k) % 4) as f64 * times);
        }
    }
    let p = dir.join(format!("many-{times}.tns"));
    std::fs::write(&p, text).unwrap();
    let mut cmd = sptmc_command(dir);
    cmd.args(["gcp", p.to_str().unwrap(), "--rank", "2"])
        .args(["--backend", "cpu", "--threads", "2"])
        .args(args);
    let o = output_within(cmd, 120);
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(o.status.success(), "{err}");
    (err, String::from_utf8_lossy(&o.stdout).into_owned())
}

/// A run of few epochs samples every nonzero in each gradient under GenTen's default
/// (3·nnz/epochs): the command says so, and not where the sample is given. A run whose
/// loss does not move over its epochs (counts of 1e30 under the negative binomial
/// loss, which runs on them as given) warns of it, in `--json` too; a run that moves
/// does not.
#[test]
fn whole_gradient_samples_and_a_loss_that_does_not_move_are_said() {
    let dir = tempfile::tempdir().unwrap();
    let short = [
        "--loss",
        "poisson-log",
        "--epochs",
        "2",
        "--epoch-iters",
        "5",
    ];
    let (err, _) = run_many(dir.path(), 1.0, &short);
    assert!(
        err.contains("each iteration's gradient samples all 1500 nonzeros"),
        "{err}"
    );
    assert!(!err.contains("warning"), "{err}");
    let mut json = short.to_vec();
    json.push("--json");
    let (_, out) = run_many(dir.path(), 1.0, &json);
    let json: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(json["options"]["grad_nonzeros"], 1500);
    assert_eq!(json["warnings"], serde_json::json!([]));
    let mut given = short.to_vec();
    given.extend(["--grad-nonzeros", "300"]);
    let (err, _) = run_many(dir.path(), 1.0, &given);
    assert!(!err.contains("gradient samples all"), "{err}");
    let stalls = [
        "--json",
        "--loss",
        "negative-binomial",
        "--loss-param",
        "5",
        "--epochs",
        "3",
        "--epoch-iters",
        "10",
    ];
    let (err, out) = run_many(dir.path(), 1e30, &stalls);
    assert!(err.contains("sptmc: warning: GCP's loss moved by"), "{err}");
    let json: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(json["warnings"].as_array().unwrap().len(), 1, "{json}");
}

/// SGD's epoch lines and closing line say what their numbers are: an epoch whose loss
/// estimate is not finite is said in words (no NaN printed; `--json` has null and the
/// reason), the final loss is the exact one where it is known, and otherwise the
/// estimate, labelled with its sample (`final_loss` null, with a note).
#[test]
fn sgd_labels_its_estimates_and_prints_no_nan() {
    let dir = tempfile::tempdir().unwrap();
    let steep = ["--loss", "poisson-log", "--epochs", "2", "--rate", "100"];
    let (err, out) = run_many(dir.path(), 1.0, &steep);
    assert!(!err.contains("NaN") && !out.contains("NaN"), "{err}{out}");
    assert!(
        err.contains("epoch undone: loss estimate not finite; step 1.000e2 reduced to 1.000e1"),
        "{err}"
    );
    assert!(
        err.contains("estimated over a fixed sample of 3000 entries"),
        "{err}"
    );
    assert!(out.contains("(exact, over all 3000 cells"), "{out}");
    let mut json = steep.to_vec();
    json.push("--json");
    let (_, out) = run_many(dir.path(), 1.0, &json);
    assert!(!out.contains("NaN"), "{out}");
    let j: serde_json::Value = serde_json::from_str(&out).unwrap();
    let first = &j["iterations"][0];
    assert!(first["loss"].is_null(), "{first}");
    assert_eq!(first["undone"], "not-finite", "{first}");
    assert!(
        j["final_loss"].is_f64() && j["final_loss_estimate"].is_f64(),
        "{j}"
    );
    // Rayleigh's zeros have no closed form: beyond --dense-limit, only the estimate.
    let few = [
        "--loss",
        "rayleigh",
        "--epochs",
        "2",
        "--epoch-iters",
        "5",
        "--dense-limit",
        "100",
    ];
    let (_, out) = run_many(dir.path(), 1.0, &few);
    assert!(
        out.contains("final loss estimated over 3000 sampled entries (1500 nonzeros, 1500 zeros)"),
        "{out}"
    );
    let mut json = few.to_vec();
    json.push("--json");
    let (_, out) = run_many(dir.path(), 1.0, &json);
    let j: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert!(
        j["final_loss"].is_null() && j["initial_loss"].is_null(),
        "{j}"
    );
    assert!(j["final_loss_estimate"].is_f64(), "{j}");
    assert_eq!(j["loss_estimate_sample"]["nonzeros"], 1500, "{j}");
    let note = j["final_loss_note"].as_str().unwrap();
    assert!(
        note.contains("rayleigh") && note.contains("dense_limit"),
        "{note}"
    );
}
