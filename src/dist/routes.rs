//! Which factor rows travel between the members of a layer: only the rows a block uses.
//!
//! Per mode, the medium-grained exchange of [`super::cp_als`] and [`super::cp_apr`]
//! moves partial rows from every member of a slab's layer to the rows' owners, and the
//! owners' updated rows back to the members. A member's block uses only the rows of
//! its slab that some of its nonzeros index; on a sparse tensor cut over many ranks
//! that is a small share of the slab. Its partial rows of the other rows are exact
//! zeros, and its kernels never read those factor rows, so [`Routes`] moves only the
//! used ones (as SPLATT's medium-grained exchange does): a member sends an owner the
//! partial rows of the owner's rows that its block uses, and gets those rows back
//! updated. The owners' sums are bit for bit those over every row: the rows left out
//! would add exact zeros, in the same member order.
//!
//! The routes are set once per run and mode (one all-to-all of row lists); each
//! exchange is then one all-to-all with its counts known on both sides, and no other
//! collective. Where the members together use more than half their slabs' rows
//! ([`ROUTED_SHARE`]) the exchange is the dense one ([`Routes::whole`]: partial rows
//! straight from the block's output, the updated rows by an all-gather into the slab);
//! the coarse-grained variant always is, being the exchange of whole factors it is
//! there to be measured as.

use super::comm::{Channel, Plain, Reduce};
use super::exchange::{Block, Exchange};
use super::partition::Scheme;
use std::ops::Range;

/// A factor value as exchanged: summed in f64 by the rows' owners.
pub(crate) trait RowValue: Plain {
    /// The value in f64.
    fn widen(self) -> f64;
    /// An f64 sum back in this type.
    fn narrow(x: f64) -> Self;
}

impl RowValue for f32 {
    fn widen(self) -> f64 {
        f64::from(self)
    }
    fn narrow(x: f64) -> Self {
        x as f32
    }
}

impl RowValue for f64 {
    fn widen(self) -> f64 {
        self
    }
    fn narrow(x: f64) -> Self {
        x
    }
}

/// Some rows of a piece, relative to its first, ascending.
#[derive(Debug, Clone, PartialEq, Eq)]
enum RowSet {
    /// All of the piece's `n` rows.
    All(usize),
    /// These rows.
    Listed(Vec<u32>),
}

impl RowSet {
    /// The rows `rows` of a piece of `of` rows.
    fn of(rows: Vec<u32>, of: usize) -> RowSet {
        if rows.len() == of {
            RowSet::All(of)
        } else {
            RowSet::Listed(rows)
        }
    }

    fn len(&self) -> usize {
        match self {
            RowSet::All(n) => *n,
            RowSet::Listed(v) => v.len(),
        }
    }

    fn is_all(&self) -> bool {
        matches!(self, RowSet::All(_))
    }
}

/// The largest share of its slabs' rows a layer's members may use, together, for the
/// exchange to move only those rows; above it the layer exchanges whole slabs.
/// Packing the used rows and placing them on arrival are two more passes over them,
/// which cost about what sending them does where the network is as fast as memory:
/// on this project's 2-core machine, with 65 % of the rows in use, the packed
/// exchange sent 35 % fewer bytes and ran CP-APR 14 % slower
/// (`bench/results/2026-12-07-dist-routes-epyc`).
const ROUTED_SHARE: f64 = 0.5;

/// Rows an owner sums at a time (its f64 sums of that many rows stay in the cache).
const SUM_ROWS: usize = 256;

/// Marks a row list that stands for a whole piece in the one-time exchange of lists.
const WHOLE: u32 = u32::MAX;

