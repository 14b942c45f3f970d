//! sptmc: sparse MTTKRP and TTM-chain (the kernels of CP and Tucker decomposition) on
//! the Hybrid Linear Storage format — dense 16³ bitmap tiles for tensor cores plus a
//! linearized sparse remainder — with a rayon CPU backend, an FP64 reference, CP-ALS
//! and Tucker-HOOI on top.
//!
//! Data flows one way: [`tensor`] (COO, I/O, generator) → [`hls`] (format) →
//! [`engine`] (backends) → [`decomp`] (CP-ALS, Tucker-HOOI) → the `sptmc` command line.
//! [`mod@reference`] and [`accuracy`] check any result against FP64.

pub mod accuracy;
pub mod bench;
pub mod decomp;
pub mod engine;
pub mod error;
pub mod hls;
pub mod matrix;
pub mod memplan;
pub mod model_io;
pub mod ops;
pub mod reference;
pub mod selftest;
pub mod tensor;
pub mod timing;
pub mod tune;

pub use error::{Error, Result};
pub use matrix::Matrix;
pub use ops::Op;
pub use tensor::CooTensor;
