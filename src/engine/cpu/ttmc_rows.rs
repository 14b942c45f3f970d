//! TTMc row by row.
//!
//! The key-order walk ([`super::ttmc`]) keys its partial sums by the target coordinate,
//! so any target costs the same, but it pays a table lookup per nonzero and a random
//! read-modify-write of a whole output row (`Π R` floats) per distinct pair of target
//! and first other coordinate, and a wide output is either copied per worker and
//! summed or walked once per worker. Here each mode's nonzeros are grouped by row once
//! ([`RowGroups`], built at the first TTMc call) and ordered within the row by the
//! other modes' indices, shortest mode first (as SPLATT orders its CSF levels); every
//! row is then a CSF tree rooted at the target:
//!
//! - a nonzero adds `v · F_{l_{d-1}}[c]` (width `R_{l_{d-1}}`) to the sum of its
//!   deepest open node;
//! - when the coordinate of level `l_j` changes, the nodes from level `j` down close:
//!   each sum `S` is folded into its parent's as `F_{l_j}[c] ⊗ S`, the top level's
//!   into the output row, which stays in the L1 cache while its row is walked and is
//!   written once.
//!
//! So a nonzero costs one row of its last mode's rank, a fiber one Kronecker product,
//! and no lookups, private outputs or reductions. The Kronecker products come out in
//! the levels' order. A 3rd-order tensor at leaf ranks up to 32 folds straight into
//! the mode order in whole 8-lane vectors: a leaf rank that is not a multiple of 8 is
//! read from a copy of its factor padded with zero columns (and the row summed at the
//! padded width, then copied out once). Others go through a column permutation per
//! row. Rows longer than a piece
//! ([`super::rows::PIECE`]) are cut, each piece summed into its own partial row and a
//! row's pieces added in order ([`Plan`]), so results do not depend on the thread
//! count. Memory: `N (N − 1) · 4 + N · 4` bytes per nonzero for all modes, built only
//! where that fits in a quarter of the available memory (else the walk runs).

use super::row_groups::RowGroups;
use super::rows::Plan;
use super::subnormal::FlushSubnormals;
use super::ttmc::{axpy, kron_add};
use super::ttmc_tree3::tree3;
use crate::error::Result;
use crate::hls::HlsTensor;
use crate::matrix::Matrix;
use rayon::prelude::*;

/// Every mode's nonzeros grouped by row and ordered within it, and how each mode's
/// rows are cut.
pub(super) struct RowTtmc {
    groups: Vec<RowGroups>,
    plans: Vec<Plan>,
    /// Per mode, the order of its tree's levels: positions among the other modes (in
    /// mode order), shortest mode first.
    levels: Vec<Vec<usize>>,
}

impl RowTtmc {
    /// The groups of `hls`, or `None` where they would not fit in a quarter of the
    /// available memory (or the tensor has one mode).
    pub(super) fn new(hls: &HlsTensor) -> Result<Option<Self>> {
        let Some(mut groups) = RowGroups::build_if_room(hls)? else {
            return Ok(None);
        };
        let plans: Vec<Plan> = groups.iter().map(|g| Plan::new(g.ptr())).collect();
        let dims = hls.dims();
        let mut levels = Vec::with_capacity(groups.len());
        for (mode, (g, plan)) in groups.iter_mut().zip(&plans).enumerate() {
            // Shortest other mode at the top of the tree (as SPLATT orders its CSF
            // levels): its indices repeat most within a row, so its fibers are the
            // longest and the fewest Kronecker products are formed.
            let others: Vec<usize> = (0..dims.len()).filter(|&m| m != mode).collect();
            let mut order: Vec<usize> = (0..others.len()).collect();
            order.sort_by_key(|&k| (dims[others[k]], k));
            g.sort_within_rows(&plan.row_tasks, &order);
            levels.push(order);
        }
        Ok(Some(RowTtmc {
            groups,
            plans,
            levels,
        }))
    }

    /// Bytes of the groups TTMc of `mode` reads: row offsets, the other modes' indices
    /// and the values.
    pub(super) fn form_bytes(&self, mode: usize) -> usize {
        self.groups[mode].bytes()
    }