/// The routes of one mode's rows within a rank's layer (see the [module
/// documentation](self)).
#[derive(Debug, Clone)]
pub(crate) struct Routes {
    /// Per member of the layer (in its order), where its piece starts in the slab.
    piece_at: Vec<usize>,
    /// Per member: the rows of its piece (relative to the piece) this rank's block
    /// uses; what this rank sends it in a reduction and gets back in a gather.
    uses: Vec<RowSet>,
    /// Per member: the rows of this rank's piece (relative to it) that the member's
    /// block uses; what this rank gets from it in a reduction and sends it in a gather.
    wanted: Vec<RowSet>,
    /// This rank's place in the layer.
    me: usize,
    /// This rank's rows (its piece's length).
    own: usize,
    /// The slab's rows.
    slab: usize,
    /// The most rows any member of the layer sends to or gets from one member (the
    /// same on every member: it sets the exchanges' rounds).
    most: u64,
    /// Whether the layer exchanges whole slabs ([`Routes::whole`]): the dense exchange.
    whole: bool,
}

impl Routes {
    /// The routes of the layer `layer` (every member calls this together) whose
    /// members own `pieces` (global row ranges, in the members' order, covering the
    /// slab that starts at row `slab_at`), this rank's block using the slab rows
    /// `used` (relative to the slab, ascending, distinct).
    pub(crate) fn new(
        layer: &Channel,
        pieces: &[Range<usize>],
        slab_at: usize,
        used: &[u32],
    ) -> Routes {
        let me = layer.rank();
        // Where the members use most of their slabs, the dense exchange.
        let mut share = [
            used.len() as u64,
            (pieces.last().map_or(slab_at, |p| p.end) - slab_at) as u64,
        ];
        layer.reduce_u64(&mut share, Reduce::Sum);
        if share[0] as f64 > ROUTED_SHARE * share[1] as f64 {
            return Routes::whole(pieces, slab_at, me);
        }
        let mut at = 0;
        let uses: Vec<RowSet> = pieces
            .iter()
            .map(|p| {
                let (lo, hi) = ((p.start - slab_at) as u32, (p.end - slab_at) as u32);
                let from = at + used[at..].partition_point(|&u| u < lo);
                at = from + used[from..].partition_point(|&u| u < hi);
                RowSet::of(used[from..at].iter().map(|&u| u - lo).collect(), p.len())
            })
            .collect();
        // One all-to-all of the lists: each member learns which of its rows every
        // other member's block uses.
        let mut send: Vec<u32> = Vec::new();
        let mut counts = Vec::with_capacity(uses.len());
        for u in &uses {
            let before = send.len();
            match u {
                RowSet::All(0) => {}
                RowSet::All(_) => send.push(WHOLE),
                RowSet::Listed(v) => send.extend_from_slice(v),
            }
            counts.push((send.len() - before) as u64);
        }
        let (lists, got) = layer.all_to_all(&send, &counts);
        drop(send);
        let own = pieces[me].len();
        let mut from = 0;
        let wanted: Vec<RowSet> = got
            .iter()
            .map(|&c| {
                let list = &lists[from..from + c as usize];
                from += c as usize;
                match list {
                    [WHOLE] => RowSet::All(own),
                    l => RowSet::of(l.to_vec(), own),
                }
            })
            .collect();
        let local_most = uses.iter().chain(&wanted).map(RowSet::len).max();
        let mut most = [local_most.unwrap_or(0) as u64];
        layer.reduce_u64(&mut most, Reduce::Max);
        Routes {
            piece_at: pieces.iter().map(|p| p.start - slab_at).collect(),
            uses,
            wanted,
            me,
            own,
            slab: pieces.last().map_or(slab_at, |p| p.end) - slab_at,
            most: most[0],
            // At most half the layer's rows are in use: some member leaves rows out.
            whole: false,
        }
    }

    /// The dense routes of a layer whose members all use their whole slab (no
    /// collective: every member knows the pieces).
    pub(crate) fn whole(pieces: &[Range<usize>], slab_at: usize, me: usize) -> Routes {
        let own = pieces[me].len();
        Routes {
            piece_at: pieces.iter().map(|p| p.start - slab_at).collect(),
            uses: pieces.iter().map(|p| RowSet::All(p.len())).collect(),
            wanted: pieces.iter().map(|_| RowSet::All(own)).collect(),
            me,
            own,
            slab: pieces.last().map_or(slab_at, |p| p.end) - slab_at,
            most: pieces.iter().map(|p| p.len() as u64).max().unwrap_or(0),
            whole: true,
        }
    }

