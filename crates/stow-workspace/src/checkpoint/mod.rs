//! Content-addressed checkpoints (D3).
//!
//! Layout inside a registry partition `R`:
//!
//! ```text
//! R/.stow/blobs/<xx>/<sha256>          immutable payloads, stored once
//! R/.stow/checkpoints/<cp_id>/         one published checkpoint:
//!     manifest.json                      files (path, size, mode, sha256), exclusions
//!     summary.json                       id, workspace, parent, created, files, bytes
//! R/.stow/checkpoints/.stage-*         a capture being assembled (ignored)
//! R/.stow/checkpoints/.deleted-*       a checkpoint being removed (ignored)
//! R/.stow/tmp/                         blobs being written
//! R/.stow/statcache/<ws>.cache         per-workspace stat cache (binary)
//! R/.stow/capture-locks/<ws>.lock      per-workspace capture lock
//! ```
//!
//! Modules, one job each: `format` (manifests and summaries), `blobs` (the
//! content-addressed store and its durability rules), `scan` (walking the
//! tree), `objects` (the bucket snapshot of a portable capture), `capture`,
//! `validate` (rules for manifests from outside), `publish` (the one path by which capture, import and apply make a
//! checkpoint visible), `diff`, `materialize` (verify and restore), `delete`
//! and `gc`.
//!
//! Crash rules: a blob reaches its final name only after its bytes are
//! durable (`syncfs`), and a checkpoint directory is renamed into place only
//! after every blob it names is durable, so a published checkpoint never
//! names a missing or torn blob. (A capture refused after its blobs were
//! named leaves them unreferenced: complete, reused by a retry, removed by
//! garbage collection.) Garbage collection runs under the registry
//! lock (which every capture also holds) and deletes only blobs no published
//! manifest names; it refuses to run when any manifest is unreadable.

mod admit;
mod blobs;
mod capture;
mod check;
mod delete;
mod diff;
mod format;
mod gc;
mod materialize;
mod monitor;
mod objects;
mod produce;
mod publish;
mod scan;
mod tree;
mod validate;

use std::path::PathBuf;

use crate::registry::Registry;

pub use blobs::{stored_bytes, verify_blob};
pub use capture::{capture, CaptureOptions};
pub use check::{check, Damage, RegistryCheck};
pub use delete::{delete, DeleteResult};
pub use diff::{
    diff, diff_files, diff_links, BucketChange, Change, DiffResult, Kind, LinkChange, ObjectChange,
};
pub use format::{
    check_belongs, load_manifest, registry_usage, summaries, CheckpointManifest, CheckpointResult,
    DirectoryEntry, FileEntry, Ignored, LinkEntry, ObjectEntry, SkippedEntry, Summary,
};
pub use gc::{gc, GcResult};
pub use materialize::verify;
pub use monitor::TreeMonitor;

pub(crate) use admit::{admit, RetentionCaps};
pub(crate) use blobs::{
    blob_ok, blob_path, discard, open_verified, read_blob, stage_bytes, stage_known, stage_reader,
    Payload, StageError,
};
pub(crate) use capture::capture_locked;
pub(crate) use delete::delete_workspace_checkpoints;
pub(crate) use diff::{diff_buckets, diff_files_exact, diff_objects};
pub(crate) use format::object_as_file;
pub(crate) use materialize::materialize;
pub(crate) use publish::publish;
pub(crate) use validate::validate_manifest;

pub(crate) fn state(registry: &Registry) -> PathBuf {
    registry.state_dir()
}

pub(crate) fn checkpoints_dir(registry: &Registry) -> PathBuf {
    state(registry).join("checkpoints")
}

/// The per-workspace stat cache (binary; see `statcache`).
pub(crate) fn cache_path(registry: &Registry, ws: &str) -> PathBuf {
    state(registry)
        .join("statcache")
        .join(format!("{ws}.cache"))
}

/// The JSON stat cache of earlier versions, removed with the workspace.
pub(crate) fn legacy_cache_path(registry: &Registry, ws: &str) -> PathBuf {
    state(registry).join("statcache").join(format!("{ws}.json"))
}

pub(crate) fn now_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as i64)
        .unwrap_or(0)
}
