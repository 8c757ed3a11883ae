//! Keyed capture (`--request-key`, `--resolve`): a caller persists a random
//! key and the exact options before calling, and reuses both to reconcile
//! after a crash or timeout. The checkpoint ID derives from the key, and the
//! receipt is published atomically inside the checkpoint directory, so a
//! checkpoint with that ID exists exactly when the capture committed.

use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::error::WsError;
use crate::fsutil::{create_private_dir, hex, FileLock};
use crate::paths::{check_checkpoint_id, check_workspace_id};
use crate::registry::Registry;
use crate::{capture_locked, CaptureOptions, CaptureSpec, CheckpointManifest};

/// The receipt stored with a keyed checkpoint.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Receipt {
    pub version: u32,
    pub checkpoint_id: String,
    pub workspace_id: String,
    pub request_digest: String,
    pub options_digest: String,
}

/// The checkpoint part of a keyed result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyedCheckpoint {
    pub version: u32,
    pub id: String,
    pub workspace_id: String,
    /// The parent checkpoint; absent (never null) for a first checkpoint.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parent_id: Option<String>,
    pub created: String,
    pub files: u64,
    /// Logical bytes: files and, in a portable checkpoint, objects.
    pub bytes: u64,
    pub excluded: Vec<String>,
    /// Portable checkpoints: the objects outside the file view.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub objects: Option<u64>,
}

/// `result` of the keyed envelope.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct KeyedResult {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub checkpoint: Option<KeyedCheckpoint>,
    pub replayed: bool,
    pub outcome: Outcome,
}

/// Whether a keyed capture's effect happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// The checkpoint is published.
    Committed,
    /// Nothing was published.
    NotCommitted,
    /// Whether it was published is not known (look again by key).
    Unknown,
}

impl Outcome {
    /// The outcome's wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Committed => "committed",
            Outcome::NotCommitted => "not_committed",
            Outcome::Unknown => "unknown",
        }
    }
}

/// The error object of the keyed envelope.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct KeyedError {
    pub code: String,
    pub phase: String,
    pub attempts: u32,
    pub retryable: bool,
    pub outcome: Outcome,
    /// Human message (the CLI prints it on stderr, MCP includes it); not
    /// part of the envelope's JSON.
    #[serde(skip)]
    pub message: String,
}

/// The keyed envelope: `{version, result, error?}`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct KeyedEnvelope {
    pub version: u32,
    pub result: KeyedResult,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<KeyedError>,
}

/// A keyed capture or resolution request.
pub struct KeyedRequest<'a> {
    pub workspace_id: &'a str,
    pub request_key: &'a str,
    /// Only look: never capture.
    pub resolve: bool,
    /// Must be positive.
    pub timeout: Duration,
    /// What to capture.
    pub spec: CaptureSpec,
    /// A long-lived server's watch over the workspace (see
    /// [`crate::TreeMonitor`]).
    pub monitor: Option<&'a crate::TreeMonitor>,
}

/// The checkpoint ID and full request digest a key derives.
pub fn derive_id(workspace_id: &str, key: &str) -> (String, String) {
    let mut h = Sha256::new();
    h.update(b"stow-checkpoint-request-v1");
    h.update([0u8]);
    h.update(workspace_id.as_bytes());
    h.update([0u8]);
    h.update(key.as_bytes());
    let digest = hex(&h.finalize());
    (format!("cp_{}", &digest[..24]), digest)
}

/// The digest of a request's options as they take effect: a portable
/// capture's 0 bounds are the archive defaults, so a caller that names the
/// defaults (the MCP profile) and one that leaves them out (the CLI)
/// describe the same request.
fn options_digest(req: &KeyedRequest) -> String {
    let spec = &req.spec;
    let (max_bytes, max_files) = spec.bounds();
    let mut opts = serde_json::json!({
        "parent": spec.parent,
        "max_bytes": max_bytes,
        "max_files": max_files,
        "include_sensitive": spec.include_sensitive,
        "portable": spec.portable,
    });
    // Only when set, so requests from before the option keep their digest.
    if spec.no_ignore {
        opts["no_ignore"] = serde_json::Value::Bool(true);
    }
    if let Some(message) = &spec.message {
        opts["message"] = serde_json::Value::String(message.clone());
    }
    hex(&Sha256::digest(opts.to_string().as_bytes()))
}

