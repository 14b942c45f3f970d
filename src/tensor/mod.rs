//! Sparse tensors in coordinate (COO) form: the input side of the pipeline.
//!
//! [`CooTensor`] holds any order; [`tns`] reads and writes FROSTT `.tns` text (plain or
//! gzipped), [`binary`] a compact memory-mappable form, [`cache`] keeps a binary copy
//! of every text read, and [`generate`] makes seeded synthetic tensors of every regime
//! the kernels care about.

pub mod binary;
pub mod cache;
pub mod generate;
pub mod relabel;
mod sort;
pub mod tns;

use crate::error::{Error, Result};
use rayon::prelude::*;

/// A sparse tensor of any order in coordinate form.
///
/// Invariants (checked by [`CooTensor::new`]):
/// - `order() >= 1`, every extent `dims[m] >= 1`;
/// - `indices[m].len() == values.len()` for every mode `m`;
/// - every index is 0-based and `< dims[m]`;
/// - every value is finite.
///
/// Coordinates need not be sorted or unique; [`CooTensor::sum_duplicates`] sorts them
/// and merges repeats. Indices are stored mode by mode (structure of arrays) so that a
/// mode's indices are contiguous.
#[derive(Debug, Clone, PartialEq)]
pub struct CooTensor {
    dims: Vec<usize>,
    indices: Vec<Vec<u32>>,
    values: Vec<f64>,
}

impl CooTensor {
    /// Builds a tensor from per-mode 0-based index arrays and values, checking every
    /// invariant listed on the type.
    pub fn new(dims: Vec<usize>, indices: Vec<Vec<u32>>, values: Vec<f64>) -> Result<Self> {
        if dims.is_empty() {
            return Err(Error::InvalidTensor(
                "a tensor needs at least one mode".into(),
            ));
        }
        if let Some(m) = dims.iter().position(|&d| d == 0) {
            return Err(Error::InvalidTensor(format!("mode {m} has length 0")));
        }
        if let Some(m) = dims.iter().position(|&d| d > u32::MAX as usize + 1) {
            return Err(Error::Unsupported(format!(
                "mode {m} has length {} > 2^32",
                dims[m]
            )));
        }
        if indices.len() != dims.len() {
            return Err(Error::shape(
                "index arrays",
                format!("{} modes", dims.len()),
                format!("{} arrays", indices.len()),
            ));
        }
        for (m, ix) in indices.iter().enumerate() {
            if ix.len() != values.len() {
                return Err(Error::shape(
                    format!("indices of mode {m}"),
                    values.len(),
                    ix.len(),
                ));
            }
            if let Some(p) = ix.iter().position(|&i| i as usize >= dims[m]) {
                return Err(Error::InvalidTensor(format!(
                    "nonzero {p}: index {} in mode {m} is beyond its length {}",
                    ix[p], dims[m]
                )));
            }
        }
        if let Some(p) = values.iter().position(|v| !v.is_finite()) {
            return Err(Error::NonFinite(format!(
                "nonzero {p} has value {}",
                values[p]
            )));
        }
        Ok(CooTensor {
            dims,
            indices,
            values,
        })
    }

    /// Builds a tensor from `(coordinates, value)` entries (0-based).
    pub fn from_entries<I, C>(dims: Vec<usize>, entries: I) -> Result<Self>
    where
        I: IntoIterator<Item = (C, f64)>,
        C: AsRef<[u32]>,
    {
        let order = dims.len();
        let mut indices = vec![Vec::new(); order];
        let mut values = Vec::new();
        for (k, (c, v)) in entries.into_iter().enumerate() {
            let c = c.as_ref();
            if c.len() != order {
                return Err(Error::shape(
                    format!("coordinates of entry {k}"),
                    order,
                    c.len(),
                ));
            }
            for (m, &i) in c.iter().enumerate() {
                indices[m].push(i);
            }
            values.push(v);
        }
        Self::new(dims, indices, values)
    }

    /// Number of modes.
    pub fn order(&self) -> usize {
        self.dims.len()
    }

    /// Extent of every mode.
    pub fn dims(&self) -> &[usize] {
        &self.dims
    }

    /// Number of stored entries (after [`CooTensor::sum_duplicates`], of nonzeros).
    pub fn nnz(&self) -> usize {
        self.values.len()
    }

    /// The 0-based indices of mode `m`, one per entry.
    pub fn indices(&self, m: usize) -> &[u32] {
        &self.indices[m]
    }

    /// The values, one per entry.
    pub fn values(&self) -> &[f64] {
        &self.values
    }

