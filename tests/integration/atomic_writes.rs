//! Results are written whole or not at all: a full disk, a killed writer or an
//! `--out` that must not be replaced leaves under the result's name either the earlier
//! result, untouched, or nothing — never a truncated file, a folder with some new and
//! some old files, or stale files of another model.

use crate::common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Output;

fn sptmc(args: &[&str], cache: &Path) -> Output {
    let mut c = common::sptmc_command(cache);
    c.args(args).args(["--backend", "cpu"]);
    common::output_within(c, 300)
}

fn ok(o: &Output) {
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

/// Every entry of `dir` (name → bytes, `None` for a folder); empty when `dir` does not
/// exist.
fn snapshot(dir: &Path) -> BTreeMap<String, Option<Vec<u8>>> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return BTreeMap::new();
    };
    entries
        .map(|e| {
            let e = e.unwrap();
            let name = e.file_name().into_string().unwrap();
            let bytes = e.path().is_file().then(|| std::fs::read(e.path()).unwrap());
            (name, bytes)
        })
        .collect()
}

/// The names in `dir` that are temporaries of a write.
fn temporaries(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.starts_with(".sptmc-tmp-"))
        .collect()
}

/// A tmpfs of `kib` KiB mounted on a new temporary folder, unmounted on drop; `None`
/// (a visible skip) where this process may not mount one.
struct SmallDisk {
    dir: tempfile::TempDir,
}

