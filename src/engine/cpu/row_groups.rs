//! Each mode's nonzeros grouped by row ([`RowGroups`]), the form the row-by-row
//! kernels read ([`super::rows`], [`super::mttkrp_rows`], [`super::ttmc_rows`],
//! [`super::phi_rows`], the completion session).
//!
//! [`RowGroups::build`] is a counting sort per mode, in parallel: every mode's rows
//! are cut into ranges, and one task per (mode, range) counts the nonzeros of its rows
//! and then writes them into its own slice of the grouped arrays. Each task visits the
//! whole tensor (decoding keys is cheap next to the scattered writes, which are what
//! the ranges share out), always in the tensor's stored order: the sparse part, then
//! the dense tiles. So the nonzeros of a row keep that order, whatever the number of
//! threads, and the row kernels' sums do not depend on it.

use super::completion::visit;
use super::kernel::Share;
use crate::error::Result;
use crate::hls::HlsTensor;
use crate::matrix::{check_alloc, zeroed_on_huge_pages};
use rayon::prelude::*;

/// Fewest rows a build task takes (fewer rows than this per worker run as one range).
const MIN_RANGE_ROWS: usize = 4096;

/// One mode's nonzeros grouped by row.
pub(super) struct RowGroups {
    /// Row `i`'s nonzeros are `ptr[i]..ptr[i + 1]`.
    ptr: Vec<usize>,
    /// Per nonzero, the indices of the other modes, in mode order (`order − 1` each).
    others: Vec<u32>,
    /// Per nonzero, its value minus the session's offset.
    values: Vec<f32>,
}

impl RowGroups {
    /// The rows' nonzero ranges: row `i`'s nonzeros are `ptr()[i]..ptr()[i + 1]`.
    pub(super) fn ptr(&self) -> &[usize] {
        &self.ptr
    }

    /// Per nonzero, the other modes' indices (`order − 1` each, in mode order).
    pub(super) fn others(&self) -> &[u32] {
        &self.others
    }

    /// Per nonzero, its value minus the offset it was built with.
    pub(super) fn values(&self) -> &[f32] {
        &self.values
    }

    /// Bytes it holds: offsets, indices and values.
    pub(super) fn bytes(&self) -> usize {
        self.ptr.len() * std::mem::size_of::<usize>() + 4 * (self.others.len() + self.values.len())
    }

    /// Stores each nonzero's other indices in the order `levels` (a permutation of
    /// `0..order − 1`: position `k` then holds the index that was at `levels[k]`) and
    /// orders each row's nonzeros by them lexicographically (so that nonzeros sharing
    /// the first level's index are consecutive: the fibers TTMc sums before its
    /// Kronecker products). `tasks` (whole rows `r0..r1`, covering every row, as
    /// [`Plan::row_tasks`]) run in parallel. Coordinates are unique, so the order is
    /// total and does not depend on the thread count.
    pub(super) fn sort_within_rows(&mut self, tasks: &[(usize, usize)], levels: &[usize]) {
        let d = match self.others.len().checked_div(self.values.len()) {
            Some(d) if d > 0 => d,
            _ => return,
        };
        let ptr = &self.ptr;
        let mut jobs = Vec::with_capacity(tasks.len());
        let (mut o, mut v) = (&mut self.others[..], &mut self.values[..]);
        for &(r0, r1) in tasks {
            let n = ptr[r1] - ptr[r0];
            let (mine_o, rest_o) = std::mem::take(&mut o).split_at_mut(n * d);
            let (mine_v, rest_v) = std::mem::take(&mut v).split_at_mut(n);
            (o, v) = (rest_o, rest_v);
            jobs.push((r0, r1, mine_o, mine_v));
        }
        jobs.into_par_iter().for_each_init(
            || (Vec::new(), Vec::new(), Vec::new()),
            |(perm, to, tv): &mut (Vec<usize>, Vec<u32>, Vec<f32>), (r0, r1, o, v)| {
                let base = ptr[r0];
                if levels.iter().enumerate().any(|(k, &l)| k != l) {
                    for e in o.chunks_exact_mut(d) {
                        to.clear();
                        to.extend(levels.iter().map(|&l| e[l]));
                        e.copy_from_slice(to);
                    }
                }
                for i in r0..r1 {
                    let (s, e) = (ptr[i] - base, ptr[i + 1] - base);
                    let key = |p: usize| &o[p * d..(p + 1) * d];
                    if (s + 1..e).all(|p| key(p - 1) <= key(p)) {
                        continue;
                    }
                    perm.clear();
                    perm.extend(s..e);
                    perm.sort_unstable_by(|&a, &b| key(a).cmp(key(b)));
                    to.clear();
                    tv.clear();
                    for &p in perm.iter() {
                        to.extend_from_slice(key(p));
                        tv.push(v[p]);
                    }
                    o[s * d..e * d].copy_from_slice(to);
                    v[s..e].copy_from_slice(tv);
                }
            },
        );
    }

