//! Output paths are checked before any work: `--out` onto a file where a folder is
//! needed, into a folder that cannot exist, or onto a folder where a file is needed
//! fails at once with one line, not after every iteration ran; results that are not
//! finite are never written.

use crate::common;

use common::{assert_one_error_line, output_within, sptmc_command};
use std::path::Path;

/// Runs `args` and checks it failed with one line naming every word, before any
/// iteration or kernel ran.
fn fails_before_work(dir: &Path, args: &[&str], words: &[&str]) {
    let mut c = sptmc_command(dir);
    c.args(args).args(["--backend", "cpu"]);
    let o = output_within(c, 120);
    assert_one_error_line(&o, words);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!err.contains("its ="), "{args:?} iterated first: {err}");
    assert!(o.stdout.is_empty(), "{args:?} printed a result");
}

#[test]
fn model_folders_are_checked_before_the_iterations() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let f = common::small_tns(d);
    let fs = f.to_str().unwrap();
    let file = d.join("taken.txt");
    std::fs::write(&file, "not a folder").unwrap();
    let under_file = file.join("model");
    for cmd in [
        vec!["cp", fs, "--rank", "4", "--iters", "3"],
        vec!["tucker", fs, "--ranks", "3,3,3", "--iters", "3"],
    ] {
        let mut a = cmd.clone();
        a.extend(["--out", file.to_str().unwrap()]);
        fails_before_work(d, &a, &["taken.txt", "not a folder"]);
        let mut a = cmd.clone();
        a.extend(["--out", under_file.to_str().unwrap()]);
        fails_before_work(d, &a, &["taken.txt"]);
    }
    // A folder that can be made is made, and the model lands in it.
    let fresh = d.join("new/model");
    let mut c = sptmc_command(d);
    c.args(["cp", fs, "--rank", "4", "--iters", "2", "--backend", "cpu"])
        .args(["--out", fresh.to_str().unwrap()]);
    let o = output_within(c, 120);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(fresh.join("factor-0.txt").exists() && fresh.join("weights.txt").exists());
}

#[test]
fn result_files_are_checked_before_the_kernel() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let f = common::small_tns(d);
    let fs = f.to_str().unwrap();
    let missing = d.join("no/such/folder/out.txt");
    let folder = d.join("a-folder");
    std::fs::create_dir_all(&folder).unwrap();
    for op in [
        vec!["mttkrp", fs, "--rank", "4"],
        vec!["ttmc", fs, "--ranks", "3,3,3"],
    ] {
        let mut a = op.clone();
        a.extend(["--out", missing.to_str().unwrap()]);
        fails_before_work(d, &a, &["does not exist"]);
        let mut a = op.clone();
        a.extend(["--out", folder.to_str().unwrap()]);
        fails_before_work(d, &a, &["is a folder"]);
    }
    let mut c = sptmc_command(d);
    let missing = d.join("no/such/folder/out.sptb");
    c.args(["convert", fs, missing.to_str().unwrap()]);
    assert_one_error_line(&output_within(c, 60), &["does not exist"]);
}
