//! The checkpoint engine of stow-s3: content-addressed checkpoints of a
//! directory tree (and, for portable captures, of its bucket view), and
//! everything that reads, moves or collects them.
//!
//! What it is: scanning and watching a tree, capturing it into a registry
//! partition (blobs stored once by SHA-256, one tree node per directory,
//! one immutable manifest per checkpoint), publishing, diff, verify,
//! materialize, delete, GC, keyed (idempotent) captures, the watch service
//! that keeps a tree's scan warm between captures, and transfer: archives,
//! deltas and remotes. The workspace bucket view (`bucket`) lives here for
//! now, behind the `ObjectBackend` it implements.
//!
//! What it is not: the workspace lifecycle (task manifests, prepare,
//! open/claim, admin, restore into a new workspace, handoff, bundles) is
//! `stow-workspace`, on top of this crate; this crate never imports it.
//! It knows no HTTP, JSON-RPC or CLI, and prints nothing.
//!
//! Layout inside a registry partition `R` (see ARCHITECTURE.md):
//!
//! ```text
//! R/.stow/blobs/<xx>/<sha256>          immutable payloads and tree nodes, stored once
//! R/.stow/checkpoints/<cp_id>/         one published checkpoint:
//!     manifest.json                      the root tree node (or flat lists), exclusions
//!     summary.json                       id, workspace, parent, created, files, bytes
//!     receipt.json                       a keyed capture's receipt
//! R/.stow/checkpoints/.stage-*         a checkpoint being published (ignored)
//! R/.stow/checkpoints/.deleted-*       a checkpoint being removed (ignored)
//! R/.stow/tmp/                         payloads being staged
//! R/.stow/statcache/<ws>.cache         per-workspace stat cache (binary)
//! R/.stow/capture-locks/<ws>.lock      per-workspace capture lock
//! R/.stow/watch/<ws>.{sock,lock}       a running watch service
//! ```
//!
//! Crash rules: a blob reaches its final name only after its bytes are
//! durable, and a checkpoint directory is renamed into place only after
//! every blob it names is durable, so a published checkpoint never names a
//! missing or torn blob. (A capture refused after its blobs were named
//! leaves them unreferenced: complete, reused by a retry, removed by
//! garbage collection.) Garbage collection runs under the registry lock
//! (which every capture also holds) and deletes only blobs no published
//! manifest names; it refuses to run when any manifest is unreadable.

// The layers below the engine: errors, file helpers, names, the registry.
mod error;
pub mod fault;
pub mod fsutil;
#[doc(hidden)]
pub mod fuzzing;
mod gitexcludes;
mod layout;
pub mod parallel;
pub mod paths;
pub mod progress;
pub mod registry;

// Reading a tree: walks, ignore rules, the scan, inotify, the stat cache,
// the long-lived monitor.
mod ignorefile;
mod listing;
mod monitor;
mod scan;
mod statcache;
pub mod walk;
mod watch;

// Checkpoints: format, tree nodes, blobs, capture, publication, reads;
// a rewind's journaled changes to the tree.
mod apply;
mod blobs;
mod capture;
mod check;
mod cursor;
mod delete;
mod diff;
mod format;
mod gc;
pub mod history;
mod materialize;
mod objects;
mod publish;
pub mod status;
mod stored;
mod tree;
mod validate;

pub use blobs::{open_verified, stored_bytes, verify_blob, VerifiedBlob};
pub use capture::{capture, CaptureOptions, CaptureSpec};
pub use check::{check, Damage, RegistryCheck, UnfinishedRewind};
pub use delete::{delete, DeleteResult};
pub use diff::{
    diff, diff_files, diff_links, BucketChange, Change, DiffResult, Kind, LinkChange, ObjectChange,
};
pub use format::{
    check_belongs, check_message, registry_usage, summaries, CheckpointManifest, CheckpointResult,
    DirectoryEntry, FileEntry, Ignored, LinkEntry, ObjectEntry, Origin, SkippedEntry, Summary,
    MAX_MESSAGE_BYTES,
};
pub use gc::{gc, GcResult};
pub use materialize::verify;
pub use monitor::{KeptReuse, TreeMonitor};
pub use stored::load_manifest;

pub(crate) use blobs::{
    blob_ok, blob_path, discard, read_blob, stage_bytes, stage_known, stage_reader, Payload,
    StageError,
};
pub(crate) use capture::capture_locked;
pub(crate) use capture::{admit, RetentionCaps};
pub use delete::delete_workspace_checkpoints;
pub(crate) use diff::{diff_buckets, diff_files_exact, diff_objects};
pub use format::object_as_file;
pub use materialize::materialize;
pub(crate) use publish::publish;
pub(crate) use validate::validate_manifest;

// Keyed captures, the watch service, the bucket view, transfer.
pub mod bucket;
pub mod keyed;
pub mod rewind;
mod transfer;
pub mod watch_service;

pub use error::{Result, WsError};
pub use registry::{Policy, Record, Registry};
pub use transfer::{archive, delta, remote};
