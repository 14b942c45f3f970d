//! How a tensor and its factors are split over `P` ranks.
//!
//! **Medium-grained** (as SPLATT's and GenTen's distributed CP): the ranks form a grid
//! `p₀ × … × p_{N−1} = P` over the modes; mode `m` is cut into `p_m` contiguous slabs
//! of rows whose boundaries balance the nonzeros (from the count of nonzeros per
//! index); the rank at grid coordinates `(c₀, …)` holds the nonzeros whose index in
//! every mode `m` falls in slab `c_m`. Its block uses the factor rows of its slabs
//! only. The ranks that share slab `c_n` of mode `n` form that slab's *layer*; each
//! owns an even share of the slab's rows, the rows it updates.
//!
//! **Coarse-grained** (for comparison): one slab per mode (the whole mode), every rank
//! in one layer, nonzeros spread over the ranks by a hash of their coordinates. The
//! same exchange then moves whole factors: the all-reduce the medium-grained grid
//! avoids.

use std::ops::Range;

/// Which decomposition of the work.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Scheme {
    /// A grid of ranks over the modes.
    Medium,
    /// Every rank over the whole of every mode.
    Coarse,
}

/// A grid of ranks over the modes, last mode fastest in the rank numbering.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grid {
    /// Ranks along each mode; their product is the number of ranks.
    pub shape: Vec<usize>,
}

impl Grid {
    /// The grid for `ranks` ranks over a tensor of extents `dims`: the prime factors of
    /// `ranks`, largest first, each given to the mode whose slabs are then longest
    /// (longest rows per slab first, as long as that mode has rows left to cut), so the
    /// slabs, and the rows exchanged, are as short as the factorization allows.
    pub fn choose(ranks: usize, dims: &[usize]) -> Grid {
        let mut shape = vec![1usize; dims.len()];
        for f in prime_factors(ranks).into_iter().rev() {
            let len = |m: usize| dims[m] as f64 / shape[m] as f64;
            let fits: Vec<usize> = (0..dims.len())
                .filter(|&m| shape[m] * f <= dims[m])
                .collect();
            let pool: Vec<usize> = if fits.is_empty() {
                (0..dims.len()).collect()
            } else {
                fits
            };
            let m = pool
                .into_iter()
                .max_by(|&a, &b| len(a).total_cmp(&len(b)).then(b.cmp(&a)))
                .expect("at least one mode");
            shape[m] *= f;
        }
        Grid { shape }
    }

    /// The number of ranks.
    pub fn size(&self) -> usize {
        self.shape.iter().product()
    }

    /// The grid coordinates of `rank`.
    pub fn coords(&self, mut rank: usize) -> Vec<usize> {
        let mut c = vec![0; self.shape.len()];
        for m in (0..self.shape.len()).rev() {
            c[m] = rank % self.shape[m];
            rank /= self.shape[m];
        }
        c
    }

    /// The rank at grid coordinates `c`.
    pub fn rank_of(&self, c: &[usize]) -> usize {
        c.iter().zip(&self.shape).fold(0, |r, (&x, &s)| r * s + x)
    }
}

/// Prime factors in increasing order (with repeats).
fn prime_factors(mut n: usize) -> Vec<usize> {
    let mut out = Vec::new();
    let mut f = 2;
    while f * f <= n {
        while n.is_multiple_of(f) {
            out.push(f);
            n /= f;
        }
        f += 1;
    }
    if n > 1 {
        out.push(n);
    }
    out
}

/// `parts + 1` boundaries cutting `0..counts.len()` into contiguous slabs holding
/// about `total / parts` of the counts each (each boundary where the running sum comes
/// nearest its target); even slabs of rows when every count is 0.
pub fn balance(counts: &[u64], parts: usize) -> Vec<u64> {
    let n = counts.len() as u64;
    let total: u64 = counts.iter().sum();
    if total == 0 {
        return (0..=parts as u64).map(|k| k * n / parts as u64).collect();
    }
    let mut bounds = vec![0u64; parts + 1];
    bounds[parts] = n;
    let mut sum = 0u64;
    let mut i = 0usize;
    for (k, b) in bounds.iter_mut().enumerate().take(parts).skip(1) {
        // Target k·total/parts, in 128 bits so that nothing overflows.
        let target = (k as u128 * total as u128 / parts as u128) as u64;
        while i < counts.len() && sum + counts[i] <= target {
            sum += counts[i];
            i += 1;
        }
        // Take the next index too when that lands nearer the target.
        if i < counts.len() && sum + counts[i] - target < target - sum {
            sum += counts[i];
            i += 1;
        }
        *b = i as u64;
    }
    bounds
}

