//! Plain-text files for factor matrices and Tucker cores, loadable with
//! `numpy.loadtxt`: one matrix row per line, entries separated by single spaces,
//! `#` comment lines (a header saying what the file holds and its shape).
//!
//! A model written to a folder `DIR` (by `sptmc cp|tucker --out DIR`):
//! - `DIR/factor-<m>.txt`: the `I_m × R_m` factor of mode `m`;
//! - CP: `DIR/weights.txt`, one λ per line;
//! - Tucker: `DIR/core.txt`, the core unfolded along mode 0: `R_0` lines of
//!   `R_1·…·R_{N-1}` entries, last mode fastest (`numpy.loadtxt(...).reshape(ranks)`);
//! - `DIR/model.json`: kind, dims, ranks, fits per iteration, timings.
//!
//! Results are written whole or not at all ([`write_model`], [`write_matrix`]; see
//! [`atomic`]).

pub mod atomic;

use crate::error::{Error, Result};
use crate::matrix::Matrix;
pub use atomic::{ModelFile, StagedDir, check_replaceable, write_file_atomically, write_model_dir};
use std::io::{self, BufRead, BufReader, Write};
use std::path::{Path, PathBuf};

/// Writes `m` to the file `path` with a `#` header line `header`, whole or not at all
/// (an earlier `path` stays as it was when writing fails).
pub fn write_matrix<T>(path: &Path, header: &str, m: &Matrix<T>) -> Result<()>
where
    T: Copy + Default + Into<f64> + Sync,
{
    write_file_atomically(path, |w| write_matrix_to(w, header, m))
}

/// Writes `m` as text with a `#` header line `header` to `w` (f32 entries as the f64
/// values they are).
pub fn write_matrix_to<T>(w: &mut dyn Write, header: &str, m: &Matrix<T>) -> io::Result<()>
where
    T: Copy + Default + Into<f64> + Sync,
{
    write_matrix_header(w, header, m.rows(), m.cols())?;
    if m.cols() == 0 {
        // Rows without values: empty lines.
        return (0..m.rows()).try_for_each(|_| writeln!(w));
    }
    write_matrix_rows(w, m.data(), m.cols())
}

/// Writes the `#` header line of a `rows × cols` matrix, what [`write_matrix_to`]
/// writes first; [`write_matrix_rows`] then writes the rows, in as many pieces as
/// the caller likes (a matrix that is never whole in memory is written by pieces of
/// rows, the same text as when written at once).
pub fn write_matrix_header(
    w: &mut dyn Write,
    header: &str,
    rows: usize,
    cols: usize,
) -> io::Result<()> {
    writeln!(w, "# {header} ({rows} x {cols})")
}

/// Writes `data`, whole rows of `cols` values in row-major order, one line per row, as
/// [`write_matrix_to`] writes them: each value the shortest decimal that reads back as
/// the same f64 (`zmij`, as `serde_json` writes numbers), separated by single spaces.
/// Pieces of rows are formatted in parallel and written in order, a bounded batch at a
/// time (a factor of millions of rows is gigabytes of text).
pub fn write_matrix_rows<T>(w: &mut dyn Write, data: &[T], cols: usize) -> io::Result<()>
where
    T: Copy + Into<f64> + Sync,
{
    use rayon::prelude::*;
    let cols = cols.max(1);
    let piece = (PIECE_VALUES / cols).max(1) * cols;
    for batch in data.chunks(piece * PIECES_PER_BATCH) {
        let texts: Vec<Vec<u8>> = batch
            .par_chunks(piece)
            .map(|rows| format_rows(rows, cols))
            .collect();
        for t in &texts {
            w.write_all(t)?;
        }
    }
    Ok(())
}

/// Values formatted per parallel piece of [`write_matrix_rows`] (whole rows).
const PIECE_VALUES: usize = 1 << 14;
/// Pieces formatted before they are written (about 25 bytes a value: some 20 MB).
const PIECES_PER_BATCH: usize = 64;

/// The text of whole rows of `cols` values.
fn format_rows<T: Copy + Into<f64>>(data: &[T], cols: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(data.len() * 20);
    let mut buf = zmij::Buffer::new();
    for row in data.chunks_exact(cols) {
        for (j, &x) in row.iter().enumerate() {
            if j > 0 {
                out.push(b' ');
            }
            out.extend_from_slice(buf.format(x.into()).as_bytes());
        }
        out.push(b'\n');
    }
    out
}

