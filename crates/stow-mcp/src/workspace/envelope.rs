//! The workspace profile's result envelope (the output schema in `workspace_tools.json`,
//! shared by all seven tools, and the members the rewind tools add) and its
//! error object.

use serde::Serialize;
use serde_json::Value;
use stow_checkpoint::watch_service::WatchReply;
use stow_checkpoint::WsError;
use stow_workspace::handoff::HandoffDocument;

/// `{version: 1, outcome, …}`; members that do not apply are omitted.
#[derive(Debug, Clone, Serialize)]
pub struct WsEnvelope {
    pub version: u32,
    pub outcome: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub workspace: Option<WorkspaceView>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub capture: Option<CaptureView>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub checkpoint_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub entries: Option<Vec<Value>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub handoff: Option<HandoffDocument>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bundle: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub origin_checkpoint_id: Option<String>,
    /// `stow_checkpoint_list`, `stow_workspace_rewind`: the workspace's head.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub head: Option<String>,
    /// `stow_workspace_rewind`: what the rewind did.
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub rewind: Option<RewindView>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorView>,
}

/// The members of a rewind's result.
#[derive(Debug, Clone, Serialize)]
pub struct RewindView {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub undo_checkpoint_id: Option<String>,
    pub dry_run: bool,
    pub replayed: bool,
    pub written: u64,
    pub deleted: u64,
    pub unchanged: u64,
    pub conflicts: Vec<stow_checkpoint::rewind::Conflict>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub skipped: Vec<String>,
}

/// A workspace as the tools describe it.
#[derive(Debug, Clone, Serialize)]
pub struct WorkspaceView {
    pub workspace_id: String,
    pub directory: String,
    pub bucket: String,
    pub max_checkpoint_bytes: u64,
    pub max_checkpoints: u64,
}

/// The capture part of create and resolve results.
#[derive(Debug, Clone, Serialize)]
pub struct CaptureView {
    pub checkpoint: CheckpointView,
    pub replayed: bool,
    pub outcome: &'static str,
}

/// A checkpoint in a capture result (`parent_id` is "" when there is none).
#[derive(Debug, Clone, Default, Serialize)]
pub struct CheckpointView {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub version: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub objects: Option<u64>,
    pub id: String,
    pub workspace_id: String,
    pub parent_id: String,
    pub created: String,
    pub files: u64,
    pub bytes: u64,
    pub excluded: Vec<String>,
}

/// The error object: always all five members.
#[derive(Debug, Clone, Serialize)]
pub struct ErrorView {
    pub code: String,
    pub phase: String,
    pub attempts: u32,
    pub retryable: bool,
    pub message: String,
}

impl WsEnvelope {
    /// The envelope of a request a watch service (or this process in its
    /// stead) refused: `outcome_unknown` is an unknown outcome, retryable
    /// with its key; anything else changed nothing.
    pub(super) fn watch_refusal(code: &str, message: String, retryable: bool) -> WsEnvelope {
        let unknown = code == WsError::OutcomeUnknown(String::new()).code();
        let (outcome, phase) = if unknown {
            ("unknown", "apply")
        } else {
            ("not_committed", "validate")
        };
        let mut env = WsEnvelope::refused(outcome, code, phase, message);
        if let Some(err) = env.error.as_mut() {
            err.attempts = 1;
            err.retryable = retryable || unknown;
        }
        env
    }

    /// A watch service answered with a reply of another kind.
    pub(super) fn mismatched(reply: &WatchReply) -> WsEnvelope {
        WsEnvelope::refused(
            "unknown",
            "internal",
            "apply",
            format!("the watch service answered with a reply of another kind: {reply:?}"),
        )
    }

    /// An envelope with only an outcome.
    pub fn new(outcome: &'static str) -> WsEnvelope {
        WsEnvelope {
            version: 1,
            outcome,
            workspace: None,
            capture: None,
            checkpoint_id: None,
            entries: None,
            next_cursor: None,
            handoff: None,
            bundle: None,
            origin_checkpoint_id: None,
            head: None,
            rewind: None,
            error: None,
        }
    }

    /// A refusal with `outcome` (`ok` for inspection tools, `not_committed`
    /// for effects that did not start).
    pub fn refused(outcome: &'static str, code: &str, phase: &str, message: String) -> WsEnvelope {
        let mut env = WsEnvelope::new(outcome);
        env.error = Some(ErrorView {
            code: code.to_string(),
            phase: phase.to_string(),
            attempts: 0,
            retryable: false,
            message,
        });
        env
    }

    /// A refusal carrying a workspace engine error's code.
    pub fn from_error(outcome: &'static str, phase: &str, e: &WsError) -> WsEnvelope {
        let mut env = WsEnvelope::refused(outcome, e.code(), phase, e.to_string());
        if let Some(err) = env.error.as_mut() {
            err.retryable = e.retryable();
        }
        env
    }

    /// What is left of an envelope too large to send: its outcome and
    /// checkpoint, never the effect it reports.
    pub fn minimal(&self) -> WsEnvelope {
        let mut env = WsEnvelope::new(self.outcome);
        env.checkpoint_id = self.checkpoint_id.clone();
        env.capture = self.capture.clone().map(|mut c| {
            c.checkpoint.excluded = Vec::new();
            c
        });
        env.bundle = self.bundle.clone();
        env.origin_checkpoint_id = self.origin_checkpoint_id.clone();
        env.rewind = self.rewind.clone().map(|mut r| {
            r.skipped = Vec::new();
            r
        });
        env.error = Some(ErrorView {
            code: "response_too_large".into(),
            phase: "respond".into(),
            attempts: 0,
            retryable: false,
            message: "the encoded result exceeds 256 KiB; request a smaller page".into(),
        });
        env
    }
}
