//! The `keel` command line (placeholder until the CLI issue lands).

fn main() {}