    /// [`RowGroups::build`] with no offset, for the row-by-row MTTKRP and TTMc: `None`
    /// where the groups (`N² · 4` bytes per nonzero) would not fit in a quarter of the
    /// available memory, or the tensor has one mode (the callers then walk the HLS form
    /// instead).
    pub(super) fn build_if_room(hls: &HlsTensor) -> Result<Option<Vec<Self>>> {
        let (order, nnz) = (hls.order() as u64, hls.nnz() as u64);
        if order < 2 {
            return Ok(None);
        }
        let need = nnz * order * order * 4;
        let budget = crate::matrix::available_memory().map_or(u64::MAX, |a| a / 4);
        if need > budget {
            return Ok(None);
        }
        Self::build(hls, 0.0).map(Some)
    }

    /// Groups the nonzeros of `hls` (values minus `offset`) by their index in every
    /// mode: one [`RowGroups`] per mode, each row's nonzeros in the tensor's stored
    /// order.
    pub(super) fn build(hls: &HlsTensor, offset: f32) -> Result<Vec<Self>> {
        let (order, nnz) = (hls.order(), hls.nnz());
        check_alloc("the row-grouped nonzeros of ALS", nnz, order * order, 4)?;
        // Enough ranges over all modes for two tasks per worker.
        let workers = rayon::current_num_threads().max(1);
        let per_mode = (2 * workers).div_ceil(order).max(1);
        Ok((0..order)
            .into_par_iter()
            .map(|mode| Self::build_mode(hls, mode, offset, per_mode))
            .collect())
    }

    /// One mode's groups, its rows cut into at most `ranges` ranges of equal length.
    fn build_mode(hls: &HlsTensor, mode: usize, offset: f32, ranges: usize) -> Self {
        let (order, nnz, rows) = (hls.order(), hls.nnz(), hls.dims()[mode]);
        let d = order - 1;
        let k = ranges.min(rows / MIN_RANGE_ROWS).max(1);
        let bounds: Vec<usize> = (0..=k).map(|t| rows * t / k).collect();
        let whole = whole_share(hls);

        // Counts: `ptr[i + 1]` is row `i`'s count, each range counting its own rows.
        let mut ptr = vec![0usize; rows + 1];
        let mut counts = Vec::with_capacity(k);
        let mut rest = &mut ptr[1..];
        for t in 0..k {
            let (mine, tail) = std::mem::take(&mut rest).split_at_mut(bounds[t + 1] - bounds[t]);
            rest = tail;
            counts.push((bounds[t], mine));
        }
        counts.into_par_iter().for_each(|(r0, cnt)| {
            visit(hls, &whole, offset, |_, c, _| {
                if let Some(n) = cnt.get_mut((c[mode] as usize).wrapping_sub(r0)) {
                    *n += 1;
                }
            });
        });
        for i in 1..ptr.len() {
            ptr[i] += ptr[i - 1];
        }

        // Filled at scattered places, read row by row.
        let mut others: Vec<u32> = zeroed_on_huge_pages(nnz * d);
        let mut values: Vec<f32> = zeroed_on_huge_pages(nnz);
        let mut jobs = Vec::with_capacity(k);
        let (mut o, mut v) = (&mut others[..], &mut values[..]);
        for t in 0..k {
            let n = ptr[bounds[t + 1]] - ptr[bounds[t]];
            let (mine_o, rest_o) = std::mem::take(&mut o).split_at_mut(n * d);
            let (mine_v, rest_v) = std::mem::take(&mut v).split_at_mut(n);
            (o, v) = (rest_o, rest_v);
            jobs.push((bounds[t], bounds[t + 1], mine_o, mine_v));
        }
        let ptr_ref = &ptr;
        jobs.into_par_iter().for_each(|(r0, r1, o, v)| {
            let base = ptr_ref[r0];
            // Where the next nonzero of each row goes, relative to the range's start.
            let mut next: Vec<usize> = ptr_ref[r0..r1].iter().map(|&p| p - base).collect();
            visit(hls, &whole, offset, |_, c, x| {
                let Some(p) = next.get_mut((c[mode] as usize).wrapping_sub(r0)) else {
                    return;
                };
                let q = *p;
                *p += 1;
                v[q] = x;
                let dst = &mut o[q * d..(q + 1) * d];
                for (slot, (_, &ci)) in dst
                    .iter_mut()
                    .zip(c.iter().enumerate().filter(|&(m, _)| m != mode))
                {
                    *slot = ci;
                }
            });
        });
        RowGroups {
            ptr,
            others,
            values,
        }
    }
}

