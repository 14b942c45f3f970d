//! Modes renumbered to their used indices, for tensors whose coordinates need more key
//! bits than the HLS format holds ([`crate::hls::layout::MAX_KEY_BITS`]): five modes of
//! millions of rows need over 100 bits though a few hundred thousand nonzeros use at
//! most that many indices per mode. Only the used indices get numbers, the models run
//! on the renumbered tensor, and their factors go back to the tensor's own rows (an
//! unused index's row is zero: the row CP-ALS, CP-APR and Tucker-HOOI give a slice
//! without nonzeros after their first update).

use super::CooTensor;
use crate::error::Result;
use crate::hls::layout::{MAX_KEY_BITS, bits_for};
use crate::matrix::Matrix;
use rayon::prelude::*;

/// The key bits the coordinates of extents `dims` need.
pub fn key_bits(dims: &[usize]) -> u32 {
    dims.iter().map(|&d| bits_for(d)).sum()
}

/// A tensor with every mode renumbered to its used indices, and the way back.
#[derive(Debug, Clone)]
pub struct Relabelled {
    /// The renumbered tensor: extent `used[m].len()` in mode `m`.
    pub tensor: CooTensor,
    /// Per mode, the original index of each new one, ascending.
    pub used: Vec<Vec<u32>>,
    /// The original extents.
    pub dims: Vec<usize>,
}

impl Relabelled {
    /// `x` with each mode's used indices numbered in order (a mode without nonzeros
    /// keeps one row, so that every extent is at least 1).
    pub fn of(x: &CooTensor) -> Result<Self> {
        let mut used = Vec::with_capacity(x.order());
        let mut indices = Vec::with_capacity(x.order());
        // Sorted, not marked in an array of the extent: memory follows the nonzeros
        // even where an extent is near 2^32.
        for m in 0..x.order() {
            let idx = x.indices(m);
            let mut list = idx.to_vec();
            list.par_sort_unstable();
            list.dedup();
            let renumbered = idx
                .par_iter()
                .map(|i| list.binary_search(i).expect("listed above") as u32)
                .collect();
            if list.is_empty() {
                list.push(0);
            }
            indices.push(renumbered);
            used.push(list);
        }
        let dims = used.iter().map(Vec::len).collect();
        Ok(Relabelled {
            tensor: CooTensor::new(dims, indices, x.values().to_vec())?,
            used,
            dims: x.dims().to_vec(),
        })
    }

    /// A factor of the renumbered mode `mode` (`used[mode].len()` rows) on the
    /// original rows: each used index's row, zeros elsewhere.
    pub fn expand(&self, mode: usize, f: &Matrix) -> Matrix {
        let c = f.cols();
        let mut out = Matrix::zeros(self.dims[mode], c);
        for (k, &i) in self.used[mode].iter().enumerate() {
            out.data_mut()[i as usize * c..(i as usize + 1) * c].copy_from_slice(f.row(k));
        }
        out
    }

    /// A factor on the original rows of `mode` cut to the used ones, in order (for
    /// initial factors given on the original rows).
    pub fn compress(&self, mode: usize, f: &Matrix) -> Matrix {
        let c = f.cols();
        Matrix::from_fn(self.used[mode].len(), c, |k, j| {
            f.get(self.used[mode][k] as usize, j)
        })
    }

    /// A line saying what was renumbered and why.
    pub fn note(&self) -> String {
        let modes: Vec<String> = (self.used.iter().zip(&self.dims))
            .map(|(u, d)| format!("{} of {d}", u.len()))
            .collect();
        format!(
            "the coordinates need {} bits of key, more than the format's {MAX_KEY_BITS}: \
             each mode renumbered to its used indices ({}, {} bits); an unused index's \
             row of the model is zero",
            key_bits(&self.dims),
            modes.join(", "),
            key_bits(self.tensor.dims())
        )
    }
}

/// `x` renumbered where its coordinates need more key bits than the format holds;
/// `None` where they fit.
pub fn relabel_if_needed(x: &CooTensor) -> Result<Option<Relabelled>> {
    if key_bits(x.dims()) <= MAX_KEY_BITS {
        return Ok(None);
    }
    Relabelled::of(x).map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Renumbering keeps every nonzero (value and order), numbers the used indices in
    /// order, and expanding a compressed factor puts each row back with zeros between.
    #[test]
    fn renumbered_modes_and_factors_round_trip() {
        let dims = vec![1 << 32, 5, 1 << 31, 1 << 31];
        let idx = vec![
            vec![7, 1 << 29, 7],
            vec![4, 0, 2],
            vec![(1 << 31) - 1, 3, 3],
            vec![0, 0, 0],
        ];
        let x = CooTensor::new(dims.clone(), idx, vec![1.0, -2.5, 3.0]).unwrap();
        assert!(key_bits(&dims) > MAX_KEY_BITS);
        let r = relabel_if_needed(&x).unwrap().expect("over the key bits");
        assert_eq!(r.tensor.dims(), &[2, 3, 2, 1]);
        assert_eq!(r.used[0], vec![7, 1 << 29]);
        assert_eq!(r.tensor.indices(0), &[0, 1, 0]);
        assert_eq!(r.tensor.indices(2), &[1, 0, 0]);
        assert_eq!(r.tensor.values(), x.values());
        let f = Matrix::from_fn(3, 2, |i, j| (10 * i + j) as f32 + 1.0);
        let full = r.expand(1, &f);
        assert_eq!(full.shape(), (5, 2));
        assert_eq!(full.row(0), f.row(0));
        assert_eq!(full.row(2), f.row(1));
        assert_eq!(full.row(4), f.row(2));
        assert!(full.row(1).iter().chain(full.row(3)).all(|&v| v == 0.0));
        assert_eq!(r.compress(1, &full), f);
        let small = CooTensor::new(vec![40, 30], vec![vec![3], vec![2]], vec![1.0]).unwrap();
        assert!(relabel_if_needed(&small).unwrap().is_none());
    }
}
