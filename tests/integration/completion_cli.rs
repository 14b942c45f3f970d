//! `sptmc complete` and `sptmc predict` end to end: the JSON's top-level RMSEs, a model
//! folder read back by `predict`, train/test files, and bad input (one clear error
//! line, never NaN or a panic).

use crate::common;

use std::path::Path;
use std::process::Output;

fn sptmc(args: &[&str], cache: &Path) -> Output {
    let mut c = common::sptmc_command(cache);
    c.args(args).arg("--backend").arg("cpu");
    common::output_within(c, 300)
}

fn sptmc_predict(args: &[&str], cache: &Path) -> Output {
    let mut c = common::sptmc_command(cache);
    c.args(args);
    common::output_within(c, 120)
}

fn json(o: &Output) -> serde_json::Value {
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    serde_json::from_slice(&o.stdout).unwrap()
}

#[test]
fn complete_reports_every_rmse_and_predict_reads_the_model_back() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let f = common::small_tns(dir);
    let f = f.to_str().unwrap();
    let model = dir.join("model");
    let entries = std::fs::read_to_string(f)
        .unwrap()
        .lines()
        .filter(|l| !l.starts_with('#'))
        .count() as u64;
    for solver in ["als", "ccd", "sgd"] {
        let args = [
            "complete",
            f,
            "--rank",
            "4",
            "--solver",
            solver,
            "--split",
            "0.8,0.1,0.1",
            "--seed",
            "3",
            "--epochs",
            "5",
            "--json",
            "--out",
            model.to_str().unwrap(),
        ];
        let v = json(&sptmc(&args, dir));
        for key in [
            "train_rmse",
            "validation_rmse",
            "test_rmse",
            "baseline_test_rmse",
            "mean_baseline_test_rmse",
        ] {
            let r = v[key]
                .as_f64()
                .unwrap_or_else(|| panic!("{solver}: {key} in {v}"));
            assert!(r.is_finite() && r >= 0.0, "{solver}: {key} = {r}");
        }
        assert_eq!(v["solver"], solver);
        assert_eq!(
            v["train_nnz"].as_u64().unwrap()
                + v["validation_nnz"].as_u64().unwrap()
                + v["test_nnz"].as_u64().unwrap(),
            entries
        );
        // The same split and seed give the same result.
        let again = json(&sptmc(&args, dir));
        assert_eq!(
            again["test_rmse"], v["test_rmse"],
            "{solver}: not deterministic"
        );
    }
    // Predict a few coordinates with their values: the RMSE is that of the model.
    let text = std::fs::read_to_string(f).unwrap();
    let coords: Vec<&str> = text
        .lines()
        .filter(|l| !l.starts_with('#'))
        .take(20)
        .collect();
    let cfile = dir.join("coords.tns");
    std::fs::write(&cfile, coords.join("\n")).unwrap();
    let out = dir.join("pred.tns");
    let p = sptmc_predict(
        &[
            "predict",
            model.to_str().unwrap(),
            cfile.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
            "--json",
        ],
        dir,
    );
    let v = json(&p);
    assert_eq!(v["predictions"], 20);
    assert!(v["rmse"].as_f64().unwrap().is_finite());
    let written = std::fs::read_to_string(&out).unwrap();
    assert_eq!(written.lines().count(), 20);
    for (w, c) in written.lines().zip(&coords) {
        let wf: Vec<&str> = w.split_whitespace().collect();
        let cf: Vec<&str> = c.split_whitespace().collect();
        assert_eq!(wf[..3], cf[..3], "indices kept");
        assert!(wf[3].parse::<f64>().unwrap().is_finite());
    }
    // Indices only, to stdout.
    let bare: Vec<String> = coords
        .iter()
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .collect();
    std::fs::write(&cfile, bare.join("\n")).unwrap();
    let p = sptmc_predict(
        &["predict", model.to_str().unwrap(), cfile.to_str().unwrap()],
        dir,
    );
    assert!(p.status.success(), "{}", String::from_utf8_lossy(&p.stderr));
    assert_eq!(String::from_utf8_lossy(&p.stdout).lines().count(), 20);
    // An index beyond the model names the line.
    std::fs::write(&cfile, "1 1 1\n99999 1 1\n").unwrap();
    let p = sptmc_predict(
        &["predict", model.to_str().unwrap(), cfile.to_str().unwrap()],
        dir,
    );
    common::assert_one_error_line(&p, &["coords.tns:2", "99999", "mode 0"]);
}

