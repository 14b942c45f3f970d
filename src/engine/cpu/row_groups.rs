//! Each mode's nonzeros grouped by row ([`RowGroups`]), the form the row-by-row
//! kernels read ([`super::rows`], [`super::mttkrp_rows`], [`super::ttmc_rows`],
//! [`super::phi_rows`], the completion session).
//!
//! [`RowGroups::build`] is a stable sort of the nonzeros by row, one mode after the
//! other, in two passes that each keep their writes local (a counting sort straight
//! into a long mode's rows writes every nonzero at a random place of arrays of hundreds
//! of MB, and its row counters miss the cache too):
//! 1. the tensor, cut into chunks in its stored order (the sparse part, then the dense
//!    tiles), is scattered into buckets of consecutive rows (at most [`MAX_BUCKETS`],
//!    so that every bucket's write position stays in cache), each chunk into its own
//!    slice of every bucket, the chunks' slices in chunk order;
//! 2. each bucket, a few thousand rows whose nonzeros fit in cache, is sorted by row
//!    with a counting sort of its own.
//!
//! Both passes are stable, so a row's nonzeros keep the stored order whatever the
//! number of threads, and the row kernels' sums do not depend on it. The modes are
//! built one after the other, or side by side on a tensor small enough that one
//! mode's chunks would leave workers idle ([`row_groups_side_by_side`]).

use super::completion::visit;
use super::kernel::{Share, shares};
use crate::error::Result;
use crate::hls::HlsTensor;
use crate::matrix::{check_alloc, zeroed_on_huge_pages};
use crate::memplan::{ROW_GROUPS_CHUNK_NNZ, row_groups_side_by_side};
use rayon::prelude::*;

