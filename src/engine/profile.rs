//! Tuning profiles: per device, per op and rank, the tile threshold `T` at which a
//! 16³ tile costs the same on the dense and the sparse path.
//!
//! A profile file is TOML with one or more `[[profile]]` tables:
//!
//! ```toml
//! [[profile]]
//! backend = "cpu"                       # or "cuda"
//! device = "cpu:AMD EPYC 7B13:2t"       # Backend::device_id(), or "*" for any device
//! description = "..."                   # free text
//! tuned = "2026-11-22"                  # free text: date, commit, command
//!
//! [[profile.threshold]]
//! op = "mttkrp"                         # or "ttmc"
//! rank = 16
//! value = 78
//! ```
//!
//! Matching: the profile whose `backend` and `device` equal the running device's wins;
//! else the `device = "*"` profile of that backend (`tuning/default.toml`). Within a
//! profile, the entry of the op with the nearest rank (ties: the smaller rank).
//!
//! Every `tuning/*.toml` of the source tree is compiled in ([`Profiles::builtin`]), so
//! a binary copied anywhere knows the devices tuned so far; a caller adds folders
//! ([`Profiles::add_dir`]) and gets back the files it could not read.

use super::BackendKind;
use crate::error::{Error, Result};
use crate::hls::ValueType;
use crate::ops::Op;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// The profiles compiled in: every `tuning/*.toml` at build time, `(file name, text)`.
pub const BUILTIN: &[(&str, &str)] = include!(concat!(env!("OUT_DIR"), "/builtin_profiles.rs"));

/// One threshold measurement.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ThresholdEntry {
    /// The op.
    pub op: Op,
    /// The rank it was tuned at.
    pub rank: usize,
    /// The tile threshold.
    pub value: u32,
    /// The type the sweep tensors' values were stored in (dense tiles of f32 values
    /// cost more MMAs than fp16 ones, so the crossover differs); files from before the
    /// field were tuned with fp16 values.
    #[serde(default)]
    pub values: ValueType,
}

/// The thresholds of one device.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Profile {
    /// Which backend.
    pub backend: BackendKind,
    /// [`crate::engine::Backend::device_id`] of the device, or `"*"`.
    pub device: String,
    /// Free text about the device.
    #[serde(default)]
    pub description: String,
    /// Free text: when, at which commit, with which command.
    #[serde(default)]
    pub tuned: String,
    /// The thresholds.
    #[serde(default)]
    pub threshold: Vec<ThresholdEntry>,
}

#[derive(Debug, Serialize, Deserialize)]
struct ProfileFile {
    profile: Vec<Profile>,
}

/// A threshold and where it came from.
#[derive(Debug, Clone, PartialEq)]
pub struct ProfileChoice {
    /// The tile threshold.
    pub threshold: u32,
    /// The file (or "built-in default") and profile it came from.
    pub source: String,
}

/// A set of profiles with the files they came from.
#[derive(Debug, Clone, Default)]
pub struct Profiles {
    entries: Vec<(String, Profile)>,
}

/// Parses profile text; `origin` names it in errors.
pub fn parse(text: &str, origin: &Path) -> Result<Vec<Profile>> {
    let f: ProfileFile = toml::from_str(text).map_err(|e| Error::Profile {
        path: origin.to_path_buf(),
        reason: e.to_string().trim().to_string(),
    })?;
    for p in &f.profile {
        if let Some(e) = p.threshold.iter().find(|e| e.rank == 0 || e.value == 0) {
            return Err(Error::Profile {
                path: origin.to_path_buf(),
                reason: format!(
                    "profile {:?}: {} threshold at rank {} is {}; ranks and thresholds must be ≥ 1",
                    p.device, e.op, e.rank, e.value
                ),
            });
        }
    }
    Ok(f.profile)
}

/// Renders profiles as TOML text.
pub fn render(profiles: &[Profile]) -> String {
    toml::to_string_pretty(&ProfileFile {
        profile: profiles.to_vec(),
    })
    .expect("profiles serialize")
}

