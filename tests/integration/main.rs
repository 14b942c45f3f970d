//! The integration tests, one executable with a module per area (`cargo test --test
//! integration`, or `cargo test --test integration MODULE::` for one area).
//!
//! One executable rather than one per file: each executable links the whole library and
//! its dependencies, which on CI's two cores cost more than running the tests, and one
//! harness runs the areas' tests side by side instead of one executable after another.
//! Tests that drive the `sptmc` binary start their own processes, so running beside
//! each other changes nothing they measure; none sets process-wide state (environment
//! variables, the global rayon pool, the panic hook).

mod common;
#[path = "../support/low_rank.rs"]
mod low_rank;

mod abi_drift;
mod address_space;
mod atomic_writes;
mod bad_input;
mod cache;
mod cli;
mod collapsed_models;
mod completion;
mod completion_cli;
mod completion_defaults;
mod completion_files;
mod completion_rows;
mod completion_scale;
mod completion_solvers;
mod cp_apr;
mod cp_rows;
mod decomp;
mod engine;
mod exact_values;
mod fit;
mod fuzz;
mod gcp_cli;
mod gcp_gradient;
mod gpu;
mod hls_roundtrip;
mod kernel_families;
mod limits;
mod memory_plan;
mod messages;
mod mpi_cp;
mod mpi_cp_apr;
mod mpi_memory;
mod mpi_routes;
mod odd_lines;
mod options;
mod output_streams;
mod outputs;
mod peer_pyttb;
mod peer_pyttb_cp_apr;
mod peer_pyttb_gcp;
mod peer_pyttb_mttkrp;
mod phi;
mod reference;
mod rounded_values;
mod seam;
mod selftest_skips;
mod special_files;
mod tns_io;
mod tucker_rows;
mod tuning;
mod values;
