//! Tuning profiles as the engine sees them: a profile written for the running device is
//! found by its file name and used; malformed files are named with the reason.

use sptmc::Op;
use sptmc::engine::profile::{Profile, Profiles, ThresholdEntry, profile_path, render};
use sptmc::engine::{BackendKind, Engine, Workload};
use sptmc::hls::ValueType;
use sptmc::tools::tune::crossover::{CrossingKind, Crossover};
use sptmc::tools::tune::{OpRankTuning, TuneOptions, TuneReport};
use std::path::Path;

fn report_for(engine: &Engine, thresholds: &[(Op, usize, u32)]) -> TuneReport {
    TuneReport {
        backend: engine.kind(),
        device_id: engine.backend().device_id(),
        description: engine.backend().describe(),
        version: "test".into(),
        date: "2026-11-22".into(),
        options: TuneOptions::quick(),
        values: sptmc::hls::ValueType::F16,
        results: thresholds
            .iter()
            .map(|&(op, rank, t)| OpRankTuning {
                op,
                rank,
                rows: vec![],
                crossover: Crossover {
                    threshold: t,
                    kind: CrossingKind::Interpolated,
                    regret: 0.0,
                },
                verify: vec![],
                near_tensor: None,
            })
            .collect(),
        sweep_tensors: vec![],
        verify_tensor: None,
        duration_s: 0.0,
    }
}

#[test]
fn engine_uses_the_profile_tuned_for_its_device() {
    let dir = tempfile::tempdir().unwrap();
    let probe = Engine::cpu();
    let report = report_for(
        &probe,
        &[
            (Op::Mttkrp, 16, 37),
            (Op::Mttkrp, 32, 45),
            (Op::Ttmc, 8, 4097),
        ],
    );
    let path = report.save_profile(dir.path()).unwrap();
    assert_eq!(path, profile_path(dir.path(), &probe.backend().device_id()));
    assert!(
        path.file_name()
            .unwrap()
            .to_str()
            .unwrap()
            .starts_with("cpu-")
    );

    let mut profiles = Profiles::builtin();
    assert!(profiles.add_dir(dir.path()).is_empty());
    let engine = Engine::cpu().with_profiles(profiles);
    let name = path.display().to_string();

    let c = engine.threshold(Workload {
        op: Op::Mttkrp,
        rank: 16,
    });
    assert_eq!(c.threshold, 37);
    assert!(c.source.contains(&name), "{}", c.source);
    // Nearest tuned rank: 30 → 32.
    assert_eq!(
        engine
            .threshold(Workload {
                op: Op::Mttkrp,
                rank: 30
            })
            .threshold,
        45
    );
    // "Never dense" is a threshold like any other.
    let c = engine.threshold(Workload {
        op: Op::Ttmc,
        rank: 16,
    });
    assert_eq!(c.threshold, 4097);
    assert!(c.source.contains(&name), "{}", c.source);

    // And prepare uses it: at 4097 no tile is dense.
    let x = sptmc::tensor::generate::generate(&sptmc::tensor::generate::GenSpec {
        dims: vec![128, 128, 128],
        nnz: 4000,
        pattern: sptmc::tensor::generate::Pattern::BlockDense {
            tile_nnz: 1000,
            dense_share: 0.5,
        },
        seed: 5,
    })
    .unwrap();
    let p = engine
        .prepare(
            &x,
            &[
                Workload {
                    op: Op::Mttkrp,
                    rank: 16,
                },
                Workload {
                    op: Op::Ttmc,
                    rank: 8,
                },
            ],
        )
        .unwrap();
    assert_eq!(p.hls(Op::Mttkrp).unwrap().threshold(), 37);
    assert_eq!(p.hls(Op::Mttkrp).unwrap().stats().dense_tiles, 2);
    assert_eq!(p.hls(Op::Ttmc).unwrap().stats().dense_tiles, 0);
}

#[test]
fn another_devices_profile_is_not_used() {
    let dir = tempfile::tempdir().unwrap();
    let other = Profile {
        backend: BackendKind::Cpu,
        device: "cpu:some other model:64t".into(),
        description: String::new(),
        tuned: String::new(),
        threshold: vec![ThresholdEntry {
            op: Op::Mttkrp,
            rank: 16,
            value: 3,
            values: ValueType::F16,
        }],
    };
    let path = profile_path(dir.path(), &other.device);
    std::fs::write(&path, render(&[other])).unwrap();
    let mut profiles = Profiles::builtin();
    assert!(profiles.add_dir(dir.path()).is_empty());
    let engine = Engine::cpu().with_profiles(profiles);
    let c = engine.threshold(Workload {
        op: Op::Mttkrp,
        rank: 16,
    });
    assert_ne!(c.threshold, 3);
    // This machine's own compiled-in profile or the default, never the other device's.
    assert!(c.source.starts_with("built-in tuning/"), "{}", c.source);
}

#[test]
fn no_profile_for_the_backend_falls_back_to_the_paper_values() {
    let engine = Engine::cpu().with_profiles(Profiles::default());
    let c = engine.threshold(Workload {
        op: Op::Mttkrp,
        rank: 16,
    });
    assert_eq!(c.threshold, 78);
    assert!(c.source.contains("paper"), "{}", c.source);
    assert_eq!(
        engine
            .threshold(Workload {
                op: Op::Ttmc,
                rank: 8
            })
            .threshold,
        61
    );
}

