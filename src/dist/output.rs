//! Writing a model whose factors are spread over the ranks, without any rank holding a
//! whole factor: rank 0 writes each factor file's header, then receives the rows in
//! order, window by window (at most [`WINDOW_BYTES`] of rows at a time, each owner
//! sending the part of the window it owns), writes them and drops them. The files are
//! those a single process writes for the same values, byte for byte, and the folder
//! is written whole or not at all ([`StagedDir`]): a rank that fails midway ends the
//! run before the folder takes its final name.
//!
//! A factor leaves in the single process's arrangement ([`Arrangement`]): the
//! components in its order, each column scaled as it scales them, rounded to f32 as
//! its model stores them.

use super::comm::{Channel, Plain, Reduce};
use super::exchange::UsedIndices;
use super::partition::Partition;
use crate::error::{Error, Result};
use crate::model_io::{StagedDir, write_matrix_header, write_matrix_rows};
use std::io::{self, Write};
use std::ops::Range;
use std::path::Path;

/// The most bytes of factor rows (as f64) rank 0 receives and holds at once.
pub const WINDOW_BYTES: usize = 1 << 20;

/// How the single process arranges a factor before writing it: the output's column
/// `j` is column `perm[j]` of the factor, times `scale[perm[j]]` (in f64), rounded to
/// f32.
#[derive(Debug, Clone, PartialEq)]
pub struct Arrangement {
    /// The components in the order they are written.
    pub perm: Vec<usize>,
    /// Per mode, the factor of each column (by its index before `perm`); `None` leaves
    /// the values as they are.
    pub scale: Vec<Option<Vec<f64>>>,
}

impl Arrangement {
    /// Appends the output row of `row` (one row of the factor of `mode`) to `out`.
    fn push_row<T: Plain + Into<f64>>(&self, mode: usize, row: &[T], out: &mut Vec<f64>) {
        let rounded = |v: f64| f64::from(v as f32);
        match &self.scale[mode] {
            Some(s) => out.extend(self.perm.iter().map(|&c| rounded(row[c].into() * s[c]))),
            None => out.extend(self.perm.iter().map(|&c| rounded(row[c].into()))),
        }
    }
}

/// The components ordered by decreasing weight (stable, so ties keep their order), as
/// the single process orders them.
pub fn by_weight(weights: &[f64]) -> Vec<usize> {
    let mut perm: Vec<usize> = (0..weights.len()).collect();
    perm.sort_by(|&i, &j| weights[j].total_cmp(&weights[i]));
    perm
}

/// The sum over every row of a factor of `f(value)` per column, added in row order
/// exactly as one process adds them over the whole factor (`acc += f(v)`, row after
/// row): each owner continues the sum of the owners of the rows before its own, in
/// turn. `rows` are this rank's rows (`R` values each) of mode `m` of `part`.
pub fn ordered_column_sums<T: Plain + Into<f64>>(
    ch: &Channel,
    part: &Partition,
    m: usize,
    rows: &[T],
    r: usize,
    f: impl Fn(f64) -> f64,
) -> Vec<f64> {
    let mut acc = vec![0.0f64; r];
    for (owner, _) in owners_in_row_order(part, m) {
        let mut mine = vec![0.0f64; r];
        if owner == ch.rank() {
            mine.copy_from_slice(&acc);
            for row in rows.chunks_exact(r.max(1)) {
                for (a, &v) in mine.iter_mut().zip(row) {
                    *a += f(v.into());
                }
            }
        }
        // Every other rank adds +0.0, which leaves the owner's sums exact.
        ch.reduce_f64(&mut mine, Reduce::Sum);
        acc = mine;
    }
    acc
}

/// The ranks owning rows of mode `m`, with their rows, in row order (ranks owning no
/// row left out).
fn owners_in_row_order(part: &Partition, m: usize) -> Vec<(usize, Range<usize>)> {
    let mut v: Vec<(usize, Range<usize>)> = (0..part.ranks())
        .map(|j| (j, part.owned(m, j)))
        .filter(|(_, o)| !o.is_empty())
        .collect();
    v.sort_by_key(|(_, o)| o.start);
    v
}

/// Sends the rows of mode `m` to rank 0 window by window, every rank its `rows` (the
/// rows it owns, `R` values each); rank 0 writes them, arranged, after a header, to
/// `sink` (when it has one). Collective. On rank 0 a write that fails leaves the rest
/// of the rows received and dropped, so that every rank finishes the exchange, and
/// gives that error. With `tensor_rows` (the tensor's row of each of the run's, and
/// its extent), the file has the tensor's rows, zero where the run holds none.
pub fn stream_factor<T: Plain + Into<f64>>(
    ch: &Channel,
    part: &Partition,
    m: usize,
    rows: &[T],
    arr: &Arrangement,
    tensor_rows: Option<(&[u32], usize)>,
    sink: Option<&mut dyn Write>,
) -> io::Result<()> {
    let window = (WINDOW_BYTES / (8 * arr.perm.len().max(1))).max(1);
    stream_rows(ch, part, m, (rows, tensor_rows), arr, sink, window)
}

