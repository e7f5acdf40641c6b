//! The `keel` command line: see [`keel::cli`] and `cli.md`.

fn main() -> std::process::ExitCode {
    keel::cli::main()
}
