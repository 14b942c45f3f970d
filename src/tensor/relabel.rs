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

/// A tensor with its modes renumbered to their used indices, and the way back.
#[derive(Debug, Clone)]
pub struct Relabelled {
    /// The renumbered tensor: extent `used[m].len()` in mode `m`, one more where
    /// `spare[m]`.
    pub tensor: CooTensor,
    /// Per mode, the original index of each new one, ascending (every index, in order,
    /// in a mode [`Relabelled::of_modes`] left as it was).
    pub used: Vec<Vec<u32>>,
    /// Per mode, whether the renumbered mode has one row after the used ones, which no
    /// nonzero of the tensor touches: where [`Relabelled::entries`] puts the indices
    /// the tensor does not use.
    pub spare: Vec<bool>,
    /// The original extents.
    pub dims: Vec<usize>,
}

impl Relabelled {
    /// `x` with each mode's used indices numbered in order (a mode without nonzeros
    /// keeps one row, so that every extent is at least 1).
    pub fn of(x: &CooTensor) -> Result<Self> {
        Self::renumber(x, &vec![true; x.order()], false)
    }

    /// `x` with the modes `which` renumbered to their used indices plus one spare row
    /// each (the other modes keep their indices).
    pub fn of_modes(x: &CooTensor, which: &[bool]) -> Result<Self> {
        Self::renumber(x, which, true)
    }

    /// `x` with the modes `which` renumbered to their used indices, without a spare row
    /// (the other modes keep their indices).
    pub fn of_used_rows(x: &CooTensor, which: &[bool]) -> Result<Self> {
        Self::renumber(x, which, false)
    }

    fn renumber(x: &CooTensor, which: &[bool], spare: bool) -> Result<Self> {
        let mut used = Vec::with_capacity(x.order());
        let mut indices = Vec::with_capacity(x.order());
        for (m, &renumber) in which.iter().enumerate() {
            let idx = x.indices(m);
            if !renumber {
                used.push((0..x.dims()[m] as u32).collect());
                indices.push(idx.to_vec());
                continue;
            }
            // Sorted, not marked in an array of the extent: memory follows the
            // nonzeros even where an extent is near 2^32.
            let mut list = idx.to_vec();
            list.par_sort_unstable();
            list.dedup();
            let renumbered = idx
                .par_iter()
                .map(|i| list.binary_search(i).expect("listed above") as u32)
                .collect();
            if list.is_empty() && !spare {
                list.push(0);
            }
            indices.push(renumbered);
            used.push(list);
        }
        let spare: Vec<bool> = which.iter().map(|&w| w && spare).collect();
        let dims = (used.iter().zip(&spare))
            .map(|(u, &s)| u.len() + usize::from(s))
            .collect();
        Ok(Relabelled {
            tensor: CooTensor::new(dims, indices, x.values().to_vec())?,
            used,
            spare,
            dims: x.dims().to_vec(),
        })
    }

    /// The entries of `v` (a tensor of the original extents) on the renumbered rows:
    /// an index the tensor does not use goes to its mode's spare row. Fails where a
    /// mode without one meets such an index.
    pub fn entries(&self, v: &CooTensor) -> Result<CooTensor> {
        if v.dims() != self.dims.as_slice() {
            return Err(crate::error::Error::shape(
                "extents of the entries to renumber",
                format!("{:?}", self.dims),
                format!("{:?}", v.dims()),
            ));
        }
        let mut indices = Vec::with_capacity(v.order());
        for (m, used) in self.used.iter().enumerate() {
            let spare = self.spare[m].then_some(used.len() as u32);
            let idx: Result<Vec<u32>> = (v.indices(m).par_iter())
                .map(|i| match (used.binary_search(i), spare) {
                    (Ok(k), _) => Ok(k as u32),
                    (Err(_), Some(s)) => Ok(s),
                    (Err(_), None) => Err(crate::error::Error::InvalidTensor(format!(
                        "index {i} of mode {m} is not among the renumbered tensor's"
                    ))),
                })
                .collect();
            indices.push(idx?);
        }
        CooTensor::new(self.tensor.dims().to_vec(), indices, v.values().to_vec())
    }

    /// A factor of the renumbered mode `mode` on the original rows: each used index's
    /// row, zeros elsewhere (the spare row, if any, is dropped).
    pub fn expand(&self, mode: usize, f: &Matrix) -> Matrix {
        let c = f.cols();
        let mut out = Matrix::zeros(self.dims[mode], c);
        for (k, &i) in self.used[mode].iter().enumerate() {
            out.data_mut()[i as usize * c..(i as usize + 1) * c].copy_from_slice(f.row(k));
        }
        out
    }

    /// [`Relabelled::expand`] for one value per row.
    pub fn expand_values(&self, mode: usize, v: &[f64]) -> Vec<f64> {
        let mut out = vec![0.0; self.dims[mode]];
        for (&i, &x) in self.used[mode].iter().zip(v) {
            out[i as usize] = x;
        }
        out
    }