#[test]
fn train_and_test_files_with_a_held_out_validation() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let f = common::small_tns(dir);
    let text = std::fs::read_to_string(&f).unwrap();
    let lines: Vec<&str> = text.lines().filter(|l| !l.starts_with('#')).collect();
    let (train, test) = lines.split_at(lines.len() * 9 / 10);
    let (trf, tef) = (dir.join("train.tns"), dir.join("test.tns"));
    std::fs::write(&trf, train.join("\n")).unwrap();
    std::fs::write(&tef, test.join("\n")).unwrap();
    let v = json(&sptmc(
        &[
            "complete",
            "--train",
            trf.to_str().unwrap(),
            "--test",
            tef.to_str().unwrap(),
            "--rank",
            "4",
            "--epochs",
            "5",
            "--json",
        ],
        dir,
    ));
    assert_eq!(v["test_nnz"].as_u64().unwrap() as usize, test.len());
    assert!(v["test_rmse"].as_f64().unwrap().is_finite());
    assert!(v["data"].as_str().unwrap().contains("1/9"), "{v}");
}

#[test]
fn bad_completion_options_get_one_clear_error() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let f = common::small_tns(dir);
    let f = f.to_str().unwrap();
    for (extra, words) in [
        (vec!["--lambda", "-1"], vec!["λ", "≥ 0"]),
        (
            vec!["--solver", "sgd", "--learning-rate", "0"],
            vec!["learning rate", "> 0"],
        ),
        (
            vec!["--split", "0.9,0,0.1"],
            vec!["validation set is empty"],
        ),
        (vec!["--split", "0.9,0.2,0.1"], vec!["add up to 1"]),
        (vec!["--split", "0.5,0.5"], vec!["three fractions"]),
        (vec!["--rank", "0"], vec!["rank"]),
    ] {
        let mut args = vec!["complete", f, "--epochs", "2"];
        args.extend(&extra);
        let o = sptmc(&args, dir);
        common::assert_one_error_line(&o, &words);
        assert!(!String::from_utf8_lossy(&o.stderr).contains("NaN"));
    }
}

/// Values whose squares the f32 normal equations cannot sum run times a power of two,
/// with RMSEs to scale; values the model's f32 factors cannot hold are one error line
/// saying what to do (not an infinity epochs in); values a thousand billion times
/// larger than usual run as given.
#[test]
fn values_far_from_one_run_scaled_and_values_past_f32_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (x, _) = sptmc::tensor::tns::read(&common::small_tns(dir)).unwrap();
    let scaled = |s: f64, name: &str| {
        let idx = (0..x.order()).map(|m| x.indices(m).to_vec()).collect();
        let v = x.values().iter().map(|v| v * s).collect();
        let y = sptmc::CooTensor::new(x.dims().to_vec(), idx, v).unwrap();
        let p = dir.join(name);
        sptmc::tensor::tns::write(&p, &y).unwrap();
        p
    };
    let run = |p: &Path| {
        let f = p.to_str().unwrap();
        sptmc(
            &["complete", f, "--rank", "3", "--epochs", "3", "--json"],
            dir,
        )
    };
    // Far from 1 the run multiplies the values by a power of two: times 2^99 and times
    // 2^102 run on the same values (the power differs by 3 = N), so the second's RMSEs
    // are the first's times 8, exactly.
    let a = json(&run(&scaled(2f64.powi(99), "huge.tns")));
    let b = json(&run(&scaled(2f64.powi(102), "huger.tns")));
    let power = |v: &serde_json::Value| v["values_scaled_by_2_to_the"].as_i64().unwrap();
    assert_eq!(power(&a) - power(&b), 3, "{a}\n{b}");
    for key in ["test_rmse", "validation_rmse", "train_rmse"] {
        let (x, y) = (a[key].as_f64().unwrap(), b[key].as_f64().unwrap());
        assert!(x.is_finite() && x > 1e25, "{key} {x}");
        assert_eq!(y, 8.0 * x, "{key}");
    }
    // Past what the f32 factors can hold: one line.
    let far = run(&scaled(1e300, "far.tns"));
    common::assert_one_error_line(&far, &["model of order 3", "beyond its f32 factors' range"]);
    let v = json(&run(&scaled(1e12, "large.tns")));
    let rmse = v["test_rmse"].as_f64().unwrap();
    assert!(rmse.is_finite() && rmse > 1e9, "{v}");
}