    /// TTMc of `mode` into `out` (`I_mode × Π_{m≠mode} R_m`, every entry overwritten),
    /// `factors` one per mode. The groups hold the values with the tensor's scale
    /// applied.
    pub(super) fn run(&self, mode: usize, factors: &[Matrix], out: &mut Matrix) {
        let (g, plan, p) = (&self.groups[mode], &self.plans[mode], out.cols());
        let others: Vec<&Matrix> = (factors.iter().enumerate())
            .filter(|&(m, _)| m != mode)
            .map(|(_, f)| f)
            .collect();
        let levels = &self.levels[mode];
        let mut facs: Vec<&Matrix> = levels.iter().map(|&k| others[k]).collect();
        let d = facs.len();
        let rb = facs.last().map_or(0, |f| f.cols());
        let width = leaf_width(rb, d);
        let swap = levels.iter().enumerate().any(|(k, &l)| k != l);
        let direct3 = d == 2 && width <= 32;
        // Zero columns: the leaf's up to `width`; in [`tree3`]'s reversed levels, the
        // upper level's to whole vectors too (its rows are then the vectors).
        let ra = facs[0].cols();
        let padded: Vec<(usize, Matrix)> = [
            (width != rb).then(|| (d - 1, facs[d - 1].with_columns(width))),
            (direct3 && swap && !ra.is_multiple_of(8))
                .then(|| (0, facs[0].with_columns(ra.div_ceil(8) * 8))),
        ]
        .into_iter()
        .flatten()
        .collect();
        for (level, m) in &padded {
            facs[*level] = m;
        }
        let map = if direct3 || !swap {
            Vec::new()
        } else {
            let ranks: Vec<usize> = others.iter().map(|f| f.cols()).collect();
            column_order(levels, &ranks)
        };
        let shape = Shape {
            direct3,
            swap,
            ra,
            rb,
            map: &map,
        };
        let (ptr, idx, x) = (g.ptr(), g.others(), g.values());
        let facs = &facs[..];
        let nodes = || Nodes::new(facs, !map.is_empty() || !padded.is_empty());
        if !plan.cut {
            let jobs = plan.row_jobs(out.data_mut(), p);
            jobs.into_par_iter()
                .for_each_init(nodes, |nodes, (r0, r1, dst)| {
                    let _flush = FlushSubnormals::new();
                    for (i, o) in (r0..r1).zip(dst.chunks_exact_mut(p.max(1))) {
                        let (s, e) = (ptr[i], ptr[i + 1]);
                        piece(&idx[s * d..e * d], &x[s..e], facs, &shape, nodes, o);
                    }
                });
            return;
        }
        // Rows in one piece straight into the output; the pieces of the cut rows into
        // partial rows, then each cut row the sum of its pieces in order.
        let mut partial = vec![0f32; plan.cut_slots() * p];
        let jobs = plan.cut_jobs(out.data_mut(), &mut partial, p);
        jobs.into_par_iter().for_each_init(nodes, |nodes, job| {
            let _flush = FlushSubnormals::new();
            job.run(plan, p, |&(_, s, e), dst, _| {
                piece(&idx[s * d..e * d], &x[s..e], facs, &shape, nodes, dst);
            });
        });
        plan.add_cut_rows(&partial, p, out.data_mut());
    }
}

/// How [`piece`] writes a row: which tree, and where its columns go.
struct Shape<'a> {
    /// Two levels with a leaf of at most 32 columns (padded): [`tree3`], which writes
    /// the mode order itself.
    direct3: bool,
    /// The levels are not in mode order.
    swap: bool,
    /// The upper level's rank, with [`Shape::direct3`] (its factor may be padded with
    /// zero columns past it).
    ra: usize,
    /// The leaf's rank (its factor may be padded with zero columns past it).
    rb: usize,
    /// Where [`tree_any`]'s columns (levels' order) go in the mode order; empty where
    /// they are the mode order already.
    map: &'a [usize],
}

