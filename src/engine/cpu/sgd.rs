//! Lock-free SGD on the CPU by stratification (DSGD, Gemulla et al. 2011).
//!
//! Every mode's rows are cut into `P` blocks (`P` = the workers, fewer when `P^N`
//! blocks would be too many), at multiples of 16 rows so that a dense tile lies in one
//! block of every mode, and with about equal nonzero counts. The tensor's nonzeros fall
//! into `P^N` *cells* (one block per mode). An epoch runs `P^(N−1)` *strata* one after
//! the other; stratum `s = (s_1, …, s_{N−1})` gives worker `w` the cell whose block in
//! mode 0 is `w` and in mode `m` is `(w + s_m) mod P`. Within a stratum no two workers
//! share a block of any mode, so no two touch one factor row: each worker holds its
//! blocks' rows as its own `&mut` slices (split from the factors, no locks, no atomics,
//! no `unsafe`), and every cell is visited exactly once per epoch.
//!
//! Within a cell a worker visits the sparse nonzeros (in a seeded random order, or in
//! position order when the step asks for no shuffle), then the cell's dense tiles (in a
//! seeded random order, each in bitmap order). The result depends on the seed and on
//! `P`, never on timing. With one worker there is one cell and, without shuffling, the
//! visiting order is the session's nonzero order.

use super::kernel::dense_nonzeros;
use super::subnormal::FlushSubnormals;
use crate::engine::{Anchor, SgdStep};
use crate::error::{Error, Result};
use crate::hls::{HlsTensor, LOW_KEY_BITS, TILE};
use crate::matrix::Matrix;
use rand::SeedableRng;
use rand::seq::SliceRandom;
use rayon::prelude::*;

/// At most this many cells (`P^N`): more would make strata of cells too small to pay
/// for the barrier between them.
const MAX_CELLS: usize = 1 << 16;

/// One block of every mode: the nonzeros the cell holds.
#[derive(Debug, Default)]
struct Cell {
    /// Positions in the sparse part.
    sparse: Vec<u32>,
    /// Dense tile indices.
    tiles: Vec<u32>,
}

/// A worker's cell in one stratum: the cell's index and, per mode, the first row of
/// its block and the block's rows.
type CellJob<'a> = (usize, Vec<(usize, &'a mut [f32])>);

/// The blocks and cells of a tensor for stratified SGD.
#[derive(Debug)]
pub(super) struct Strata {
    /// Blocks per mode.
    p: usize,
    /// Per mode, the `p + 1` row boundaries of its blocks.
    bounds: Vec<Vec<usize>>,
    /// `cells[Σ_m b_m p^m]`.
    cells: Vec<Cell>,
    /// Per mode, the nonzeros of every row (the regularization of a step on row `i`
    /// is `λ / counts[m][i]`).
    counts: Vec<Vec<u32>>,
}

/// The largest `p ≤ workers` with `p^order ≤ MAX_CELLS` (at least 1).
fn blocks_per_mode(workers: usize, order: usize) -> usize {
    let mut p = workers.max(1);
    while p > 1 && (p as u128).pow(order as u32) > MAX_CELLS as u128 {
        p -= 1;
    }
    p
}

