//! Moving what each rank read to the rank that holds it: the partition chosen from the
//! nonzeros' counts per index, then one all-to-all (per index array and the values,
//! 64-bit counts) and each rank's block in local indices.
//!
//! For CP-ALS the counts also say which modes are mostly empty: as for one process
//! (`decomp::used_rows`), those run on their used rows ([`UsedIndices`]), every rank
//! renumbering the indices it read before they are sent, and the partition is of the
//! used rows.

use super::comm::{Channel, DistResult, Reduce};
use super::partition::{Partition, Scheme};
use super::read::Share;
use crate::decomp::used_rows::modes_to_renumber;
use crate::error::Error;
use crate::tensor::CooTensor;
use std::ops::Range;
use std::path::Path;

/// The modes a distributed run holds on their used rows only: the tensor's own
/// extents, and per renumbered mode its used rows, ascending (row `k` of the run is
/// the tensor's row `used[k]`).
#[derive(Debug, Clone)]
pub struct UsedIndices {
    /// The tensor's own extents.
    pub dims: Vec<usize>,
    /// Per mode, the tensor's rows the run holds; `None` where it holds every row.
    pub used: Vec<Option<Vec<u32>>>,
}

impl UsedIndices {
    /// The tensor's rows that the run's rows `rows` of mode `m` stand for, so that
    /// consecutive ranges of run rows stand for consecutive ranges of the tensor's
    /// rows covering all of them: from the first row's (0 for the run's first) up to
    /// the next range's first (the extent after the run's last). Empty for no rows.
    pub fn span(&self, m: usize, rows: Range<usize>) -> Range<usize> {
        let Some(used) = &self.used[m] else {
            return rows;
        };
        if rows.is_empty() {
            return 0..0;
        }
        let at = |k: usize| match k {
            0 => 0,
            k if k >= used.len() => self.dims[m],
            k => used[k] as usize,
        };
        at(rows.start)..at(rows.end)
    }

    /// A line saying which modes `what` runs on their used rows.
    pub fn note(&self, what: &str) -> String {
        let modes: Vec<String> = (self.used.iter().zip(&self.dims).enumerate())
            .filter_map(|(m, (u, d))| {
                u.as_ref()
                    .map(|u| format!("mode {m}: {} of {d} rows", u.len()))
            })
            .collect();
        format!(
            "{what} runs on the rows with nonzeros ({}); the others are zero in the model",
            modes.join(", ")
        )
    }
}

/// A rank's block of the tensor and where it sits.
#[derive(Debug)]
pub struct Block {
    /// How the tensor is split.
    pub partition: Partition,
    /// The extents the run holds: the whole tensor's, its used rows' where modes run
    /// on those ([`Block::rows`]).
    pub dims: Vec<usize>,
    /// The modes held on their used rows, where some are.
    pub rows: Option<UsedIndices>,
    /// The nonzeros this rank holds, indices relative to its slabs (extents: the slab
    /// lengths, at least 1), duplicates summed.
    pub tensor: CooTensor,
    /// Per mode, the first row of this rank's slab.
    pub offsets: Vec<usize>,
    /// Entries merged into another with the same coordinates, over all ranks.
    pub duplicates: u64,
    /// Nonzeros over all ranks (after duplicates were summed).
    pub nnz: u64,
    /// Which factor rows the medium-grained exchange moves.
    pub exchange: Exchange,
}

/// Which factor rows the medium-grained exchange moves between the members of a layer
/// (the coarse-grained variant always moves whole factors).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Exchange {
    /// The rows each member's block uses (the default).
    UsedRows,
    /// Every row of the slab (for comparison).
    Slabs,
}

impl Block {
    /// The largest magnitude of the tensor's values, over every rank's block (0 for a
    /// tensor without values).
    pub fn largest_magnitude(&self, ch: &Channel) -> f64 {
        let mut most = [(self.tensor.values().iter()).fold(0.0f64, |m, v| m.max(v.abs()))];
        ch.reduce_f64(&mut most, Reduce::Max);
        most[0]
    }

    /// The tensor's own extents.
    pub fn tensor_dims(&self) -> &[usize] {
        self.rows.as_ref().map_or(&self.dims, |r| &r.dims)
    }
}