/// The width the leaf level's rows are read at, in a tree of `levels` levels: for two
/// levels (a 3rd-order tensor) and a rank up to 32, the rank rounded up to whole 8-lane
/// vectors ([`tree3`]'s widths); else the rank. Read at its own width a rank such as
/// 5, 10 or 20 left a scalar tail in every leaf row and every fold: TTMc took 2–5
/// times as long at ranks 5, 10, 12 and 20 as padded, on 3rd-order tensors of 200 to
/// 118 000 rows per mode. Deeper trees gain nothing from it (their folds above the
/// leaf are wider by the padding): at ranks 3 to 10 on 4th- and 5th-order tensors
/// the padded leaf ran from 0.8 to 1.3 times the unpadded one's speed.
fn leaf_width(rank: usize, levels: usize) -> usize {
    if levels == 2 && rank <= 32 {
        rank.div_ceil(8) * 8
    } else {
        rank
    }
}

/// A worker's sums of the open nodes of one row's tree.
struct Nodes {
    /// `sums[j]` (`1 ≤ j < d`; `sums[0]` unused): the sum under the open node of level
    /// `j − 1`, `Π_{l ≥ j} R_l` wide; zero between nodes.
    sums: Vec<Vec<f32>>,
    /// The last nonzero's other indices.
    prev: Vec<u32>,
    /// A row in the levels' Kronecker order, where that is not the mode order, or
    /// [`tree3`]'s row at its padded width.
    row: Vec<f32>,
}

impl Nodes {
    fn new(facs: &[&Matrix], permuted: bool) -> Self {
        let d = facs.len();
        let sums = (0..d)
            .map(|j| {
                let width = if j == 0 {
                    0
                } else {
                    facs[j..].iter().map(|f| f.cols()).product()
                };
                vec![0f32; width]
            })
            .collect();
        let width = if permuted {
            facs.iter().map(|f| f.cols()).product()
        } else {
            0
        };
        Nodes {
            sums,
            prev: vec![0; d],
            row: vec![0f32; width],
        }
    }

    /// Closes the node of level `j − 1` (its index is in `prev`): adds
    /// `F_{j−1}[prev] ⊗ sums[j]` to its parent's sum, or to `dst` at the top, and
    /// zeroes `sums[j]`.
    #[inline(always)]
    fn fold(&mut self, j: usize, facs: &[&Matrix], dst: &mut [f32]) {
        let f = facs[j - 1].row(self.prev[j - 1] as usize);
        let (lo, hi) = self.sums.split_at_mut(j);
        let src = &mut hi[0];
        let parent: &mut [f32] = if j == 1 { dst } else { &mut lo[j - 1] };
        kron_add(parent, f, src);
        src.fill(0.0);
    }
}

/// Where each column of a row in the levels' Kronecker order goes in the mode order:
/// `ranks` are the other modes' ranks in mode order, `levels` the tree's order of them.
fn column_order(levels: &[usize], ranks: &[usize]) -> Vec<usize> {
    let d = ranks.len();
    let mut stride = vec![1usize; d];
    for k in (0..d.saturating_sub(1)).rev() {
        stride[k] = stride[k + 1] * ranks[k + 1];
    }
    let width: usize = ranks.iter().product();
    (0..width)
        .map(|mut t| {
            let mut at = 0;
            for &l in levels.iter().rev() {
                at += (t % ranks[l]) * stride[l];
                t /= ranks[l];
            }
            at
        })
        .collect()
}

/// One row (or piece of a row) of TTMc into `dst` (overwritten, in mode order): its
/// nonzeros' other indices (`facs.len()` each, in the levels' order, sorted) and
/// values, written as `shape` says. A 3rd-order tensor at a leaf of at most 32 columns
/// (padded to a multiple of 8) has its widths fixed at compile time and writes the
/// mode order itself.
fn piece(
    others: &[u32],
    values: &[f32],
    facs: &[&Matrix],
    shape: &Shape,
    nodes: &mut Nodes,
    dst: &mut [f32],
) {
    if shape.direct3
        && let [a, b] = facs
    {
        let (ra, rb) = (shape.ra, shape.rb);
        let row = &mut nodes.row;
        macro_rules! tree3 {
            ($v:literal, $swap:literal) => {
                return tree3::<$v, $swap>(others, values, a, b, ra, rb, row, dst)
            };
        }
        match (b.cols(), shape.swap) {
            (8, false) => tree3!(1, false),
            (16, false) => tree3!(2, false),
            (24, false) => tree3!(3, false),
            (32, false) => tree3!(4, false),
            (8, true) => tree3!(1, true),
            (16, true) => tree3!(2, true),
            (24, true) => tree3!(3, true),
            (32, true) => tree3!(4, true),
            _ => {}
        }
    }
    if shape.map.is_empty() {
        return tree_any(others, values, facs, nodes, dst);
    }
    let mut row = std::mem::take(&mut nodes.row);
    tree_any(others, values, facs, nodes, &mut row);
    for (&v, &at) in row.iter().zip(shape.map) {
        dst[at] = v;
    }
    nodes.row = row;
}