    /// The rows this rank sends to other members per reduction and per gather.
    pub(crate) fn rows_sent(&self) -> (u64, u64) {
        let others = |sets: &[RowSet]| -> u64 {
            (sets.iter().enumerate())
                .filter(|&(k, _)| k != self.me)
                .map(|(_, s)| s.len() as u64)
                .sum()
        };
        (others(&self.uses), others(&self.wanted))
    }

    /// Whether this rank is its layer's only member (it owns its whole slab, and an
    /// exchange is a copy).
    pub(crate) fn alone(&self) -> bool {
        self.piece_at.len() == 1
    }

    /// Sums the partial rows `local` (the slab's, `r` values each) of every member of
    /// the layer into this rank's rows `out` (`own × r`): each entry in f64 over the
    /// members in their order, then narrowed.
    pub(crate) fn reduce<T: RowValue>(
        &self,
        layer: &Channel,
        local: &[T],
        r: usize,
        out: &mut [T],
    ) {
        if self.alone() {
            // One term per entry: its sum is itself (up to a zero's sign, which the
            // single process's output keeps too).
            out[..self.own * r].copy_from_slice(&local[..self.own * r]);
            return;
        }
        let counts: Vec<u64> = self.uses.iter().map(|u| (u.len() * r) as u64).collect();
        let recv: Vec<u64> = self.wanted.iter().map(|w| (w.len() * r) as u64).collect();
        let packed;
        let send: &[T] = if self.uses.iter().all(RowSet::is_all) {
            // The pieces cover the slab in order: the block's output is the message.
            &local[..self.slab * r]
        } else {
            packed = pack(local, r, self.uses.iter().zip(&self.piece_at));
            &packed
        };
        let mut got = vec![T::default(); recv.iter().sum::<u64>() as usize];
        layer.all_to_all_known(send, &counts, &recv, self.most * r as u64, &mut got);
        let mut starts = Vec::with_capacity(recv.len());
        let mut s = 0;
        for &c in &recv {
            starts.push(s);
            s += c as usize;
        }
        // Block by block of rows, member by member: each entry is summed in the
        // members' order, and the inner loops run over whole rows.
        let mut next = vec![0usize; self.wanted.len()];
        let rows = SUM_ROWS.min(self.own);
        let mut acc = vec![0f64; rows * r];
        for lo in (0..self.own).step_by(SUM_ROWS) {
            let hi = (lo + SUM_ROWS).min(self.own);
            let acc = &mut acc[..(hi - lo) * r];
            acc.fill(0.0);
            for (j, w) in self.wanted.iter().enumerate() {
                let k = next[j];
                match w {
                    RowSet::All(_) => {
                        // Every row of the block, in order.
                        let part = &got[starts[j] + lo * r..][..(hi - lo) * r];
                        for (a, &x) in acc.iter_mut().zip(part) {
                            *a += x.widen();
                        }
                        next[j] = hi;
                    }
                    RowSet::Listed(v) => {
                        let n = v[k..].partition_point(|&i| (i as usize) < hi);
                        let parts = got[starts[j] + k * r..][..n * r].chunks_exact(r.max(1));
                        for (&i, part) in v[k..k + n].iter().zip(parts) {
                            let i = i as usize - lo;
                            for (a, &x) in acc[i * r..][..r].iter_mut().zip(part) {
                                *a += x.widen();
                            }
                        }
                        next[j] = k + n;
                    }
                }
            }
            for (o, &a) in out[lo * r..hi * r].iter_mut().zip(acc.iter()) {
                *o = T::narrow(a);
            }
        }
    }

