//! Malformed input: every class gets a typed error naming the file, the line and the
//! reason, and no input of any kind makes the readers panic.

use rand::{Rng, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;
use sptmc::Error;
use sptmc::tensor::generate::{GenSpec, Pattern, generate};
use sptmc::tensor::{binary, tns};
use std::io::Write;
use std::path::Path;

const FILE: &str = "bad.tns";

/// Parses `text`, expects a parse error on `line` whose reason contains every one of
/// `words`, and checks that the message names the file and the line.
fn expect_parse_error(text: &[u8], line: usize, words: &[&str]) {
    let err = tns::parse(text, Path::new(FILE)).expect_err("malformed input must fail");
    let msg = err.to_string();
    match err {
        Error::Parse {
            file,
            line: l,
            reason,
        } => {
            assert_eq!(file, Path::new(FILE));
            assert_eq!(l, line, "line of: {msg}");
            for w in words {
                assert!(reason.contains(w), "{msg:?} does not say {w:?}");
            }
            assert!(
                msg.starts_with(&format!("{FILE}:{line}: ")),
                "{msg:?} does not name file and line"
            );
        }
        other => panic!("expected a parse error, got {other:?}"),
    }
}

#[test]
fn wrong_column_count() {
    expect_parse_error(
        b"1 1 1 1.0\n2 2 2 2.0\n3 3 3 3 3.0\n",
        3,
        &["expected 4", "found 5", "line 1"],
    );
    expect_parse_error(b"# c\n1 1 1 1.0\n2 2 2.0\n", 3, &["expected 4", "found 3"]);
    // A lone non-integer field is neither data nor a header.
    expect_parse_error(b"\nabc\n", 2, &["at least 2 fields"]);
}

#[test]
fn non_numeric_index() {
    expect_parse_error(
        b"1 1 1.0\n1 x 2.0\n",
        2,
        &["index of mode 1", "not a positive integer", "\"x\""],
    );
    expect_parse_error(b"1 1 1.0\n-1 1 2.0\n", 2, &["mode 0", "\"-1\""]);
    expect_parse_error(b"1 1 1.0\n1.5 1 2.0\n", 2, &["mode 0", "\"1.5\""]);
}

#[test]
fn non_numeric_value() {
    expect_parse_error(
        b"1 1 1.0\n2 2 abc\n",
        2,
        &["value is not a number", "\"abc\""],
    );
    expect_parse_error(b"1 1 1,5\n", 1, &["value is not a number", "\"1,5\""]);
}

#[test]
fn index_zero_in_a_one_based_file() {
    expect_parse_error(
        b"1 1 1 1.0\n1 0 1 1.0\n",
        2,
        &["index of mode 1 is 0", "1-based"],
    );
}

#[test]
fn index_beyond_a_declared_dimension() {
    expect_parse_error(
        b"3\n4 5 6\n1 1 1 1.0\n4 6 1 1.0\n",
        4,
        &["index 6 of mode 1", "beyond the declared dimension 5"],
    );
}

#[test]
fn index_beyond_two_to_the_32() {
    expect_parse_error(b"1 4294967297 1.0\n", 1, &["mode 1", "exceeds 2^32"]);
    expect_parse_error(
        b"1 99999999999999999999999999 1.0\n",
        1,
        &["mode 1", "exceeds 2^32"],
    );
    // 2^32 itself is the largest 1-based index.
    let (x, _) = tns::parse(b"1 4294967296 1.0\n", Path::new(FILE)).unwrap();
    assert_eq!(x.dims(), &[1, 1 << 32]);
}

#[test]
fn nan_and_infinite_values() {
    expect_parse_error(b"1 1 1.0\n2 2 NaN\n", 2, &["value is NaN"]);
    expect_parse_error(b"1 1 inf\n", 1, &["value is infinite"]);
    expect_parse_error(b"1 1 -Infinity\n", 1, &["value is infinite"]);
    expect_parse_error(b"1 1 1e400\n", 1, &["value is infinite"]);
}

#[test]
fn empty_tensor_names_the_last_line() {
    expect_parse_error(b"", 1, &["no data lines"]);
    expect_parse_error(b"# only\n\n# comments\n", 3, &["no data lines"]);
    expect_parse_error(b"2\n3 4\n# header only", 3, &["no data lines"]);
}

#[test]
fn header_with_a_zero_dimension() {
    expect_parse_error(
        b"3\n4 0 6\n1 1 1 1.0\n",
        2,
        &["header dimension of mode 1 is 0"],
    );
    expect_parse_error(b"0\n\n", 1, &["order 0"]);
}

#[test]
fn header_order_that_does_not_match() {
    expect_parse_error(
        b"3\n# dims\n4 5\n1 1 1 1.0\n",
        3,
        &["declares order 3", "has 2 fields"],
    );
    expect_parse_error(
        b"3\n4 5 6\n1 1 1.0\n",
        3,
        &["expected 4", "found 3", "header"],
    );
    expect_parse_error(b"2\n", 1, &["ends before the line of 2 dimensions"]);
    expect_parse_error(b"2\n7 x\n", 2, &["header dimension of mode 1", "\"x\""]);
}

#[test]
fn bytes_that_are_not_utf8() {
    expect_parse_error(b"1 1 1.0\n2 2 \xff\xfe\n", 2, &["value is not a number"]);
    expect_parse_error(b"1 \xc3 1.0\n", 1, &["index of mode 1"]);
}

#[test]
fn errors_deep_in_a_large_input_name_the_exact_line() {
    let x = generate(&GenSpec {
        dims: vec![500, 400, 300],
        nnz: 120_000,
        pattern: Pattern::Uniform,
        seed: 5,
    })
    .unwrap();
    let mut text = b"# header comment\n\n".to_vec();
    tns::write_to(&mut text, &x).unwrap();
    let lines: Vec<&[u8]> = text.split(|&b| b == b'\n').collect();
    // Break one line late in the file (past the first parallel chunk) and one after it.
    let bad = 97_531;
    let mut broken = Vec::new();
    for (k, l) in lines.iter().enumerate() {
        if k + 1 == bad {
            broken.extend_from_slice(b"1 2 0 5.0");
        } else if k + 1 == bad + 5_000 {
            broken.extend_from_slice(b"1 2 3");
        } else {
            broken.extend_from_slice(l);
        }
        if k + 1 < lines.len() {
            broken.push(b'\n');
        }
    }
    expect_parse_error(&broken, bad, &["index of mode 2 is 0"]);
}

#[test]
fn repeated_entries_summing_to_infinity() {
    let err = tns::parse(b"1 1 1e308\n1 1 1e308\n", Path::new(FILE)).unwrap_err();
    assert!(matches!(err, Error::NonFinite(_)), "{err:?}");
    let msg = err.to_string();
    assert!(msg.contains(FILE) && msg.contains("[1, 1]"), "{msg}");
}

#[test]
fn file_errors_name_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.tns");
    let err = tns::read(&missing).unwrap_err();
    assert!(matches!(err, Error::Io { ref path, .. } if path == &missing));
    assert!(err.to_string().contains("missing.tns"));

    let fake = dir.path().join("fake.tns.gz");
    std::fs::write(&fake, b"1 1 1.0\n").unwrap();
    let err = tns::read(&fake).unwrap_err();
    assert!(matches!(err, Error::Decompress { .. }), "{err:?}");
    assert!(err.to_string().contains("fake.tns.gz"));

    // A gzip stream cut short.
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    for k in 0..5_000 {
        writeln!(enc, "{} 2 3 1.5", k + 1).unwrap();
    }
    let gz = enc.finish().unwrap();
    let cut = dir.path().join("cut.tns.gz");
    std::fs::write(&cut, &gz[..gz.len() / 2]).unwrap();
    let err = tns::read(&cut).unwrap_err();
    assert!(matches!(err, Error::Decompress { .. }), "{err:?}");
    assert!(err.to_string().contains("cut.tns.gz"));

    // Errors inside a file name the file, not a placeholder.
    let bad = dir.path().join("bad.tns.gz");
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    enc.write_all(b"1 1 1\n1 1 x\n").unwrap();
    std::fs::write(&bad, enc.finish().unwrap()).unwrap();
    let err = tns::read(&bad).unwrap_err();
    assert!(matches!(err, Error::Parse { ref file, line: 2, .. } if file == &bad));
}