impl Strata {
    /// Cuts `hls` into blocks for `workers` workers and lists every cell's nonzeros.
    pub(super) fn new(hls: &HlsTensor, workers: usize) -> Result<Self> {
        let order = hls.order();
        let dims = hls.dims();
        let p = blocks_per_mode(workers, order);
        let mut counts: Vec<Vec<u32>> = dims.iter().map(|&d| vec![0; d]).collect();
        hls.for_each_nonzero(|c, _| {
            for (n, &i) in counts.iter_mut().zip(c) {
                n[i as usize] += 1;
            }
        });
        // Nonzeros per 16-row slab of every mode.
        let slabs: Vec<Vec<u64>> = counts
            .iter()
            .map(|n| {
                n.chunks(TILE)
                    .map(|s| s.iter().map(|&c| u64::from(c)).sum())
                    .collect()
            })
            .collect();
        let nnz = hls.nnz() as u64;
        let bounds: Vec<Vec<usize>> = slabs
            .iter()
            .zip(dims)
            .map(|(counts, &d)| {
                let mut b = vec![0usize];
                let mut seen = 0u64;
                for (k, &c) in counts.iter().enumerate() {
                    seen += c;
                    while b.len() < p && seen * p as u64 >= nnz * b.len() as u64 {
                        b.push(((k + 1) * TILE).min(d));
                    }
                }
                while b.len() < p {
                    b.push(d);
                }
                b.push(d);
                b
            })
            .collect();
        // The block of every row, per mode.
        let block_of: Vec<Vec<u32>> = bounds
            .iter()
            .zip(dims)
            .map(|(b, &d)| {
                let mut v = vec![0u32; d];
                for blk in 0..p {
                    v[b[blk]..b[blk + 1]].fill(blk as u32);
                }
                v
            })
            .collect();
        let cells_n = p.pow(order as u32);
        let mut cells: Vec<Cell> = (0..cells_n).map(|_| Cell::default()).collect();
        let cell_of = |c: &[u32]| -> usize {
            c.iter()
                .zip(&block_of)
                .rev()
                .fold(0usize, |acc, (&i, b)| acc * p + b[i as usize] as usize)
        };
        let sp = hls.sparse();
        let layout = sp.layout();
        let mut c = vec![0u32; order];
        for b in 0..sp.block_prefix().len() {
            let (s, e) = (
                sp.block_offsets()[b] as usize,
                sp.block_offsets()[b + 1] as usize,
            );
            for q in s..e {
                layout.decode_all(sp.full_key(b, q), &mut c);
                let q = u32::try_from(q)
                    .map_err(|_| Error::Unsupported("2^32 or more nonzeros in SGD".into()))?;
                cells[cell_of(&c)].sparse.push(q);
            }
        }
        if let Some(d) = hls.dense() {
            for t in 0..d.len() {
                cells[cell_of(&d.tile_origin(t))].tiles.push(t as u32);
            }
        }
        Ok(Strata {
            p,
            bounds,
            cells,
            counts,
        })
    }

    /// One epoch of SGD steps over every nonzero (see the module docs), on `factors`
    /// (one per mode, row-major, all of one rank).
    pub(super) fn epoch(
        &self,
        hls: &HlsTensor,
        offset: f32,
        factors: &mut [Matrix],
        step: &SgdStep,
    ) {
        let order = hls.order();
        let p = self.p;
        let rank = factors[0].cols();
        let strata = p.pow(order as u32 - 1);
        for s in 0..strata {
            // The stratum's shift of every mode (mode 0: none).
            let mut shift = vec![0usize; order];
            let mut rest = s;
            for sh in shift.iter_mut().skip(1) {
                *sh = rest % p;
                rest /= p;
            }
            // Every mode's blocks as disjoint mutable slices.
            let mut blocks: Vec<Vec<Option<&mut [f32]>>> = Vec::with_capacity(order);
            for (f, b) in factors.iter_mut().zip(&self.bounds) {
                let mut rest = f.data_mut();
                let mut v = Vec::with_capacity(p);
                for k in 0..p {
                    let (mine, tail) = rest.split_at_mut((b[k + 1] - b[k]) * rank);
                    v.push(Some(mine));
                    rest = tail;
                }
                blocks.push(v);
            }
            let jobs: Vec<CellJob<'_>> = (0..p)
                .map(|w| {
                    let mut cell = 0;
                    let mut rows = Vec::with_capacity(order);
                    for m in (0..order).rev() {
                        let b = (w + shift[m]) % p;
                        cell = cell * p + b;
                        let slice = blocks[m][b].take().expect("each block once per stratum");
                        rows.push((self.bounds[m][b], slice));
                    }
                    rows.reverse();
                    (cell, rows)
                })
                .collect();
            jobs.into_par_iter().for_each(|(cell, mut rows)| {
                let _flush = FlushSubnormals::new();
                let seed = step
                    .seed
                    .wrapping_mul(0x9E37_79B9_7F4A_7C15)
                    .wrapping_add(cell as u64);
                self.cell(hls, offset, cell, &mut rows, rank, step, seed);
            });
        }
    }

