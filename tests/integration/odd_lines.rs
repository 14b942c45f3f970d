//! Lines that are not what they seem: carriage returns that do not end a line (CR-only
//! line ends made a 4-line file one nonzero of order 7), a line of millions of fields,
//! binary data. Each is refused with one line naming the line; CRLF and LF still read.

use crate::common;

use sptmc::tensor::tns;
use std::path::Path;

fn parse(text: &[u8]) -> sptmc::Result<sptmc::CooTensor> {
    tns::parse(text, Path::new("t.tns")).map(|r| r.0)
}

fn refused(text: &[u8], line: usize, words: &[&str]) {
    let e = parse(text).unwrap_err().to_string();
    assert!(e.starts_with(&format!("t.tns:{line}: ")), "{e}");
    for w in words {
        assert!(e.contains(w), "{w:?} not in {e}");
    }
    assert_eq!(e.lines().count(), 1, "{e}");
}

#[test]
fn line_ends_lf_and_crlf_read_alike() {
    let lf = b"1 1 1 1\n2 2 2 2\n3 3 3 3\n4 4 4 4\n";
    let want = parse(lf).unwrap();
    assert_eq!(want.nnz(), 4);
    for text in [
        &b"1 1 1 1\r\n2 2 2 2\r\n3 3 3 3\r\n4 4 4 4\r\n"[..],
        // Mixed LF and CRLF, no line end at the end, a CR at the very end.
        b"1 1 1 1\r\n2 2 2 2\n3 3 3 3\r\n4 4 4 4",
        b"1 1 1 1\n2 2 2 2\n3 3 3 3\n4 4 4 4\r",
        b"# comment\r\n1 1 1 1\r\n2 2 2 2 # note\r\n3 3 3 3\n\r\n4 4 4 4\n",
    ] {
        let x = parse(text).unwrap();
        assert_eq!(x.dims(), want.dims(), "{:?}", String::from_utf8_lossy(text));
        assert_eq!(x.values(), want.values());
    }
}

#[test]
fn carriage_returns_inside_lines_are_refused() {
    // CR-only line ends: one line of 16 fields, before.
    refused(
        b"1 1 1 1\r2 2 2 2\r3 3 3 3\r4 4 4 4\r",
        1,
        &["carriage return", "tr"],
    );
    // CR-only after some LF lines: the line number is the first bad one.
    refused(
        b"1 1 1 1\n2 2 2 2\n3 3 3 3\r4 4 4 4\r",
        3,
        &["carriage return"],
    );
    // A CR between fields, in a comment, doubled before the LF.
    refused(b"1 1 1 1\n2 2\r2 2\n", 2, &["carriage return"]);
    refused(b"# a\rcomment\n1 1 1 1\n", 1, &["carriage return"]);
    refused(b"1 1 1 1\r\r\n", 1, &["carriage return"]);
}

#[test]
fn lines_beyond_any_tensor_are_refused() {
    // 2.5 M fields on one 5 MB line: an order-2,499,999 tensor, before.
    let long = "1 ".repeat(2_500_000) + "\n";
    refused(long.as_bytes(), 1, &["longer than 1 MiB"]);
    // A long comment line after data.
    let comment = format!("1 1 1\n#{}\n", "x".repeat(tns::MAX_LINE + 1));
    refused(comment.as_bytes(), 2, &["longer than 1 MiB"]);
    // Under 1 MiB but of an order far beyond any real tensor.
    let wide = "1 ".repeat(5000) + "1\n";
    refused(wide.as_bytes(), 1, &["order of 5000", "at most 1024"]);
    refused(b"5000\n1 1 1\n", 1, &["declares order 5000"]);
    // The largest order allowed still reads.
    let max = "1 ".repeat(tns::MAX_ORDER) + "2\n";
    assert_eq!(parse(max.as_bytes()).unwrap().order(), tns::MAX_ORDER);
}

#[test]
fn binary_data_is_refused() {
    refused(b"1 1 1 1\n\x00\x01\x02\n", 2, &["NUL", "binary"]);
    refused(b"\x00", 1, &["NUL"]);
    let mut noise = Vec::new();
    let mut s: u32 = 7;
    for _ in 0..100_000 {
        s = s.wrapping_mul(1664525).wrapping_add(1013904223);
        noise.push((s >> 24) as u8);
    }
    // Noise: binary, whatever stray line ends come first.
    refused(&noise, 1, &["NUL", "binary"]);
    for seed in 1..50u32 {
        let mut s = seed;
        let noise: Vec<u8> = (0..4096)
            .map(|_| {
                s = s.wrapping_mul(1664525).wrapping_add(1013904223);
                (s >> 24) as u8
            })
            .collect();
        let e = parse(&noise).unwrap_err().to_string();
        assert!(e.contains("binary"), "{e}");
    }
}

/// From files: the CLI refuses CR-only text (plain and gzipped), binary data and `/dev/urandom`
/// (read forever, before) with one line, within seconds.
#[test]
fn the_command_line_refuses_them_at_once() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let cr = dir.join("cr.tns");
    std::fs::write(&cr, b"1 1 1 1\r2 2 2 2\r3 3 3 3\r4 4 4 4\r").unwrap();
    let crgz = dir.join("cr.tns.gz");
    {
        use std::io::Write;
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        e.write_all(b"1 1 1 1\r2 2 2 2\r").unwrap();
        std::fs::write(&crgz, e.finish().unwrap()).unwrap();
    }
    // Binary data whose first two bytes read like a line end in the middle of a line:
    // /dev/urandom starts so about once in 256 runs.
    let noise = dir.join("noise.tns");
    std::fs::write(&noise, b"\rA\x07\x00\xff\x00 1 1 1 1\n").unwrap();
    let cases: [(&Path, &[&str]); 4] = [
        (&cr, &["cr.tns:1", "carriage return"]),
        (&crgz, &["cr.tns.gz:1", "carriage return"]),
        (&noise, &["noise.tns:1", "binary"]),
        (Path::new("/dev/urandom"), &["/dev/urandom", "binary"]),
    ];
    for (file, words) in cases {
        for extra in [&[][..], &["--no-cache"][..]] {
            let mut c = common::sptmc_command(dir);
            c.arg("info").arg(file).args(extra);
            let start = std::time::Instant::now();
            let o = common::output_within(c, 60);
            common::assert_one_error_line(&o, words);
            assert!(start.elapsed().as_secs() < 20, "{file:?} took long");
        }
    }
}