#[test]
fn bad_binary_files_are_rejected_with_a_reason() {
    let dir = tempfile::tempdir().unwrap();
    let x = generate(&GenSpec {
        dims: vec![20, 30, 40],
        nnz: 101,
        pattern: Pattern::Uniform,
        seed: 9,
    })
    .unwrap();
    let good = dir.path().join("good.sptb");
    binary::write(&good, &x).unwrap();
    let bytes = std::fs::read(&good).unwrap();
    let nnz = x.nnz();
    let values_at = bytes.len() - 8 * nnz;

    // Structural damage behind a correct checksum (a tool that writes bad files), so
    // each check is reached; and plain corruption, which the checksum finds.
    let resum = |mut b: Vec<u8>| {
        let sum = xxhash_rust::xxh3::xxh3_64(&b[40..]);
        b[32..40].copy_from_slice(&sum.to_le_bytes());
        b
    };
    let mut cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("empty", vec![], "fewer than"),
        ("truncated", bytes[..bytes.len() - 3].to_vec(), "need"),
        ("padded", [&bytes[..], &[0u8; 8]].concat(), "need"),
        ("magic", [b"NOTSPTB!", &bytes[8..]].concat(), "magic"),
    ];
    let mut version = bytes.clone();
    version[8] = 7;
    cases.push(("version", version, "version 7"));
    let mut version1 = bytes.clone();
    version1[8] = 1;
    cases.push(("version 1", version1, "sptmc convert"));
    let mut order0 = bytes.clone();
    order0[12..16].copy_from_slice(&0u32.to_le_bytes());
    cases.push(("order 0", order0, "order 0"));
    let mut huge = bytes.clone();
    huge[16..24].copy_from_slice(&u64::MAX.to_le_bytes());
    cases.push(("huge nnz", huge, "nnz"));
    let mut meta = bytes.clone();
    meta[24..32].copy_from_slice(&(u64::MAX / 2).to_le_bytes());
    cases.push(("huge metadata", meta, "metadata"));
    let mut flipped = bytes.clone();
    flipped[values_at + 3] ^= 0x40;
    cases.push(("flipped byte", flipped, "checksum"));
    let mut dim0 = bytes.clone();
    dim0[48..56].copy_from_slice(&0u64.to_le_bytes());
    cases.push(("dimension 0", resum(dim0), "dimension of mode 1"));
    let mut index = bytes.clone();
    let at = 40 + 8 * 3 + 4 * 5;
    index[at..at + 4].copy_from_slice(&20u32.to_le_bytes());
    cases.push(("index", resum(index), "index 20 of mode 0"));
    let mut nan = bytes.clone();
    nan[values_at..values_at + 8].copy_from_slice(&f64::NAN.to_le_bytes());
    cases.push(("NaN", resum(nan), "not finite"));

    for (name, data, word) in cases {
        let p = dir.path().join(format!("{}.sptb", name.replace(' ', "_")));
        std::fs::write(&p, &data).unwrap();
        let err = binary::read(&p).unwrap_err();
        let msg = err.to_string();
        match err {
            Error::BadBinary { path, reason } => {
                assert_eq!(path, p);
                assert!(reason.contains(word), "{name}: {reason:?} lacks {word:?}");
                assert!(msg.contains(&*p.to_string_lossy()), "{msg}");
            }
            other => panic!("{name}: expected BadBinary, got {other:?}"),
        }
    }
}

