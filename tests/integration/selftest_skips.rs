//! `sptmc selftest` on a tensor whose results cannot fit in memory: the runs it cannot
//! make are reported as skipped, with the refusal, not as accuracy failures (exit 3);
//! the rest still run and the self-test passes.

use crate::common;

#[test]
fn runs_refused_for_memory_are_skipped_and_named() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    // Mode 0 of length 4·10⁹: every factor of it, and every result along it, needs far
    // more than any machine has.
    for (name, text) in [
        (
            "long4.tns",
            "1 1 1 1 1\n2 3 1 2 2\n4000000000 2 2 1 3\n3 1 2 2 1\n",
        ),
        ("long3.tns", "1 1 1 1\n2 3 1 2\n3 2 4000000000 3\n"),
    ] {
        let f = dir.join(name);
        std::fs::write(&f, text).unwrap();
        for json in [false, true] {
            let mut c = common::sptmc_command(dir);
            c.args([
                "selftest",
                "--dim",
                "20",
                "--nnz",
                "500",
                "--backend",
                "cpu",
            ])
            .arg(&f);
            if json {
                c.arg("--json");
            }
            let o = common::output_within(c, 300);
            let out = String::from_utf8_lossy(&o.stdout);
            let err = String::from_utf8_lossy(&o.stderr);
            assert_eq!(o.status.code(), Some(0), "{name}: {out}\n{err}");
            assert!(err.contains("selftest passed"), "{err}");
            if json {
                let v: serde_json::Value = serde_json::from_str(&out).unwrap();
                let rows = v["rows"].as_array().unwrap();
                let skipped: Vec<_> = rows.iter().filter(|r| r["skipped"].is_string()).collect();
                assert!(!skipped.is_empty(), "{out}");
                for r in skipped {
                    assert_eq!(r["tensor"], serde_json::json!(name));
                    assert!(r["skipped"].as_str().unwrap().contains("not enough memory"));
                    assert!(r["error"].is_null());
                }
            } else {
                assert!(out.contains("SKIPPED not enough memory"), "{out}");
                assert!(out.contains("skipped for want of memory"), "{out}");
                assert!(!out.contains("FAIL"), "{out}");
            }
        }
    }
}