/// Splits the tensor read as `share` over the ranks by `scheme` and moves every entry
/// to its rank; `path` names the file in errors. With `cp_rank`, a CP model of that
/// rank runs on the used rows of the modes where that pays, as for one process.
pub fn distribute(
    ch: &Channel,
    share: Share,
    scheme: Scheme,
    path: &Path,
    cp_rank: Option<usize>,
) -> DistResult<Block> {
    let Share {
        mut entries, dims, ..
    } = share;
    let p = ch.size();
    let mut counts: Vec<Vec<u64>> = Vec::new();
    let mut rows = None;
    if scheme == Scheme::Medium || cp_rank.is_some() {
        let per_row = row_counts(ch, &entries.indices, &dims);
        rows = cp_rank.and_then(|rank| used_indices(&per_row, &dims, rank));
        if let Some(r) = &rows {
            renumber(&mut entries.indices, r);
        }
        counts = ch.agree(dense_counts(per_row, rows.as_ref(), &dims))?;
    }
    let dims = match &rows {
        Some(r) => (r.used.iter().zip(&r.dims))
            .map(|(u, &d)| u.as_ref().map_or(d, Vec::len))
            .collect(),
        None => dims,
    };
    let partition = match scheme {
        Scheme::Medium => Partition::medium(p, &dims, &counts),
        Scheme::Coarse => Partition::coarse(p, &dims),
    };
    drop(counts);
    let order = dims.len();
    let n = entries.values.len();
    // Counting sort by destination, stable (file order kept within a destination).
    let mut coords = vec![0u32; order];
    let dest: Vec<u32> = (0..n)
        .map(|k| {
            for (m, c) in coords.iter_mut().enumerate() {
                *c = entries.indices[m][k];
            }
            partition.owner(&coords) as u32
        })
        .collect();
    let mut counts = vec![0u64; p];
    for &d in &dest {
        counts[d as usize] += 1;
    }
    let mut at: Vec<usize> = counts
        .iter()
        .scan(0usize, |s, &c| {
            let v = *s;
            *s += c as usize;
            Some(v)
        })
        .collect();
    let mut order_of = vec![0usize; n];
    for (k, &d) in dest.iter().enumerate() {
        order_of[at[d as usize]] = k;
        at[d as usize] += 1;
    }
    drop(dest);
    let me = ch.rank();
    let offsets: Vec<usize> = (0..order).map(|m| partition.slab(m, me).start).collect();
    let mut local = Vec::with_capacity(order);
    for (ix, &base) in entries.indices.iter().zip(&offsets) {
        let send: Vec<u32> = order_of.iter().map(|&k| ix[k]).collect();
        let (mut got, _) = ch.all_to_all(&send, &counts);
        let base = base as u32;
        for i in &mut got {
            *i -= base;
        }
        local.push(got);
    }
    let send: Vec<f64> = order_of.iter().map(|&k| entries.values[k]).collect();
    drop(entries);
    let (values, _) = ch.all_to_all(&send, &counts);
    drop(send);
    let extents: Vec<usize> = (0..order)
        .map(|m| partition.slab(m, me).len().max(1))
        .collect();
    let built = CooTensor::new(extents, local, values).map(|mut t| {
        let merged = t.sum_duplicates();
        (t, merged)
    });
    let (tensor, merged) = ch.agree(built.and_then(|(t, merged)| {
        if let Some(k) = t.values().iter().position(|v| !v.is_finite()) {
            let c: Vec<u64> = t
                .coords(k)
                .iter()
                .zip(&offsets)
                .map(|(&i, &o)| i as u64 + o as u64 + 1)
                .collect();
            return Err(Error::NonFinite(format!(
                "{}: the repeated entries at coordinates {c:?} (1-based) sum to {}",
                path.display(),
                t.values()[k]
            )));
        }
        Ok((t, merged))
    }))?;
    let mut totals = [merged as u64, tensor.nnz() as u64];
    ch.reduce_u64(&mut totals, Reduce::Sum);
    Ok(Block {
        partition,
        dims,
        rows,
        tensor,
        offsets,
        duplicates: totals[0],
        nnz: totals[1],
        exchange: Exchange::UsedRows,
    })
}

/// Every row's count of nonzeros over all ranks in one mode.
#[derive(Debug, Clone, PartialEq)]
enum RowCounts {
    /// A count per row of the mode.
    Dense(Vec<u64>),
    /// A mode longer than [`SPARSE_COUNTS`] times the tensor's nonzeros: its rows with
    /// nonzeros, ascending, and their counts. A count per row would cost more than the
    /// tensor there, on every rank (32 GiB for a mode of 2³² rows).
    Sparse { rows: Vec<u32>, counts: Vec<u64> },
}

