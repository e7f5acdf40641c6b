//! The `keel` command line: see [`keel::cli`] and `cli.md`.

/// jemalloc, not the system allocator: the engine allocates on one thread
/// and frees on another all the time, which glibc's malloc serialises on
/// its arena locks (ARCHITECTURE.md, "Cargo features: the engine alone").
#[cfg(not(target_env = "msvc"))]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> std::process::ExitCode {
    keel::cli::main()
}
