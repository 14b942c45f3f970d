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