/// The split of a tensor's nonzeros and factor rows over the ranks.
#[derive(Debug, Clone, PartialEq)]
pub struct Partition {
    scheme: Scheme,
    grid: Grid,
    /// Per mode, `p_m + 1` slab boundaries (row indices).
    bounds: Vec<Vec<u64>>,
    ranks: usize,
}

impl Partition {
    /// The medium-grained partition of a tensor of extents `dims` over `ranks` ranks,
    /// with `counts[m][i]` the nonzeros of index `i` in mode `m`.
    pub fn medium(ranks: usize, dims: &[usize], counts: &[Vec<u64>]) -> Partition {
        let grid = Grid::choose(ranks, dims);
        let bounds = counts
            .iter()
            .zip(&grid.shape)
            .map(|(c, &p)| balance(c, p))
            .collect();
        Partition {
            scheme: Scheme::Medium,
            grid,
            bounds,
            ranks,
        }
    }

    /// The coarse-grained partition: every mode whole, nonzeros hashed to ranks.
    pub fn coarse(ranks: usize, dims: &[usize]) -> Partition {
        Partition {
            scheme: Scheme::Coarse,
            grid: Grid {
                shape: vec![1; dims.len()],
            },
            bounds: dims.iter().map(|&d| vec![0, d as u64]).collect(),
            ranks,
        }
    }

    /// The scheme.
    pub fn scheme(&self) -> Scheme {
        self.scheme
    }

    /// The grid (all ones for the coarse scheme).
    pub fn grid(&self) -> &Grid {
        &self.grid
    }

    /// The number of ranks.
    pub fn ranks(&self) -> usize {
        self.ranks
    }

    /// The slab boundaries of mode `m`.
    pub fn bounds(&self, m: usize) -> &[u64] {
        &self.bounds[m]
    }

    /// The slab of mode `m` that holds index `i`.
    fn slab_of(&self, m: usize, i: u32) -> usize {
        self.bounds[m].partition_point(|&b| b <= i as u64) - 1
    }

    /// The rank that holds the nonzero at `coords`.
    pub fn owner(&self, coords: &[u32]) -> usize {
        match self.scheme {
            Scheme::Medium => {
                let c: Vec<usize> = (0..coords.len())
                    .map(|m| self.slab_of(m, coords[m]))
                    .collect();
                self.grid.rank_of(&c)
            }
            Scheme::Coarse => {
                let h = coords
                    .iter()
                    .fold(0x9e37_79b9_7f4a_7c15u64, |h, &i| mix(h ^ u64::from(i)));
                (h % self.ranks as u64) as usize
            }
        }
    }

    /// The layer of `rank` in mode `m`: its slab's number (the color its layer shares).
    pub fn layer(&self, m: usize, rank: usize) -> usize {
        match self.scheme {
            Scheme::Medium => self.grid.coords(rank)[m],
            Scheme::Coarse => 0,
        }
    }

    /// The rows of mode `m` that `rank`'s block uses (its slab).
    pub fn slab(&self, m: usize, rank: usize) -> Range<usize> {
        let c = self.layer(m, rank);
        self.bounds[m][c] as usize..self.bounds[m][c + 1] as usize
    }

    /// The ranks of `rank`'s layer in mode `m`, in rank order.
    pub fn members(&self, m: usize, rank: usize) -> Vec<usize> {
        let c = self.layer(m, rank);
        (0..self.ranks).filter(|&r| self.layer(m, r) == c).collect()
    }

