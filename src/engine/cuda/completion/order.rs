//! The order a session visits the nonzeros in: the SGD work units' seeded permutation,
//! and (in the tests) the index arithmetic of the kernels' walks over a dense tile
//! checked against the session's order.

use rand::{Rng, SeedableRng};

/// Greatest common divisor.
fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

/// The SGD visiting order of `units` work units as `(mul, add)`: unit
/// `(mul · u + add) mod units` runs `u`-th. A seeded bijection (`mul` coprime with
/// `units`) when shuffling, else the identity.
pub(super) fn unit_permutation(units: u64, seed: u64, shuffle: bool) -> (u32, u32) {
    if !shuffle || units <= 1 {
        return (1, 0);
    }
    let mut rng = rand_xoshiro::Xoshiro256PlusPlus::seed_from_u64(seed);
    let mut mul = rng.random_range(1..units);
    while gcd(mul, units) != 1 {
        mul = if mul + 1 < units { mul + 1 } else { 1 };
    }
    let add = rng.random_range(0..units);
    (mul as u32, add as u32)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::cuda::abi::HLS_COMPLETION_TILE_PARTS;
    use crate::hls::{HlsBuilder, HlsTensor, TILE_ORDER};
    use crate::tensor::generate::{GenSpec, Pattern, generate};

    /// A 3rd-order tensor with dense tiles and a sparse part.
    fn tiled() -> HlsTensor {
        let x = generate(&GenSpec {
            dims: vec![40, 35, 50],
            nnz: 6000,
            pattern: Pattern::BlockDense {
                tile_nnz: 300,
                dense_share: 0.6,
            },
            seed: 8,
        })
        .unwrap();
        let hls = HlsBuilder::new(16).build(&x).unwrap();
        assert!(hls.dense().is_some_and(|d| d.len() > 2) && hls.sparse().nnz() > 0);
        hls
    }

    /// The dense tiles in the session's order, as `(position, coordinates, value)`.
    fn session_dense(hls: &HlsTensor) -> Vec<(usize, [u32; TILE_ORDER], u64)> {
        let mut v = Vec::new();
        let mut q = 0;
        hls.for_each_nonzero(|c, x| {
            if q >= hls.sparse().nnz() {
                v.push((q, std::array::from_fn(|m| c[m]), x.to_bits()));
            }
            q += 1;
        });
        v
    }

    /// The index arithmetic of `for_each_nonzero`'s dense walk in kernels/completion.cu
    /// (lane l owns bitmap words 2l and 2l + 1, an exclusive scan of their popcounts
    /// gives its first slot) gives every dense nonzero the session's position,
    /// coordinates and value.
    #[test]
    fn the_kernels_lane_walk_of_a_tile_visits_the_session_order() {
        let hls = tiled();
        let d = hls.dense().unwrap();
        let sp = hls.sparse().nnz();
        let scale = f64::from(hls.scale());
        let mut got = Vec::new();
        for t in 0..d.len() {
            let o = d.tile_origin(t);
            let bm = &d.bitmaps()[t];
            let mut incl = 0usize;
            for lane in 0..32 {
                let (w0, w1) = (bm[2 * lane], bm[2 * lane + 1]);
                let count = (w0.count_ones() + w1.count_ones()) as usize;
                incl += count;
                let mut slot = d.offsets()[t] as usize + incl - count;
                for (k, w) in [w0, w1].into_iter().enumerate() {
                    let mut bits = w;
                    while bits != 0 {
                        let pos = (2 * lane + k) as u32 * 64 + bits.trailing_zeros();
                        bits &= bits - 1;
                        let c = crate::hls::DenseTile::cell(o, pos);
                        got.push((sp + slot, c, (d.values().get(slot) * scale).to_bits()));
                        slot += 1;
                    }
                }
            }
        }
        got.sort_by_key(|g| g.0);
        assert_eq!(got, session_dense(&hls));
    }

    /// The same for SGD's units: a tile in HLS_COMPLETION_TILE_PARTS parts of 16 words,
    /// each starting at the popcount of the words before it.
    #[test]
    fn the_kernels_sgd_parts_of_a_tile_visit_the_session_order() {
        let hls = tiled();
        let d = hls.dense().unwrap();
        let sp = hls.sparse().nnz();
        let scale = f64::from(hls.scale());
        let parts = HLS_COMPLETION_TILE_PARTS as usize;
        let words = crate::hls::BITMAP_WORDS / parts;
        let mut got = Vec::new();
        for t in 0..d.len() {
            let o = d.tile_origin(t);
            let bm = &d.bitmaps()[t];
            for part in 0..parts {
                let mut slot = d.offsets()[t] as usize
                    + bm[..part * words]
                        .iter()
                        .map(|w| w.count_ones() as usize)
                        .sum::<usize>();
                for (w, &word) in bm.iter().enumerate().skip(part * words).take(words) {
                    let mut bits = word;
                    while bits != 0 {
                        let pos = w as u32 * 64 + bits.trailing_zeros();
                        bits &= bits - 1;
                        let c = crate::hls::DenseTile::cell(o, pos);
                        got.push((sp + slot, c, (d.values().get(slot) * scale).to_bits()));
                        slot += 1;
                    }
                }
            }
        }
        assert_eq!(
            got,
            session_dense(&hls),
            "parts in order give the session order"
        );
    }

    #[test]
    fn unit_permutations_are_bijections() {
        for units in [1u64, 2, 3, 7, 12, 64, 97, 1000] {
            for seed in 0..20 {
                let (mul, add) = unit_permutation(units, seed, true);
                let mut seen = vec![false; units as usize];
                for u in 0..units {
                    let v = (u64::from(mul) * u + u64::from(add)) % units;
                    assert!(!seen[v as usize], "units {units}, seed {seed}");
                    seen[v as usize] = true;
                }
            }
            assert_eq!(unit_permutation(units, 5, false), (1, 0));
        }
    }
}
