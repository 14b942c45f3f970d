//! Reading and writing `.tns` text and the binary form: round trips, the accepted
//! variants of the format, and the shared real data sets. (The cache: tests/integration/cache.rs.)

use crate::common;
use sptmc::CooTensor;
use sptmc::tensor::binary;
use sptmc::tensor::generate::{GenSpec, Pattern, generate};
use sptmc::tensor::tns;

use common::{shared_data, shared_files};
use std::io::Write;
use std::path::Path;

fn sample() -> CooTensor {
    generate(&GenSpec {
        dims: vec![37, 5, 90],
        nnz: 2_000,
        pattern: Pattern::PowerLaw { alpha: 1.0 },
        seed: 11,
    })
    .unwrap()
}

fn parse_str(text: &str) -> (CooTensor, tns::ReadReport) {
    tns::parse(text.as_bytes(), Path::new("mem.tns")).unwrap()
}

#[test]
fn plain_text_round_trip_is_exact() {
    let dir = tempfile::tempdir().unwrap();
    let x = sample();
    let p = dir.path().join("x.tns");
    tns::write(&p, &x).unwrap();
    let (y, report) = tns::read(&p).unwrap();
    assert_eq!(y, x);
    assert_eq!(report.entries, x.nnz());
    assert_eq!(report.lines, x.nnz());
    assert_eq!(report.duplicates_summed, 0);
    assert_eq!(report.header, None);
    assert_eq!(report.bytes, std::fs::metadata(&p).unwrap().len());
}

#[test]
fn gzip_round_trip_is_exact() {
    let dir = tempfile::tempdir().unwrap();
    let x = sample();
    let p = dir.path().join("x.tns.gz");
    tns::write(&p, &x).unwrap();
    let raw = std::fs::read(&p).unwrap();
    assert_eq!(&raw[..2], &[0x1f, 0x8b], "a .gz name gives a gzip file");
    let (y, report) = tns::read(&p).unwrap();
    assert_eq!(y, x);
    assert!(report.bytes > raw.len() as u64, "bytes counts the text");
}

#[test]
fn gzip_is_detected_by_content_and_multi_member_files_read_whole() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("plainname.tns");
    let mut f = std::fs::File::create(&p).unwrap();
    for part in ["1 1 2.5\n", "2 3 -1\n"] {
        let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        enc.write_all(part.as_bytes()).unwrap();
        f.write_all(&enc.finish().unwrap()).unwrap();
    }
    drop(f);
    let (x, _) = tns::read(&p).unwrap();
    assert_eq!(x.dims(), &[2, 3]);
    assert_eq!(x.values(), &[2.5, -1.0]);
}

#[test]
fn awkward_values_survive_a_round_trip_bit_for_bit() {
    let vals = [
        0.1,
        1.0 / 3.0,
        -7.0,
        1e-310,
        f64::MAX,
        -f64::MIN_POSITIVE,
        123456789.125,
        6.02214076e23,
    ];
    let x = CooTensor::from_entries(
        vec![vals.len()],
        vals.iter().enumerate().map(|(i, &v)| ([i as u32], v)),
    )
    .unwrap();
    let mut text = Vec::new();
    tns::write_to(&mut text, &x).unwrap();
    let (y, _) = tns::parse(&text, Path::new("vals.tns")).unwrap();
    for (a, b) in x.values().iter().zip(y.values()) {
        assert_eq!(a.to_bits(), b.to_bits());
    }
}

#[test]
fn written_text_is_one_based_without_header() {
    let x = CooTensor::from_entries(vec![2, 3], [([0u32, 2], 4.0), ([1, 0], 0.5)]).unwrap();
    let mut text = Vec::new();
    tns::write_to(&mut text, &x).unwrap();
    assert_eq!(String::from_utf8(text).unwrap(), "1 3 4\n2 1 0.5\n");
}

#[test]
fn comments_blank_lines_tabs_and_crlf_are_accepted() {
    let text =
        "# a comment\r\n\r\n  # indented comment\n1\t2 3   1.5\r\n\n2 1\t1 -2e-1 \r\n   \t\n# end";
    let (x, report) = parse_str(text);
    assert_eq!(x.dims(), &[2, 2, 3]);
    assert_eq!(x.nnz(), 2);
    assert_eq!(x.coords(0), vec![0, 1, 2]);
    assert_eq!(x.values(), &[1.5, -0.2]);
    assert_eq!(report.lines, 8);
    assert_eq!(report.entries, 2);
}

