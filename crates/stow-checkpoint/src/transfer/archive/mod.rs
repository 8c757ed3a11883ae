//! Transfer archives: one checkpoint as a
//! gzip tar that moves between registries and machines.
//!
//! Layout: entry 1 is `manifest.json`, compact JSON `{"format_version",
//! "manifest"}` holding the checkpoint manifest; then one regular entry
//! per payload, `files/<path>` for each file and `objects/<sha256>` for
//! each distinct object body of a portable checkpoint, sorted by name,
//! mode 0600, owner 0, mtime 0, no directory entries; names ustar cannot
//! hold travel in a PAX `path` record. The gzip stream is a series of
//! members compressed in parallel (`gz`), each with header mtime 0, so
//! the same checkpoint always exports to the same bytes and plain
//! `tar xzf` reads it. Credentials (sensitive paths) travel only on
//! request; registry state (receipts, stat caches, records) never does.
//!
//! Reading (`read`) validates everything while streaming — types, names,
//! sizes, digests, the zero trailer — and never writes outside the
//! registry's private staging; import publishes through the same path as
//! a capture (`checkpoint::publish`).

mod gz;
mod payloads;
mod read;
mod tarfmt;
mod write;

use serde::{Deserialize, Serialize};

use crate::error::{Result, WsError};
use crate::paths::is_sensitive;
use crate::CheckpointManifest;

pub use read::{import, preview, ImportOptions, PreviewFile, PreviewObject, PreviewResult};
pub use write::{export, ExportOptions, ExportResult};

pub(crate) use read::admit_outside_manifest;
pub use read::{file_sha256, import_with_digest, Expectation};

/// Default bound on an archive's payload bytes.
pub const DEFAULT_MAX_BYTES: u64 = 1 << 30;
/// Default bound on an archive's payloads (files and objects).
pub const DEFAULT_MAX_FILES: u64 = 100_000;
/// Largest `manifest.json` entry.
pub const MAX_MANIFEST_BYTES: u64 = 16 << 20;
/// Most decompressed bytes allowed after the end of the tar, all zero.
const MAX_TRAILER_BYTES: u64 = 1 << 20;
/// The name of the first entry.
const MANIFEST_ENTRY: &str = "manifest.json";

/// Bounds of an archive (0 in a field means its default).
#[derive(Debug, Clone, Copy, Default)]
pub struct ArchiveLimits {
    pub max_bytes: u64,
    pub max_files: u64,
}

impl ArchiveLimits {
    /// The byte bound in force (the default for 0).
    pub fn effective_bytes(&self) -> u64 {
        self.max_bytes()
    }

    /// The payload-count bound in force (the default for 0).
    pub fn effective_files(&self) -> u64 {
        self.max_files()
    }

    fn max_bytes(&self) -> u64 {
        if self.max_bytes == 0 {
            DEFAULT_MAX_BYTES
        } else {
            self.max_bytes
        }
    }

    fn max_files(&self) -> u64 {
        if self.max_files == 0 {
            DEFAULT_MAX_FILES
        } else {
            self.max_files
        }
    }

    /// Refuses a checkpoint over the bounds: the file bound holds for its
    /// payloads (files and objects) and, apart, for the entries without
    /// one (directories and links), which cost a restore as much.
    fn check(&self, m: &CheckpointManifest) -> Result<()> {
        let payloads = (m.files.len() + m.objects.len()) as u64;
        let bare = (m.dirs.len() + m.links.len()) as u64;
        for (count, what) in [
            (payloads, "files and objects"),
            (bare, "directories and links"),
        ] {
            if count > self.max_files() {
                return Err(WsError::CapacityExceeded(format!(
                    "the checkpoint holds {count} {what}, over the limit of {}",
                    self.max_files()
                )));
            }
        }
        let bytes = m.payload_bytes();
        if bytes > self.max_bytes() {
            return Err(WsError::CapacityExceeded(format!(
                "the checkpoint holds {bytes} bytes, over the limit of {}",
                self.max_bytes()
            )));
        }
        Ok(())
    }
}