/// Writes a model into the folder `dir`, whole or not at all: `factor-<m>.txt` for each
/// of `factors`, the `(name, header, matrix)` of `matrices` (weights, a core), and
/// `summary` as `model.json`, last. An existing `dir` is replaced whole (see
/// [`check_replaceable`] for which may be); on failure it is left as it was.
pub fn write_model(
    dir: &Path,
    factors: &[Matrix],
    matrices: &[(&str, String, Matrix<f64>)],
    summary: &serde_json::Value,
) -> Result<()> {
    let mut files: Vec<ModelFile<'_>> = Vec::new();
    for (m, f) in factors.iter().enumerate() {
        files.push(ModelFile {
            name: format!("factor-{m}.txt"),
            fill: Box::new(move |w| write_matrix_to(w, &format!("factor of mode {m}"), f)),
        });
    }
    for (name, header, matrix) in matrices {
        files.push(ModelFile {
            name: (*name).to_string(),
            fill: Box::new(move |w| write_matrix_to(w, header, matrix)),
        });
    }
    files.push(ModelFile {
        name: "model.json".into(),
        fill: Box::new(move |w| write_summary(w, summary)),
    });
    write_model_dir(dir, &files)
}

/// Completes the model folder `staged`, whose factor files are written: the `(name,
/// header, matrix)` of `matrices` and `summary` as `model.json`, as [`write_model`]
/// writes them; then puts it in place.
pub fn finish_model(
    staged: StagedDir,
    matrices: &[(&str, String, Matrix<f64>)],
    summary: &serde_json::Value,
) -> Result<()> {
    for (name, header, matrix) in matrices {
        staged.write(name, |w| write_matrix_to(w, header, matrix))?;
    }
    staged.write("model.json", |w| write_summary(w, summary))?;
    staged.commit()
}

/// `summary` as a model folder's `model.json` holds it.
fn write_summary(w: &mut dyn Write, summary: &serde_json::Value) -> io::Result<()> {
    serde_json::to_writer_pretty(&mut *w, summary).map_err(io::Error::other)?;
    writeln!(w)
}

/// Reads a matrix written by [`write_matrix`] (or any whitespace-separated table with
/// `#` comments). Errors name the file, line and reason.
pub fn read_matrix(path: &Path) -> Result<Matrix<f64>> {
    let f = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
    let mut data = Vec::new();
    let mut cols = None;
    let mut rows = 0;
    for (k, line) in BufReader::new(f).lines().enumerate() {
        let line = line.map_err(|e| Error::io(path, e))?;
        let t = line.trim();
        if t.is_empty() || t.starts_with('#') {
            continue;
        }
        let bad = |reason: String| Error::Parse {
            file: path.to_path_buf(),
            line: k + 1,
            reason,
        };
        let mut n = 0;
        for field in t.split_whitespace() {
            let v: f64 = field
                .parse()
                .map_err(|_| bad(format!("{field:?} is not a number")))?;
            if !v.is_finite() {
                return Err(bad(format!("{field} is not a finite number")));
            }
            data.push(v);
            n += 1;
        }
        match cols {
            None => cols = Some(n),
            Some(c) if c != n => {
                return Err(bad(format!("{n} columns, the rows before have {c}")));
            }
            _ => {}
        }
        rows += 1;
    }
    Matrix::new(rows, cols.unwrap_or(0), data)
}

/// The file of mode `m`'s factor in a model folder.
pub fn factor_path(dir: &Path, m: usize) -> PathBuf {
    dir.join(format!("factor-{m}.txt"))
}

/// Writes factors as `factor-<m>.txt` into `dir` (created if needed).
pub fn write_factors(dir: &Path, factors: &[Matrix]) -> Result<()> {
    std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    for (m, f) in factors.iter().enumerate() {
        write_matrix(&factor_path(dir, m), &format!("factor of mode {m}"), f)?;
    }
    Ok(())
}

/// The CP model in the folder `dir` as initial factors (f64): `factor-<m>.txt` for `m`
/// in `0..order`, and where the folder has a `weights.txt` (as `--out` writes it), the
/// weights multiplied into the first factor's columns. A written model has unit-norm
/// columns and its scale in the weights, so these factors are the model itself: a run
/// started from them resumes it.
pub fn read_cp_init(dir: &Path, order: usize) -> Result<Vec<Matrix<f64>>> {
    let mut factors: Vec<Matrix<f64>> = (0..order)
        .map(|m| read_matrix(&factor_path(dir, m)))
        .collect::<Result<_>>()?;
    let path = dir.join("weights.txt");
    if !path.exists() {
        return Ok(factors);
    }
    let w = read_matrix(&path)?;
    let rank = factors.first().map_or(0, Matrix::cols);
    if w.cols() != 1 || w.rows() != rank {
        return Err(Error::Parse {
            file: path,
            line: 0,
            reason: format!(
                "{} x {} weights; the factors have {rank} columns, so one weight a line, {rank} lines",
                w.rows(),
                w.cols()
            ),
        });
    }
    if let Some(f) = factors.first_mut() {
        for row in f.data_mut().chunks_exact_mut(rank.max(1)) {
            for (v, &l) in row.iter_mut().zip(w.data()) {
                *v *= l;
            }
        }
    }
    Ok(factors)
}

