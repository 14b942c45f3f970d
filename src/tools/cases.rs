//! The tensors and factors the tools run on: one catalog of generated regimes for the
//! benchmarks and the self-test ([`generated`]), one large generated tensor
//! ([`generated_case`], `sptmc bench --gen-nnz`), the shared real data sets
//! ([`shared_data_dir`], [`shared_files`]) and how factors are drawn ([`FactorKind`]).

use crate::error::{Error, Result};
use crate::matrix::Matrix;
use crate::tensor::CooTensor;
use crate::tensor::generate::{GenSpec, Pattern, generate};
use std::path::{Path, PathBuf};

/// One named tensor.
#[derive(Debug, Clone)]
pub struct Case {
    /// Name shown in reports (a file's stem for files).
    pub name: String,
    /// The tensor.
    pub tensor: CooTensor,
}

impl Case {
    /// Reads a FROSTT `.tns` file (plain or gzipped, with [`crate::tensor::tns::read`])
    /// or sptmc's binary `.sptb` ([`crate::tensor::binary::read`], as every other command
    /// takes it) and names the case after the file's stem (without `.tns` / `.tns.gz` /
    /// `.sptb`).
    pub fn from_file(path: &Path) -> Result<Self> {
        let tensor = match path.extension().is_some_and(|e| e == "sptb") {
            true => crate::tensor::binary::read(path)?,
            false => crate::tensor::tns::read(path)?.0,
        };
        Ok(Case {
            name: case_name(path),
            tensor,
        })
    }
}

/// The catalog, all seeded (`seed`, `seed + 1`, …): 3rd-order tensors over `dim`³ of
/// every regime the kernels care about — `uniform` (no dense tiles at tuned
/// thresholds), `power-law` (α = 1.1, skewed slices like rating data) and `block-dense`
/// ([`Pattern::BLOCK_DENSE`]) — then `uniform-4d` over `(dim/2 + 1)`⁴ (sparse part
/// only). `nnz` nonzeros drawn each (repeats summed: a few fewer).
pub fn generated(dim: usize, nnz: usize, seed: u64) -> Result<Vec<Case>> {
    let specs = [
        ("uniform", vec![dim; 3], Pattern::Uniform),
        ("power-law", vec![dim; 3], Pattern::PowerLaw { alpha: 1.1 }),
        ("block-dense", vec![dim; 3], Pattern::BLOCK_DENSE),
        ("uniform-4d", vec![dim / 2 + 1; 4], Pattern::Uniform),
    ];
    specs
        .into_iter()
        .enumerate()
        .map(|(k, (name, dims, pattern))| {
            Ok(Case {
                name: name.to_string(),
                tensor: generate(&GenSpec {
                    dims,
                    nnz,
                    pattern,
                    seed: seed.wrapping_add(k as u64),
                })?,
            })
        })
        .collect()
}

/// Where a [`generated_case`] puts its nonzeros (`sptmc bench --gen-layout`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum GenLayout {
    /// [`Pattern::BLOCK_DENSE`], as the catalog's block-dense case: dense tiles exist.
    #[default]
    BlockDense,
    /// Uniform over all cells (as benches/torch_peer.py --gen-nnz).
    Uniform,
}

impl std::fmt::Display for GenLayout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            GenLayout::BlockDense => "block-dense",
            GenLayout::Uniform => "uniform",
        })
    }
}

/// The default extents of a [`generated_case`]: 4096³, as `benches/torch_peer.py
/// --gen-nnz` uses; at 50M nonzeros the uniform 30% adds about one nonzero per tile, so
/// the dense tiles are the block-dense ones.
pub const GEN_DIMS: [usize; 3] = [4096, 4096, 4096];

/// One seeded generated tensor of `nnz` drawn nonzeros (repeats summed: a few fewer)
/// over `dims`, named `gen-<layout>-<nnz>-s<seed>`, for `sptmc bench --gen-nnz`.
pub fn generated_case(nnz: usize, seed: u64, dims: &[usize], layout: GenLayout) -> Result<Case> {
    let pattern = match layout {
        GenLayout::BlockDense => Pattern::BLOCK_DENSE,
        GenLayout::Uniform => Pattern::Uniform,
    };
    Ok(Case {
        name: format!("gen-{layout}-{nnz}-s{seed}"),
        tensor: generate(&GenSpec {
            dims: dims.to_vec(),
            nnz,
            pattern,
            seed,
        })?,
    })
}

/// Where the shared real data sets are: `$SPTMC_DATA_DIR` when set, else
/// `../shared/data` beside the crate's source folder; `None` when that folder does not
/// exist.
pub fn shared_data_dir() -> Option<PathBuf> {
    let dir = std::env::var_os("SPTMC_DATA_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/data"));
    dir.is_dir().then_some(dir)
}

/// The `*.tns` / `*.tns.gz` files in `dir`, sorted by name.
pub fn shared_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| Error::io(dir, e))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            let n = p.to_string_lossy();
            n.ends_with(".tns") || n.ends_with(".tns.gz")
        })
        .collect();
    files.sort();
    Ok(files)
}

/// Every tensor of [`shared_files`], read.
pub fn shared_cases(dir: &Path) -> Result<Vec<Case>> {
    shared_files(dir)?
        .iter()
        .map(|p| Case::from_file(p))
        .collect()
}

