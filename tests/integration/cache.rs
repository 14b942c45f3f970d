//! The binary cache: never stale (same time and size are not enough), never corrupt
//! (a checksum), no leftovers from killed writers, kept in the user's cache folder and
//! not beside the data, off with `--no-cache`; `sptmc convert` for an explicit copy;
//! a `.sptb` given directly is validated like text (repeats summed).

use crate::common;

use common::{assert_one_error_line, output_within, sptmc_command};
use sptmc::CooTensor;
use sptmc::tensor::binary;
use sptmc::tensor::cache::{Cache, CacheNote, LoadSource};
use sptmc::tensor::tns;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

fn set_mtime(p: &Path, t: SystemTime) {
    std::fs::File::options()
        .write(true)
        .open(p)
        .unwrap()
        .set_modified(t)
        .unwrap();
}

fn mtime(p: &Path) -> SystemTime {
    std::fs::metadata(p).unwrap().modified().unwrap()
}

fn files_in(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .map(|r| {
            r.map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

#[test]
fn a_replaced_source_with_the_same_time_is_parsed_again() {
    let data = tempfile::tempdir().unwrap();
    let cache = Cache::new(data.path().join("cache"));
    let src = data.path().join("x.tns");
    std::fs::write(&src, "1 1 1 1.0\n2 2 2 2.0\n").unwrap();
    let stamp = mtime(&src);
    let (a, how) = cache.load(&src).unwrap();
    assert_eq!(a.nnz(), 2);
    assert!(
        matches!(
            how,
            LoadSource::Text {
                cache: CacheNote::Written(_),
                ..
            }
        ),
        "{how:?}"
    );
    let (_, how) = cache.load(&src).unwrap();
    assert!(matches!(how, LoadSource::Cache { .. }), "{how:?}");

    // A corrected file of 4 lines dated like the old one (cp -p, rsync -a, touch -r).
    std::fs::write(&src, "1 1 1 1.0\n2 2 2 2.0\n3 3 3 3.0\n4 4 4 4.0\n").unwrap();
    set_mtime(&src, stamp);
    let (b, how) = cache.load(&src).unwrap();
    assert_eq!(b.nnz(), 4);
    assert!(
        matches!(
            how,
            LoadSource::Text {
                cache: CacheNote::Rebuilt { .. },
                ..
            }
        ),
        "{how:?}"
    );
    // Same size and same time, other content.
    std::fs::write(&src, "1 1 1 1.0\n2 2 2 2.0\n3 3 3 3.0\n4 4 4 5.0\n").unwrap();
    set_mtime(&src, stamp);
    let (c, how) = cache.load(&src).unwrap();
    assert_eq!(c.values()[3], 5.0);
    match how {
        LoadSource::Text {
            cache: CacheNote::Rebuilt { why, .. },
            ..
        } => assert!(why.contains("content"), "{why}"),
        other => panic!("{other:?}"),
    }
    let (d, how) = cache.load(&src).unwrap();
    assert!(matches!(how, LoadSource::Cache { .. }));
    assert_eq!(d, c);
}

#[test]
fn a_corrupt_cache_entry_is_detected_and_rebuilt() {
    let data = tempfile::tempdir().unwrap();
    let cache = Cache::new(data.path().join("cache"));
    let src = data.path().join("x.tns");
    std::fs::write(&src, "1 1 1 1170.0\n2 3 4 -2.5\n").unwrap();
    let (x, _) = cache.load(&src).unwrap();
    let entry = cache.entry_path(&std::fs::canonicalize(&src).unwrap());
    let mut bytes = std::fs::read(&entry).unwrap();
    // A flipped bit in the last value.
    let last = bytes.len() - 2;
    bytes[last] ^= 0x10;
    std::fs::write(&entry, &bytes).unwrap();
    let err = binary::read(&entry).unwrap_err().to_string();
    assert!(err.contains("checksum"), "{err}");
    let (y, how) = cache.load(&src).unwrap();
    assert_eq!(y, x);
    match how {
        LoadSource::Text {
            cache: CacheNote::Rebuilt { why, .. },
            ..
        } => assert!(why.contains("checksum"), "{why}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(binary::read(&entry).unwrap(), x);
}

/// The id of a process that has exited.
fn dead_pid() -> u32 {
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let pid = child.id();
    child.wait().unwrap();
    pid
}

#[cfg(target_os = "linux")]
#[test]
fn temporaries_of_killed_writers_are_removed_on_the_next_load() {
    let data = tempfile::tempdir().unwrap();
    let dir = data.path().join("cache");
    std::fs::create_dir_all(&dir).unwrap();
    let cache = Cache::new(&dir);
    let src = data.path().join("x.tns");
    std::fs::write(&src, "1 1 1 1.0\n").unwrap();
    let dead = dead_pid();
    let leftover = dir.join(format!(".sptmc-tmp-{dead}-0-x.tns.sptb"));
    let legacy = data.path().join(format!("x.tns.sptb.tmp{dead}"));
    let live = dir.join(format!(".sptmc-tmp-{}-9-y.sptb", std::process::id()));
    for p in [&leftover, &legacy, &live] {
        std::fs::write(p, vec![0u8; 4096]).unwrap();
    }
    cache.load(&src).unwrap();
    assert!(!leftover.exists() && !legacy.exists());
    assert!(live.exists(), "a writer that still runs keeps its file");
}

#[cfg(unix)]
#[test]
fn an_unwritable_cache_folder_only_skips_the_cache() {
    use std::os::unix::fs::PermissionsExt;
    let data = tempfile::tempdir().unwrap();
    let dir = data.path().join("cache");
    std::fs::create_dir_all(&dir).unwrap();
    let src = data.path().join("x.tns");
    std::fs::write(&src, "1 1 1 1.0\n").unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o555)).unwrap();
    let can_write = std::fs::File::create(dir.join("probe")).is_ok();
    let result = Cache::new(&dir).load(&src);
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let (x, how) = result.unwrap();
    assert_eq!(x.nnz(), 1);
    if can_write {
        eprintln!("note: running with rights that ignore folder permissions");
    } else {
        assert!(
            matches!(
                how,
                LoadSource::Text {
                    cache: CacheNote::NotWritten(_),
                    ..
                }
            ),
            "{how:?}"
        );
    }
}

#[test]
fn concurrent_first_reads_agree() {
    let data = tempfile::tempdir().unwrap();
    let src = data.path().join("x.tns");
    let mut text = String::new();
    for k in 1..=5000 {
        text += &format!("{} {} {} {k}\n", k % 97 + 1, k % 89 + 1, k % 83 + 1);
    }
    std::fs::write(&src, text).unwrap();
    let dir = data.path().join("cache");
    let loads: Vec<CooTensor> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..4)
            .map(|_| s.spawn(|| Cache::new(&dir).load(&src).unwrap().0))
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert!(loads.windows(2).all(|w| w[0] == w[1]));
    assert_eq!(Cache::new(&dir).load(&src).unwrap().0, loads[0]);
    assert_eq!(files_in(&dir).len(), 1, "{:?}", files_in(&dir));
}

fn small(dir: &Path) -> PathBuf {
    let p = dir.join("x.tns");
    std::fs::write(&p, "1 1 1 1.5\n2 3 1 2.5\n3 2 2 -1\n").unwrap();
    p
}

#[test]
fn the_cache_lives_in_the_user_cache_folder_never_beside_the_data() {
    let data = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    let f = small(data.path());
    let fs = f.to_str().unwrap();
    let before = files_in(data.path());
    // XDG_CACHE_HOME first.
    for round in 0..2 {
        let mut c = sptmc_command(home.path());
        c.args(["info", fs]);
        let o = output_within(c, 60);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let err = String::from_utf8_lossy(&o.stderr);
        let want = if round == 0 {
            "cached in"
        } else {
            "from cache"
        };
        assert!(err.contains(want), "{err}");
        assert!(
            err.contains(&*home.path().join("sptmc").to_string_lossy()),
            "{err}"
        );
    }
    assert_eq!(files_in(&home.path().join("sptmc")).len(), 1);
    // Then $HOME/.cache.
    let mut c = sptmc_command(home.path());
    c.env_remove("XDG_CACHE_HOME").env("HOME", home.path());
    c.args(["info", fs]);
    let o = output_within(c, 60);
    assert!(o.status.success());
    assert_eq!(files_in(&home.path().join(".cache/sptmc")).len(), 1);
    assert_eq!(
        files_in(data.path()),
        before,
        "nothing is written beside the data"
    );
}

#[test]
fn no_cache_neither_reads_nor_writes_the_cache() {
    let data = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    let f = small(data.path());
    let mut c = sptmc_command(home.path());
    c.args(["mttkrp", f.to_str().unwrap(), "--rank", "2", "--reps", "1"])
        .args(["--no-cache", "--backend", "cpu"]);
    let o = output_within(c, 60);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(err.contains("not cached (--no-cache)"), "{err}");
    assert!(!home.path().join("sptmc").exists());
    for cmd in ["info", "cp", "tucker", "ttmc", "selftest"] {
        let mut c = sptmc_command(home.path());
        c.args([cmd, "--no-cache", "--help"]);
        assert!(
            output_within(c, 60).status.success(),
            "{cmd} lacks --no-cache"
        );
    }
}

#[test]
fn convert_writes_a_checked_binary_copy() {
    let data = tempfile::tempdir().unwrap();
    let f = small(data.path());
    let (x, _) = tns::read(&f).unwrap();
    let out = data.path().join("x.sptb");
    let run = |args: &[&str]| {
        let mut c = sptmc_command(data.path());
        c.args(args);
        output_within(c, 60)
    };
    let (fs, os) = (f.to_str().unwrap(), out.to_str().unwrap());
    let o = run(&["convert", fs, os]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(binary::read(&out).unwrap(), x);
    assert_one_error_line(&run(&["convert", fs, os]), &["exists", "--force"]);
    assert!(run(&["convert", fs, os, "--force"]).status.success());
    // Back to gzipped text, from the binary copy.
    let gz = data.path().join("y.tns.gz");
    assert!(run(&["convert", os, gz.to_str().unwrap()]).status.success());
    assert_eq!(tns::read(&gz).unwrap().0, x);
    let bad = data.path().join("y.csv");
    assert_one_error_line(&run(&["convert", fs, bad.to_str().unwrap()]), &[".sptb"]);
    // The binary copy is read directly, without the cache.
    let mut c = sptmc_command(data.path());
    c.args(["info", os, "--json"]);
    let o = output_within(c, 60);
    assert!(o.status.success());
    assert!(!data.path().join("sptmc").exists());
}

#[test]
fn repeated_coordinates_in_a_binary_file_are_summed() {
    let data = tempfile::tempdir().unwrap();
    // Another tool's file: the same cell twice (1 + 2) and one more entry (2).
    let x = CooTensor::new(
        vec![2, 2, 2],
        vec![vec![0, 1, 0], vec![0, 1, 0], vec![0, 1, 0]],
        vec![1.0, 2.0, 2.0],
    )
    .unwrap();
    let p = data.path().join("dup.sptb");
    binary::write(&p, &x).unwrap();
    let (y, report) = binary::read_report(&p).unwrap();
    assert_eq!(report.duplicates_summed, 1);
    assert_eq!(y.nnz(), 2);
    assert_eq!(y.norm_sq(), 9.0 + 4.0);
    let mut c = sptmc_command(data.path());
    c.args(["info", p.to_str().unwrap(), "--json"]);
    let o = output_within(c, 60);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["norm"].as_f64().unwrap(), 13f64.sqrt());
    assert_eq!(v["nnz"], 2);
}

/// The duplicates a text had are counted on every read: when parsed, and from the
/// cache entry afterwards (stderr and `info --json`, whose `hls.duplicates_summed` is
/// the builder's count of an already summed tensor, 0).
#[test]
fn duplicates_of_the_text_are_reported_from_the_cache_too() {
    let data = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    let f = data.path().join("dup.tns");
    std::fs::write(&f, "1 1 1 1\n1 1 1 2\n1 1 1 -3\n2 2 2 1\n").unwrap();
    for round in 0..2 {
        let mut c = sptmc_command(home.path());
        c.args(["info", f.to_str().unwrap(), "--json"]);
        let o = output_within(c, 60);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(j["duplicates_summed"], 2, "round {round}: {j}");
        assert_eq!(j["nnz"], 2, "round {round}");
        let mut c = sptmc_command(home.path());
        c.args(["info", f.to_str().unwrap()]);
        let err = String::from_utf8_lossy(&output_within(c, 60).stderr).into_owned();
        assert!(err.contains("from cache"), "round {round}: {err}");
        assert!(err.contains("2 duplicate entries"), "round {round}: {err}");
    }
}

/// An entry made before entries recorded the values the parse read as 0 (below the
/// smallest f64) is made again, so that a later read can say them; after that the
/// entry is read, and says them.
#[test]
fn an_entry_without_the_record_of_values_read_as_zero_is_made_again() {
    let data = tempfile::tempdir().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let f = data.path().join("tiny.tns");
    std::fs::write(&f, "1 1 1 2.5\n2 2 1 1e-400\n2 1 2 1\n").unwrap();
    let cache = Cache::new(dir.path());
    let (x, how) = cache.load(&f).unwrap();
    assert!(
        matches!(
            &how,
            LoadSource::Text {
                cache: CacheNote::Written(_),
                ..
            }
        ),
        "{how:?}"
    );
    // The entry as an older sptmc wrote it: its source record without the fields.
    let entry = cache.entry_path(&std::fs::canonicalize(&f).unwrap());
    let mut record: serde_json::Value =
        serde_json::from_slice(&binary::read_meta(&entry).unwrap()).unwrap();
    assert_eq!(record["values_underflowed"], 1);
    assert_eq!(record["first_underflow_line"], 2);
    for key in [
        "values_underflowed",
        "first_underflow_line",
        "trailing_bytes",
    ] {
        record.as_object_mut().unwrap().remove(key);
    }
    binary::write_with_meta(&entry, &x, &serde_json::to_vec(&record).unwrap()).unwrap();
    let (y, how) = cache.load(&f).unwrap();
    assert_eq!(y, x);
    match &how {
        LoadSource::Text {
            report,
            cache: CacheNote::Rebuilt { why, .. },
        } => {
            assert_eq!(report.values_underflowed, 1);
            assert!(why.contains("values below the smallest f64"), "{why}");
        }
        other => panic!("{other:?}"),
    }
    let (_, how) = cache.load(&f).unwrap();
    match how {
        LoadSource::Cache { underflowed, .. } => assert_eq!(underflowed, (1, Some(2))),
        other => panic!("{other:?}"),
    }
}
