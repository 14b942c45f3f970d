//! Measuring per-device tile thresholds (the profiles the engine reads live in
//! [`crate::engine::profile`]): the tuning procedure ([`run`]), where the cost curves
//! cross ([`crossover`]) and side-by-side timing at several thresholds ([`compare`]).
pub mod compare;
pub mod crossover;
pub mod run;

pub use compare::{compare_thresholds, compare_thresholds_detailed};
pub use run::{TuneOptions, TuneProgress, TuneReport, tune};