impl SmallDisk {
    fn new(kib: usize) -> Option<SmallDisk> {
        let dir = tempfile::tempdir().unwrap();
        let mounted = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={kib}k"), "tmpfs"])
            .arg(dir.path())
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !mounted {
            return common::skip(
                "SPTMC_REQUIRE_TMPFS",
                "cannot mount a small tmpfs here (needs root) to fill a disk",
            );
        }
        Some(SmallDisk { dir })
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Fills the disk up to `free` bytes left.
    fn fill_leaving(&self, free: u64) {
        use std::io::Write;
        let p = self.path().join("filler");
        let mut f = std::fs::File::create(&p).unwrap();
        let block = vec![7u8; 4096];
        while f.write_all(&block).is_ok() {}
        drop(f);
        let len = std::fs::metadata(&p).unwrap().len();
        let f = std::fs::OpenOptions::new().write(true).open(&p).unwrap();
        f.set_len(len.saturating_sub(free)).unwrap();
    }

    fn empty(&self) {
        let _ = std::fs::remove_file(self.path().join("filler"));
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg(self.dir.path())
            .status();
    }
}

/// The model commands with a small rank on `file`, each writing into `out`.
fn model_commands<'a>(file: &'a str, out: &'a str) -> Vec<Vec<&'a str>> {
    vec![
        vec!["cp", file, "--rank", "3", "--iters", "3", "--out", out],
        vec![
            "tucker", file, "--ranks", "2,2,2", "--iters", "2", "--out", out,
        ],
        vec!["cp-apr", file, "--rank", "2", "--iters", "2", "--out", out],
        vec![
            "complete", file, "--rank", "2", "--epochs", "2", "--out", out,
        ],
    ]
}

/// On a disk that fills up before, at the start of or while the model is written, each
/// model command fails with one line naming the disk's error, and leaves the earlier
/// model untouched (and no model at all where there was none), without temporaries.
#[test]
fn a_full_disk_leaves_the_earlier_model_or_none() {
    let cache = tempfile::tempdir().unwrap();
    let small = common::small_tns(cache.path());
    let file = small.to_str().unwrap();
    let Some(disk) = SmallDisk::new(512) else {
        return;
    };
    let old = disk.path().join("model");
    let new = disk.path().join("new");
    let (old_s, new_s) = (old.to_str().unwrap(), new.to_str().unwrap());
    for free in [0, 3000, 9000] {
        for (k, args) in model_commands(file, old_s).iter().enumerate() {
            disk.empty();
            // The earlier model: another command's, so the new one differs in files.
            let other = &model_commands(file, old_s)[(k + 1) % 4];
            ok(&sptmc(other, cache.path()));
            let before = snapshot(&old);
            assert!(before.contains_key("model.json"));
            disk.fill_leaving(free);
            let o = sptmc(args, cache.path());
            common::assert_one_error_line(&o, &["No space left"]);
            assert_eq!(snapshot(&old), before, "{args:?} with {free} bytes free");
            let mut fresh = args.clone();
            *fresh.last_mut().unwrap() = new_s;
            let o = sptmc(&fresh, cache.path());
            common::assert_one_error_line(&o, &["No space left"]);
            assert!(!new.exists(), "{fresh:?} left {:?}", snapshot(&new));
            assert_eq!(temporaries(disk.path()), Vec::<String>::new());
        }
    }
}

/// The single-file results (`mttkrp`, `ttmc`, `predict --out`) on a full disk: one
/// error line, the earlier file untouched, no temporaries; into `/dev/full` (which
/// cannot be replaced, so is written to directly): one error line.
#[test]
fn a_full_disk_leaves_the_earlier_result_file() {
    let cache = tempfile::tempdir().unwrap();
    let small = common::small_tns(cache.path());
    let file = small.to_str().unwrap();
    let model = cache.path().join("model");
    let m = model.to_str().unwrap();
    ok(&sptmc(
        &["complete", file, "--rank", "2", "--epochs", "2", "--out", m],
        cache.path(),
    ));
    let commands = |out: &str| -> Vec<Vec<String>> {
        let v = |a: &[&str]| a.iter().map(|s| s.to_string()).collect();
        vec![
            // Results of 25 to 60 KB: more than the disk has left in every round.
            v(&["mttkrp", file, "--rank", "64", "--out", out]),
            v(&["ttmc", file, "--rank", "8", "--mode", "1", "--out", out]),
            v(&["predict", m, file, "--out", out]),
        ]
    };
    for args in commands("/dev/full") {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let mut c = common::sptmc_command(cache.path());
        c.args(&args);
        common::assert_one_error_line(&common::output_within(c, 120), &["No space left"]);
    }
    let Some(disk) = SmallDisk::new(256) else {
        return;
    };
    let out = disk.path().join("result.txt");
    for free in [0, 8192, 20000] {
        for args in commands(out.to_str().unwrap()) {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            disk.empty();
            std::fs::write(&out, "# an earlier result\n1 2\n").unwrap();
            disk.fill_leaving(free);
            let mut c = common::sptmc_command(cache.path());
            c.args(&args);
            let o = common::output_within(c, 120);
            common::assert_one_error_line(&o, &["No space left"]);
            let text = std::fs::read_to_string(&out).unwrap();
            assert_eq!(text, "# an earlier result\n1 2\n", "{args:?}, {free} free");
            assert_eq!(temporaries(disk.path()), Vec::<String>::new());
        }
    }
}

/// Checks that `dir` holds a complete model of `order` factors of `rank` columns for
/// `dims` (every factor readable with all its rows, model.json parsed), or is the
/// `earlier` snapshot; returns which.
fn complete_or_earlier(
    dir: &Path,
    dims: &[usize],
    rank: usize,
    earlier: &BTreeMap<String, Option<Vec<u8>>>,
) -> &'static str {
    let now = snapshot(dir);
    if &now == earlier {
        return "earlier";
    }
    let v: serde_json::Value = serde_json::from_slice(now["model.json"].as_ref().unwrap()).unwrap();
    assert_eq!(v["rank"], serde_json::json!(rank), "{v}");
    for (m, &d) in dims.iter().enumerate() {
        let f = sptmc::model_io::read_matrix(&dir.join(format!("factor-{m}.txt"))).unwrap();
        assert_eq!((f.rows(), f.cols()), (d, rank));
    }
    assert!(now.contains_key("weights.txt"));
    "new"
}