    /// The SGD steps of one cell; `rows[m]` = (first row, the block's rows of mode `m`).
    #[allow(clippy::too_many_arguments)]
    fn cell(
        &self,
        hls: &HlsTensor,
        offset: f32,
        cell: usize,
        rows: &mut [(usize, &mut [f32])],
        rank: usize,
        step: &SgdStep,
        seed: u64,
    ) {
        let cell = &self.cells[cell];
        let mut rng = rand_xoshiro::Xoshiro256PlusPlus::seed_from_u64(seed);
        let mut order_sp: Vec<u32>;
        let sparse: &[u32] = if step.shuffle {
            order_sp = cell.sparse.clone();
            order_sp.shuffle(&mut rng);
            &order_sp
        } else {
            &cell.sparse
        };
        let mut order_t: Vec<u32>;
        let tiles: &[u32] = if step.shuffle {
            order_t = cell.tiles.clone();
            order_t.shuffle(&mut rng);
            &order_t
        } else {
            &cell.tiles
        };
        let n = hls.order();
        let scale = hls.scale();
        let mut upd = Updater::new(n, rank, step, &self.counts);
        let sp = hls.sparse();
        let layout = sp.layout();
        let mut c = vec![0u32; n];
        for &q in sparse {
            let q = q as usize;
            let b = sp.block_of(q);
            if layout.total_bits() <= 64 {
                let key = (sp.block_prefix()[b] << LOW_KEY_BITS) | sp.keys()[q] as u64;
                for (m, cm) in c.iter_mut().enumerate() {
                    *cm = layout.decode64(key, m);
                }
            } else {
                layout.decode_all(sp.full_key(b, q), &mut c);
            }
            // One predictable branch per value: the update is what costs here.
            let x = sp.values().get(q) as f32;
            upd.step(rows, &c, x * scale - offset);
        }
        if let Some(d) = hls.dense() {
            for &t in tiles {
                let t = t as usize;
                dense_nonzeros(d, (t, t + 1), |cc, v| {
                    upd.step(rows, &cc, v * scale - offset)
                });
            }
        }
    }
}

/// One SGD step's arithmetic, with its scratch rows.
struct Updater<'a> {
    rank: usize,
    counts: &'a [Vec<u32>],
    lr: f32,
    lambda: f32,
    /// With bias columns: the first of them (`rank − order`), their rate and λ.
    bias: Option<(usize, f32, f32)>,
    /// Per mode, the value its bias is shrunk toward.
    centers: Vec<f32>,
    /// Per mode, how its CP columns are regularized.
    anchors: Vec<Anchor>,
    /// The rows as they were before the step, mode after mode.
    old: Vec<f32>,
    /// The product of the other modes' rows.
    others: Vec<f32>,
}

impl<'a> Updater<'a> {
    fn new(order: usize, rank: usize, step: &SgdStep, counts: &'a [Vec<u32>]) -> Self {
        Updater {
            rank,
            counts,
            lr: step.learning_rate,
            lambda: step.lambda,
            bias: step
                .bias
                .as_ref()
                .map(|b| (rank.saturating_sub(order), b.learning_rate, b.lambda)),
            centers: match &step.bias {
                Some(b) if !b.centers.is_empty() => b.centers.clone(),
                _ => vec![0.0; order],
            },
            anchors: if step.anchors.is_empty() {
                vec![Anchor::ZERO; order]
            } else {
                step.anchors.clone()
            },
            old: vec![0.0; order * rank],
            others: vec![0.0; rank],
        }
    }