impl Profiles {
    /// The compiled-in profiles ([`BUILTIN`]), origins `built-in tuning/<file>`.
    pub fn builtin() -> Self {
        let mut p = Profiles::default();
        for (name, text) in BUILTIN {
            let origin = format!("built-in tuning/{name}");
            for prof in parse(text, Path::new(&origin))
                .expect("the compiled-in profiles parse (checked by a test)")
            {
                p.entries.push((origin.clone(), prof));
            }
        }
        p
    }

    /// Adds every `*.toml` file of `dir`, in name order; later files win over earlier
    /// ones and over the compiled-in profiles. A file that cannot be read or parsed is
    /// skipped and returned with its reason, so one bad file hides no other.
    pub fn add_dir(&mut self, dir: &Path) -> Vec<Error> {
        let rd = match std::fs::read_dir(dir) {
            Ok(rd) => rd,
            Err(e) => return vec![Error::io(dir, e)],
        };
        let mut files: Vec<PathBuf> = rd
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "toml"))
            .collect();
        files.sort();
        files
            .iter()
            .filter_map(|f| self.add_file(f).err())
            .collect()
    }

    /// Adds the profiles of one file.
    pub fn add_file(&mut self, path: &Path) -> Result<()> {
        let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
        for prof in parse(&text, path)? {
            self.entries.push((path.display().to_string(), prof));
        }
        Ok(())
    }

    /// Adds one profile (e.g. just tuned).
    pub fn add(&mut self, origin: impl Into<String>, profile: Profile) {
        self.entries.push((origin.into(), profile));
    }

    /// All profiles with their origins.
    pub fn entries(&self) -> &[(String, Profile)] {
        &self.entries
    }

    /// The threshold for `op` at `rank` on the device `device` of kind `backend`, for
    /// values stored as `values` (an entry tuned with the other type when the profile
    /// has none of this one, and the source says so). [`Op::Completion`] takes
    /// MTTKRP's, so that a tensor prepared for both shares one form (its kernels walk
    /// dense tiles nonzero by nonzero: the threshold only decides how the nonzeros are
    /// stored).
    pub fn threshold(
        &self,
        backend: BackendKind,
        device: &str,
        op: Op,
        rank: usize,
        values: ValueType,
    ) -> ProfileChoice {
        if op == Op::Completion {
            let c = self.threshold(backend, device, Op::Mttkrp, rank, values);
            return ProfileChoice {
                source: format!("{}, as for mttkrp", c.source),
                ..c
            };
        }
        let exact = self
            .entries
            .iter()
            .rev()
            .filter(|(_, p)| p.backend == backend && p.device == device)
            .find_map(|(o, p)| nearest(p, op, rank, values).map(|v| (o, p, v)));
        let fallback = || {
            self.entries
                .iter()
                .rev()
                .filter(|(_, p)| p.backend == backend && p.device == "*")
                .find_map(|(o, p)| nearest(p, op, rank, values).map(|v| (o, p, v)))
        };
        match exact.or_else(fallback) {
            Some((origin, p, (v, tuned_with))) => ProfileChoice {
                threshold: v,
                source: if tuned_with == values {
                    format!("{origin} [{} {}]", p.backend, p.device)
                } else {
                    format!(
                        "{origin} [{} {}; tuned with {tuned_with} values, none with {values}]",
                        p.backend, p.device
                    )
                },
            },
            None => ProfileChoice {
                threshold: match op {
                    Op::Mttkrp | Op::Completion | Op::Phi => 78,
                    Op::Ttmc => 61,
                },
                source: "no profile for this backend: the HLS paper's A100 values".into(),
            },
        }
    }
}