/// SIGTERM at several moments of writing a large model over an earlier one: the folder
/// is always the earlier model or the complete new one; the next write removes what
/// the killed one left beside it.
#[test]
fn a_killed_writer_leaves_the_earlier_model_or_the_new_one() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let out = dir.join("model");
    let o = out.to_str().unwrap();
    // The built-in generated tensor [2000, 1500, 400]; rank 120 makes factors of
    // about 7 MB of text.
    let dims = [2000, 1500, 400];
    let args = |rank: &'static str| -> Vec<&str> {
        vec![
            "cp",
            "--rank",
            rank,
            "--iters",
            "1",
            "--out",
            o,
            "--backend",
            "cpu",
        ]
    };
    let run = |a: &[&str]| {
        let mut c = common::sptmc_command(dir);
        c.args(a);
        common::output_within(c, 300)
    };
    ok(&run(&args("2")));
    let mut earlier = snapshot(&out);
    let mut seen = Vec::new();
    for delay_ms in [0u64, 5, 30, 100, 400] {
        let mut c = common::sptmc_command(dir);
        c.args(args("120"))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null());
        let known = temporaries(dir);
        let mut child = c.spawn().unwrap();
        // Waits for a new temporary folder (the write has begun), then a while.
        let start = std::time::Instant::now();
        while temporaries(dir).iter().all(|t| known.contains(t)) && start.elapsed().as_secs() < 120
        {
            if child.try_wait().unwrap().is_some() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_micros(200));
        }
        std::thread::sleep(std::time::Duration::from_millis(delay_ms));
        // The child is ours: SIGTERM by its id.
        let _ = std::process::Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status();
        let _ = child.wait();
        let which = complete_or_earlier(&out, &dims, 120, &earlier);
        seen.push((delay_ms, which));
        if which == "new" {
            // The next rounds kill over the rank-2 model again.
            std::fs::remove_dir_all(&out).unwrap();
            ok(&run(&args("2")));
            // That rewrite is the next rounds' earlier model (its model.json holds
            // its own timings, so it is not the first one's bytes).
            let again = snapshot(&out);
            assert_eq!(again.len(), earlier.len());
            earlier = again;
        }
    }
    eprintln!("killed at (ms after the write began, what was left): {seen:?}");
    assert!(
        seen.iter().any(|s| s.1 == "earlier"),
        "no kill landed during a write: {seen:?}"
    );
    // A later write removes the killed writers' temporaries.
    ok(&run(&args("2")));
    assert_eq!(temporaries(dir), Vec::<String>::new());
}

/// An existing `--out` folder is replaced whole: no file of the earlier model stays
/// (a CP model's weights under a Tucker one, a Tucker core under a CP one, the fourth
/// factor of a 4-mode model under a 3-mode one).
#[test]
fn a_new_model_replaces_the_earlier_whole() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let small = common::small_tns(dir);
    let file = small.to_str().unwrap();
    let four = dir.join("four.tns");
    let mut text = String::new();
    for k in 0..300u32 {
        let c = [k % 7 + 1, k % 5 + 1, k % 11 + 1, k % 3 + 1];
        text.push_str(&format!(
            "{} {} {} {} {}\n",
            c[0],
            c[1],
            c[2],
            c[3],
            k % 4 + 1
        ));
    }
    std::fs::write(&four, text).unwrap();
    let out = dir.join("m");
    let o = out.to_str().unwrap();
    let names = |d: &Path| snapshot(d).into_keys().collect::<Vec<_>>();
    let f4 = four.to_str().unwrap();
    let cases: [(&[&str], &[&str]); 4] = [
        (
            &["cp-apr", f4, "--rank", "2", "--iters", "2"],
            &[
                "factor-0.txt",
                "factor-1.txt",
                "factor-2.txt",
                "factor-3.txt",
                "model.json",
                "weights.txt",
            ],
        ),
        (
            &["tucker", file, "--ranks", "2,2,2", "--iters", "2"],
            &[
                "core.txt",
                "factor-0.txt",
                "factor-1.txt",
                "factor-2.txt",
                "model.json",
            ],
        ),
        (
            &["cp", file, "--rank", "2", "--iters", "2"],
            &[
                "factor-0.txt",
                "factor-1.txt",
                "factor-2.txt",
                "model.json",
                "weights.txt",
            ],
        ),
        (
            &["complete", file, "--rank", "2", "--epochs", "2"],
            &[
                "bias-0.txt",
                "bias-1.txt",
                "bias-2.txt",
                "factor-0.txt",
                "factor-1.txt",
                "factor-2.txt",
                "model.json",
            ],
        ),
    ];
    for (args, want) in cases {
        let mut a = args.to_vec();
        a.extend(["--out", o]);
        ok(&sptmc(&a, dir));
        assert_eq!(names(&out), *want, "{args:?}");
    }
}

