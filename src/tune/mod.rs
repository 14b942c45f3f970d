//! Per-device tile thresholds: the profiles the engine reads ([`profile`]), the tuning
//! procedure that measures them ([`run`]), where the cost curves cross
//! ([`crossover`]) and side-by-side timing at several thresholds ([`compare`]).
pub mod compare;
pub mod crossover;
pub mod profile;
pub mod run;

pub use compare::{compare_thresholds, compare_thresholds_detailed};
pub use run::{TuneOptions, TuneProgress, TuneReport, profile_path, tune};
