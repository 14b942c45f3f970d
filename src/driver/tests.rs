//! The driver's path: a kept form is reused (its preparation not planned again),
//! the front end hears of the preparation before the first step, and a step's Break
//! stops the fit there.

use super::*;
use crate::engine::Prepared;
use crate::ops::Op;
use crate::tensor::generate::{GenSpec, Pattern, generate};
use std::sync::{Arc, Mutex};

/// Keeps forms in a list, counting what it was asked.
#[derive(Default)]
struct Kept {
    forms: Mutex<Vec<(Op, u32, Arc<Prepared>)>>,
}

impl Forms for Kept {
    fn find(&self, _: &Engine, op: Op, threshold: u32) -> Option<Arc<Prepared>> {
        let forms = self.forms.lock().unwrap();
        let found = forms.iter().find(|f| f.0 == op && f.1 == threshold);
        found.map(|f| f.2.clone())
    }

    fn keep(&self, _: &Engine, op: Op, threshold: u32, prepared: &Arc<Prepared>) {
        self.forms
            .lock()
            .unwrap()
            .push((op, threshold, prepared.clone()));
    }
}

/// Records what it heard; breaks after `stop_after` steps.
struct Heard {
    built: Vec<bool>,
    steps: usize,
    stop_after: usize,
}

impl Events<crate::decomp::IterStats> for Heard {
    fn prepared(&mut self, p: &Preparation) {
        assert_eq!(
            self.steps, 0,
            "the preparation is told before the first step"
        );
        assert!(!p.thresholds().is_empty());
        assert!(p.stats().is_ok());
        self.built.push(p.built);
    }

    fn step(&mut self, _: &crate::decomp::IterStats) -> ControlFlow<()> {
        self.steps += 1;
        if self.steps >= self.stop_after {
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(())
        }
    }
}

#[test]
fn a_kept_form_is_reused_and_a_break_stops_the_fit() {
    let x = generate(&GenSpec {
        dims: vec![30, 20, 10],
        nnz: 800,
        pattern: Pattern::Uniform,
        seed: 3,
    })
    .unwrap();
    let engine = Engine::cpu();
    let kept = Kept::default();
    let request = CpRequest {
        rank: 3,
        iters: 10,
        tol: 0.0,
        seed: 1,
        init: None,
    };
    let job = request.validate(&x).unwrap();
    let mut heard = Heard {
        built: vec![],
        steps: 0,
        stop_after: 2,
    };
    let first = run(&job, &engine, &x, &kept, &mut heard).unwrap();
    assert_eq!(first.model.iters.len(), 2, "stopped by the step's Break");
    assert_eq!(kept.forms.lock().unwrap().len(), 1);
    heard.steps = 0;
    heard.stop_after = usize::MAX;
    let second = run(&job, &engine, &x, &kept, &mut heard).unwrap();
    assert_eq!(
        heard.built,
        [true, false],
        "the second run reuses the kept form"
    );
    assert_eq!(kept.forms.lock().unwrap().len(), 1);
    assert_eq!(second.model.iters.len(), 10);
    // The report's summary carries what --json prints.
    let v = second.summary("x", x.dims(), x.nnz());
    assert_eq!(v["kind"], "cp");
    assert_eq!(v["rank"], 3);
    assert_eq!(v["iterations"].as_array().unwrap().len(), 10);
    assert_eq!(v["backend"], second.backend.as_str());
}

#[test]
fn prepare_hands_new_forms_to_be_kept_and_reuses_them() {
    let x = generate(&GenSpec {
        dims: vec![30, 20, 10],
        nnz: 800,
        pattern: Pattern::Uniform,
        seed: 3,
    })
    .unwrap();
    let engine = Engine::cpu();
    let kept = Kept::default();
    let w = crate::engine::Workload {
        op: Op::Mttkrp,
        rank: 4,
    };
    let empty = || MemoryPlan::new("nothing else", "none");
    let p = prepare(&engine, &x, w, empty(), &kept).unwrap();
    assert!(p.built);
    let again = prepare(&engine, &x, w, empty(), &kept).unwrap();
    assert!(!again.built);
    assert!(Arc::ptr_eq(&p.prepared, &again.prepared));
    // Without a kept form, NoForms builds every time.
    assert!(prepare(&engine, &x, w, empty(), &NoForms).unwrap().built);
}