    /// The rows of `rank`'s slab of mode `m` that each member of its layer owns (in
    /// the order of [`Partition::members`]), as global row ranges: an even split.
    pub fn pieces(&self, m: usize, rank: usize) -> Vec<Range<usize>> {
        let slab = self.slab(m, rank);
        let q = self.members(m, rank).len();
        let len = slab.len();
        (0..q)
            .map(|k| slab.start + k * len / q..slab.start + (k + 1) * len / q)
            .collect()
    }

    /// The rows of mode `m` that `rank` owns and updates.
    pub fn owned(&self, m: usize, rank: usize) -> Range<usize> {
        let k = self
            .members(m, rank)
            .iter()
            .position(|&r| r == rank)
            .expect("a rank is a member of its own layer");
        self.pieces(m, rank)[k].clone()
    }
}

/// SplitMix64's finalizer: a cheap, well-spread hash step.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grids_multiply_to_the_ranks_and_cut_the_longest_modes() {
        assert_eq!(Grid::choose(1, &[5, 6, 7]).shape, vec![1, 1, 1]);
        assert_eq!(
            Grid::choose(4, &[100, 100, 100])
                .shape
                .iter()
                .product::<usize>(),
            4
        );
        assert_eq!(Grid::choose(2, &[10, 1000, 10]).shape, vec![1, 2, 1]);
        assert_eq!(Grid::choose(8, &[64, 64, 64]).shape, vec![2, 2, 2]);
        // A prime count beyond every extent still makes a grid.
        assert_eq!(
            Grid::choose(7, &[2, 3, 4]).shape.iter().product::<usize>(),
            7
        );
        let g = Grid {
            shape: vec![2, 3, 2],
        };
        for r in 0..12 {
            assert_eq!(g.rank_of(&g.coords(r)), r);
        }
    }

    #[test]
    fn balance_cuts_near_equal_counts() {
        assert_eq!(balance(&[1, 1, 1, 1], 2), vec![0, 2, 4]);
        // Either cut between the two tens balances them.
        let b = balance(&[10, 0, 0, 10], 2);
        assert!((1..=3).contains(&b[1]), "{b:?}");
        assert_eq!(balance(&[0, 0, 0, 0], 2), vec![0, 2, 4]);
        // One row for three slabs: one slab holds it, the others are empty.
        let b = balance(&[5], 3);
        assert_eq!((b[0], b[3]), (0, 1));
        assert_eq!(b.windows(2).filter(|w| w[1] > w[0]).count(), 1, "{b:?}");
        let b = balance(&[3, 1, 4, 1, 5, 9, 2, 6, 5, 3], 3);
        assert_eq!(b.first(), Some(&0));
        assert_eq!(b.last(), Some(&10));
        assert!(b.windows(2).all(|w| w[0] <= w[1]));
    }

    #[test]
    fn every_row_has_one_owner_and_every_nonzero_one_rank() {
        for ranks in 1..=6 {
            let dims = [7usize, 9, 5];
            let counts: Vec<Vec<u64>> = dims.iter().map(|&d| vec![1; d]).collect();
            for p in [
                Partition::medium(ranks, &dims, &counts),
                Partition::coarse(ranks, &dims),
            ] {
                for (m, &d) in dims.iter().enumerate() {
                    let mut owners = vec![0; d];
                    for r in 0..ranks {
                        for i in p.owned(m, r) {
                            owners[i] += 1;
                        }
                        let s = p.slab(m, r);
                        let o = p.owned(m, r);
                        assert!(s.start <= o.start && o.end <= s.end);
                    }
                    assert!(owners.iter().all(|&o| o == 1), "{ranks} ranks, mode {m}");
                }
                for i in 0..7u32 {
                    for j in 0..9u32 {
                        let r = p.owner(&[i, j, 2]);
                        assert!(r < ranks);
                        if p.scheme() == Scheme::Medium {
                            // The holder's block covers the nonzero.
                            assert!(p.slab(0, r).contains(&(i as usize)));
                            assert!(p.slab(1, r).contains(&(j as usize)));
                        }
                    }
                }
            }
        }
    }
}
