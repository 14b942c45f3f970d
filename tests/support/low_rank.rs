//! Generated completion problems: a low-rank CP tensor plus an offset, scaled, sampled
//! and noised as issue-style benchmarks ask (shared by `tests/integration/completion_defaults.rs`
//! and `examples/completion_defaults.rs`).

use rand::{Rng, SeedableRng};
use sptmc::CooTensor;
use sptmc::decomp::completion::{Split, split};

/// One generated problem.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Case {
    /// Extents.
    pub dims: [usize; 3],
    /// The truth's CP rank.
    pub rank: usize,
    /// Added to every value before scaling.
    pub offset: f64,
    /// Multiplies every value.
    pub scale: f64,
    /// Share of the cells observed.
    pub observed: f64,
    /// Noise σ as a share of the noise-free values' spread.
    pub noise: f64,
}

/// A problem's entries split 80/10/10, and the noise σ it was drawn with.
pub struct Problem {
    pub split: Split,
    pub sigma: f64,
}

/// Draws `case` with `seed`: factors uniform in [0, 1) (so that the CP part has a
/// nonzero mean, as ratings do), values `scale · (CP + offset)`, about `observed` of
/// the cells kept, Gaussian noise of σ = `noise` × the kept values' standard
/// deviation, split 80/10/10 by `seed`.
pub fn draw(case: &Case, seed: u64) -> Problem {
    let mut rng = rand_xoshiro::Xoshiro256PlusPlus::seed_from_u64(seed);
    let [a, b, c] = case.dims;
    let f: Vec<Vec<f64>> = case
        .dims
        .iter()
        .map(|&d| (0..d * case.rank).map(|_| rng.random::<f64>()).collect())
        .collect();
    let mut coords = Vec::new();
    let mut clean = Vec::new();
    for i in 0..a {
        for j in 0..b {
            for k in 0..c {
                if rng.random::<f64>() >= case.observed {
                    continue;
                }
                let r = case.rank;
                let v: f64 = (0..r)
                    .map(|q| f[0][i * r + q] * f[1][j * r + q] * f[2][k * r + q])
                    .sum();
                coords.push([i as u32, j as u32, k as u32]);
                clean.push(case.scale * (v + case.offset));
            }
        }
    }
    let n = clean.len() as f64;
    let mean = clean.iter().sum::<f64>() / n;
    let spread = (clean.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / n).sqrt();
    let sigma = case.noise * spread;
    let entries = coords.into_iter().zip(clean).map(|(c, v)| {
        // Box–Muller.
        let (u1, u2): (f64, f64) = (rng.random::<f64>().max(1e-300), rng.random());
        let z = (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos();
        (c.to_vec(), v + sigma * z)
    });
    let x = CooTensor::from_entries(case.dims.to_vec(), entries).expect("valid entries");
    Problem {
        split: split(&x, [0.8, 0.1, 0.1], seed).expect("a valid split"),
        sigma,
    }
}