    /// The coordinates of entry `k`.
    pub fn coords(&self, k: usize) -> Vec<u32> {
        self.indices.iter().map(|ix| ix[k]).collect()
    }

    /// Fraction of cells that hold an entry.
    pub fn density(&self) -> f64 {
        let cells: f64 = self.dims.iter().map(|&d| d as f64).product();
        self.nnz() as f64 / cells
    }

    /// Squared Frobenius norm, in f64 (+0 for no values: an empty `sum` is -0).
    pub fn norm_sq(&self) -> f64 {
        self.values.iter().fold(0.0, |s, v| s + v * v)
    }

    /// Bytes of the plain COO form the HLS paper compares against: one u32 per mode
    /// and one f32 value per nonzero.
    pub fn coo_bytes(&self) -> usize {
        self.nnz() * (4 * self.order() + 4)
    }

    /// Checks that `mode < order()`.
    pub fn check_mode(&self, mode: usize) -> Result<()> {
        if mode >= self.order() {
            Err(Error::ModeOutOfRange {
                mode,
                order: self.order(),
            })
        } else {
            Ok(())
        }
    }

    /// Whether entries are in lexicographic coordinate order without repeats.
    pub fn is_sorted_unique(&self) -> bool {
        (1..self.nnz()).all(|k| self.cmp_entries(k - 1, k) == std::cmp::Ordering::Less)
    }

    fn cmp_entries(&self, a: usize, b: usize) -> std::cmp::Ordering {
        for ix in &self.indices {
            match ix[a].cmp(&ix[b]) {
                std::cmp::Ordering::Equal => continue,
                o => return o,
            }
        }
        std::cmp::Ordering::Equal
    }

    /// Sorts entries lexicographically (mode 0 slowest) and sums entries with equal
    /// coordinates. Returns how many entries were merged away (0 when all were unique).
    ///
    /// A sum can overflow to ±inf, which breaks the type's finite-values invariant:
    /// for input a caller did not make itself, use [`CooTensor::sum_duplicates_finite`].
    pub fn sum_duplicates(&mut self) -> usize {
        match self.summed() {
            Some((indices, values)) => self.replace_entries(indices, values),
            None => 0,
        }
    }

    /// [`CooTensor::sum_duplicates`], refusing a sum that overflows f64: an
    /// [`Error::NonFinite`] naming the first such coordinates, counted from `base` (1
    /// for FROSTT text: as the caller's input counts them), and the tensor left as it
    /// was.
    pub fn sum_duplicates_finite(&mut self, base: u64) -> Result<usize> {
        let Some((indices, values)) = self.summed() else {
            return Ok(0);
        };
        if let Some(k) = values.iter().position(|v| !v.is_finite()) {
            let coords: Vec<u64> = indices.iter().map(|ix| ix[k] as u64 + base).collect();
            return Err(Error::NonFinite(format!(
                "the repeated entries at coordinates {coords:?} ({base}-based) sum to {}",
                values[k]
            )));
        }
        Ok(self.replace_entries(indices, values))
    }

    /// The entries sorted, those with equal coordinates summed; `None` when they
    /// already are sorted and unique.
    fn summed(&self) -> Option<(Vec<Vec<u32>>, Vec<f64>)> {
        if self.is_sorted_unique() {
            return None;
        }
        let (order, starts) = sort::lexicographic_runs(self);
        let indices: Vec<Vec<u32>> = (self.indices.iter())
            .map(|ix| starts.par_iter().map(|&p| ix[order[p] as usize]).collect())
            .collect();
        // Each run's values added in their order in the tensor.
        let values: Vec<f64> = (0..starts.len())
            .into_par_iter()
            .map(|r| {
                let end = starts.get(r + 1).copied().unwrap_or(order.len());
                let mut run = order[starts[r]..end].iter();
                let first = self.values[*run.next().expect("a run is not empty") as usize];
                run.fold(first, |s, &k| s + self.values[k as usize])
            })
            .collect();
        Some((indices, values))
    }

    /// Puts the entries [`CooTensor::summed`] made in place; how many were merged away.
    fn replace_entries(&mut self, indices: Vec<Vec<u32>>, values: Vec<f64>) -> usize {
        let merged = self.nnz() - values.len();
        self.indices = indices;
        self.values = values;
        merged
    }

    /// Applies `f` to every value in place (a change of units; indices unchanged).
    pub fn map_values(&mut self, f: impl Fn(f64) -> f64 + Sync) {
        self.values.par_iter_mut().for_each(|v| *v = f(*v));
    }