/// [`stream_factor`] with windows of `window` rows.
fn stream_rows<T: Plain + Into<f64>>(
    ch: &Channel,
    part: &Partition,
    m: usize,
    (rows, tensor_rows): (&[T], Option<(&[u32], usize)>),
    arr: &Arrangement,
    mut sink: Option<&mut dyn Write>,
    window: usize,
) -> io::Result<()> {
    let r = arr.perm.len();
    let dim = part.bounds(m).last().copied().unwrap_or(0) as usize;
    // The tensor's rows the file has, and the next of them to write.
    let (extent, mut next) = (tensor_rows.map_or(dim, |(_, d)| d), 0usize);
    let me = ch.rank();
    let mine = part.owned(m, me);
    debug_assert_eq!(rows.len(), mine.len() * r);
    let mut failed: Option<io::Error> = None;
    let mut write = |sink: &mut Option<&mut dyn Write>,
                     what: &mut dyn FnMut(&mut dyn Write) -> io::Result<()>| {
        if let Some(w) = sink.as_deref_mut()
            && let Err(e) = what(w)
        {
            failed = Some(e);
            *sink = None;
        }
    };
    if me == 0 {
        write(&mut sink, &mut |w| {
            write_matrix_header(w, &format!("factor of mode {m}"), extent, r)
        });
    }
    // Zero rows (the tensor's rows the run holds none of), a window's worth at a time.
    let zeros = vec![0.0f64; window.min(extent).max(1) * r];
    let owners = owners_in_row_order(part, m);
    let mut text = Vec::with_capacity(window.min(dim) * r);
    for lo in (0..dim).step_by(window) {
        let win = lo..(lo + window).min(dim);
        // The rows of `o` in the window (empty where they do not meet).
        let cut = |o: &Range<usize>| {
            let start = o.start.max(win.start);
            start..o.end.min(win.end).max(start)
        };
        let here = cut(&mine);
        let send: Vec<T> = if here.is_empty() {
            Vec::new()
        } else {
            rows[(here.start - mine.start) * r..(here.end - mine.start) * r].to_vec()
        };
        let mut counts = vec![0u64; ch.size()];
        counts[0] = send.len() as u64;
        let (got, from) = ch.all_to_all(&send, &counts);
        drop(send);
        if me != 0 {
            continue;
        }
        // Every rank's piece of the window, placed by the rows it owns.
        let mut at = vec![0usize; ch.size()];
        let mut k = 0usize;
        for (j, &n) in from.iter().enumerate() {
            at[j] = k;
            k += n as usize;
        }
        text.clear();
        let mut k = win.start;
        for (j, o) in &owners {
            let piece = cut(o);
            let vals = &got[at[*j]..at[*j] + piece.len() * r];
            for row in vals.chunks_exact(r.max(1)) {
                if let Some((used, _)) = tensor_rows {
                    // The zero rows before this one, after the rows so far.
                    let to = used[k] as usize;
                    if to > next {
                        write(&mut sink, &mut |w| write_matrix_rows(w, &text, r));
                        text.clear();
                        zeros_up_to(&mut next, to, window, |n| {
                            write(&mut sink, &mut |w| write_matrix_rows(w, &zeros[..n * r], r))
                        });
                    }
                    next = to + 1;
                }
                arr.push_row(m, row, &mut text);
                k += 1;
            }
        }
        write(&mut sink, &mut |w| write_matrix_rows(w, &text, r));
    }
    if me == 0 && tensor_rows.is_some() {
        zeros_up_to(&mut next, extent, window, |n| {
            write(&mut sink, &mut |w| write_matrix_rows(w, &zeros[..n * r], r))
        });
    }
    failed.map_or(Ok(()), Err)
}

/// Calls `emit(n)` for runs of at most `window` rows from `next` up to `to`, moving
/// `next` there.
fn zeros_up_to(next: &mut usize, to: usize, window: usize, mut emit: impl FnMut(usize)) {
    while *next < to {
        let n = (to - *next).min(window.max(1));
        emit(n);
        *next += n;
    }
}

/// The factors of a model spread over the ranks, and their arrangement.
pub struct SpreadFactors<'a, T> {
    /// How the tensor is split.
    pub partition: &'a Partition,
    /// Per mode, the rows this rank owns (`R` values each).
    pub rows: Vec<&'a [T]>,
    /// The single process's arrangement.
    pub arrangement: Arrangement,
    /// The modes held on their used rows, where some are: their files have every row
    /// of the tensor.
    pub tensor_rows: Option<&'a UsedIndices>,
}

