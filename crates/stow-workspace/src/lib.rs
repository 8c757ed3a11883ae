//! stow-s3 agent workspaces: the lifecycle of a task directory on top of
//! the checkpoint engine (`stow-checkpoint`).
//!
//! What it is: the version-1 task manifest, `prepare` (files and Git
//! inputs copied into a new root), the workspace identity and session
//! claim, opening and resuming, admin (list, destroy, collect, prune,
//! policy), restore of a checkpoint into a new workspace, handoff
//! documents and named bundles.
//!
//! What it is not: checkpoints themselves (capture, diff, verify, GC,
//! transfer) are `stow-checkpoint`'s, which never imports this crate. A
//! workspace is a real directory plus a registry record: a copy for
//! editing, not an OS sandbox. This crate does no printing; every result
//! is a typed `serde` struct the CLI prints as JSON.

pub mod admin;
pub mod attach;
pub mod bundle;
mod describe;
#[doc(hidden)]
pub mod fuzzing;
mod git;
pub mod handoff;
mod identity;
pub mod manifest;
pub mod open;
mod prepare;
pub mod restore;

pub use describe::{
    capabilities, Capabilities, CheckpointLimits, RegistryBound, RepositoryResult, WorkspaceResult,
};
pub use identity::{claim_session, find_workspace, is_live, read_identity, Identity};
pub use manifest::{Plan, TaskManifest};
pub use prepare::prepare;
pub use stow_checkpoint::{Registry, Result, WsError};
