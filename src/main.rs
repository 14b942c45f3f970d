//! The `sptmc` command line: CP and Tucker models of sparse tensors, the raw kernels
//! with an accuracy check, tensor statistics, self-test, benchmarks and tuning.
//!
//! Output streams behave as in other command-line tools: a reader that closes the
//! pipe early (`sptmc info X | head -1`) ends the program quietly (SIGPIPE, as C tools
//! do); stdout that cannot be written (`> /dev/full`) is one error line on stderr and
//! exit status 1; stderr that cannot be written is ignored. To that end the print
//! macros below replace std's for the whole binary: a plain `println!` in any command
//! goes through [`print_stdout`], an `eprintln!` through [`print_stderr`].

/// `print!` of this binary: see [`print_stdout`].
macro_rules! print {
    ($($t:tt)*) => { $crate::print_stdout(format_args!($($t)*), false) };
}

/// `println!` of this binary: see [`print_stdout`].
macro_rules! println {
    () => { $crate::print_stdout(format_args!(""), true) };
    ($($t:tt)*) => { $crate::print_stdout(format_args!($($t)*), true) };
}

/// `eprint!` of this binary: see [`print_stderr`].
macro_rules! eprint {
    ($($t:tt)*) => { $crate::print_stderr(format_args!($($t)*), false) };
}

/// `eprintln!` of this binary: see [`print_stderr`].
macro_rules! eprintln {
    () => { $crate::print_stderr(format_args!(""), true) };
    ($($t:tt)*) => { $crate::print_stderr(format_args!($($t)*), true) };
}

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

/// Writes to stdout (and a newline when `line`), flushed at once so that a failure is
/// seen here. A closed pipe ends the process by SIGPIPE (its default action is restored
/// in [`main`]; this is the fallback where it is ignored); any other failure is one
/// error line on stderr and exit status 1.
fn print_stdout(args: std::fmt::Arguments<'_>, line: bool) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    let done = out
        .write_fmt(args)
        .and_then(|()| if line { out.write_all(b"\n") } else { Ok(()) })
        .and_then(|()| out.flush());
    if let Err(e) = done {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(141);
        }
        print_stderr(
            format_args!("sptmc: error: cannot write to stdout: {e}"),
            true,
        );
        std::process::exit(1);
    }
}

/// Writes to stderr (and a newline when `line`); a failure is ignored, since there is
/// nowhere left to report it.
fn print_stderr(args: std::fmt::Arguments<'_>, line: bool) {
    use std::io::Write;
    let mut err = std::io::stderr().lock();
    let _ = err
        .write_fmt(args)
        .and_then(|()| if line { err.write_all(b"\n") } else { Ok(()) });
}

/// Parses the command line. A usage error is one `sptmc: error:` line and exit status
/// 1 (clap's own text spans several lines and exits 2); `--help` and `--version` print
/// as usual.
fn parse_args() -> Result<cli::args::Cli, ExitCode> {
    use clap::error::ErrorKind;
    let e = match cli::args::Cli::try_parse() {
        Ok(cli) => return Ok(cli),
        Err(e) => e,
    };
    match e.kind() {
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => {
            print!("{}", e.render());
            Err(ExitCode::SUCCESS)
        }
        ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            eprint!("{}", e.render());
            Err(ExitCode::from(1))
        }
        _ => {
            eprintln!("sptmc: error: {}", one_line(&e.to_string()));
            Err(ExitCode::from(1))
        }
    }
}

/// Clap's message as one line: its first paragraph, the `error: ` prefix dropped and
/// the lines joined (a list of missing arguments follows on indented lines).
fn one_line(text: &str) -> String {
    let first = text.split("\n\n").next().unwrap_or(text);
    let joined: Vec<&str> = first
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    let line = joined.join(" ");
    line.strip_prefix("error: ").unwrap_or(&line).to_string()
}

fn main() -> ExitCode {
    // A reader that closes the pipe early ends the program quietly, as it does C
    // tools (Rust ignores SIGPIPE, turning each later write into an error).
    // SAFETY: sets a signal's disposition to its default before any thread starts.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    // Under `ulimit -v`, one malloc arena: each further one reserves 64 MiB of the
    // limited address space (see `sptmc::memplan`). Before any thread starts.
    sptmc::memplan::share_one_malloc_arena();
    // A bug must not print a backtrace at a user: one line, and a non-zero exit.
    std::panic::set_hook(Box::new(|info| {
        eprintln!("sptmc: internal error: {info}");
    }));
    let args = match parse_args() {
        Ok(a) => a,
        Err(code) => return code,
    };
    match cli::run(args) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("sptmc: error: {e}");
            ExitCode::from(1)
        }
    }
}