    /// The step at `c` (global coordinates) with value `x` (offset taken off) on the
    /// blocks `rows` (`rows[m].0` = the block's first row).
    #[inline]
    fn step(&mut self, rows: &mut [(usize, &mut [f32])], c: &[u32], x: f32) {
        let r = self.rank;
        for ((first, block), (&i, old)) in
            rows.iter().zip(c.iter().zip(self.old.chunks_exact_mut(r)))
        {
            let at = (i as usize - first) * r;
            old.copy_from_slice(&block[at..at + r]);
        }
        // e = x − Σ_r Π_m a_m[r]
        self.others.fill(1.0);
        for old in self.old.chunks_exact(r) {
            for (o, &a) in self.others.iter_mut().zip(old) {
                *o *= a;
            }
        }
        let e = x - self.others.iter().sum::<f32>();
        for (m, ((first, block), &i)) in rows.iter_mut().zip(c).enumerate() {
            self.others.fill(e);
            for (mm, old) in self.old.chunks_exact(r).enumerate() {
                if mm != m {
                    for (o, &a) in self.others.iter_mut().zip(old) {
                        *o *= a;
                    }
                }
            }
            let at = (i as usize - *first) * r;
            let own = &self.old[m * r..(m + 1) * r];
            // The row's share of w λ‖A − c‖²: over its nonzeros (≥ 1: this one).
            let count = self.counts[m][i as usize] as f32;
            let Anchor {
                value: anchor,
                weight,
            } = self.anchors[m];
            let reg = weight * self.lambda / count;
            let row = &mut block[at..at + r];
            match self.bias {
                None => {
                    for ((a, &g), &a0) in row.iter_mut().zip(&self.others).zip(own) {
                        *a = a0 + self.lr * (g - reg * (a0 - anchor));
                    }
                }
                Some((first, lr_b, lambda_b)) => {
                    for ((a, &g), &a0) in row[..first].iter_mut().zip(&self.others).zip(own) {
                        *a = a0 + self.lr * (g - reg * (a0 - anchor));
                    }
                    // Only this mode's own bias moves; the others' columns stay at 1.
                    let (a, g, a0) = (&mut row[first + m], self.others[first + m], own[first + m]);
                    *a = a0 + lr_b * (g - lambda_b / count * (a0 - self.centers[m]));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_per_mode_keep_the_cells_bounded() {
        assert_eq!(blocks_per_mode(1, 3), 1);
        assert_eq!(blocks_per_mode(2, 3), 2);
        assert_eq!(blocks_per_mode(64, 3), 40);
        assert_eq!(blocks_per_mode(16, 4), 16);
        assert_eq!(blocks_per_mode(16, 8), 4);
        assert_eq!(blocks_per_mode(0, 3), 1);
    }

    /// Every nonzero lies in exactly one cell, and a cell's nonzeros lie in its blocks
    /// (tiles included: block boundaries are multiples of 16), for several worker counts
    /// and a tensor with dense tiles and a sparse part.
    #[test]
    fn cells_partition_the_nonzeros_within_their_blocks() {
        use crate::hls::HlsBuilder;
        use crate::tensor::generate::{GenSpec, Pattern, generate};
        let x = generate(&GenSpec {
            dims: vec![70, 50, 40],
            nnz: 8000,
            pattern: Pattern::BlockDense {
                tile_nnz: 200,
                dense_share: 0.5,
            },
            seed: 3,
        })
        .unwrap();
        let hls = HlsBuilder::new(16).build(&x).unwrap();
        let d = hls.dense().expect("dense tiles");
        assert!(!d.is_empty() && hls.sparse().nnz() > 0);
        for workers in [1, 2, 3, 5] {
            let st = Strata::new(&hls, workers).unwrap();
            let p = st.p;
            let mut seen_sparse = vec![0u32; hls.sparse().nnz()];
            let mut seen_tiles = vec![0u32; d.len()];
            let layout = hls.sparse().layout();
            let mut c = vec![0u32; 3];
            for (k, cell) in st.cells.iter().enumerate() {
                let blocks: Vec<usize> = (0..3).map(|m| (k / p.pow(m as u32)) % p).collect();
                let inside = |c: &[u32]| {
                    (0..3).all(|m| {
                        let b = &st.bounds[m];
                        (b[blocks[m]]..b[blocks[m] + 1]).contains(&(c[m] as usize))
                    })
                };
                for &q in &cell.sparse {
                    let q = q as usize;
                    seen_sparse[q] += 1;
                    let b = hls.sparse().block_of(q);
                    layout.decode_all(hls.sparse().full_key(b, q), &mut c);
                    assert!(
                        inside(&c),
                        "{workers} workers: nonzero {q} at {c:?} outside cell {k}"
                    );
                }
                for &t in &cell.tiles {
                    seen_tiles[t as usize] += 1;
                    let o = d.tile_origin(t as usize);
                    let last = [o[0] + 15, o[1] + 15, o[2] + 15];
                    assert!(inside(&o), "{workers} workers: tile {t} outside cell {k}");
                    let clipped: Vec<u32> = (0..3)
                        .map(|m| last[m].min(x.dims()[m] as u32 - 1))
                        .collect();
                    assert!(
                        inside(&clipped),
                        "{workers} workers: tile {t} crosses a block"
                    );
                }
            }
            assert!(seen_sparse.iter().all(|&n| n == 1), "{workers} workers");
            assert!(seen_tiles.iter().all(|&n| n == 1), "{workers} workers");
        }
    }

    /// One step with an anchored mode against a hand-computed one. Order 2, `R = 1`, no
    /// biases: at `a₀ = 0.5`, `a₁ = 2`, `x = 2.1`, `e = 1.1`. With `η = 0.1`,
    /// `λ = 0.4`, mode 1 anchored at 0.5 with weight 2, rows of 2 (mode 0) and 4
    /// (mode 1) nonzeros:
    /// `a₀ = 0.5 + 0.1 (1.1·2 − 0.4/2 · 0.5) = 0.71`,
    /// `a₁ = 2 + 0.1 (1.1·0.5 − 2·0.4/4 · (2 − 0.5)) = 2.025`.
    #[test]
    fn a_step_with_an_anchored_mode_matches_the_hand_computed_one() {
        let step = SgdStep {
            learning_rate: 0.1,
            lambda: 0.4,
            seed: 0,
            shuffle: false,
            bias: None,
            anchors: vec![
                Anchor::ZERO,
                Anchor {
                    value: 0.5,
                    weight: 2.0,
                },
            ],
        };
        let counts = vec![vec![7, 2], vec![4, 1]];
        let mut upd = Updater::new(2, 1, &step, &counts);
        let mut m0 = vec![0.5f32];
        let mut m1 = vec![2.0f32, 9.0];
        {
            let mut rows = [(1usize, m0.as_mut_slice()), (0usize, m1.as_mut_slice())];
            upd.step(&mut rows, &[1, 0], 2.1);
        }
        assert!((m0[0] - 0.71).abs() <= 1e-6, "{m0:?}");
        assert!((m1[0] - 2.025).abs() <= 1e-6 && m1[1] == 9.0, "{m1:?}");
    }

    /// One step with bias columns against a hand-computed one. Order 2, `R = 1`, so
    /// `K = 3`: mode 0's row is `[a₀, b₀, 1]`, mode 1's `[a₁, 1, b₁]`. At `a₀ = 0.5`,
    /// `b₀ = 0.2`, `a₁ = 2`, `b₁ = −0.1` the model is `1 + 0.2 − 0.1 = 1.1`, so at
    /// `x = 2.1`, `e = 1`. With `η = 0.1`, `λ = 0.4`, `η_b = 0.5`, `λ_b = 2` and rows of
    /// 2 (mode 0) and 4 (mode 1) nonzeros, from the rows before the step:
    /// `a₀ = 0.5 + 0.1 (1·2 − 0.4/2 · 0.5) = 0.69`,
    /// `b₀ = 0.2 + 0.5 (1 − 2/2 · 0.2) = 0.6`,
    /// `a₁ = 2 + 0.1 (1·0.5 − 0.4/4 · 2) = 2.03`,
    /// `b₁ = −0.1 + 0.5 (1 − 2/4 · (−0.1 − 0.3)) = 0.5` (mode 1's biases shrink toward
    /// 0.3); the fixed columns stay at 1.
    #[test]
    fn a_step_with_biases_matches_the_hand_computed_one() {
        let step = SgdStep {
            learning_rate: 0.1,
            lambda: 0.4,
            seed: 0,
            shuffle: false,
            bias: Some(crate::engine::SgdBias {
                learning_rate: 0.5,
                lambda: 2.0,
                centers: vec![0.0, 0.3],
            }),
            anchors: Vec::new(),
        };
        // Row 1 of mode 0 (2 nonzeros), row 0 of mode 1 (4 nonzeros).
        let counts = vec![vec![7, 2], vec![4, 1]];
        let mut upd = Updater::new(2, 3, &step, &counts);
        // Mode 0's block starts at row 1 (one row); mode 1's at row 0 (two rows).
        let mut m0 = vec![0.5f32, 0.2, 1.0];
        let mut m1 = vec![2.0f32, 1.0, -0.1, 9.0, 9.0, 9.0];
        {
            let mut rows = [(1usize, m0.as_mut_slice()), (0usize, m1.as_mut_slice())];
            upd.step(&mut rows, &[1, 0], 2.1);
        }
        let want0 = [0.69f32, 0.6, 1.0];
        let want1 = [2.03f32, 1.0, 0.5, 9.0, 9.0, 9.0];
        for (got, want) in m0.iter().chain(&m1).zip(want0.iter().chain(&want1)) {
            assert!((got - want).abs() <= 1e-6, "{m0:?} {m1:?}");
        }
    }
}