#[test]
fn malformed_profile_files_are_named_with_the_reason() {
    let cases = [
        ("syntax.toml", "[[profile]\nbackend = \"cpu\"\n", "syntax"),
        (
            "no-device.toml",
            "[[profile]]\nbackend = \"cpu\"\n",
            "device",
        ),
        (
            "bad-op.toml",
            "[[profile]]\nbackend = \"cpu\"\ndevice = \"x\"\n[[profile.threshold]]\nop = \"spmv\"\nrank = 8\nvalue = 3\n",
            "spmv",
        ),
        (
            "zero-value.toml",
            "[[profile]]\nbackend = \"cpu\"\ndevice = \"x\"\n[[profile.threshold]]\nop = \"ttmc\"\nrank = 8\nvalue = 0\n",
            "is 0",
        ),
        (
            "negative.toml",
            "[[profile]]\nbackend = \"cpu\"\ndevice = \"x\"\n[[profile.threshold]]\nop = \"ttmc\"\nrank = 8\nvalue = -5\n",
            "value",
        ),
    ];
    for (name, text, reason) in cases {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(name), text).unwrap();
        let mut profiles = Profiles::builtin();
        let mut errors = profiles.add_dir(dir.path());
        assert_eq!(errors.len(), 1, "{name}");
        let e = errors.pop().unwrap();
        let msg = e.to_string();
        assert!(matches!(e, sptmc::Error::Profile { .. }), "{name}: {e:?}");
        assert!(msg.contains(name), "{name}: {msg}");
        assert!(msg.contains(reason), "{name}: {msg}");
        // Nothing of the bad file was added.
        assert_eq!(
            profiles.entries().len(),
            Profiles::builtin().entries().len()
        );
    }
}

#[test]
fn unreadable_profile_folder_is_an_io_error_naming_it() {
    let e = Profiles::builtin()
        .add_dir(Path::new("/nonexistent/sptmc-tuning"))
        .pop()
        .expect("one error");
    assert!(matches!(e, sptmc::Error::Io { .. }), "{e:?}");
    assert!(e.to_string().contains("/nonexistent/sptmc-tuning"), "{e}");
}

#[test]
fn an_f32_tuning_run_keeps_the_fp16_thresholds_and_each_type_finds_its_own() {
    let dir = tempfile::tempdir().unwrap();
    let probe = Engine::cpu();
    let f16 = report_for(&probe, &[(Op::Mttkrp, 16, 37), (Op::Ttmc, 8, 50)]);
    let mut f32 = report_for(&probe, &[(Op::Mttkrp, 16, 80)]);
    f32.values = ValueType::F32;
    f16.save_profile(dir.path()).unwrap();
    let path = f32.save_profile(dir.path()).unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.contains("with f16 and f32 values"), "{text}");

    let mut profiles = Profiles::builtin();
    assert!(profiles.add_dir(dir.path()).is_empty());
    let engine = Engine::cpu().with_profiles(profiles);
    let w = |op, rank| Workload { op, rank };
    assert_eq!(engine.threshold(w(Op::Mttkrp, 16)).threshold, 37);
    assert_eq!(
        engine
            .threshold_for(w(Op::Mttkrp, 16), ValueType::F32)
            .threshold,
        80
    );
    // No f32 entry for TTMc: the fp16 one, and the source says so.
    let c = engine.threshold_for(w(Op::Ttmc, 8), ValueType::F32);
    assert_eq!(c.threshold, 50);
    assert!(c.source.contains("tuned with f16 values"), "{}", c.source);

    // A new fp16 run replaces the fp16 entries only, and the text of the run it replaced.
    let mut again = report_for(&probe, &[(Op::Mttkrp, 16, 41)]);
    again.date = "2026-11-25".into();
    again.save_profile(dir.path()).unwrap();
    let back =
        sptmc::engine::profile::parse(&std::fs::read_to_string(&path).unwrap(), &path).unwrap();
    let tuned = &back[0].tuned;
    assert_eq!(tuned.matches("thresholds kept").count(), 1, "{tuned}");
    assert!(tuned.starts_with("2026-11-25"), "{tuned}");
    assert_eq!(
        tuned.matches("2026-11-22").count(),
        1,
        "the f32 run's: {tuned}"
    );
    let mut entries: Vec<(ValueType, Op, u32)> = back[0]
        .threshold
        .iter()
        .map(|e| (e.values, e.op, e.value))
        .collect();
    entries.sort_by_key(|e| (e.0 == ValueType::F32, e.2));
    assert_eq!(
        entries,
        vec![
            (ValueType::F16, Op::Mttkrp, 41),
            (ValueType::F32, Op::Mttkrp, 80)
        ]
    );
}

#[test]
fn a_profile_file_that_does_not_parse_is_not_overwritten() {
    let dir = tempfile::tempdir().unwrap();
    let probe = Engine::cpu();
    let path = profile_path(dir.path(), &probe.backend().device_id());
    std::fs::write(&path, "[[profile]]\nbackend = 3\n").unwrap();
    let err = report_for(&probe, &[(Op::Mttkrp, 16, 37)])
        .save_profile(dir.path())
        .unwrap_err()
        .to_string();
    assert!(err.contains(&path.display().to_string()), "{err}");
    assert_eq!(
        std::fs::read_to_string(&path).unwrap(),
        "[[profile]]\nbackend = 3\n"
    );
}
