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
    if scheme == Scheme::Medium || cp_rank.is_some() {
        counts = (entries.indices.iter().zip(&dims))
            .map(|(ix, &d)| {
                let mut c = vec![0u64; d];
                for &i in ix {
                    c[i as usize] += 1;
                }
                ch.reduce_u64(&mut c, Reduce::Sum);
                c
            })
            .collect();
    }
    let rows = cp_rank.and_then(|rank| used_indices(&counts, &dims, rank));
    let dims = match &rows {
        Some(r) => {
            renumber(&mut entries.indices, &mut counts, r);
            (r.used.iter().zip(&r.dims))
                .map(|(u, &d)| u.as_ref().map_or(d, Vec::len))
                .collect()
        }
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

/// The modes a CP model of rank `rank` runs on their used rows, from every row's count
/// of nonzeros over all ranks (`counts`, per mode), where that pays
/// ([`modes_to_renumber`]).
fn used_indices(counts: &[Vec<u64>], dims: &[usize], rank: usize) -> Option<UsedIndices> {
    let empty: Vec<usize> = counts
        .iter()
        .map(|c| c.iter().filter(|&&n| n == 0).count())
        .collect();
    let nnz = counts.first().map_or(0, |c| c.iter().sum::<u64>()) as usize;
    let which = modes_to_renumber(&empty, dims, nnz, |_| rank, |_| 1)?;
    let used = (counts.iter().zip(&which))
        .map(|(c, &w)| {
            w.then(|| {
                (c.iter().enumerate())
                    .filter(|(_, n)| **n > 0)
                    .map(|(i, _)| i as u32)
                    .collect()
            })
        })
        .collect();
    Some(UsedIndices {
        dims: dims.to_vec(),
        used,
    })
}

/// This rank's `indices` (per mode) and the `counts` per row renumbered to the used rows
/// of the modes `rows` renumbers.
fn renumber(indices: &mut [Vec<u32>], counts: &mut [Vec<u64>], rows: &UsedIndices) {
    for ((ix, c), used) in indices.iter_mut().zip(counts).zip(&rows.used) {
        let Some(used) = used else { continue };
        for i in ix.iter_mut() {
            *i = used.binary_search(i).expect("a used row") as u32;
        }
        c.retain(|&n| n > 0);
    }
}
