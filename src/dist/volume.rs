//! The communication-volume model of one CP-ALS iteration (and of one CP-APR iteration,
//! [`apr_rows_bytes`]), to set the bytes a run measures against.
//!
//! Per mode `n` and rank, the factor exchange sends (f32 values, `R` per row):
//! - the reduction of partial MTTKRP rows to their owners: the rows of the rank's slab
//!   that other members of its layer own, `(S − O) R` values;
//! - the gather of updated rows: its own `O` rows to the `q − 1` other members,
//!   `O (q − 1) R` values;
//!
//! with `S` the slab's rows, `O` the rows the rank owns and `q` the members of its
//! layer; with even shares, `2 S R (q − 1) / q`. Medium-grained with `p_n = P^{1/N}`
//! slabs per mode that is about `2 I_n R / P^{1/N}` values; coarse-grained (one layer of
//! `P` ranks, `S = I_n`) about `2 I_n R`, whatever `P`. The Grams, norms and the
//! fit's scalars add `O(R²)` per mode, independent of the tensor.

use super::partition::Partition;

/// Bytes of one factor value as exchanged.
pub const VALUE_BYTES: u64 = 4;

/// The bytes `rank` sends per iteration for the factor rows of each mode (the model
/// above, exact for the partition's slabs and shares).
pub fn rows_bytes(p: &Partition, rank: usize, r: usize) -> Vec<u64> {
    (0..p.grid().shape.len())
        .map(|m| {
            let slab = p.slab(m, rank).len() as u64;
            let own = p.owned(m, rank).len() as u64;
            let q = p.members(m, rank).len() as u64;
            (slab - own + own * (q - 1)) * r as u64 * VALUE_BYTES
        })
        .collect()
}

/// The bytes of the small all-reduces per iteration (Grams, norms, inner products,
/// column maxima and the fit's scalars), as a ring all-reduce sends them: per mode an
/// `R × R + 2R` sum, an `R` maximum and an `R` column maximum, in f64.
pub fn scalars_bytes(ranks: usize, modes: usize, r: usize) -> u64 {
    let p = ranks as u64;
    let per_mode = ((r * r + 2 * r) + r + r) as u64 * 8;
    2 * per_mode * modes as u64 * (p - 1) / p
}

/// Bytes of one factor value as CP-APR exchanges it (its rows and Φ are f64).
pub const APR_VALUE_BYTES: u64 = 8;

/// The bytes `rank` sends per CP-APR iteration for the factor rows of each mode, given
/// the mean Φ evaluations of each mode per iteration: every evaluation gathers the
/// owned rows of `B` to the `q − 1` other members of the layer and reduces the partial
/// Φ rows of the rest of the slab to their owners; after the inner iterations the
/// normalized rows are gathered once more. In f64: `(E (S − O) + (E + 1) O (q − 1)) R`
/// values for `E` evaluations.
pub fn apr_rows_bytes(p: &Partition, rank: usize, r: usize, evaluations: &[f64]) -> Vec<u64> {
    (0..p.grid().shape.len())
        .map(|m| {
            let slab = p.slab(m, rank).len() as f64;
            let own = p.owned(m, rank).len() as f64;
            let q = p.members(m, rank).len() as f64;
            let e = evaluations[m];
            let values = e * (slab - own) + (e + 1.0) * own * (q - 1.0);
            (values * r as f64 * APR_VALUE_BYTES as f64).round() as u64
        })
        .collect()
}

/// The bytes of CP-APR's small all-reduces per iteration, as a ring all-reduce sends
/// them (f64 or u64 values, 8 bytes): per evaluation the violation and its NaN flag and
/// the agreement on Φ; per mode the agreement on the session, the `R` column sums;
/// per iteration the log term with every mode's column sums and flags, and two
/// agreements.
pub fn apr_scalars_bytes(ranks: usize, modes: usize, r: usize, evaluations: f64) -> u64 {
    let p = ranks as f64;
    let values =
        evaluations * 3.0 + modes as f64 * (1 + r) as f64 + (2 + modes * (r + 1) + 2) as f64;
    (2.0 * values * 8.0 * (p - 1.0) / p).round() as u64
}

/// CP-APR's rough figure per iteration: `(E_n + 1) I_n R / P^{1/N}` f64 values per mode
/// for `E_n` Φ evaluations (the rows of `B` out and Φ back per evaluation, halved as
/// for CP-ALS, and the normalized rows once), in bytes, summed over the modes.
pub fn apr_rough_bytes(dims: &[usize], ranks: usize, r: usize, evaluations: &[f64]) -> u64 {
    let root = (ranks as f64).powf(1.0 / dims.len() as f64);
    dims.iter()
        .zip(evaluations)
        .map(|(&d, &e)| ((e + 1.0) * d as f64 * r as f64 / root * APR_VALUE_BYTES as f64) as u64)
        .sum()
}

/// The rough per-mode figure `I_n R / P^{1/N}` values (in bytes) that the
/// medium-grained decomposition is known by.
pub fn rough_bytes(dims: &[usize], ranks: usize, r: usize) -> Vec<u64> {
    let root = (ranks as f64).powf(1.0 / dims.len() as f64);
    dims.iter()
        .map(|&d| (d as f64 * r as f64 / root * VALUE_BYTES as f64) as u64)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_rank_sends_nothing_and_medium_sends_less_than_coarse() {
        let dims = [64usize, 64, 64];
        let counts: Vec<Vec<u64>> = dims.iter().map(|&d| vec![1; d]).collect();
        let one = Partition::medium(1, &dims, &counts);
        assert_eq!(rows_bytes(&one, 0, 8), vec![0, 0, 0]);
        assert_eq!(scalars_bytes(1, 3, 8), 0);
        let medium = Partition::medium(8, &dims, &counts);
        let coarse = Partition::coarse(8, &dims);
        for rank in 0..8 {
            let m: u64 = rows_bytes(&medium, rank, 8).iter().sum();
            let c: u64 = rows_bytes(&coarse, rank, 8).iter().sum();
            assert!(m < c, "rank {rank}: medium {m} vs coarse {c}");
            // 2×2×2 grid: slabs of 32 rows shared by 4 ranks owning 8 each:
            // (32 − 8 + 8·3)·8·4 bytes per mode.
            assert_eq!(m, 3 * (32 - 8 + 8 * 3) * 8 * 4);
            // Coarse: 64 rows over 8 owners: (64 − 8 + 8·7)·8·4.
            assert_eq!(c, 3 * (64 - 8 + 8 * 7) * 8 * 4);
        }
        // Within 2× of the rough I·R/P^(1/N) per mode (2·32·8·4·3/4 vs 64·8·4/2).
        let rough: u64 = rough_bytes(&dims, 8, 8).iter().sum();
        let m: u64 = rows_bytes(&medium, 0, 8).iter().sum();
        assert!(m as f64 <= 2.0 * rough as f64 && m as f64 >= rough as f64 / 2.0);
    }
}
