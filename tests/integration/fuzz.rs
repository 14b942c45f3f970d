//! Mutated inputs for the `.tns` parser (plain and gzipped) and the `.sptb` reader, a
//! fixed number of cases per run (the proptest equivalent of the `cargo fuzz` targets
//! in fuzz/): no panic, no hang (each case under a time limit), no allocation beyond
//! a bound proportional to the input, and for every tensor that reads, an HLS build
//! that stays within its memory plan.
//!
//! The allocator of this test binary counts bytes in use and their peak, so the
//! whole file is one test, and it runs in a process of its own (the integration
//! binary started again with only this test): nothing else may allocate while a case
//! is measured. In the shared process, other tests' allocations landed in a case's
//! peak ("parsing 43 bytes held 77570912").

use crate::common;

use common::within;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use sptmc::Error;
use sptmc::hls::HlsBuilder;
use sptmc::memplan::MemoryPlan;
use sptmc::tensor::{CooTensor, binary, tns};
use std::alloc::{GlobalAlloc, Layout, System};
use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The system allocator, counting bytes in use and the peak since the last reset.
struct Counting;

static IN_USE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

fn grew(by: usize) {
    let now = IN_USE.fetch_add(by, Ordering::SeqCst) + by;
    PEAK.fetch_max(now, Ordering::SeqCst);
}

// SAFETY: every call is forwarded to `System` unchanged; only counters are added.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        // SAFETY: forwarded unchanged.
        let p = unsafe { System.alloc(l) };
        if !p.is_null() {
            grew(l.size());
        }
        p
    }
    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        // SAFETY: forwarded unchanged.
        let p = unsafe { System.alloc_zeroed(l) };
        if !p.is_null() {
            grew(l.size());
        }
        p
    }
    unsafe fn realloc(&self, ptr: *mut u8, l: Layout, new: usize) -> *mut u8 {
        // SAFETY: forwarded unchanged.
        let p = unsafe { System.realloc(ptr, l, new) };
        if !p.is_null() {
            IN_USE.fetch_sub(l.size(), Ordering::SeqCst);
            grew(new);
        }
        p
    }
    unsafe fn dealloc(&self, ptr: *mut u8, l: Layout) {
        // SAFETY: forwarded unchanged.
        unsafe { System.dealloc(ptr, l) };
        IN_USE.fetch_sub(l.size(), Ordering::SeqCst);
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Runs `f` and gives its result and the most bytes it held at once beyond what was
/// in use before.
fn measured<T>(f: impl FnOnce() -> T) -> (T, usize) {
    let base = IN_USE.load(Ordering::SeqCst);
    PEAK.store(base, Ordering::SeqCst);
    let out = f();
    (out, PEAK.load(Ordering::SeqCst).saturating_sub(base))
}

/// Fixed allocations of a call whatever its input (rayon's jobs, small vectors).
const SLACK: usize = 1 << 20;

/// Valid texts the mutations start from.
const TEXTS: &[&str] = &[
    "1 2 3 1.5\n4 5 6 -2e3\n10 10 10 7\n",
    "3\n10 10 10\n1 2 3 1.5\n# c\n4 5 6 -2e3\r\n10 10 10 7\n",
    "1 1 1 1 0.5\n2 2 2 2 1e-320\n3 1 2 3 3e38\n3 1 2 3 -1\n",
    "7 2.5 # a comment\n1 -0\n\n3 1e-39\n",
    "1 1 1 2\n1 1 1 3\n16 16 16 4\n17 1 33 5 # tile\n",
];

/// Applies `edits` (position, kind, byte) to `bytes`: replace, insert or delete, with
/// bytes biased to those the formats use.
fn mutate(mut bytes: Vec<u8>, edits: &[(u16, u8, u8)]) -> Vec<u8> {
    const ALPHABET: &[u8] = b"0123456789 \t\r\n#.-+eEnaif\x00\xff\x1f\x8b";
    for &(pos, kind, b) in edits {
        let b = if b < 200 {
            ALPHABET[b as usize % ALPHABET.len()]
        } else {
            b
        };
        if bytes.is_empty() {
            bytes.push(b);
            continue;
        }
        let at = pos as usize % bytes.len();
        match kind % 3 {
            0 => bytes[at] = b,
            1 => bytes.insert(at, b),
            _ => {
                bytes.remove(at);
            }
        }
    }
    bytes
}

fn edits() -> impl Strategy<Value = Vec<(u16, u8, u8)>> {
    prop::collection::vec((any::<u16>(), any::<u8>(), any::<u8>()), 1..10)
}

fn runner(cases: u32) -> TestRunner {
    TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    })
}

/// Builds the HLS form of a tensor that read, within its memory plan.
fn builds_within_plan(x: &CooTensor) -> Result<(), TestCaseError> {
    let mut plan = MemoryPlan::new("fuzz", "-");
    let values = sptmc::hls::ValueChoice::Auto.resolve_values(x.values());
    plan.add_prepare(x.nnz(), x.order(), 1, 78, sptmc::Op::Mttkrp, values);
    let (built, peak) = measured(|| HlsBuilder::new(78).build(x));
    if let Err(e) = &built {
        prop_assert!(
            matches!(e, Error::Unsupported(_) | Error::InvalidTensor(_)),
            "build: {e:?}"
        );
    }
    prop_assert!(
        peak as u64 <= plan.bytes() + SLACK as u64,
        "HLS build of {} nonzeros held {peak} bytes, plan {}",
        x.nnz(),
        plan.bytes()
    );
    Ok(())
}