fn case_name(path: &Path) -> String {
    let n = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    match n.strip_suffix(".sptb") {
        Some(stem) => stem.to_string(),
        None => n
            .trim_end_matches(".gz")
            .trim_end_matches(".tns")
            .to_string(),
    }
}

/// How a case's random factors are drawn, all from [`Matrix::random_factors`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FactorKind {
    /// Uniform in `[0.05, 1)`: the usual well-scaled case.
    #[default]
    Uniform,
    /// Log-uniform over `[1e-6, 1)`: six decades inside every column, as CP-ALS
    /// produces on power-law data, where fp16 staging loses what is far below a
    /// column's largest entry. Positive, so that results measure the staging and not
    /// the cancellation of terms against the tensor values' own fp16 rounding.
    LogUniform,
    /// Uniform, then mode 1 scaled by 1e30 and the last mode by 1e-30: products far
    /// outside f32's range unless the kernels rescale.
    Extreme,
}

impl FactorKind {
    /// Seeded factors of this kind and rank `rank`, one per mode (the target mode's
    /// included, unused).
    pub fn factors(self, dims: &[usize], rank: usize, seed: u64) -> Vec<Matrix> {
        let order = dims.len();
        let uniform = |u: f32| 0.05 + 0.95 * u;
        Matrix::random_factors(dims, &vec![rank; order], seed)
            .into_iter()
            .enumerate()
            .map(|(m, f)| match self {
                FactorKind::Uniform => f.map(uniform),
                FactorKind::LogUniform => f.map(|u| 10f32.powf(6.0 * u - 6.0)),
                FactorKind::Extreme => match m {
                    1 => f.map(|u| uniform(u) * 1e30),
                    _ if m == order - 1 => f.map(|u| uniform(u) * 1e-30),
                    _ => f.map(uniform),
                },
            })
            .collect()
    }

    /// Suffix of a case name (empty for the uniform kind).
    pub fn suffix(self) -> &'static str {
        match self {
            FactorKind::Uniform => "",
            FactorKind::LogUniform => "/log-uniform",
            FactorKind::Extreme => "/extreme",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cases_are_named_after_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let plain = dir.path().join("small.tns");
        std::fs::write(&plain, "1 2 3 1.5\n2 1 1 -2\n").unwrap();
        let case = Case::from_file(&plain).unwrap();
        assert_eq!(case.name, "small");
        assert_eq!(case.tensor.nnz(), 2);
        assert_eq!(
            case_name(Path::new("/x/movielens-100k.tns.gz")),
            "movielens-100k"
        );
        assert_eq!(shared_files(dir.path()).unwrap(), vec![plain.clone()]);
        // The binary form reads to the same tensor, named the same.
        let binary = dir.path().join("small.sptb");
        crate::tensor::binary::write(&binary, &case.tensor).unwrap();
        let b = Case::from_file(&binary).unwrap();
        assert_eq!((b.name.as_str(), &b.tensor), ("small", &case.tensor));
    }

    #[test]
    fn generated_cases_are_seeded_named_and_hold_dense_tiles() {
        let a = generated_case(20_000, 1, &GEN_DIMS, GenLayout::BlockDense).unwrap();
        assert_eq!(a.name, "gen-block-dense-20000-s1");
        assert_eq!(a.tensor.dims(), &GEN_DIMS);
        assert!(a.tensor.nnz() > 19_900 && a.tensor.nnz() <= 20_000);
        let b = generated_case(20_000, 1, &GEN_DIMS, GenLayout::BlockDense).unwrap();
        assert_eq!(a.tensor, b.tensor);
        // 14,000 nonzeros in 35 tiles of 400; the uniform 6,000 almost never share a tile.
        let h = crate::hls::HlsBuilder::new(100).build(&a.tensor).unwrap();
        assert_eq!(h.stats().dense_tiles, 35, "{:?}", h.stats());
        let u = generated_case(5000, 2, &[100, 100, 100], GenLayout::Uniform).unwrap();
        assert_eq!(u.name, "gen-uniform-5000-s2");
        assert_eq!(
            crate::hls::HlsBuilder::new(100)
                .build(&u.tensor)
                .unwrap()
                .stats()
                .dense_tiles,
            0
        );
        assert!(generated_case(0, 1, &GEN_DIMS, GenLayout::Uniform).is_err());
    }

    #[test]
    fn factor_kinds_stay_in_their_ranges() {
        let dims = [30, 20, 10];
        let all = |k: FactorKind, m: usize| k.factors(&dims, 4, 3)[m].data().to_vec();
        assert!(
            all(FactorKind::Uniform, 0)
                .iter()
                .all(|&v| (0.05..1.0).contains(&v))
        );
        assert!(
            all(FactorKind::LogUniform, 1)
                .iter()
                .all(|&v| (1e-6..=1.0).contains(&v))
        );
        assert!(all(FactorKind::Extreme, 1).iter().all(|&v| v >= 0.05e30));
        assert!(all(FactorKind::Extreme, 2).iter().all(|&v| v < 1e-30));
        assert_eq!(FactorKind::Uniform.factors(&dims, 4, 3)[0].shape(), (30, 4));
    }
}