/// Most buckets of consecutive rows the first pass scatters into: their write
/// positions (a cache line per bucket and array) stay in L2.
const MAX_BUCKETS: usize = 1024;

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
    /// [`Plan::row_tasks`](super::rows::Plan::row_tasks)) run in parallel. Coordinates are unique, so the order is
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
        let workers = rayon::current_num_threads().max(1);
        Ok(Self::build_in(
            hls,
            offset,
            (nnz / ROW_GROUPS_CHUNK_NNZ).clamp(1, 4 * workers),
        ))
    }

    /// [`RowGroups::build`] with the tensor's parts cut into `n` chunks each.
    fn build_in(hls: &HlsTensor, offset: f32, n: usize) -> Vec<Self> {
        let chunks = stored_chunks(hls, n);
        let dims = hls.dims();
        // Per mode, buckets of `1 << shift` rows, at most MAX_BUCKETS of them.
        let shifts: Vec<usize> = (dims.iter())
            .map(|&rows| {
                (0..usize::BITS as usize)
                    .find(|&s| rows.div_ceil(1usize << s) <= MAX_BUCKETS)
                    .unwrap_or(usize::BITS as usize - 1)
            })
            .collect();
        // Pass 1a, every mode in one visit: each chunk's count per mode and bucket.
        let counts: Vec<Vec<Vec<usize>>> = chunks
            .par_iter()
            .map(|share| {
                let mut n: Vec<Vec<usize>> = (dims.iter().zip(&shifts))
                    .map(|(&rows, &s)| vec![0usize; rows.div_ceil(1 << s).max(1)])
                    .collect();
                visit(hls, share, offset, |_, c, _| {
                    for ((n, &i), &s) in n.iter_mut().zip(c).zip(&shifts) {
                        n[(i as usize) >> s] += 1;
                    }
                });
                n
            })
            .collect();
        // Then each mode, in parallel: a mode's row labels are the only memory the
        // build holds besides the groups. One mode at a time, unless the tensor is too
        // small for one mode's chunks (of at least ROW_GROUPS_CHUNK_NNZ nonzeros, but
        // in tests) to keep the workers busy.
        let mode = |mode: usize| {
            let counts: Vec<&[usize]> = counts.iter().map(|c| &c[mode][..]).collect();
            Self::build_mode(hls, mode, offset, &chunks, shifts[mode], &counts)
        };
        if row_groups_side_by_side(hls.nnz(), rayon::current_num_threads()) {
            (0..hls.order()).into_par_iter().map(mode).collect()
        } else {
            (0..hls.order()).map(mode).collect()
        }
    }

    /// One mode's groups: the chunks (in stored order, `counts[k][b]` of chunk `k`'s
    /// nonzeros in bucket `b`) scattered into buckets of `1 << shift` consecutive rows,
    /// then each bucket sorted by row.
    fn build_mode(
        hls: &HlsTensor,
        mode: usize,
        offset: f32,
        chunks: &[Share],
        shift: usize,
        counts: &[&[usize]],
    ) -> Self {
        let (order, nnz, rows) = (hls.order(), hls.nnz(), hls.dims()[mode]);
        let d = order - 1;
        let buckets = rows.div_ceil(1 << shift).max(1);
        let bucket_of = |i: u32| (i as usize) >> shift;
        // Where each bucket starts, and each chunk's share of it.
        let mut starts = Vec::with_capacity(buckets + 1);
        starts.push(0usize);
        for b in 0..buckets {
            let n: usize = counts.iter().map(|c| c[b]).sum();
            starts.push(starts[b] + n);
        }

        // Filled at a bucket's next place per chunk, then sorted within buckets.
        let mut others: Vec<u32> = zeroed_on_huge_pages(nnz * d);
        let mut values: Vec<f32> = zeroed_on_huge_pages(nnz);
        // Per nonzero, its row's position within its bucket; none where every bucket is
        // one row (a mode of at most MAX_BUCKETS rows), already grouped by the scatter.
        let mut labels: Vec<u32> = if shift > 0 {
            zeroed_on_huge_pages(nnz)
        } else {
            Vec::new()
        };

        // Pass 1b: every chunk into its own slice of every bucket.
        {
            let mut dests: Vec<Vec<Dest>> = (0..chunks.len())
                .map(|_| Vec::with_capacity(buckets))
                .collect();
            let mut rest: Dest = (&mut others[..], &mut values[..], &mut labels[..]);
            for b in 0..buckets {
                for (dest, count) in dests.iter_mut().zip(counts) {
                    dest.push(take_front(&mut rest, count[b], d));
                }
            }
            chunks.par_iter().zip(dests).for_each(|(share, mut dest)| {
                let mut next = vec![0usize; buckets];
                visit(hls, share, offset, |_, c, x| {
                    let i = c[mode];
                    let b = bucket_of(i);
                    let (q, (o, v, l)) = (next[b], &mut dest[b]);
                    next[b] += 1;
                    v[q] = x;
                    if shift > 0 {
                        l[q] = i - ((b << shift) as u32);
                    }
                    let slots = o[q * d..(q + 1) * d].iter_mut();
                    for (slot, (_, &ci)) in
                        slots.zip(c.iter().enumerate().filter(|&(m, _)| m != mode))
                    {
                        *slot = ci;
                    }
                });
            });
        }

        // Pass 2: each bucket sorted by row (stable), its rows' offsets written.
        let mut ptr = vec![0usize; rows + 1];
        let mut jobs = Vec::with_capacity(buckets);
        let mut rest: Dest = (&mut others[..], &mut values[..], &mut labels[..]);
        let mut p = &mut ptr[1..];
        for b in 0..buckets {
            let (o, v, l) = take_front(&mut rest, starts[b + 1] - starts[b], d);
            let span = (rows - (b << shift)).min(1 << shift);
            let (mp, rp) = std::mem::take(&mut p).split_at_mut(span);
            p = rp;
            jobs.push((starts[b], o, v, l, mp));
        }
        jobs.into_par_iter().for_each_init(
            || (Vec::new(), Vec::new(), Vec::new()),
            |(counts, so, sv): &mut (Vec<usize>, Vec<u32>, Vec<f32>), (base, o, v, l, p)| {
                if shift == 0 {
                    // One row: its nonzeros are the bucket's.
                    p[0] = base + v.len();
                    return;
                }
                // `counts[r + 1]`: nonzeros of the bucket's row `r`, then their end.
                counts.clear();
                counts.resize(p.len() + 1, 0);
                for &r in l.iter() {
                    counts[r as usize + 1] += 1;
                }
                for r in 0..p.len() {
                    counts[r + 1] += counts[r];
                    p[r] = base + counts[r + 1];
                }
                if l.is_sorted() {
                    return;
                }
                so.clear();
                so.extend_from_slice(o);
                sv.clear();
                sv.extend_from_slice(v);
                for (k, &r) in l.iter().enumerate() {
                    let at = counts[r as usize];
                    counts[r as usize] += 1;
                    o[at * d..(at + 1) * d].copy_from_slice(&so[k * d..(k + 1) * d]);
                    v[at] = sv[k];
                }
            },
        );
        RowGroups {
            ptr,
            others,
            values,
        }
    }
}

