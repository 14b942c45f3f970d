//! sptmc: sparse MTTKRP and TTM-chain (the kernels of CP and Tucker decomposition) on
//! the Hybrid Linear Storage format — dense 16³ bitmap tiles for tensor cores plus a
//! linearized sparse remainder — with a rayon CPU backend, an FP64 reference, CP-ALS
//! and Tucker-HOOI on top.
//!
//! The core, where data flows one way: [`tensor`] (COO, I/O, generator) → [`hls`]
//! (format) → [`engine`] (backends, tuning profiles) → [`decomp`] (CP-ALS,
//! Tucker-HOOI), on the base types [`error`], [`matrix`], [`ops`], [`memplan`] and
//! [`model_io`]; [`mod@reference`] and [`accuracy`] check any result against FP64.
//! Above the core, [`driver`] is the one path every front end (the `sptmc` command
//! line, the Python package) takes from a request to a reported model; [`tools`]
//! (self-test, benchmarks, tuning) measure the core.

// The core.
pub mod accuracy;
pub mod decomp;
pub mod dist;
pub mod engine;
pub mod environment;
pub mod error;
pub mod hls;
pub mod math;
pub mod matrix;
pub mod memplan;
pub mod model_io;
pub mod ops;
pub mod random;
pub mod reference;
pub mod tensor;

// Above the core: the front ends' driver and the tools.
pub mod driver;
pub mod tools;

pub use error::{Error, Result};
pub use matrix::Matrix;
pub use ops::Op;
pub use tensor::CooTensor;

/// A rayon pool of `threads` workers, for unit tests that compare results across
/// thread counts.
#[cfg(test)]
pub(crate) fn pool_of(threads: usize) -> rayon::ThreadPool {
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .expect("a rayon pool")
}