/// Reads `factor-<m>.txt` for `m` in `0..order` from `dir`.
pub fn read_factors(dir: &Path, order: usize) -> Result<Vec<Matrix>> {
    (0..order)
        .map(|m| Ok(read_matrix(&factor_path(dir, m))?.to_f32()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn factors_round_trip_and_bad_rows_name_the_line() {
        let dir = tempfile::tempdir().unwrap();
        let dir = dir.path();
        let f = vec![Matrix::random(5, 3, 1), Matrix::random(4, 3, 2)];
        write_factors(dir, &f).unwrap();
        assert_eq!(read_factors(dir, 2).unwrap(), f);
        std::fs::write(factor_path(dir, 0), "# x\n1 2 3\n4 5\n").unwrap();
        let e = read_factors(dir, 1).unwrap_err().to_string();
        assert!(
            e.contains("factor-0.txt:3") && e.contains("2 columns"),
            "{e}"
        );
    }

    #[test]
    fn factors_are_written_so_that_f64_readers_get_the_exact_f32_values() {
        let dir = tempfile::tempdir().unwrap();
        let f = Matrix::random(3, 2, 9);
        write_factors(dir.path(), &[f.clone(), Matrix::zeros(1, 2)]).unwrap();
        let text = std::fs::read_to_string(factor_path(dir.path(), 0)).unwrap();
        let rows: Vec<&str> = text.lines().filter(|l| !l.starts_with('#')).collect();
        let back: Vec<f64> = rows
            .iter()
            .flat_map(|l| l.split_whitespace())
            .map(|s| s.parse::<f64>().unwrap())
            .collect();
        let want: Vec<f64> = f.data().iter().map(|&v| f64::from(v)).collect();
        assert_eq!(back, want);
        assert_eq!(rows.len(), 3);
        assert!(factor_path(dir.path(), 1).is_file());
    }

    /// Values at f64's extremes read back as the same bits (shortest round-trip
    /// digits), and a matrix of more rows than one batch of parallel pieces is written
    /// in row order: the text of each row formatted alone.
    #[test]
    fn written_values_read_back_exactly_and_rows_stay_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let extremes = [
            0.0,
            -0.0,
            f64::MIN_POSITIVE,
            5e-324,
            f64::MAX,
            -f64::MAX,
            1e21,
            1e-7,
            -1.5,
            f64::from(0.1f32),
            f64::from(f32::MAX),
            f64::from(f32::MIN_POSITIVE),
            123456789.0,
            std::f64::consts::PI,
        ];
        let m = Matrix::new(7, 2, extremes.to_vec()).unwrap();
        let path = dir.path().join("x.txt");
        write_matrix(&path, "extremes", &m).unwrap();
        let back = read_matrix(&path).unwrap();
        let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(back.data()), bits(m.data()));

        let cols = 3;
        let rows = (PIECE_VALUES * PIECES_PER_BATCH) / cols + 1000;
        let big = Matrix::random(rows, cols, 9);
        let mut text = Vec::new();
        write_matrix_rows(&mut text, big.data(), cols).unwrap();
        let mut want = Vec::new();
        for row in big.data().chunks_exact(cols) {
            want.extend_from_slice(&format_rows(row, cols));
        }
        assert_eq!(text, want);
    }

    /// A model's weights are multiplied into its first factor; weights that do not
    /// match the factors' columns are an error naming weights.txt.
    #[test]
    fn cp_init_multiplies_the_weights_in_and_checks_their_count() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let f = vec![Matrix::random(4, 2, 1), Matrix::random(3, 2, 2)];
        write_factors(d, &f).unwrap();
        let plain = read_cp_init(d, 2).unwrap();
        assert_eq!(plain[0], f[0].to_f64());
        std::fs::write(d.join("weights.txt"), "# CP weights\n2\n-0.5\n").unwrap();
        let got = read_cp_init(d, 2).unwrap();
        for i in 0..4 {
            assert_eq!(got[0].get(i, 0), 2.0 * f64::from(f[0].get(i, 0)));
            assert_eq!(got[0].get(i, 1), -0.5 * f64::from(f[0].get(i, 1)));
        }
        assert_eq!(got[1], f[1].to_f64());
        std::fs::write(d.join("weights.txt"), "1\n2\n3\n").unwrap();
        let e = read_cp_init(d, 2).unwrap_err().to_string();
        assert!(e.contains("weights.txt") && e.contains("2 columns"), "{e}");
    }
}
