//! Backend invariants, search contracts and independent model comparisons.
use super::*;

mod support;
use support::*;

mod bounds;
mod convergence;
mod interpolation;
mod model;
mod search;
mod search_acceptance;
mod traces;