    /// Consumes the tensor, giving back `(dims, indices, values)`.
    pub fn into_parts(self) -> (Vec<usize>, Vec<Vec<u32>>, Vec<f64>) {
        (self.dims, self.indices, self.values)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn duplicates_are_summed_and_counted() {
        let mut t = CooTensor::from_entries(
            vec![3, 2],
            [
                ([2u32, 1], 1.0),
                ([0, 0], 2.0),
                ([2, 1], 3.5),
                ([0, 0], 1.0),
            ],
        )
        .unwrap();
        assert_eq!(t.sum_duplicates(), 2);
        assert_eq!(t.nnz(), 2);
        assert_eq!(t.coords(0), vec![0, 0]);
        assert_eq!(t.values(), &[3.0, 4.5]);
        assert!(t.is_sorted_unique());
    }

    #[test]
    fn a_sum_of_duplicates_beyond_f64_is_refused_by_its_coordinates() {
        let entries = [
            ([1u32, 2], 1.0),
            ([0, 1], 1e308),
            ([1, 2], -1e308),
            ([0, 1], 1e308),
        ];
        let mut t = CooTensor::from_entries(vec![3, 3], entries).unwrap();
        let before = t.clone();
        let err = t.sum_duplicates_finite(1).unwrap_err();
        assert!(matches!(err, Error::NonFinite(_)), "{err:?}");
        assert_eq!(
            err.to_string(),
            "non-finite value: the repeated entries at coordinates [1, 2] (1-based) sum to inf"
        );
        // Refused whole: nothing was merged.
        assert_eq!(t, before);
        // A sum that stays finite is merged as `sum_duplicates` merges it.
        let mut ok =
            CooTensor::from_entries(vec![3, 3], [([0u32, 1], 1e308), ([0, 1], -1e308)]).unwrap();
        assert_eq!(ok.sum_duplicates_finite(0).unwrap(), 1);
        assert_eq!(ok.values(), &[0.0]);
    }

    #[test]
    fn an_empty_tensors_norm_is_positive_zero() {
        let t = CooTensor::new(vec![2, 3], vec![vec![], vec![]], vec![]).unwrap();
        assert!(t.norm_sq() == 0.0 && t.norm_sq().is_sign_positive());
    }

    /// Against a map from coordinates to the sum of their values in file order, with
    /// coordinates that pack into 64 bits, into 128, and into neither.
    #[test]
    fn duplicates_are_summed_in_file_order_at_every_key_width() {
        use rand::{Rng, SeedableRng};
        use std::collections::BTreeMap;
        let mut rng = rand_xoshiro::Xoshiro256PlusPlus::seed_from_u64(99);
        let mut next = |n: usize| rng.random_range(0..n);
        for dims in [
            vec![9, 7, 5],
            vec![1 << 30, 1 << 30, 3],
            vec![u32::MAX as usize; 5],
        ] {
            let n = 20_000;
            // Three distinct indices per mode, spread over the extent.
            let idx: Vec<Vec<u32>> = (dims.iter())
                .map(|&d| (0..n).map(|_| (next(3) * (d / 3)) as u32).collect())
                .collect();
            let vals: Vec<f64> = (0..n).map(|_| 1.0 / (1 + next(1000)) as f64).collect();
            let mut want: BTreeMap<Vec<u32>, f64> = BTreeMap::new();
            for k in 0..n {
                let c: Vec<u32> = idx.iter().map(|ix| ix[k]).collect();
                want.entry(c)
                    .and_modify(|s| *s += vals[k])
                    .or_insert(vals[k]);
            }
            let mut t = CooTensor::new(dims.clone(), idx, vals).unwrap();
            assert_eq!(t.sum_duplicates(), n - want.len(), "{dims:?}");
            let got: Vec<(Vec<u32>, f64)> =
                (0..t.nnz()).map(|k| (t.coords(k), t.values()[k])).collect();
            assert_eq!(got, want.into_iter().collect::<Vec<_>>(), "{dims:?}");
        }
    }

    #[test]
    fn invariants_are_checked() {
        assert!(matches!(
            CooTensor::new(vec![2, 0], vec![vec![], vec![]], vec![]),
            Err(Error::InvalidTensor(_))
        ));
        assert!(matches!(
            CooTensor::new(vec![2, 2], vec![vec![2], vec![0]], vec![1.0]),
            Err(Error::InvalidTensor(_))
        ));
        assert!(matches!(
            CooTensor::new(vec![2, 2], vec![vec![1], vec![0]], vec![f64::NAN]),
            Err(Error::NonFinite(_))
        ));
        assert!(matches!(
            CooTensor::new(vec![2, 2], vec![vec![1]], vec![1.0]),
            Err(Error::Shape { .. })
        ));
    }
}
