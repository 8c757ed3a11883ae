//! Benchmarks for stow-s3 (work in progress).
fn main() {}