/// Writes the factor files of `factors` into a new model folder `dir` (on rank 0 only;
/// every rank takes part): collective. Rank 0 gets the folder, still to be completed
/// (its other files) and committed, or the error that stopped the writing (every rank
/// has then still finished the exchange); the other ranks get `Ok(None)`.
pub fn write_factors<T: Plain + Into<f64>>(
    ch: &Channel,
    dir: &Path,
    factors: &SpreadFactors<'_, T>,
) -> Result<Option<StagedDir>> {
    let mut staged = if ch.rank() == 0 {
        Some(StagedDir::begin(dir))
    } else {
        None
    };
    let mut failed: Option<Error> = None;
    for (m, rows) in factors.rows.iter().enumerate() {
        let (p, a) = (factors.partition, &factors.arrangement);
        let t =
            (factors.tensor_rows).and_then(|u| u.used[m].as_deref().map(|used| (used, u.dims[m])));
        match staged.as_ref() {
            Some(Ok(s)) if failed.is_none() => {
                let mut streamed = false;
                let done = s.write(&format!("factor-{m}.txt"), |w| {
                    streamed = true;
                    stream_factor(ch, p, m, rows, a, t, Some(w))
                });
                if !streamed {
                    // The file could not be created: the rows still go through.
                    let _ = stream_factor(ch, p, m, rows, a, t, None);
                }
                if let Err(e) = done {
                    failed = Some(e);
                }
            }
            _ => {
                let _ = stream_factor(ch, p, m, rows, a, t, None);
            }
        }
    }
    match staged.take() {
        None => Ok(None),
        Some(Err(e)) => Err(e),
        Some(Ok(_)) if failed.is_some() => Err(failed.expect("checked")),
        Some(Ok(s)) => Ok(Some(s)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::matrix::Matrix;
    use crate::model_io::write_matrix_to;

    /// One rank, windows of a few rows: the streamed file is the whole matrix's text.
    #[test]
    fn a_factor_streamed_by_windows_is_the_whole_matrixs_text() {
        let dims = [3 * 5 + 2, 4, 5];
        let counts: Vec<Vec<u64>> = dims.iter().map(|&d| vec![1; d]).collect();
        let part = Partition::medium(1, &dims, &counts);
        let ch = Channel::single();
        let f = Matrix::random(dims[0], 3, 5);
        let scale = vec![0.5, 3.0, 1.0 / 7.0];
        let arr = Arrangement {
            perm: vec![2, 0, 1],
            scale: vec![Some(scale.clone()), None, None],
        };
        let mut got = Vec::new();
        stream_rows(&ch, &part, 0, (f.data(), None), &arr, Some(&mut got), 5).unwrap();
        let want = Matrix::<f64>::from_fn(dims[0], 3, |i, j| {
            let c = arr.perm[j];
            f64::from((f64::from(f.get(i, c)) * scale[c]) as f32)
        });
        let mut text = Vec::new();
        write_matrix_to(&mut text, "factor of mode 0", &want).unwrap();
        assert_eq!(
            String::from_utf8(got).unwrap(),
            String::from_utf8(text).unwrap()
        );
    }

    #[test]
    fn ordered_sums_are_the_sequential_sums() {
        let dims = [50usize, 3];
        let counts: Vec<Vec<u64>> = dims.iter().map(|&d| vec![1; d]).collect();
        let part = Partition::medium(1, &dims, &counts);
        let f = Matrix::random(50, 4, 2);
        let got = ordered_column_sums(&Channel::single(), &part, 0, f.data(), 4, |v| v * v);
        let mut want = [0.0f64; 4];
        for i in 0..50 {
            for (c, w) in want.iter_mut().enumerate() {
                *w += f64::from(f.get(i, c)) * f64::from(f.get(i, c));
            }
        }
        assert_eq!(got, want);
    }

    /// A write that fails leaves no folder behind and says why.
    #[test]
    fn a_failed_write_leaves_no_folder() {
        let dims = [20usize, 3];
        let counts: Vec<Vec<u64>> = dims.iter().map(|&d| vec![1; d]).collect();
        let part = Partition::medium(1, &dims, &counts);
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("m");
        let (a, b) = (Matrix::random(20, 2, 1), Matrix::random(3, 2, 2));
        let spread = SpreadFactors {
            partition: &part,
            rows: vec![a.data(), b.data()],
            arrangement: Arrangement {
                perm: vec![0, 1],
                scale: vec![None, None],
            },
            tensor_rows: None,
        };
        // A file where the folder would be created: refused before any row is sent.
        std::fs::write(&dir, "x").unwrap();
        let e = write_factors(&Channel::single(), &dir, &spread).unwrap_err();
        assert!(e.to_string().contains("not a folder"), "{e}");
        std::fs::remove_file(&dir).unwrap();
        let staged = write_factors(&Channel::single(), &dir, &spread)
            .unwrap()
            .expect("rank 0 holds the folder");
        // Dropped before the commit: nothing under the final name, no temporary.
        drop(staged);
        assert_eq!(std::fs::read_dir(root.path()).unwrap().count(), 0);
        let staged = write_factors(&Channel::single(), &dir, &spread)
            .unwrap()
            .unwrap();
        staged.commit().unwrap();
        let text = std::fs::read_to_string(dir.join("factor-1.txt")).unwrap();
        assert_eq!(text.lines().count(), 4);
    }
}