fn fail(
    code: &'static str,
    phase: &'static str,
    outcome: Outcome,
    message: String,
) -> KeyedEnvelope {
    KeyedEnvelope {
        version: 1,
        result: KeyedResult {
            checkpoint: None,
            replayed: false,
            outcome,
        },
        error: Some(KeyedError {
            code: code.into(),
            phase: phase.into(),
            attempts: 1,
            retryable: code == "in_progress",
            outcome,
            message,
        }),
    }
}

fn from_error(e: WsError, phase: &'static str) -> KeyedEnvelope {
    let (code, phase, outcome) = match &e {
        WsError::InvalidRequest(_) | WsError::InvalidPath { .. } => {
            ("invalid_request", "validate", Outcome::NotCommitted)
        }
        WsError::InvalidParent(_) => ("invalid_parent", "validate", Outcome::NotCommitted),
        WsError::InProgress(_) => ("in_progress", "lock", Outcome::NotCommitted),
        WsError::CapacityExceeded(_) => ("capacity_exceeded", "admit", Outcome::NotCommitted),
        WsError::WorkspaceChanged(_) => ("workspace_changed", "verify", Outcome::NotCommitted),
        WsError::OutcomeUnknown(_) => ("outcome_unknown", "commit", Outcome::Unknown),
        WsError::Corrupt(_) => ("corrupt_checkpoint", "resolve", Outcome::Unknown),
        WsError::Cancelled(_) => ("cancelled", "copy", Outcome::NotCommitted),
        WsError::RequestConflict => ("request_conflict", "resolve", Outcome::Unknown),
        WsError::Io { source, .. } if stow_store::io_is_no_space(source) => {
            ("no_space", phase, Outcome::NotCommitted)
        }
        WsError::Io { source, .. } if source.kind() == std::io::ErrorKind::PermissionDenied => {
            ("permission_denied", phase, Outcome::NotCommitted)
        }
        _ => ("io_failure", phase, Outcome::NotCommitted),
    };
    fail(code, phase, outcome, e.to_string())
}

fn committed(m: &CheckpointManifest, replayed: bool) -> KeyedEnvelope {
    KeyedEnvelope {
        version: 1,
        result: KeyedResult {
            checkpoint: Some(KeyedCheckpoint {
                version: m.version,
                id: m.id.clone(),
                workspace_id: m.workspace_id.clone(),
                parent_id: m.parent_id.clone(),
                created: m.created.clone(),
                files: m.files.len() as u64,
                bytes: m.files.iter().map(|f| f.size).sum::<u64>()
                    + m.objects.iter().map(|o| o.size).sum::<u64>(),
                excluded: m.excluded.clone(),
                objects: (m.version == 2).then_some(m.objects.len() as u64),
            }),
            replayed,
            outcome: Outcome::Committed,
        },
        error: None,
    }
}

/// Longest request key, in bytes (a keyed capture's and a rewind's).
pub const MAX_REQUEST_KEY_BYTES: usize = 256;

/// A caller's request key: 1 to [`MAX_REQUEST_KEY_BYTES`] bytes, without
/// surrounding whitespace (a key copied with a stray space would silently
/// be another key).
pub fn check_request_key(key: &str) -> crate::error::Result<()> {
    if key.is_empty() || key.len() > MAX_REQUEST_KEY_BYTES || key.trim() != key {
        return Err(WsError::InvalidRequest(format!(
            "a request key is 1 to {MAX_REQUEST_KEY_BYTES} bytes without surrounding whitespace"
        )));
    }
    Ok(())
}