/// A device id as a file name: lower case, every run of other characters than ASCII
/// letters and digits turned into one `-`, no `-` at the ends (`"cpu:AMD EPYC 7B13:2t"`
/// → `"cpu-amd-epyc-7b13-2t"`). Never `"default"`, which names the fallback profile.
pub fn sanitize_device_id(device_id: &str) -> String {
    let mut s = String::with_capacity(device_id.len());
    for c in device_id.chars() {
        if c.is_ascii_alphanumeric() {
            s.push(c.to_ascii_lowercase());
        } else if !s.is_empty() && !s.ends_with('-') {
            s.push('-');
        }
    }
    while s.ends_with('-') {
        s.pop();
    }
    match s.as_str() {
        "" => "device".into(),
        "default" => "device-default".into(),
        _ => s,
    }
}

/// Where the profile of `device_id` lives under `dir`: `dir/<sanitized id>.toml`.
pub fn profile_path(dir: &Path, device_id: &str) -> PathBuf {
    dir.join(format!("{}.toml", sanitize_device_id(device_id)))
}

/// The entry of `op` at the rank nearest `rank` tuned with `values`, else with any
/// type; its threshold and type.
fn nearest(p: &Profile, op: Op, rank: usize, values: ValueType) -> Option<(u32, ValueType)> {
    let best = |only: Option<ValueType>| {
        p.threshold
            .iter()
            .filter(|e| e.op == op && only.is_none_or(|v| e.values == v))
            .min_by_key(|e| (e.rank.abs_diff(rank), e.rank))
            .map(|e| (e.value, e.values))
    };
    best(Some(values)).or_else(|| best(None))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_profile_of_the_tree_is_compiled_in_and_this_machines_files_match() {
        let names: Vec<&str> = BUILTIN.iter().map(|(n, _)| *n).collect();
        assert!(names.contains(&"default.toml"), "{names:?}");
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tuning");
        for (name, text) in BUILTIN {
            assert_eq!(
                std::fs::read_to_string(dir.join(name)).unwrap(),
                *text,
                "{name} changed after the build"
            );
        }
        assert!(Profiles::builtin().entries().len() >= BUILTIN.len());
    }

    #[test]
    fn a_bad_file_in_a_folder_hides_no_other() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a-bad.toml"), "not toml [").unwrap();
        std::fs::write(
            dir.path().join("b-good.toml"),
            "[[profile]]\nbackend = \"cpu\"\ndevice = \"cpu:x\"\n[[profile.threshold]]\nop = \"mttkrp\"\nrank = 8\nvalue = 5\n",
        )
        .unwrap();
        let mut p = Profiles::builtin();
        let errors = p.add_dir(dir.path());
        assert_eq!(errors.len(), 1);
        assert!(
            errors[0].to_string().contains("a-bad.toml"),
            "{}",
            errors[0]
        );
        assert_eq!(
            p.threshold(BackendKind::Cpu, "cpu:x", Op::Mttkrp, 8, ValueType::F16)
                .threshold,
            5
        );
        assert_eq!(p.add_dir(&dir.path().join("missing")).len(), 1);
    }

    #[test]
    fn device_ids_become_file_names() {
        assert_eq!(
            sanitize_device_id("cpu:AMD EPYC 7B13:2t"),
            "cpu-amd-epyc-7b13-2t"
        );
        assert_eq!(
            sanitize_device_id("cuda:NVIDIA H100 80GB HBM3:sm_90"),
            "cuda-nvidia-h100-80gb-hbm3-sm-90"
        );
        assert_eq!(sanitize_device_id("  ::x//y.. "), "x-y");
        assert_eq!(sanitize_device_id("Ärger"), "rger");
        assert_eq!(sanitize_device_id("::"), "device");
        assert_eq!(sanitize_device_id("DEFAULT"), "device-default");
        assert_eq!(
            profile_path(Path::new("t"), "cpu:a"),
            Path::new("t/cpu-a.toml")
        );
    }

    /// Adds the profiles of TOML `text` as if read from the file `name`.
    fn add_text(p: &mut Profiles, name: &str, text: &str) {
        for prof in parse(text, Path::new(name)).unwrap() {
            p.add(name, prof);
        }
    }

    #[test]
    fn thresholds_are_looked_up_for_the_values_type_then_any() {
        let mut p = Profiles::default();
        let text = r#"
[[profile]]
backend = "cuda"
device = "gpu"
[[profile.threshold]]
op = "mttkrp"
rank = 32
value = 140
[[profile.threshold]]
op = "mttkrp"
rank = 32
value = 260
values = "f32"
[[profile.threshold]]
op = "ttmc"
rank = 8
value = 109
"#;
        add_text(&mut p, "g.toml", text);
        let at = |op, v| p.threshold(BackendKind::Cuda, "gpu", op, 32, v);
        assert_eq!(
            at(Op::Mttkrp, ValueType::F16).threshold,
            140,
            "untyped = f16"
        );
        assert_eq!(at(Op::Mttkrp, ValueType::F32).threshold, 260);
        let c = at(Op::Ttmc, ValueType::F32);
        assert_eq!(c.threshold, 109, "no f32 entry: the f16 one");
        assert!(c.source.contains("tuned with f16 values"), "{}", c.source);
        assert!(!at(Op::Mttkrp, ValueType::F32).source.contains("tuned with"));
    }

    #[test]
    fn builtin_default_parses_and_covers_both_backends() {
        let p = Profiles::builtin();
        for b in [BackendKind::Cpu, BackendKind::Cuda] {
            for op in Op::ALL {
                let c = p.threshold(b, "no such device", op, 16, ValueType::F16);
                assert!(c.source.contains("default.toml"), "{b} {op}: {}", c.source);
            }
        }
        // The paper's A100 values for CUDA.
        assert_eq!(
            p.threshold(BackendKind::Cuda, "x", Op::Mttkrp, 32, ValueType::F16)
                .threshold,
            78
        );
        assert_eq!(
            p.threshold(BackendKind::Cuda, "x", Op::Ttmc, 8, ValueType::F16)
                .threshold,
            61
        );
    }

    #[test]
    fn exact_device_and_nearest_rank_win() {
        let mut p = Profiles::builtin();
        let text = r#"
[[profile]]
backend = "cpu"
device = "cpu:test:2t"
[[profile.threshold]]
op = "mttkrp"
rank = 8
value = 11
[[profile.threshold]]
op = "mttkrp"
rank = 32
value = 33
"#;
        add_text(&mut p, "t.toml", text);
        assert_eq!(
            p.threshold(
                BackendKind::Cpu,
                "cpu:test:2t",
                Op::Mttkrp,
                8,
                ValueType::F16
            )
            .threshold,
            11
        );
        assert_eq!(
            p.threshold(
                BackendKind::Cpu,
                "cpu:test:2t",
                Op::Mttkrp,
                30,
                ValueType::F16
            )
            .threshold,
            33
        );
        // Tie between 8 and 32 at 20: the smaller rank.
        assert_eq!(
            p.threshold(
                BackendKind::Cpu,
                "cpu:test:2t",
                Op::Mttkrp,
                20,
                ValueType::F16
            )
            .threshold,
            11
        );
        // No TTMc entry in the device profile: the default's.
        let c = p.threshold(BackendKind::Cpu, "cpu:test:2t", Op::Ttmc, 8, ValueType::F16);
        assert!(c.source.contains("default.toml"));
        // Another device: the default.
        assert!(
            p.threshold(BackendKind::Cpu, "cpu:other", Op::Mttkrp, 8, ValueType::F16)
                .source
                .contains("default.toml")
        );
    }

    #[test]
    fn malformed_profile_names_the_file_and_reason() {
        let e = parse(
            "[[profile]]\nbackend = \"tpu\"\ndevice = \"x\"\n",
            Path::new("bad.toml"),
        )
        .unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains("bad.toml") && msg.contains("tpu"), "{msg}");
        let e = parse(
            "[[profile]]\nbackend = \"cpu\"\ndevice = \"x\"\n[[profile.threshold]]\nop = \"mttkrp\"\nrank = 0\nvalue = 3\n",
            Path::new("zero.toml"),
        )
        .unwrap_err();
        assert!(e.to_string().contains("rank 0"), "{e}");
    }
}