    /// Sends this rank's rows `owned` (`own × r`) to the members whose blocks use them,
    /// and writes the rows of the other members that this rank's block uses into
    /// `slab` (the slab's rows, `r` values each); the slab's other rows are left as
    /// they are.
    pub(crate) fn gather<T: RowValue>(
        &self,
        layer: &Channel,
        owned: &[T],
        r: usize,
        slab: &mut [T],
    ) {
        let owned = &owned[..self.own * r];
        if self.alone() {
            slab[..self.slab * r].copy_from_slice(owned);
            return;
        }
        if self.whole {
            let counts: Vec<u64> = (self.piece_at.iter().enumerate())
                .map(|(k, &at)| (self.piece_end(k) - at) as u64 * r as u64)
                .collect();
            layer.all_gather_known(owned, &counts, &mut slab[..self.slab * r]);
            return;
        }
        let counts: Vec<u64> = self.wanted.iter().map(|w| (w.len() * r) as u64).collect();
        let recv: Vec<u64> = self.uses.iter().map(|u| (u.len() * r) as u64).collect();
        let send = pack(owned, r, self.wanted.iter().map(|w| (w, &0)));
        let mut got = vec![T::default(); recv.iter().sum::<u64>() as usize];
        layer.all_to_all_known(&send, &counts, &recv, self.most * r as u64, &mut got);
        drop(send);
        let mut from = 0;
        for (u, &at) in self.uses.iter().zip(&self.piece_at) {
            match u {
                RowSet::All(n) => slab[at * r..(at + n) * r].copy_from_slice(&got[from..][..n * r]),
                RowSet::Listed(v) => {
                    for (&k, row) in v.iter().zip(got[from..].chunks_exact(r.max(1))) {
                        slab[(at + k as usize) * r..][..r].copy_from_slice(row);
                    }
                }
            }
            from += u.len() * r;
        }
    }

    /// Where member `k`'s piece ends in the slab.
    fn piece_end(&self, k: usize) -> usize {
        self.piece_at.get(k + 1).copied().unwrap_or(self.slab)
    }
}

/// The rows `set` of each piece (starting at row `at` of `rows`, `r` values each), one
/// after another.
fn pack<'a, T: Plain>(
    rows: &[T],
    r: usize,
    sets: impl Iterator<Item = (&'a RowSet, &'a usize)> + Clone,
) -> Vec<T> {
    let mut out = Vec::with_capacity(sets.clone().map(|(s, _)| s.len() * r).sum());
    for (set, &at) in sets {
        match set {
            RowSet::All(n) => out.extend_from_slice(&rows[at * r..(at + n) * r]),
            RowSet::Listed(v) => {
                for &k in v {
                    out.extend_from_slice(&rows[(at + k as usize) * r..][..r]);
                }
            }
        }
    }
    out
}

/// Every mode's routes for rank `me`'s `block`, with `layers` its layer in each mode
/// (collective over each layer): the used rows' under the medium-grained grid, whole
/// slabs under the coarse-grained one or where the block asks for them.
pub(crate) fn of_block(block: &Block, layers: &[Channel], me: usize) -> Vec<Routes> {
    let part = &block.partition;
    (layers.iter().enumerate())
        .map(|(m, layer)| {
            let (pieces, slab) = (part.pieces(m, me), part.slab(m, me));
            if part.scheme() == Scheme::Coarse || block.exchange == Exchange::Slabs {
                Routes::whole(&pieces, slab.start, layer.rank())
            } else {
                let used = used_rows(block.tensor.indices(m), slab.len());
                Routes::new(layer, &pieces, slab.start, &used)
            }
        })
        .collect()
}

/// The rows of a mode a block uses: its nonzeros' indices in that mode (relative to
/// the slab of `slab` rows), ascending and distinct.
fn used_rows(indices: &[u32], slab: usize) -> Vec<u32> {
    let mut seen = vec![false; slab];
    for &i in indices {
        seen[i as usize] = true;
    }
    (0..slab as u32).filter(|&i| seen[i as usize]).collect()
}
