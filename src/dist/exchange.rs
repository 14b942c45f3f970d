//! Moving what each rank read to the rank that holds it: the partition chosen from the
//! nonzeros' counts per index, then one all-to-all (per index array and the values,
//! 64-bit counts) and each rank's block in local indices.

use super::comm::{Channel, DistResult, Reduce};
use super::partition::{Partition, Scheme};
use super::read::Share;
use crate::error::Error;
use crate::tensor::CooTensor;
use std::path::Path;

/// A rank's block of the tensor and where it sits.
#[derive(Debug)]
pub struct Block {
    /// How the tensor is split.
    pub partition: Partition,
    /// The whole tensor's extents.
    pub dims: Vec<usize>,
    /// The nonzeros this rank holds, indices relative to its slabs (extents: the slab
    /// lengths, at least 1), duplicates summed.
    pub tensor: CooTensor,
    /// Per mode, the first row of this rank's slab.
    pub offsets: Vec<usize>,
    /// Entries merged into another with the same coordinates, over all ranks.
    pub duplicates: u64,
    /// Nonzeros over all ranks (after duplicates were summed).
    pub nnz: u64,
}

/// Splits the tensor read as `share` over the ranks by `scheme` and moves every entry
/// to its rank; `path` names the file in errors.
pub fn distribute(ch: &Channel, share: Share, scheme: Scheme, path: &Path) -> DistResult<Block> {
    let Share { entries, dims, .. } = share;
    let p = ch.size();
    let partition = match scheme {
        Scheme::Medium => {
            let counts: Vec<Vec<u64>> = entries
                .indices
                .iter()
                .zip(&dims)
                .map(|(ix, &d)| {
                    let mut c = vec![0u64; d];
                    for &i in ix {
                        c[i as usize] += 1;
                    }
                    ch.reduce_u64(&mut c, Reduce::Sum);
                    c
                })
                .collect();
            Partition::medium(p, &dims, &counts)
        }
        Scheme::Coarse => Partition::coarse(p, &dims),
    };
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
        tensor,
        offsets,
        duplicates: totals[0],
        nnz: totals[1],
    })
}
