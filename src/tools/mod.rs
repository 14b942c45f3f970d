//! The tools on top of the library core: they measure and check what the core computes,
//! and use nothing of it but its public API.
//!
//! - [`measure`]: the one timing loop ([`measure::measure`]) and the provenance of a
//!   measurement (UTC date, build commit).
//! - [`cases`]: the catalog of generated tensors, the shared real data sets, how factors
//!   are drawn.
//! - [`selftest`]: every op on every mode against the FP64 reference (`sptmc selftest`).
//! - [`mod@bench`]: kernel timings, bandwidth and the pyttb peer (`sptmc bench`).
//! - [`tune`]: measuring a device's tile thresholds (`sptmc tune`).

pub mod bench;
pub mod cases;
pub mod measure;
pub mod selftest;
pub mod tune;
