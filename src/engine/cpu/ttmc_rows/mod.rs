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
use super::runs::RUN;
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
                        piece_in_runs(&idx[s * d..e * d], &x[s..e], facs, &shape, nodes, o);
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
                piece_in_runs(&idx[s * d..e * d], &x[s..e], facs, &shape, nodes, dst);
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
    /// A long row's f64 sum of its runs ([`piece_in_runs`]).
    wide: Vec<f64>,
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
            wide: Vec::new(),
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

/// [`piece`] of a row (or piece) of many nonzeros: runs of at most
/// `max(RUN, 4 p)` nonzeros (`p` the output row's width) each summed by [`piece`] in
/// f32, their rows added in f64 and rounded once, as [`super::runs`] does for MTTKRP.
/// A dense slice's row otherwise adds hundreds of thousands of nonzeros into one leaf
/// sum in f32 (a rank-1 Tucker core was 2e-5 off on a power-law tensor). A run costs
/// one more pass over the output row and closes the open nodes once more: runs of at
/// least `4 p` keep that within a quarter of the run's leaf work at a leaf of rank 1.
#[inline(always)]
fn piece_in_runs(
    others: &[u32],
    values: &[f32],
    facs: &[&Matrix],
    shape: &Shape,
    nodes: &mut Nodes,
    dst: &mut [f32],
) {
    if values.len() <= RUN.max(4 * dst.len()) {
        return piece(others, values, facs, shape, nodes, dst);
    }
    long_piece(others, values, facs, shape, nodes, dst);
}

/// [`piece_in_runs`] of a row longer than a run (out of line: rare).
#[inline(never)]
fn long_piece(
    others: &[u32],
    values: &[f32],
    facs: &[&Matrix],
    shape: &Shape,
    nodes: &mut Nodes,
    dst: &mut [f32],
) {
    let (n, d) = (values.len(), facs.len());
    let run = RUN.max(4 * dst.len());
    let mut wide = std::mem::take(&mut nodes.wide);
    wide.clear();
    wide.resize(dst.len(), 0.0);
    for s in (0..n).step_by(run) {
        let e = (s + run).min(n);
        piece(
            &others[s * d..e * d],
            &values[s..e],
            facs,
            shape,
            nodes,
            dst,
        );
        for (w, &v) in wide.iter_mut().zip(dst.iter()) {
            *w += f64::from(v);
        }
    }
    for (o, &w) in dst.iter_mut().zip(&wide) {
        *o = w as f32;
    }
    nodes.wide = wide;
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
mod tests;