/// Mutates valid text: flips, inserts and deletes bytes, biased to the characters the
/// format uses.
fn mutate(rng: &mut Xoshiro256PlusPlus, text: &mut Vec<u8>) {
    const ALPHABET: &[u8] = b"0123456789 \t\r\n#.-+eEnaif\x00\xff";
    for _ in 0..rng.random_range(1..8) {
        if text.is_empty() {
            text.push(b'1');
        }
        let at = rng.random_range(0..text.len());
        let b = if rng.random_bool(0.8) {
            ALPHABET[rng.random_range(0..ALPHABET.len())]
        } else {
            rng.random()
        };
        match rng.random_range(0..3) {
            0 => text[at] = b,
            1 => text.insert(at, b),
            _ => {
                text.remove(at);
            }
        }
    }
}

#[test]
fn random_garbage_never_panics() {
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(0x5eed);
    let dir = tempfile::tempdir().unwrap();
    let seed_text = b"3\n10 10 10\n1 2 3 1.5\n# c\n4 5 6 -2e3\r\n10 10 10 7\n".to_vec();
    let mut failures = 0;
    for case in 0..400 {
        let data: Vec<u8> = match case % 4 {
            // Raw random bytes.
            0 => (0..rng.random_range(0..300))
                .map(|_| rng.random())
                .collect(),
            // Valid text with a few mutations.
            1 | 2 => {
                let mut t = seed_text.clone();
                mutate(&mut rng, &mut t);
                t
            }
            // A gzip stream, cut or corrupted, read through a file.
            _ => {
                let mut t = seed_text.clone();
                mutate(&mut rng, &mut t);
                let mut enc =
                    flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
                enc.write_all(&t).unwrap();
                let mut gz = enc.finish().unwrap();
                if rng.random_bool(0.5) {
                    gz.truncate(rng.random_range(0..gz.len()));
                } else {
                    let at = rng.random_range(0..gz.len());
                    gz[at] ^= rng.random_range(1..=255u8);
                }
                let p = dir.path().join("garbage.tns.gz");
                std::fs::write(&p, &gz).unwrap();
                if tns::read(&p).is_err() {
                    failures += 1;
                }
                let b = dir.path().join("garbage.sptb");
                std::fs::write(&b, &gz).unwrap();
                assert!(binary::read(&b).is_err());
                continue;
            }
        };
        let text_lines = data.split(|&b| b == b'\n').count();
        match tns::parse(&data, Path::new(FILE)) {
            Ok((x, report)) => {
                assert_eq!(x.nnz() + report.duplicates_summed, report.entries);
            }
            Err(Error::Parse { line, reason, .. }) => {
                failures += 1;
                assert!((1..=text_lines.max(1)).contains(&line), "line {line}");
                assert!(!reason.is_empty());
            }
            Err(Error::NonFinite(_)) => failures += 1,
            Err(other) => panic!("unexpected error kind {other:?}"),
        }
    }
    // Most garbage is rejected; the test must not be vacuous.
    assert!(failures > 200, "only {failures} inputs were rejected");
}
