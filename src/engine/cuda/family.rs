//! The kernel families: each is one `.cu` entry file in `kernels/`, compiled into its
//! own device-code image and loaded into its own module, so that a family that fails
//! to compile or load leaves the others usable. Shared by build.rs (which embeds an
//! image per family) and the run-time loader; depends on nothing in the crate.

/// A kernel family.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Family {
    /// MTTKRP and TTMc: the fused, sparse-only and dense-only entries (`fused.cu`).
    Core,
    /// The CP-ALS factor update (`cp_update.cu`).
    CpUpdate,
    /// CP-APR's Φ (`phi.cu`).
    Phi,
    /// Tensor completion: ALS, CCD++ and SGD (`completion.cu`).
    Completion,
    /// GCP's sampled model values and gradient (`gcp.cu`).
    Gcp,
}

impl Family {
    /// Every family, in the order build.rs compiles them.
    pub const ALL: [Family; 5] = [
        Family::Core,
        Family::CpUpdate,
        Family::Phi,
        Family::Completion,
        Family::Gcp,
    ];

    /// The family's name in messages and image file names.
    pub fn name(self) -> &'static str {
        match self {
            Family::Core => "core",
            Family::CpUpdate => "cp_update",
            Family::Phi => "phi",
            Family::Completion => "completion",
            Family::Gcp => "gcp",
        }
    }

    /// The `.cu` file (in `kernels/`) that is compiled for the family.
    pub fn entry_file(self) -> &'static str {
        match self {
            Family::Core => "fused.cu",
            Family::CpUpdate => "cp_update.cu",
            Family::Phi => "phi.cu",
            Family::Completion => "completion.cu",
            Family::Gcp => "gcp.cu",
        }
    }

    /// The family whose module holds the entry point `name` (every entry is
    /// `hls_<what>_...`: `hls_cp_*`, `hls_gcp_*`, `hls_completion_*`, `hls_{fused,sparse,dense}_phi_*`,
    /// the rest MTTKRP and TTMc).
    pub fn of(name: &str) -> Family {
        if name.starts_with("hls_gcp_") {
            Family::Gcp
        } else if name.starts_with("hls_cp_") {
            Family::CpUpdate
        } else if name.starts_with("hls_completion_") {
            Family::Completion
        } else if name.contains("_phi_") {
            Family::Phi
        } else {
            Family::Core
        }
    }

    /// The family's index in [`Family::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }
}