/// A mode's rows are counted sparsely ([`RowCounts::Sparse`]) when it has more than
/// this many times as many rows as the tensor has nonzeros: more than half of its rows
/// are then empty, so a CP model always holds it on its used rows.
const SPARSE_COUNTS: u64 = 2;

/// Per mode, every row's count of the nonzeros all ranks read (`indices`, per mode, of
/// a tensor of extents `dims`). Collective.
fn row_counts(ch: &Channel, indices: &[Vec<u32>], dims: &[usize]) -> Vec<RowCounts> {
    let mut total = [indices.first().map_or(0, Vec::len) as u64];
    ch.reduce_u64(&mut total, Reduce::Sum);
    (indices.iter().zip(dims))
        .map(|(ix, &d)| {
            if d as u64 > SPARSE_COUNTS.saturating_mul(total[0]) {
                let (rows, counts) = runs_of(ix.clone());
                let (rows, _) = ch.all_gather(&rows);
                let (counts, _) = ch.all_gather(&counts);
                let mut pairs: Vec<(u32, u64)> = rows.into_iter().zip(counts).collect();
                pairs.sort_unstable_by_key(|&(r, _)| r);
                let (mut rows, mut counts) = (Vec::new(), Vec::new());
                for same in pairs.chunk_by(|a, b| a.0 == b.0) {
                    rows.push(same[0].0);
                    counts.push(same.iter().map(|p| p.1).sum());
                }
                RowCounts::Sparse { rows, counts }
            } else {
                let mut c = vec![0u64; d];
                for &i in ix {
                    c[i as usize] += 1;
                }
                ch.reduce_u64(&mut c, Reduce::Sum);
                RowCounts::Dense(c)
            }
        })
        .collect()
}

/// The distinct values of `ix`, ascending, and how often each occurs.
fn runs_of(mut ix: Vec<u32>) -> (Vec<u32>, Vec<u64>) {
    ix.sort_unstable();
    let (mut rows, mut counts) = (Vec::new(), Vec::new());
    for chunk in ix.chunk_by(|a, b| a == b) {
        rows.push(chunk[0]);
        counts.push(chunk.len() as u64);
    }
    (rows, counts)
}

/// The modes a CP model of rank `rank` runs on their used rows, from every row's count
/// of nonzeros over all ranks (`counts`, per mode), where that pays
/// ([`modes_to_renumber`]).
fn used_indices(counts: &[RowCounts], dims: &[usize], rank: usize) -> Option<UsedIndices> {
    let empty: Vec<usize> = (counts.iter().zip(dims))
        .map(|(c, &d)| match c {
            RowCounts::Dense(c) => c.iter().filter(|&&n| n == 0).count(),
            RowCounts::Sparse { rows, .. } => d - rows.len(),
        })
        .collect();
    let nnz = counts.first().map_or(0, |c| match c {
        RowCounts::Dense(c) | RowCounts::Sparse { counts: c, .. } => c.iter().sum::<u64>(),
    }) as usize;
    let which = modes_to_renumber(&empty, dims, nnz, |_| rank, |_| 1)?;
    let used = (counts.iter().zip(&which))
        .map(|(c, &w)| {
            w.then(|| match c {
                RowCounts::Dense(c) => (c.iter().enumerate())
                    .filter(|(_, n)| **n > 0)
                    .map(|(i, _)| i as u32)
                    .collect(),
                RowCounts::Sparse { rows, .. } => rows.clone(),
            })
        })
        .collect();
    Some(UsedIndices {
        dims: dims.to_vec(),
        used,
    })
}

/// This rank's `indices` (per mode) renumbered to the used rows of the modes `rows`
/// renumbers.
fn renumber(indices: &mut [Vec<u32>], rows: &UsedIndices) {
    for (ix, used) in indices.iter_mut().zip(&rows.used) {
        let Some(used) = used else { continue };
        for i in ix.iter_mut() {
            *i = used.binary_search(i).expect("a used row") as u32;
        }
    }
}