/// [`piece`] at any order and ranks, in the levels' column order.
fn tree_any(others: &[u32], values: &[f32], facs: &[&Matrix], nodes: &mut Nodes, dst: &mut [f32]) {
    dst.fill(0.0);
    let d = facs.len();
    let leaf = facs[d - 1];
    if d == 1 {
        for (&i, &v) in others.iter().zip(values) {
            axpy(dst, v, leaf.row(i as usize));
        }
        return;
    }
    for (k, (ix, &v)) in others.chunks_exact(d).zip(values).enumerate() {
        if k > 0
            && let Some(changed) = (0..d - 1).find(|&l| ix[l] != nodes.prev[l])
        {
            for j in (changed + 1..d).rev() {
                nodes.fold(j, facs, dst);
            }
        }
        axpy(&mut nodes.sums[d - 1], v, leaf.row(ix[d - 1] as usize));
        nodes.prev.copy_from_slice(ix);
    }
    if !values.is_empty() {
        for j in (1..d).rev() {
            nodes.fold(j, facs, dst);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::accuracy::compare;
    use crate::hls::HlsBuilder;
    use crate::tensor::CooTensor;
    use crate::tensor::generate::Pattern;

    /// Runs TTMc of every mode of `hls` row by row on 1, 2 and 3 workers: against the
    /// FP64 reference of `x` within the accuracy contract, the same bits on every
    /// worker count, and the key-order walk it replaces beside it.
    fn check(x: &CooTensor, hls: &HlsTensor, ranks: &[usize], seed: u64) -> RowTtmc {
        let dims = x.dims().to_vec();
        let f = Matrix::random_factors(&dims, ranks, seed);
        let mut first: Vec<Matrix> = Vec::new();
        let mut kept = None;
        for threads in [1, 2, 3] {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap();
            pool.install(|| {
                let rows = RowTtmc::new(hls).unwrap().expect("small groups fit");
                for mode in 0..dims.len() {
                    let cols = (0..dims.len())
                        .filter(|&m| m != mode)
                        .map(|m| ranks[m])
                        .product();
                    let mut out = Matrix::from_fn(dims[mode], cols, |_, _| f32::NAN);
                    rows.run(mode, &f, &mut out);
                    let want = crate::reference::ttmc(x, mode, &f).unwrap();
                    let acc = compare(&want, &out).unwrap();
                    assert!(
                        acc.within_contract(),
                        "{dims:?} ranks {ranks:?} mode {mode} {threads} threads: {acc:?}"
                    );
                    match first.get(mode) {
                        None => first.push(out),
                        Some(f1) => assert!(
                            f1.data()
                                .iter()
                                .zip(out.data())
                                .all(|(a, b)| a.to_bits() == b.to_bits()),
                            "{dims:?} mode {mode}: {threads} threads differ from 1"
                        ),
                    }
                    // The walk stays the fallback (no room for the groups, or
                    // SPTMC_CPU_MTTKRP=walk): kept under test here.
                    let mut walk = Matrix::zeros(dims[mode], cols);
                    let pool = std::sync::Mutex::new(Vec::new());
                    super::super::kernel::run(
                        crate::ops::Op::Ttmc,
                        hls,
                        mode,
                        &f,
                        &mut walk,
                        &pool,
                    );
                    let walk = walk.map(|v| v * hls.scale());
                    let acc = compare(&want, &walk).unwrap();
                    assert!(acc.within_contract(), "walk {dims:?} mode {mode}: {acc:?}");
                }
                kept = Some(rows);
            });
        }
        kept.expect("ran")
    }

    /// Orders 2 to 5 with mixed ranks, power-law and block-dense patterns (dense tiles
    /// in the HLS form), and a mode of three rows each longer than a piece (cut).
    #[test]
    fn rows_match_the_reference_at_every_order() {
        // (extents, ranks, nonzeros, pattern, tile threshold)
        type Case = (Vec<usize>, Vec<usize>, usize, Pattern, u32);
        let cases: Vec<Case> = vec![
            (vec![40, 30], vec![3, 5], 600, Pattern::Uniform, u32::MAX),
            (
                vec![37, 45, 29],
                vec![8, 8, 8],
                4000,
                Pattern::PowerLaw { alpha: 1.0 },
                u32::MAX,
            ),
            (
                vec![60, 50, 40],
                vec![2, 5, 3],
                9000,
                Pattern::BlockDense {
                    tile_nnz: 300,
                    dense_share: 0.6,
                },
                16,
            ),
            (
                vec![20, 13, 9, 7],
                vec![3, 4, 2, 5],
                3000,
                Pattern::Uniform,
                u32::MAX,
            ),
            (
                vec![9, 8, 7, 6, 5],
                vec![2, 3, 2, 2, 3],
                2000,
                Pattern::Uniform,
                u32::MAX,
            ),
            (
                vec![3, 300, 200],
                vec![2, 4, 3],
                40_000,
                Pattern::Uniform,
                u32::MAX,
            ),
            // 3rd order at leaf ranks padded to whole vectors, in and against mode
            // order (upper ranks padded too, or not: 8), a row narrower than one padded
            // leaf (rank 1 above a leaf of 7); 4th order at ranks off the vectors.
            (
                vec![50, 70, 30],
                vec![10, 5, 12],
                6000,
                Pattern::PowerLaw { alpha: 1.0 },
                u32::MAX,
            ),
            (
                vec![40, 90, 60],
                vec![8, 20, 16],
                6000,
                Pattern::Uniform,
                u32::MAX,
            ),
            (
                vec![30, 20, 40],
                vec![5, 1, 7],
                3000,
                Pattern::Uniform,
                u32::MAX,
            ),
            (
                vec![16, 22, 12, 19],
                vec![6, 3, 10, 5],
                3000,
                Pattern::PowerLaw { alpha: 1.0 },
                u32::MAX,
            ),
        ];
        for (k, (dims, ranks, nnz, pattern, threshold)) in cases.into_iter().enumerate() {
            let (x, hls) =
                super::super::generated_case(&dims, nnz, pattern, threshold, 190 + k as u64);
            let rows = check(&x, &hls, &ranks, 7 + k as u64);
            if k == 5 {
                assert!(rows.plans[0].cut, "the 3-row mode is cut into pieces");
            }
        }
    }

    /// Fibers that the sort must bring together: each row's nonzeros arrive with their
    /// first other index interleaved, rows of 0 to 9000 nonzeros (cut ones straddling
    /// tasks) among empty ones, and a row of a single fiber.
    #[test]
    fn interleaved_fibers_and_cut_rows_match_the_reference() {
        let dims = vec![200, 50, 400];
        let mut entries = Vec::new();
        for i in 0..200u32 {
            let n: u32 = match i {
                4 => 9000,
                9 => 20_000,
                100 => 8193,
                _ if i % 6 == 0 => 0,
                _ => 1 + (i * 7) % 23,
            };
            for t in 0..n {
                // The first other index cycles fastest: no two neighbours share it.
                let (j, k) = if i == 151 {
                    (7, t % 400)
                } else {
                    (t % 50, (t / 50 + i) % 400)
                };
                entries.push(([i, j, k], 0.25 + f64::from((t * 13 + i) % 97) / 97.0));
            }
        }
        let x = CooTensor::from_entries(dims, entries).unwrap();
        let hls = HlsBuilder::new(u32::MAX).build(&x).unwrap();
        let rows = check(&x, &hls, &[3, 8, 5], 3);
        let plan = &rows.plans[0];
        assert!(plan.cut && plan.is_cut(9) && !plan.is_cut(10));
        // The sort left every row lexicographic in (j, k).
        let g = &rows.groups[0];
        for i in 0..200 {
            let ix = &g.others()[g.ptr()[i] * 2..g.ptr()[i + 1] * 2];
            assert!(ix.chunks_exact(2).is_sorted_by(|a, b| a < b), "row {i}");
        }
    }
}
