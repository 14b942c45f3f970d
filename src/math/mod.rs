//! Arithmetic that a model (in [`crate::decomp`]) and an engine kernel must both
//! perform exactly alike.
//!
//! Data flows one way: the models use the engine, never the reverse. Where a backend
//! fuses a model's rule into a kernel (the CPU's Φ session runs CP-APR's inner
//! iterations row by row while a row's Khatri-Rao rows are in cache) and must give the
//! model's result to the bit, the rule cannot live in the model's module, nor in the
//! engine, which would then own the model's mathematics. It lives here, beside the base
//! types: pure functions on slices that both sides call.

pub mod mu;