/// A chunk's slices of one bucket: the other modes' indices, the values and the row
/// labels of its nonzeros there.
type Dest<'a> = (&'a mut [u32], &'a mut [f32], &'a mut [u32]);

/// The first `n` nonzeros of `rest` (`d` indices each), split off its front (no labels
/// where `rest` holds none).
fn take_front<'a>(rest: &mut Dest<'a>, n: usize, d: usize) -> Dest<'a> {
    let (o, ro) = std::mem::take(&mut rest.0).split_at_mut(n * d);
    let (v, rv) = std::mem::take(&mut rest.1).split_at_mut(n);
    let labelled = if rest.2.is_empty() { 0 } else { n };
    let (l, rl) = std::mem::take(&mut rest.2).split_at_mut(labelled);
    *rest = (ro, rv, rl);
    (o, v, l)
}

/// The nonzeros cut into chunks in stored order: `n` ranges of the sparse part, then
/// `n` ranges of the dense tiles.
fn stored_chunks(hls: &HlsTensor, n: usize) -> Vec<Share> {
    let cut = shares(hls, n);
    let sparse = cut.iter().map(|s| Share {
        sparse: s.sparse,
        tiles: (0, 0),
    });
    let tiles = cut.iter().map(|s| Share {
        sparse: (0, 0),
        tiles: s.tiles,
    });
    sparse.chain(tiles).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tensor::generate::Pattern;

    /// One share holding every nonzero: the sparse part, then the dense tiles.
    fn whole_share(hls: &HlsTensor) -> Share {
        Share {
            sparse: (0, hls.sparse().nnz()),
            tiles: (0, hls.dense().map_or(0, |t| t.len())),
        }
    }

    /// Every mode's groups against a plain stable sort of the nonzeros in stored order
    /// (sparse part, then dense tiles), on 1, 3 and 8 workers and with the parts cut
    /// into 1, 2 and 5 chunks: the same arrays, so a row's nonzeros keep the stored
    /// order whatever the thread count. The cases have dense tiles, and modes long
    /// enough for buckets of many rows (some not a whole number of buckets).
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
                vec![40_001, 9000, 7],
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
            for (threads, chunks) in [(1, 0), (3, 0), (8, 0), (1, 2), (3, 5), (8, 5)] {
                let pool = crate::pool_of(threads);
                let groups = pool.install(|| match chunks {
                    0 => RowGroups::build(&hls, offset).unwrap(),
                    n => RowGroups::build_in(&hls, offset, n),
                });
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
                    let what = format!("case {k}, mode {mode}, {threads} threads, {chunks} chunks");
                    assert_eq!(g.ptr(), &ptr[..], "{what}");
                    assert_eq!(g.others(), &others[..], "{what}");
                    assert_eq!(g.values(), &values[..], "{what}");
                }
            }
        }
    }
}
