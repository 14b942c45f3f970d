//! The seeded uniform sequence factors are drawn from ([`crate::matrix::Matrix::random`]):
//! reproducible on any thread count, and readable from any entry without drawing what
//! comes before it.

use rand::{Rng, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;
use rayon::prelude::*;

/// Entries per stream of [`fill_random`]: entry `k` of the sequence a seed gives is
/// draw `k mod RANDOM_BLOCK` of the seed's Xoshiro256++ stream jumped `k / RANDOM_BLOCK`
/// times (each jump skips 2¹²⁸ draws, so the streams never overlap). Blocks are drawn
/// in parallel, and a position far into the sequence is reached by jumps, not by
/// drawing everything before it. The first block is the seed's own stream.
pub const RANDOM_BLOCK: usize = 1 << 20;

/// Writes entries `first..first + out.len()` of the seeded uniform `[0, 1)` sequence
/// of [`RANDOM_BLOCK`] into `out`, one block per rayon task: the values do not depend
/// on the thread count, and any range of the sequence (a rank's rows of a factor) can
/// be drawn alone, at the cost of the jumps to its first block and the draws before
/// its first entry within that block.
pub fn fill_random(out: &mut [f32], seed: u64, first: usize) {
    let end = first + out.len();
    let (b0, b1) = (first / RANDOM_BLOCK, end.div_ceil(RANDOM_BLOCK));
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed);
    for _ in 0..b0 {
        rng.jump();
    }
    // Each block's slice of `out` and its stream, placed at the slice's first entry.
    let mut pieces = Vec::with_capacity(b1.saturating_sub(b0));
    let (mut rest, mut at) = (out, first);
    for b in b0..b1 {
        let stop = ((b + 1) * RANDOM_BLOCK).min(end);
        let (piece, r) = std::mem::take(&mut rest).split_at_mut(stop - at);
        pieces.push((RandomStream::in_block(rng.clone(), at), piece));
        (rest, at) = (r, stop);
        rng.jump();
    }
    pieces
        .into_par_iter()
        .for_each(|(mut stream, piece)| stream.fill(piece));
}

/// The sequence of [`fill_random`] read in order from any entry, one piece at a time:
/// for a pass over a long range (a factor's rows) that never holds all of it.
#[derive(Debug, Clone)]
pub struct RandomStream {
    /// The stream of block `block_no`, at that block's start.
    block: Xoshiro256PlusPlus,
    block_no: usize,
    /// The same stream at entry `at`, the next entry drawn.
    now: Xoshiro256PlusPlus,
    at: usize,
}

impl RandomStream {
    /// The sequence of `seed` from entry `first` on.
    pub fn new(seed: u64, first: usize) -> Self {
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed);
        for _ in 0..first / RANDOM_BLOCK {
            rng.jump();
        }
        Self::in_block(rng, first)
    }

    /// Entry `at` on, `block` the stream of the block holding it, at its start.
    fn in_block(block: Xoshiro256PlusPlus, at: usize) -> Self {
        let mut now = block.clone();
        for _ in 0..at % RANDOM_BLOCK {
            // The same call as a drawn entry's, so the stream advances identically.
            let _: f32 = now.random::<f32>();
        }
        let block_no = at / RANDOM_BLOCK;
        RandomStream {
            block,
            block_no,
            now,
            at,
        }
    }

    /// Writes the next `out.len()` entries into `out`.
    pub fn fill(&mut self, mut out: &mut [f32]) {
        while !out.is_empty() {
            if self.at / RANDOM_BLOCK != self.block_no {
                // The previous block is used up: the next one's stream is one jump on.
                self.block.jump();
                self.block_no += 1;
                self.now = self.block.clone();
            }
            let n = ((self.block_no + 1) * RANDOM_BLOCK - self.at).min(out.len());
            let (head, rest) = std::mem::take(&mut out).split_at_mut(n);
            for x in head {
                *x = self.now.random::<f32>();
            }
            self.at += n;
            out = rest;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::matrix::Matrix;

    /// The seed's stream, drawn one entry after another, and the streams jumped `b`
    /// times: what [`fill_random`] is defined to give, written out plainly.
    fn drawn_plainly(seed: u64, len: usize) -> Vec<f32> {
        use rand::{Rng, SeedableRng};
        let mut out = Vec::with_capacity(len);
        let mut stream = rand_xoshiro::Xoshiro256PlusPlus::seed_from_u64(seed);
        while out.len() < len {
            let mut rng = stream.clone();
            let n = RANDOM_BLOCK.min(len - out.len());
            out.extend((0..n).map(|_| rng.random::<f32>()));
            stream.jump();
        }
        out
    }

    /// A factor spanning three blocks (the last one partial) is the same on 1 and 3
    /// threads and equals the definition; any range drawn alone, across block
    /// boundaries or inside one block, is that range of the whole; a matrix within one
    /// block is the seed's plain stream. Every entry lies in `[0, 1)`.
    #[test]
    fn random_entries_are_blocks_of_jumped_streams_on_any_thread_count() {
        let (rows, cols) = (2 * RANDOM_BLOCK / 8 + 1001, 8);
        let want = drawn_plainly(7, rows * cols);
        for threads in [1, 3] {
            let pool = crate::pool_of(threads);
            let got = pool.install(|| Matrix::random(rows, cols, 7));
            assert!(got.data() == &want[..], "{threads} threads");
        }
        assert!(want.iter().all(|x| (0.0..1.0).contains(x)));
        let b = RANDOM_BLOCK;
        for range in [
            0..0,
            5..17,
            b - 3..b + 4,
            b - 1..2 * b + 1,
            2 * b..2 * b,
            3..rows * cols,
        ] {
            let mut part = vec![-1.0f32; range.len()];
            fill_random(&mut part, 7, range.start);
            assert!(part == want[range.clone()], "entries {range:?}");
        }
        let small = Matrix::random(97, 32, 7);
        assert!(small.data() == &want[..97 * 32]);
        assert_ne!(Matrix::random(97, 32, 8), small);
    }

    /// A stream started anywhere and read in pieces of any size, across block
    /// boundaries, gives that stretch of the sequence.
    #[test]
    fn a_stream_read_in_pieces_is_the_sequence_from_its_start() {
        let b = RANDOM_BLOCK;
        let want = drawn_plainly(11, 3 * b + 10);
        for first in [0, 1, b - 5, b, 2 * b + 7] {
            let mut stream = RandomStream::new(11, first);
            let mut got = Vec::new();
            for len in [0, 3, b - 9, 1, 2, b + 1, 17].into_iter().cycle() {
                let len = len.min(want.len() - first - got.len());
                let mut piece = vec![-1.0f32; len];
                stream.fill(&mut piece);
                got.extend(piece);
                if first + got.len() == want.len() {
                    break;
                }
            }
            assert!(got == want[first..], "from entry {first}");
        }
    }
}