    /// A factor on the original rows of `mode` cut to the used ones, in order (for
    /// initial factors given on the original rows); the spare row, if any, zero.
    pub fn compress(&self, mode: usize, f: &Matrix) -> Matrix {
        let (c, used) = (f.cols(), &self.used[mode]);
        let mut out = Matrix::zeros(used.len() + usize::from(self.spare[mode]), c);
        for (k, &i) in used.iter().enumerate() {
            out.data_mut()[k * c..(k + 1) * c].copy_from_slice(f.row(i as usize));
        }
        out
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

/// Per mode of `x`, how many of its rows hold no nonzero. One bit per row while
/// counting: an eighth of a byte per row of an extent the factors hold at least 4 R
/// bytes of.
pub fn empty_rows(x: &CooTensor) -> Vec<usize> {
    (0..x.order())
        .map(|m| {
            let mut seen = bitvec::bitvec![0; x.dims()[m]];
            for &i in x.indices(m) {
                seen.set(i as usize, true);
            }
            seen.count_zeros()
        })
        .collect()
}

/// `x` renumbered where its coordinates need more key bits than the format holds;
/// `None` where they fit.
pub fn relabel_if_needed(x: &CooTensor) -> Result<Option<Relabelled>> {
    if key_bits(x.dims()) <= MAX_KEY_BITS {
        return Ok(None);
    }
    Relabelled::of(x).map(Some)
}

/// Initial factors given on the tensor's rows, cut to the renumbered ones (a factor of
/// another row count is left for the request's check to name).
pub fn init_rows(r: Option<&Relabelled>, init: Option<Vec<Matrix>>) -> Option<Vec<Matrix>> {
    match r {
        None => init,
        Some(r) => init.map(|fs| {
            (fs.into_iter().enumerate())
                .map(|(m, f)| match r.dims.get(m) {
                    Some(&d) if f.rows() == d => r.compress(m, &f),
                    _ => f,
                })
                .collect()
        }),
    }
}

/// A model's factors on the tensor's own rows (zero rows for unused indices where the
/// modes were renumbered).
pub fn original_rows(r: Option<&Relabelled>, factors: Vec<Matrix>) -> Vec<Matrix> {
    match r {
        // Moved, not copied: a long mode's factor is the run's largest array.
        None => factors,
        Some(r) => (factors.into_iter().enumerate())
            .map(|(m, f)| r.expand(m, &f))
            .collect(),
    }
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

    #[test]
    fn chosen_modes_renumber_with_a_spare_row_for_the_unused_indices() {
        let x = CooTensor::new(
            vec![10, 4, 3],
            vec![vec![8, 2, 8], vec![3, 0, 1], vec![2, 2, 0]],
            vec![1.0, 2.0, 3.0],
        )
        .unwrap();
        let r = Relabelled::of_modes(&x, &[true, false, true]).unwrap();
        assert_eq!(r.spare, [true, false, true]);
        // Mode 0: rows 2 and 8, then the spare; mode 1 as it was; mode 2: 0 and 2.
        assert_eq!(r.tensor.dims(), &[3, 4, 3]);
        assert_eq!(r.used[0], [2, 8]);
        assert_eq!(r.used[1], [0, 1, 2, 3]);
        assert_eq!(r.tensor.indices(0), &[1, 0, 1]);
        assert_eq!(r.tensor.indices(1), x.indices(1));
        assert_eq!(r.tensor.indices(2), &[1, 1, 0]);
        // Entries elsewhere: unused indices go to the spare row.
        let v = CooTensor::new(
            vec![10, 4, 3],
            vec![vec![8, 5], vec![2, 3], vec![1, 0]],
            vec![4.0, 5.0],
        )
        .unwrap();
        let e = r.entries(&v).unwrap();
        assert_eq!(e.indices(0), &[1, 2]);
        assert_eq!(e.indices(1), &[2, 3]);
        assert_eq!(e.indices(2), &[2, 0]);
        assert_eq!(e.values(), v.values());
        // Without spare rows an unused index has nowhere to go.
        let all = Relabelled::of(&x).unwrap();
        assert!(all.entries(&v).is_err());
        // Factors: cut to the used rows plus a zero spare row, and back.
        let f = Matrix::from_fn(10, 2, |i, j| (10 * i + j) as f32 + 1.0);
        let cut = r.compress(0, &f);
        assert_eq!(cut.shape(), (3, 2));
        assert_eq!(cut.row(0), f.row(2));
        assert_eq!(cut.row(1), f.row(8));
        assert_eq!(cut.row(2), [0.0, 0.0]);
        let back = r.expand(0, &cut);
        for i in 0..10 {
            let want = if i == 2 || i == 8 {
                f.row(i)
            } else {
                &[0.0, 0.0][..]
            };
            assert_eq!(back.row(i), want, "row {i}");
        }
        let b = r.expand_values(2, &[0.5, -1.0, 7.0]);
        assert_eq!(b, [0.5, 0.0, -1.0]);
    }
}