/// CP-APR's tolerances are absolute: on counts times 1e-9 the run stopped after 2
/// iterations, its KKT test met before the model moved. Values far below 1 now run
/// multiplied by a power of two: on `x · 2^-40` the run is the run on `x` (values of
/// an RMS within √2 of 1, which run as given), `λ` times `2^-40`, to the bit.
#[test]
fn cp_apr_on_values_far_below_one_is_the_run_on_them_in_other_units() {
    let mut x = generate(&GenSpec {
        dims: vec![40, 30, 20],
        nnz: 3000,
        pattern: Pattern::Uniform,
        seed: 5,
    })
    .unwrap();
    x.map_values(|v| (v * 7.0).round() + 1.0);
    let e = crate::decomp::rms_about(x.values(), 0.0).log2().round() as i32;
    x.map_values(|v| v * 2f64.powi(-e));
    let request = CpAprRequest {
        rank: 3,
        iters: 25,
        seed: 2,
        ..CpAprRequest::defaults()
    };
    let engine = Engine::cpu();
    let fit = |x: &CooTensor| {
        let job = request.clone().validate(x).unwrap();
        let r = run(
            &job,
            &engine,
            x,
            &NoForms,
            &mut |_: &crate::decomp::CpAprIter| ControlFlow::Continue(()),
        )
        .unwrap();
        let v = r.summary(&job, "x", x.dims(), x.nnz());
        (r.model, v["values_scaled_by_2_to_the"].clone())
    };
    let (unit, none) = fit(&x);
    assert_eq!(none, serde_json::Value::Null, "values near 1 run as given");
    assert_eq!(unit.iters.len(), 25, "the unit run does not stop early");
    let sum: f64 = x.values().iter().sum();
    for k in [40, 300] {
        let mut small = x.clone();
        small.map_values(|v| v * 2f64.powi(-k));
        let (got, power) = fit(&small);
        assert_eq!(power, serde_json::json!(k));
        assert_eq!(got.iters.len(), unit.iters.len(), "2^-{k}: iterations");
        assert_eq!(got.factors, unit.factors, "2^-{k}: factors");
        let want: Vec<f64> = unit.weights.iter().map(|w| w * 2f64.powi(-k)).collect();
        assert_eq!(got.weights, want, "2^-{k}: weights");
        // Σ x log m − Σ m in the given units: 2^-k (ll − k ln2 Σx).
        let ll =
            2f64.powi(-k) * (unit.log_likelihood - f64::from(k) * std::f64::consts::LN_2 * sum);
        assert!(
            (got.log_likelihood - ll).abs() <= 1e-12 * ll.abs(),
            "2^-{k}: {} vs {ll}",
            got.log_likelihood
        );
        assert!(got.warnings.iter().any(|w| w.contains(&format!("2^{k}"))));
    }
    // The checks read the given values: a negative one is named as given.
    let mut bad = x.clone();
    bad.map_values(|v| -v * 1e-20);
    let err = request.clone().validate(&bad).unwrap_err().to_string();
    let first = format!("(the first: {})", bad.values()[0]);
    assert!(err.contains("negative") && err.contains(&first), "{err}");
}

#[test]
fn sig5_keeps_five_significant_digits_at_any_scale() {
    for (x, want) in [
        (0.920412, "0.92041"),
        (1.127329, "1.1273"),
        (12.5, "12.500"),
        (99999.4, "99999"),
        (0.001, "0.0010000"),
        (9.2040651e7, "9.2041e7"),
        (9.204e-9, "9.2040e-9"),
        (-0.5, "-0.50000"),
        (0.0, "0"),
    ] {
        assert_eq!(super::sig5(x), want, "{x}");
    }
}

/// CP-ALS and Tucker-HOOI on values far from 1 run on them times a power of two
/// (`value_scale`): the same run as on values near 1, the model's weights or core
/// divided back exactly, the fits the same. Without it a tensor of values near 1e-38
/// collapsed to the zero model and one past 3.4e38 could not be stored.
#[test]
fn cp_and_tucker_run_alike_at_any_scale_of_the_values() {
    let mut x = generate(&GenSpec {
        dims: vec![30, 20, 10],
        nnz: 900,
        pattern: Pattern::Uniform,
        seed: 7,
    })
    .unwrap();
    // The largest magnitude in [1, 2): the values run as given.
    let max = x.values().iter().fold(0.0f64, |m, v| m.max(v.abs()));
    let e = max.log2().floor() as i32;
    x.map_values(|v| v * 2f64.powi(-e));
    let engine = Engine::cpu();
    let go = |_: &crate::decomp::IterStats| ControlFlow::Continue(());
    let cp = |x: &CooTensor| {
        let request = CpRequest {
            rank: 4,
            iters: 8,
            tol: 0.0,
            seed: 3,
            init: None,
        };
        let job = request.validate(x).unwrap();
        let power = job.scaled.as_ref().map(|s| s.power);
        (
            run(&job, &engine, x, &NoForms, &mut { go }).unwrap().model,
            power,
        )
    };
    let tucker = |x: &CooTensor| {
        let request = TuckerRequest {
            ranks: vec![3, 3, 2],
            iters: 5,
            tol: 0.0,
            seed: 3,
            init: None,
        };
        let job = request.validate(x).unwrap();
        (
            run(&job, &engine, x, &NoForms, &mut { go }).unwrap().model,
            job.scaled.map(|s| s.power),
        )
    };
    let (cp_unit, none) = cp(&x);
    assert_eq!(none, None, "values near 1 run as given");
    let (tk_unit, none) = tucker(&x);
    assert_eq!(none, None);
    for k in [-140, -1000, 60, 200, 1000] {
        let mut y = x.clone();
        y.map_values(|v| crate::decomp::cp_apr::units::times_pow2(v, k));
        let (got, power) = cp(&y);
        assert_eq!(power, Some(-k), "2^{k}");
        assert_eq!(got.fits, cp_unit.fits, "2^{k}: CP fits");
        assert_eq!(got.factors, cp_unit.factors, "2^{k}: CP factors");
        let want: Vec<f64> = (cp_unit.weights.iter())
            .map(|&w| crate::decomp::cp_apr::units::times_pow2(w, k))
            .collect();
        assert_eq!(got.weights, want, "2^{k}: CP weights");
        let (got, power) = tucker(&y);
        assert_eq!(power, Some(-k), "2^{k}");
        assert_eq!(got.fits, tk_unit.fits, "2^{k}: Tucker fits");
        assert_eq!(got.factors, tk_unit.factors, "2^{k}: Tucker factors");
        let want: Vec<f64> = (tk_unit.core.iter())
            .map(|&g| crate::decomp::cp_apr::units::times_pow2(g, k))
            .collect();
        assert_eq!(got.core, want, "2^{k}: Tucker core");
    }
}
