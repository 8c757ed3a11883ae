//! stow-s3 agent workspaces: the version-1 task manifest, `prepare`, the
//! registry (team partitions, list, destroy, collect, prune, policy),
//! resume and handoff, content-addressed checkpoints, diff and restore.
//!
//! A workspace is a real directory plus a registry record. It is a copy for
//! editing, not an OS sandbox. This crate does no printing; every result is
//! a typed `serde` struct the CLI prints as JSON.

pub mod admin;
pub mod archive;
pub mod bucket;
pub mod bundle;
pub mod checkpoint;
pub mod delta;
mod error;
pub mod fsutil;
mod git;
pub mod handoff;
mod ignorefile;
pub mod keyed;
pub mod manifest;
pub mod open;
mod parallel;
pub mod paths;
mod prepare;
pub mod progress;
pub mod registry;
pub mod remote;
pub mod restore;
mod statcache;
pub mod tree;
mod watch;
pub mod watch_service;

pub use error::{Result, WsError};
pub use manifest::{Plan, TaskManifest};
pub use prepare::{
    capabilities, claim_session, is_live, prepare, read_identity, Capabilities, CheckpointLimits,
    Identity, RegistryBound, RepositoryResult, WorkspaceResult,
};
pub use registry::{Policy, Record, Registry};
