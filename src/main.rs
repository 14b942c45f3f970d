//! The `sptmc` command line: CP and Tucker models of sparse tensors, the raw kernels
//! with an accuracy check, tensor statistics, self-test, benchmarks and tuning.

mod cli;

use clap::Parser;
use std::alloc::{GlobalAlloc, Layout, System};
use std::process::ExitCode;

/// The system allocator, except that an allocation it refuses ends the process with
/// one error line and exit status 1 instead of an abort (exit 134). Commands check a
/// memory plan before they start (`sptmc::memplan`); this catches what a plan missed
/// (another process taking the memory meanwhile, a dependency's workspace).
struct ExitOnOutOfMemory;

// SAFETY: every call is forwarded to `System` with the same arguments; a null result
// never returns (the process exits).
unsafe impl GlobalAlloc for ExitOnOutOfMemory {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded unchanged.
        checked(unsafe { System.alloc(layout) }, layout.size())
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded unchanged.
        checked(unsafe { System.alloc_zeroed(layout) }, layout.size())
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: forwarded unchanged.
        checked(unsafe { System.realloc(ptr, layout, new_size) }, new_size)
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded unchanged.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: ExitOnOutOfMemory = ExitOnOutOfMemory;

/// `ptr`, or (when null) the end of the process.
#[inline]
fn checked(ptr: *mut u8, size: usize) -> *mut u8 {
    if ptr.is_null() {
        out_of_memory(size);
    }
    ptr
}

/// Writes one line and exits with status 1, allocating nothing (the message is
/// formatted into a stack buffer) and running no exit handlers (which might).
#[cold]
fn out_of_memory(size: usize) -> ! {
    use std::io::Write;
    let mut buf = [0u8; 256];
    let mut line = std::io::Cursor::new(&mut buf[..]);
    let _ = writeln!(
        line,
        "sptmc: error: out of memory: an allocation of {size} bytes failed (see ulimit -v and the memory available)"
    );
    let n = line.position() as usize;
    // SAFETY: writes `n` initialized bytes of `buf` to stderr, then ends the process.
    unsafe {
        libc::write(2, buf.as_ptr().cast(), n);
        libc::_exit(1)
    }
}

fn main() -> ExitCode {
    // A bug must not print a backtrace at a user: one line, and a non-zero exit.
    std::panic::set_hook(Box::new(|info| {
        eprintln!("sptmc: internal error: {info}");
    }));
    let args = cli::args::Cli::parse();
    match cli::run(args) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("sptmc: error: {e}");
            ExitCode::from(1)
        }
    }
}