/// Per mode, a count per row the run holds: of its used rows where `rows` renumbers the
/// mode, else of every row of the tensor (extents `dims`), which a mode counted
/// sparsely then needs written out (checked against the memory available first).
fn dense_counts(
    counts: Vec<RowCounts>,
    rows: Option<&UsedIndices>,
    dims: &[usize],
) -> crate::error::Result<Vec<Vec<u64>>> {
    let held = |m: usize| rows.is_some_and(|r| r.used[m].is_some());
    let mut plan = crate::memplan::MemoryPlan::new(
        "partitioning the tensor's rows over the ranks",
        "renumber the long modes' indices to their rows with nonzeros",
    );
    for (m, c) in counts.iter().enumerate() {
        if let RowCounts::Sparse { .. } = c
            && !held(m)
        {
            plan.add(format!("a count per row of mode {m}"), dims[m] as u128, 8);
        }
    }
    plan.check()?;
    Ok((counts.into_iter().enumerate())
        .map(|(m, c)| match c {
            RowCounts::Dense(mut c) => {
                if held(m) {
                    c.retain(|&n| n > 0);
                }
                c
            }
            RowCounts::Sparse { rows: r, counts } if !held(m) => {
                let mut c = vec![0u64; dims[m]];
                for (&i, n) in r.iter().zip(counts) {
                    c[i as usize] = n;
                }
                c
            }
            RowCounts::Sparse { counts, .. } => counts,
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A mode's counts, whichever way they were taken, as a count per row.
    fn per_row(c: &RowCounts, d: usize) -> Vec<u64> {
        match c {
            RowCounts::Dense(c) => c.clone(),
            RowCounts::Sparse { rows, counts } => {
                let mut all = vec![0u64; d];
                for (&r, &n) in rows.iter().zip(counts) {
                    all[r as usize] = n;
                }
                all
            }
        }
    }

    #[test]
    fn long_modes_are_counted_by_their_used_rows_and_give_the_same_counts() {
        let ch = Channel::single();
        // 7 nonzeros: mode 0 (extent 15 > 2·7) is counted sparsely, modes 1 and 2 not.
        let indices = vec![
            vec![14, 3, 3, 0, 14, 9, 3],
            vec![0, 1, 1, 2, 3, 4, 5],
            vec![1, 1, 0, 0, 1, 0, 1],
        ];
        let dims = [15, 14, 2];
        let counts = row_counts(&ch, &indices, &dims);
        assert_eq!(
            counts[0],
            RowCounts::Sparse {
                rows: vec![0, 3, 9, 14],
                counts: vec![1, 3, 1, 2]
            }
        );
        assert!(matches!(counts[1], RowCounts::Dense(_)));
        for (m, c) in counts.iter().enumerate() {
            let mut want = vec![0u64; dims[m]];
            for &i in &indices[m] {
                want[i as usize] += 1;
            }
            assert_eq!(per_row(c, dims[m]), want, "mode {m}");
        }
        // CP at rank 2 holds mode 0 (11 of 15 rows empty) and mode 1 (8 of 14) on
        // their used rows; mode 2 has none empty.
        let rows = used_indices(&counts, &dims, 2).expect("modes on their used rows");
        assert_eq!(rows.used[0].as_deref(), Some(&[0, 3, 9, 14][..]));
        assert_eq!(rows.used[1].as_deref(), Some(&[0, 1, 2, 3, 4, 5][..]));
        assert_eq!(rows.used[2], None);
        let mut renumbered = indices.clone();
        renumber(&mut renumbered, &rows);
        assert_eq!(renumbered[0], vec![3, 1, 1, 0, 3, 2, 1]);
        assert_eq!(renumbered[2], indices[2]);
        let dense = dense_counts(counts.clone(), Some(&rows), &dims).unwrap();
        assert_eq!(
            dense,
            vec![vec![1, 3, 1, 2], vec![1, 2, 1, 1, 1, 1], vec![3, 4]]
        );
        // Held on every row, the sparse mode is written out row by row.
        let want: Vec<Vec<u64>> = (counts.iter().zip(dims))
            .map(|(c, d)| per_row(c, d))
            .collect();
        assert_eq!(dense_counts(counts, None, &dims).unwrap(), want);
    }

    #[test]
    fn a_count_per_row_of_a_mode_longer_than_memory_is_refused_by_the_plan() {
        let counts = vec![RowCounts::Sparse {
            rows: vec![0, u32::MAX],
            counts: vec![1, 1],
        }];
        let dims = [usize::MAX / 4];
        match dense_counts(counts, None, &dims) {
            Err(crate::error::Error::Memory { largest, .. }) => {
                assert!(largest.contains("a count per row of mode 0"), "{largest}")
            }
            other => panic!("{other:?}"),
        }
    }
}
