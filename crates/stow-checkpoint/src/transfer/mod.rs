//! Moving checkpoints between registries: transfer archives, deltas and
//! remotes. They use the engine's staging and publication internals
//! (`blobs`, `publish`), which stay private to this crate.

pub mod archive;
pub mod delta;
pub mod remote;
