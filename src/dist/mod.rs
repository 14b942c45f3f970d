//! CP-ALS and CP-APR across processes (MPI ranks), each on its own engine.
//!
//! - [`comm`]: the communicator ([`comm::Comm`], single-process [`comm::SelfComm`]) and
//!   the typed, accounted [`comm::Channel`] the models use;
//! - [`partition`]: the medium-grained grid of ranks (and the coarse-grained variant),
//!   slab boundaries that balance the nonzeros, who owns which factor rows;
//! - [`volume`]: the communication-volume model the measured bytes are set against;
//! - [`read`]: each rank reads its share of a `.tns` file (byte ranges of plain text;
//!   rank 0 streaming a gzip file in rounds), [`exchange`] moves every nonzero to the
//!   rank that holds it (one all-to-all) and gives each rank its block;
//! - `plan`: each rank's memory plan for its block, checked before it draws its
//!   factors or prepares the block;
//! - `routes`: which factor rows travel within a layer (only the rows each block
//!   uses), set once per run and mode;
//! - [`init`]: each rank draws only its rows of the initial factors;
//! - [`cp_als`]: CP-ALS over the ranks, the single process's mathematics reused;
//! - [`cp_apr`]: CP-APR over the ranks, the same multiplicative updates by the rows'
//!   owners;
//! - [`output`]: writing the model, the factors going to rank 0 row window by row
//!   window (no rank ever holds a whole factor), into a folder written whole or not at
//!   all;
//! - `mpi` (feature `mpi`): [`comm::Comm`] over the system MPI.
//!
//! Everything but the MPI binding compiles without MPI, and runs (as one rank) on
//! [`comm::SelfComm`].

mod block_phi;
pub mod comm;
pub mod cp_als;
pub mod cp_apr;
pub mod exchange;
pub mod init;
#[cfg(feature = "mpi")]
pub mod mpi;
pub mod output;
pub mod partition;
mod plan;
pub mod read;
mod routes;
pub mod volume;

#[cfg(test)]
mod tests;
