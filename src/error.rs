//! The one error type of the crate.
//!
//! Policy (as in sprs): a data-dependent failure — a malformed file, a shape that does
//! not match, a rank of 0, a missing device — is returned as an [`Error`]; the library
//! never panics on user data. Every variant carries enough structure for a caller to
//! act on it and a `Display` that reads as one clear line.

use std::path::PathBuf;

/// Everything that can go wrong in sptmc.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A line of a text tensor file could not be used.
    #[error("{}:{line}: {reason}", file.display())]
    Parse {
        /// The file being read (`<memory>` when parsing a buffer).
        file: PathBuf,
        /// 1-based line number.
        line: usize,
        /// What is wrong with the line.
        reason: String,
    },
    /// Reading or writing a file failed.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file involved.
        path: PathBuf,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },
    /// A binary tensor cache is malformed or of another version.
    #[error("{}: not a valid sptmc binary tensor: {reason}", path.display())]
    BadBinary {
        /// The file involved.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// A compressed file whose compressed stream is corrupt or truncated.
    #[error("{}: cannot decompress: {reason}", path.display())]
    Decompress {
        /// The file involved.
        path: PathBuf,
        /// What the decompressor found wrong.
        reason: String,
    },
    /// A tensor that cannot be used at all (no nonzeros, a mode of length 0, ...).
    #[error("invalid tensor: {0}")]
    InvalidTensor(String),
    /// A mode number outside `0..order`.
    #[error("mode {mode} is out of range for a tensor of order {order} (modes are 0 to {}, counted from 0)", order.saturating_sub(1))]
    ModeOutOfRange {
        /// The mode asked for.
        mode: usize,
        /// The tensor's order.
        order: usize,
    },
    /// A rank of zero, or a rank list of the wrong length.
    #[error("invalid rank: {0}")]
    InvalidRank(String),
    /// A matrix or list whose shape does not match what the operation needs.
    #[error("shape mismatch for {what}: expected {expected}, got {got}")]
    Shape {
        /// Which argument.
        what: String,
        /// The shape the operation needs.
        expected: String,
        /// The shape it was given.
        got: String,
    },
    /// An option value that makes no sense (negative tolerance, zero threads, ...).
    #[error("invalid option: {0}")]
    InvalidOption(String),
    /// Something the format or a backend does not support (yet), named precisely.
    #[error("unsupported: {0}")]
    Unsupported(String),
    /// A tensor or workspace that does not fit in the device's memory.
    #[error(
        "out of device memory: {what} needs {needed} bytes, the device has {available} bytes free"
    )]
    DeviceMemory {
        /// What was being allocated.
        what: String,
        /// Bytes needed.
        needed: u64,
        /// Bytes available.
        available: u64,
    },
    /// A result or workspace larger than the memory this machine has available.
    #[error("not enough memory: {what} needs {needed} bytes, {available} bytes are available")]
    HostMemory {
        /// What was being allocated.
        what: String,
        /// Bytes needed.
        needed: u64,
        /// Bytes available.
        available: u64,
    },
    /// A command whose memory plan ([`crate::memplan`]) needs more than this process may
    /// allocate.
    #[error(
        "not enough memory: {what} needs {}, but {} is available ({limited_by}); the largest part is {largest}; {hint}",
        crate::memplan::human_bytes(*.needed),
        crate::memplan::human_bytes(*.available)
    )]
    Memory {
        /// What was planned (e.g. `CP-ALS rank 10000`).
        what: String,
        /// Bytes the plan needs.
        needed: u64,
        /// Bytes this process may allocate.
        available: u64,
        /// Which limit is the smallest.
        limited_by: String,
        /// The plan's largest part and its size.
        largest: String,
        /// Which option reduces the need.
        hint: String,
    },
    /// No usable GPU (no driver, no device, or the wrong compute capability).
    #[error("no usable CUDA device: {0}")]
    NoDevice(String),
    /// A CUDA driver call failed.
    #[error("CUDA driver error in {context}: {message}")]
    Cuda {
        /// What was being done.
        context: String,
        /// The driver's message.
        message: String,
    },
    /// NVRTC could not compile a kernel; carries the full log and the options used.
    #[error("NVRTC failed to compile {kernel} with options {options:?}:\n{log}")]
    Nvrtc {
        /// The kernel source file.
        kernel: String,
        /// Options passed to NVRTC.
        options: Vec<String>,
        /// The compiler's log.
        log: String,
    },
    /// A tuning profile could not be read.
    #[error("{}: bad tuning profile: {reason}", path.display())]
    Profile {
        /// The profile file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// A result contains NaN or Inf, or a comparison found non-finite values.
    #[error("non-finite value: {0}")]
    NonFinite(String),
    /// A dense linear-algebra routine (eigendecomposition, SVD) did not converge.
    #[error("dense linear algebra failed: {0}")]
    Numerical(String),
}

/// The crate's result type.
pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    /// An I/O error on `path`.
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io {
            path: path.into(),
            source,
        }
    }

    /// A shape mismatch.
    pub fn shape(what: impl Into<String>, expected: impl ToString, got: impl ToString) -> Self {
        Error::Shape {
            what: what.into(),
            expected: expected.to_string(),
            got: got.to_string(),
        }
    }
}
