//! The `kubehash` binary: everything is in the library's `cli` module.

use std::process::ExitCode;

/// Scans parse pods on one thread and free them on another; glibc's malloc serialises such
/// cross-thread frees on an arena lock (a fifth of scan time in futex wake-ups). mimalloc does not.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    kubehash::cli::main().into()
}