/// One share holding every nonzero: the sparse part, then the dense tiles.
fn whole_share(hls: &HlsTensor) -> Share {
    Share {
        sparse: (0, hls.sparse().nnz()),
        tiles: (0, hls.dense().map_or(0, |t| t.len())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tensor::generate::Pattern;

    /// Every mode's groups against a plain stable sort of the nonzeros in stored order
    /// (sparse part, then dense tiles), on 1, 3 and 8 workers: the same arrays, so a
    /// row's nonzeros keep the stored order whatever the thread count. The cases have
    /// dense tiles, and modes long enough to be cut into several ranges.
    #[test]
    fn groups_are_the_stable_sort_of_the_stored_order_on_any_thread_count() {
        let cases = [
            (
                vec![60, 50, 40],
                9000,
                Pattern::BlockDense {
                    tile_nnz: 300,
                    dense_share: 0.6,
                },
                16,
            ),
            (
                vec![40_000, 9000, 7],
                30_000,
                Pattern::PowerLaw { alpha: 0.8 },
                u32::MAX,
            ),
            (
                vec![30_000, 20_000, 12, 5],
                20_000,
                Pattern::Uniform,
                u32::MAX,
            ),
        ];
        for (k, (dims, nnz, pattern, threshold)) in cases.into_iter().enumerate() {
            let (x, hls) =
                super::super::generated_case(&dims, nnz, pattern, threshold, 40 + k as u64);
            assert_eq!(hls.dense().is_some_and(|d| !d.is_empty()), threshold == 16);
            let offset = 0.25;
            // The stored order, as one sequential visit sees it.
            let mut stored: Vec<(Vec<u32>, f32)> = Vec::new();
            visit(&hls, &whole_share(&hls), offset, |_, c, v| {
                stored.push((c.to_vec(), v))
            });
            assert_eq!(stored.len(), x.nnz());
            for threads in [1, 3, 8] {
                let pool = rayon::ThreadPoolBuilder::new()
                    .num_threads(threads)
                    .build()
                    .unwrap();
                let groups = pool.install(|| RowGroups::build(&hls, offset)).unwrap();
                for (mode, g) in groups.iter().enumerate() {
                    let mut want = stored.clone();
                    want.sort_by_key(|(c, _)| c[mode]);
                    let mut ptr = vec![0usize; dims[mode] + 1];
                    for (c, _) in &want {
                        ptr[c[mode] as usize + 1] += 1;
                    }
                    for i in 1..ptr.len() {
                        ptr[i] += ptr[i - 1];
                    }
                    let others: Vec<u32> = (want.iter())
                        .flat_map(|(c, _)| (0..c.len()).filter(|&m| m != mode).map(|m| c[m]))
                        .collect();
                    let values: Vec<f32> = want.iter().map(|&(_, v)| v).collect();
                    let what = format!("case {k}, mode {mode}, {threads} threads");
                    assert_eq!(g.ptr(), &ptr[..], "{what}");
                    assert_eq!(g.others(), &others[..], "{what}");
                    assert_eq!(g.values(), &values[..], "{what}");
                }
            }
        }
    }
}