/// An `--out` folder holding anything but model files (a note, a subfolder, the input
/// tensor itself) is refused before any work, and left as it was.
#[test]
fn an_out_folder_with_other_files_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let cache = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let data = dir.join("data");
    std::fs::create_dir(&data).unwrap();
    let small = common::small_tns(&data);
    let file = small.to_str().unwrap();
    let with_note = dir.join("notes");
    std::fs::create_dir(&with_note).unwrap();
    std::fs::write(with_note.join("notes.md"), "mine").unwrap();
    std::fs::write(with_note.join("factor-0.txt"), "1\n").unwrap();
    let with_sub = dir.join("sub");
    std::fs::create_dir_all(with_sub.join("inner")).unwrap();
    let cases: Vec<(PathBuf, &str)> = vec![
        (with_note.clone(), "notes.md"),
        (with_sub.clone(), "inner"),
        // The folder of the input tensor.
        (data.clone(), "small.tns"),
    ];
    for (out, what) in cases {
        let before = snapshot(&out);
        for args in model_commands(file, out.to_str().unwrap()) {
            let o = sptmc(&args, cache.path());
            common::assert_one_error_line(&o, &["--out", what]);
            assert_eq!(snapshot(&out), before, "{args:?}");
        }
    }
    // A file named as --out of a model.
    let o = sptmc(&["cp", file, "--rank", "2", "--out", file], cache.path());
    common::assert_one_error_line(&o, &["--out", "not a folder"]);
}

/// `--out` naming the input file (directly, by a symbolic link or by a hard link) is
/// refused before any work, and the input stays as it was.
#[test]
fn an_out_file_that_is_the_input_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let small = common::small_tns(dir);
    let file = small.to_str().unwrap();
    let before = std::fs::read(&small).unwrap();
    let link = dir.join("link.tns");
    std::os::unix::fs::symlink(&small, &link).unwrap();
    let hard = dir.join("hard.tns");
    std::fs::hard_link(&small, &hard).unwrap();
    let model = dir.join("model");
    let m = model.to_str().unwrap();
    ok(&sptmc(
        &["complete", file, "--rank", "2", "--epochs", "2", "--out", m],
        dir,
    ));
    for out in [file, link.to_str().unwrap(), hard.to_str().unwrap()] {
        let cases: [&[&str]; 3] = [
            &["mttkrp", file, "--rank", "2", "--out", out],
            &["ttmc", file, "--rank", "2", "--out", out],
            &["predict", m, file, "--out", out],
        ];
        for args in cases {
            let mut c = common::sptmc_command(dir);
            c.args(args);
            let o = common::output_within(c, 120);
            common::assert_one_error_line(&o, &["--out", "is the input file"]);
            assert_eq!(std::fs::read(&small).unwrap(), before, "{args:?}");
        }
    }
}