/// The first entry of an archive.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct ArchiveHeader {
    format_version: u32,
    manifest: CheckpointManifest,
}

/// The manifest document of `m` as archives and remotes carry it: compact
/// JSON `{"format_version", "manifest"}`.
pub(crate) fn manifest_document(m: &CheckpointManifest) -> Result<Vec<u8>> {
    #[derive(Serialize)]
    struct Borrowed<'a> {
        format_version: u32,
        manifest: &'a CheckpointManifest,
    }
    serde_json::to_vec(&Borrowed {
        format_version: m.version,
        manifest: m,
    })
    .map_err(|e| WsError::InvalidRequest(format!("encode manifest: {e}")))
}

/// Strictly decodes a manifest document from outside (an archive's first
/// entry, a remote's manifest object) and checks it against every rule
/// and `limits`. Errors are plain text for the caller to classify.
pub(crate) fn decode_manifest_document(
    bytes: &[u8],
    limits: ArchiveLimits,
) -> std::result::Result<CheckpointManifest, DocumentError> {
    let h: ArchiveHeader = serde_json::from_slice(bytes)
        .map_err(|e| DocumentError::Invalid(format!("malformed: {e}")))?;
    if h.format_version != h.manifest.version {
        return Err(DocumentError::Invalid(format!(
            "format_version {} disagrees with manifest version {}",
            h.format_version, h.manifest.version
        )));
    }
    // The bounds first: counting is cheap, validating a huge manifest is not.
    limits.check(&h.manifest).map_err(DocumentError::Limit)?;
    crate::validate_manifest(&h.manifest).map_err(DocumentError::Invalid)?;
    Ok(h.manifest)
}

/// Why [`decode_manifest_document`] refused a document.
pub(crate) enum DocumentError {
    /// It breaks the format or a manifest rule.
    Invalid(String),
    /// It is valid but over the caller's bounds.
    Limit(WsError),
}

/// One payload entry an archive of `m` holds.
struct Expected {
    name: String,
    size: u64,
    sha256: String,
}

/// Every payload entry of an archive of `m`, sorted by name: one per
/// file, one per distinct object body.
fn expected_entries(m: &CheckpointManifest) -> Vec<Expected> {
    let mut out: Vec<Expected> = m
        .files
        .iter()
        .map(|f| Expected {
            name: format!("files/{}", f.path),
            size: f.size,
            sha256: f.sha256.clone(),
        })
        .collect();
    let mut seen = std::collections::HashSet::new();
    for o in &m.objects {
        if seen.insert(o.sha256.as_str()) {
            out.push(Expected {
                name: format!("objects/{}", o.sha256),
                size: o.size,
                sha256: o.sha256.clone(),
            });
        }
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

/// Sensitive-looking paths of a checkpoint, sorted: file and link paths
/// (a link named `.env` restores a credential as surely as a file), and
/// object keys as `s3://bucket/key`.
fn sensitive_paths(m: &CheckpointManifest) -> Vec<String> {
    let mut out: Vec<String> = m
        .files
        .iter()
        .map(|f| &f.path)
        .chain(m.links.iter().map(|l| &l.path))
        .filter(|p| is_sensitive(p))
        .cloned()
        .chain(
            m.objects
                .iter()
                .filter(|o| is_sensitive(&o.key))
                .map(|o| format!("s3://{}/{}", o.bucket, o.key)),
        )
        .collect();
    out.sort();
    out
}

/// Refuses sensitive paths without the explicit opt-in.
pub(crate) fn check_sensitive(m: &CheckpointManifest, include_sensitive: bool) -> Result<()> {
    match sensitive_paths(m).into_iter().next() {
        Some(path) if !include_sensitive => Err(WsError::SensitivePath {
            path,
            opt_in: "--include-sensitive",
        }),
        _ => Ok(()),
    }
}
