//! Per-device tile thresholds: the profiles the engine reads ([`profile`]).
pub mod profile;