fn text_case(seed: usize, e: &[(u16, u8, u8)]) -> Result<(), TestCaseError> {
    let text = mutate(TEXTS[seed].as_bytes().to_vec(), e);
    let (parsed, peak) = measured(|| tns::parse(&text, Path::new("fuzz.tns")));
    prop_assert!(
        peak <= 64 * text.len() + SLACK,
        "parsing {} bytes held {peak}",
        text.len()
    );
    match parsed {
        Ok((x, report)) => {
            prop_assert_eq!(x.nnz() + report.duplicates_summed, report.entries);
            builds_within_plan(&x)?;
        }
        Err(Error::Parse { line, reason, .. }) => {
            let lines = text.split(|&b| b == b'\n').count();
            prop_assert!((1..=lines.max(1)).contains(&line) && !reason.is_empty());
        }
        Err(Error::NonFinite(_) | Error::InvalidTensor(_)) => {}
        Err(other) => prop_assert!(false, "unexpected error kind {other:?}"),
    }
    Ok(())
}

fn gzip_case(dir: &Path, seed: usize, e: &[(u16, u8, u8)]) -> Result<(), TestCaseError> {
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    enc.write_all(TEXTS[seed].as_bytes()).unwrap();
    let gz = mutate(enc.finish().unwrap(), e);
    let p = dir.join("fuzz.tns.gz");
    std::fs::write(&p, &gz).unwrap();
    let (read, peak) = measured(|| tns::read(&p));
    // Decompressed text is small for these inputs: the bound is on the compressed
    // size's 4× guess plus what the text itself needs, plus the reader's buffer (it
    // reads files in steps of 4 MiB).
    prop_assert!(
        peak <= 64 * (4 * gz.len() + 4096) + (8 << 20) + SLACK,
        "reading {} bytes of gzip held {peak}",
        gz.len()
    );
    match read {
        Ok((x, _)) => builds_within_plan(&x)?,
        Err(
            Error::Parse { .. } | Error::Decompress { .. } | Error::NonFinite(_) | Error::Io { .. },
        ) => {}
        Err(other) => prop_assert!(false, "unexpected error kind {other:?}"),
    }
    Ok(())
}

/// Valid binary files the mutations start from.
fn binaries(dir: &Path) -> Vec<Vec<u8>> {
    let tensors = [
        CooTensor::from_entries(vec![4], [([3u32], 1.0)]).unwrap(),
        CooTensor::from_entries(vec![3, 5, 7], [([2u32, 4, 6], 1.5), ([0, 1, 2], -2.0)]).unwrap(),
        CooTensor::new(
            vec![2, 2, 2, 2],
            vec![vec![0, 1, 1]; 4],
            vec![1.0, 2.0, 3.0],
        )
        .unwrap(),
    ];
    tensors
        .iter()
        .enumerate()
        .map(|(k, x)| {
            let p = dir.join(format!("seed{k}.sptb"));
            binary::write_with_meta(&p, x, &b"{\"source\": \"x\"}"[..k * 7]).unwrap();
            std::fs::read(&p).unwrap()
        })
        .collect()
}

fn sptb_case(
    seeds: &[Vec<u8>],
    seed: usize,
    e: &[(u16, u8, u8)],
    resum: bool,
) -> Result<(), TestCaseError> {
    let mut bytes = mutate(seeds[seed].clone(), e);
    // Half the cases carry a correct checksum, so the checks behind it are reached.
    if resum && bytes.len() >= 40 {
        let sum = xxhash_rust::xxh3::xxh3_64(&bytes[40..]);
        bytes[32..40].copy_from_slice(&sum.to_le_bytes());
    }
    let (read, peak) = measured(|| binary::read_bytes(&bytes, Path::new("fuzz.sptb")));
    prop_assert!(
        peak <= 8 * bytes.len() + SLACK,
        "reading {} bytes held {peak}",
        bytes.len()
    );
    match read {
        Ok((x, _)) => {
            prop_assert!(x.is_sorted_unique());
            builds_within_plan(&x)?;
        }
        Err(Error::BadBinary { reason, .. }) => prop_assert!(!reason.is_empty()),
        Err(other) => prop_assert!(false, "unexpected error kind {other:?}"),
    }
    Ok(())
}

/// Each case's time limit: far above what any takes, so only a hang reaches it.
const CASE_SECONDS: u64 = 60;

/// Set in the process that runs the cases alone.
const ALONE: &str = "SPTMC_FUZZ_ALONE";

#[test]
fn mutated_files_read_or_fail_cleanly_within_time_and_memory() {
    if std::env::var_os(ALONE).is_none() {
        let name = "fuzz::mutated_files_read_or_fail_cleanly_within_time_and_memory";
        let exe = std::env::current_exe().unwrap();
        let mut c = std::process::Command::new(exe);
        c.args([name, "--exact", "--test-threads=1", "--nocapture"])
            .env(ALONE, "1");
        let out = c.output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && stdout.contains("test result: ok. 1 passed"),
            "the cases alone: {}\n{stdout}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let d = std::sync::Arc::new(dir.path().to_path_buf());
    let n = TEXTS.len();
    runner(600)
        .run(&(0..n, edits()), |(s, e)| {
            within("a text case", CASE_SECONDS, move || text_case(s, &e))
        })
        .unwrap();
    runner(150)
        .run(&(0..n, edits()), |(s, e)| {
            let d = d.clone();
            within("a gzip case", CASE_SECONDS, move || gzip_case(&d, s, &e))
        })
        .unwrap();
    let seeds = std::sync::Arc::new(binaries(&d));
    runner(600)
        .run(&(0..seeds.len(), edits(), any::<bool>()), |(s, e, r)| {
            let seeds = seeds.clone();
            within("a binary case", CASE_SECONDS, move || {
                sptb_case(&seeds, s, &e, r)
            })
        })
        .unwrap();
}