/// Runs a keyed capture or resolution. Never returns `Err`: every failure
/// is an envelope with a code, a phase and an outcome.
///
/// Long because a keyed request's steps (validate, look up the receipt,
/// replay, lock, capture with the receipt) and the phase each failure
/// reports belong in one reading order.
pub fn keyed_capture(registry: &Registry, req: &KeyedRequest) -> KeyedEnvelope {
    let started = Instant::now();
    let key = req.request_key;
    if let Err(e) = check_request_key(key) {
        return fail(
            "invalid_request",
            "validate",
            Outcome::NotCommitted,
            e.to_string(),
        );
    }
    if req.timeout.is_zero() {
        return fail(
            "invalid_request",
            "validate",
            Outcome::NotCommitted,
            "a positive --timeout is required".into(),
        );
    }
    if let Err(e) = check_workspace_id(req.workspace_id) {
        return fail(
            "invalid_request",
            "validate",
            Outcome::NotCommitted,
            e.to_string(),
        );
    }
    if let Some(p) = &req.spec.parent {
        if let Err(e) = check_checkpoint_id(p) {
            return fail(
                "invalid_request",
                "validate",
                Outcome::NotCommitted,
                e.to_string(),
            );
        }
    }
    let rec = match registry.get(req.workspace_id) {
        Ok(r) => r,
        Err(e) => {
            return fail(
                "invalid_scope",
                "lookup",
                Outcome::NotCommitted,
                e.to_string(),
            )
        }
    };
    let (id, request_digest) = derive_id(&rec.id, key);
    let expected = Receipt {
        version: 1,
        checkpoint_id: id.clone(),
        workspace_id: rec.id.clone(),
        request_digest,
        options_digest: options_digest(req),
    };
    let locks = registry.state_dir().join("capture-locks");
    if let Err(e) = create_private_dir(&locks) {
        return from_error(e, "lock");
    }
    let _capture = match FileLock::try_lock(&locks.join(format!("{}.lock", rec.id))) {
        Ok(Some(l)) => l,
        Ok(None) => return from_error(WsError::InProgress(rec.id.clone()), "lock"),
        Err(e) => {
            return fail(
                "locking_unavailable",
                "lock",
                Outcome::NotCommitted,
                e.to_string(),
            )
        }
    };
    let _registry_lock = match registry.lock() {
        Ok(l) => l,
        Err(e) => {
            return fail(
                "locking_unavailable",
                "lock",
                Outcome::NotCommitted,
                e.to_string(),
            )
        }
    };
    if let Err(e) = crate::apply::finish_locked(
        registry,
        &rec,
        req.monitor.and_then(crate::TreeMonitor::view),
    ) {
        return from_error(e, "lock");
    }
    if started.elapsed() > req.timeout {
        return fail(
            "cancelled",
            "lock",
            Outcome::NotCommitted,
            "the deadline passed before the capture started".into(),
        );
    }
    let dir = registry.state_dir().join("checkpoints").join(&id);
    if dir.is_dir() {
        return replay(registry, &id, &dir, &expected);
    }
    if req.resolve {
        // Absence proves nothing: the capture may never have run, or its
        // checkpoint was deleted (which deletes the receipt).
        return fail(
            "not_found",
            "resolve",
            Outcome::Unknown,
            format!("no receipt for this request key ({id})"),
        );
    }
    let receipt = match serde_json::to_vec_pretty(&expected) {
        Ok(b) => b,
        Err(e) => return fail("io_failure", "commit", Outcome::NotCommitted, e.to_string()),
    };
    let opts = CaptureOptions {
        spec: req.spec.clone(),
        // The deadline holds until the checkpoint is published: a capture
        // past it stops and reports `cancelled`, never half-done.
        deadline: Some(started + req.timeout),
        monitor: req.monitor,
        ..CaptureOptions::default()
    };
    match capture_locked(registry, &rec, &id, &opts, Some(receipt)) {
        // The capture's own result describes what it published: reading
        // the manifest back would cost a walk of the whole tree.
        Ok(r) => KeyedEnvelope {
            version: 1,
            result: KeyedResult {
                checkpoint: Some(KeyedCheckpoint {
                    version: if req.spec.portable { 2 } else { 1 },
                    id: r.checkpoint_id,
                    workspace_id: r.workspace_id,
                    parent_id: r.parent_checkpoint_id,
                    created: r.created,
                    files: r.files,
                    bytes: r.bytes,
                    excluded: r.excluded_sensitive_paths,
                    objects: r.objects,
                }),
                replayed: false,
                outcome: Outcome::Committed,
            },
            error: None,
        },
        Err(e) => from_error(e, "capture"),
    }
}

fn replay(
    registry: &Registry,
    id: &str,
    dir: &std::path::Path,
    expected: &Receipt,
) -> KeyedEnvelope {
    let stored: Option<Receipt> = std::fs::read(dir.join("receipt.json"))
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok());
    if stored.as_ref() != Some(expected) {
        return from_error(WsError::RequestConflict, "resolve");
    }
    match crate::verify(registry, id) {
        Ok(m) if m.workspace_id == expected.workspace_id => committed(&m, true),
        Ok(_) => fail(
            "corrupt_checkpoint",
            "verify",
            Outcome::Unknown,
            "checkpoint names another workspace".into(),
        ),
        Err(e) => fail(
            "corrupt_checkpoint",
            "verify",
            Outcome::Unknown,
            e.to_string(),
        ),
    }
}