#[test]
fn header_variant_declares_dimensions() {
    let text = "3\n10 20 30\n1 2 3 1.0\n4 5 6 2.0\n";
    let (x, report) = parse_str(text);
    assert_eq!(x.dims(), &[10, 20, 30]);
    assert_eq!(report.header, Some(vec![10, 20, 30]));
    assert_eq!(report.entries, 2);
    // With comments before and between the header lines.
    let (y, _) = parse_str("# made by a tool\n3\n# dims follow\n10 20 30\n1 2 3 1.0\n4 5 6 2.0");
    assert_eq!(y, x);
}

#[test]
fn order_one_and_header_order_one() {
    let (x, _) = parse_str("3 1.5\n1 2\n");
    assert_eq!(x.dims(), &[3]);
    assert_eq!(x.values(), &[2.0, 1.5]);
    let (y, r) = parse_str("1\n9\n3 1.5\n");
    assert_eq!(y.dims(), &[9]);
    assert_eq!(r.header, Some(vec![9]));
}

#[test]
fn duplicates_are_summed_and_counted() {
    let (x, report) = parse_str("1 1 1\n2 2 5\n1 1 2\n2 2 -1\n1 1 0.5\n3 1 1\n");
    assert_eq!(report.entries, 6);
    assert_eq!(report.duplicates_summed, 3);
    assert_eq!(x.nnz(), 3);
    assert!(x.is_sorted_unique());
    assert_eq!(x.values(), &[3.5, 4.0, 1.0]);
}

#[test]
fn dims_are_the_largest_index_per_mode() {
    let (x, _) = parse_str("5 1 1 1\n1 7 1 1\n2 2 4 1\n");
    assert_eq!(x.dims(), &[5, 7, 4]);
}

#[test]
fn large_input_parses_in_chunks_like_sequentially() {
    // Big enough to be split into several chunks; the last line has no line end.
    let x = generate(&GenSpec {
        dims: vec![1000, 3000, 70, 9],
        nnz: 150_000,
        pattern: Pattern::Uniform,
        seed: 3,
    })
    .unwrap();
    let mut text = Vec::new();
    tns::write_to(&mut text, &x).unwrap();
    text.pop();
    let (y, report) = tns::parse(&text, Path::new("big.tns")).unwrap();
    assert_eq!(y, x);
    assert_eq!(report.lines, x.nnz());
}

#[test]
fn progress_reaches_the_file_size() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("x.tns.gz");
    tns::write(&p, &sample()).unwrap();
    let size = std::fs::metadata(&p).unwrap().len();
    let mut calls = Vec::new();
    tns::read_with_progress(&p, &mut |done, total| calls.push((done, total))).unwrap();
    assert!(!calls.is_empty());
    assert!(calls.windows(2).all(|w| w[0].0 <= w[1].0));
    assert_eq!(*calls.last().unwrap(), (size, size));
}

#[test]
fn binary_round_trip_is_exact() {
    let dir = tempfile::tempdir().unwrap();
    for (k, x) in [
        sample(),
        CooTensor::from_entries(vec![4], [([3u32], 1.0)]).unwrap(),
    ]
    .into_iter()
    .enumerate()
    {
        let p = dir.path().join(format!("x{k}.sptb"));
        binary::write(&p, &x).unwrap();
        assert_eq!(std::fs::metadata(&p).unwrap().len() % 8, 0);
        assert_eq!(binary::read(&p).unwrap(), x);
    }
}

/// `(file, dims, nnz)` for every data set listed in SOURCES.md.
fn listed_sets(dir: &Path) -> Vec<(String, Vec<usize>, usize)> {
    let md = std::fs::read_to_string(dir.join("SOURCES.md")).unwrap();
    let mut out = Vec::new();
    for line in md.lines() {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        if cells.len() < 8 || !cells[1].ends_with(".tns.gz") {
            continue;
        }
        let dims = cells[5]
            .split('x')
            .map(|d| d.trim().parse().unwrap())
            .collect();
        let digits: String = cells[6]
            .split_whitespace()
            .next()
            .unwrap()
            .chars()
            .filter(|c| *c != ',')
            .collect();
        out.push((cells[1].to_string(), dims, digits.parse().unwrap()));
    }
    out
}

#[test]
fn shared_data_sets_read_with_the_listed_shape() {
    let Some(dir) = shared_data() else { return };
    let sets = listed_sets(&dir);
    let on_disk = shared_files(&dir).len();
    assert_eq!(sets.len(), on_disk, "every shared file is listed once");
    for (file, dims, nnz) in sets {
        let (x, report) = tns::read(&dir.join(&file)).unwrap();
        assert_eq!(x.nnz(), nnz, "{file}");
        assert_eq!(x.dims(), &dims[..], "{file}");
        assert_eq!(
            report.duplicates_summed, 0,
            "{file}: duplicates were summed upstream"
        );
        assert!(x.is_sorted_unique(), "{file}");
    }
}
