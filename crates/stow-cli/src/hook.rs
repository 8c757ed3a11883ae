//! `stow-s3 workspace checkpoint --hook`: a checkpoint from an agent
//! host's hook. The payload (JSON on stdin, or as the last argument, as
//! Codex's `notify` passes it) names the directory the agent works in
//! (`cwd`, or Cursor's `workspace_roots`); the checkpoint is keyed by the
//! payload, so a hook delivered twice takes one checkpoint, and its
//! message names the session and the event.
//!
//! A hook must never break its host: no workspace there is exit 0, a
//! busy workspace (a rewind running) is waited for, a
//! failure is exit 1 (which hosts treat as non-blocking, unlike 2) with
//! the reason on stderr, and stdout stays empty unless `--print` asks
//! for the result (a host may read a hook's stdout as its answer).

use std::io::Read;

use serde_json::Value;
use sha2::{Digest, Sha256};
use stow_checkpoint::watch_service::{self, CaptureRequest, WatchReply};
use stow_checkpoint::{CaptureSpec, Registry};

use crate::CliError;

/// Largest payload read.
const MAX_PAYLOAD_BYTES: u64 = 1 << 20;
/// Deadline of the keyed capture a hook takes.
const HOOK_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(120);
/// How long a hook waits for a busy workspace (a rewind, another
/// capture) before reporting `in_progress`.
const BUSY_WAIT: std::time::Duration = std::time::Duration::from_secs(10);
/// Pause between two tries of a busy workspace.
const BUSY_RETRY: std::time::Duration = std::time::Duration::from_millis(50);
/// Longest identifier copied from a payload into the message.
const MAX_ID_CHARS: usize = 120;

/// Takes the hook's checkpoint; `Ok(Null)` prints nothing.
pub fn run(payload_arg: Option<String>, print: bool) -> Result<Value, CliError> {
    hook(payload_arg, print).map_err(CliError::for_hook)
}

fn hook(payload_arg: Option<String>, print: bool) -> Result<Value, CliError> {
    let text = match payload_arg {
        Some(t) => t,
        None => {
            let mut t = String::new();
            std::io::stdin()
                .take(MAX_PAYLOAD_BYTES + 1)
                .read_to_string(&mut t)
                .map_err(|e| {
                    CliError::new("invalid_request", format!("read the hook payload: {e}"))
                })?;
            t
        }
    };
    if text.len() as u64 > MAX_PAYLOAD_BYTES {
        return Err(CliError::new(
            "invalid_request",
            format!("the hook payload is over {MAX_PAYLOAD_BYTES} bytes"),
        ));
    }
    let payload: Value = serde_json::from_str(&text).map_err(|e| {
        CliError::new(
            "invalid_request",
            format!("the hook payload is not JSON: {e}"),
        )
    })?;
    let Some(cwd) = directory(&payload) else {
        crate::diagnose(format_args!(
            "stow-s3: the hook payload names no directory (cwd); nothing to checkpoint"
        ));
        return Ok(Value::Null);
    };
    let Some((_, ident)) = stow_workspace::find_workspace(std::path::Path::new(&cwd)) else {
        // Not a workspace: the hook is simply not for this directory.
        return Ok(Value::Null);
    };
    let registry = Registry::resolve(ident.registry_dir.as_deref(), ident.team.as_deref())?;
    let req = CaptureRequest {
        spec: CaptureSpec {
            message: Some(message(&payload)),
            ..Default::default()
        },
        workspace_id: ident.workspace_id,
        request_key: Some(request_key(&text, &payload)),
        resolve: false,
        timeout_nanos: u64::try_from(HOOK_TIMEOUT.as_nanos()).unwrap_or(u64::MAX),
    };
    match capture_when_free(&registry, &req) {
        WatchReply::Keyed { envelope, message } => match &envelope.error {
            None if print => crate::output::json(&envelope),
            None => Ok(Value::Null),
            Some(e) => Err(CliError::new(e.code.clone(), message.unwrap_or_default())),
        },
        WatchReply::Captured { result } if print => crate::output::json(result),
        WatchReply::Captured { .. } => Ok(Value::Null),
        WatchReply::Refused { code, message, .. } => Err(CliError::new(code, message)),
        WatchReply::Rewound { .. } | WatchReply::Status { .. } => {
            Err(crate::output::mismatched_reply())
        }
    }
}

/// The hook's capture; while the workspace is busy (a rewind or another
/// capture holds it: `in_progress`, retryable) it is tried again for up
/// to [`BUSY_WAIT`], so a hook fired during a rewind checkpoints after it
/// instead of failing.
fn capture_when_free(registry: &Registry, req: &CaptureRequest) -> WatchReply {
    let deadline = std::time::Instant::now() + BUSY_WAIT;
    loop {
        let reply = watch_service::capture(registry, req, None);
        let busy = match &reply {
            WatchReply::Refused { retryable, .. } => *retryable,
            WatchReply::Keyed { envelope, .. } => {
                envelope.error.as_ref().is_some_and(|e| e.retryable)
            }
            _ => false,
        };
        if !busy || std::time::Instant::now() >= deadline {
            return reply;
        }
        std::thread::sleep(BUSY_RETRY);
    }
}

/// The directory the agent works in: `cwd` (Claude Code, Codex), else
/// the first of Cursor's `workspace_roots`.
fn directory(payload: &Value) -> Option<String> {
    payload
        .get("cwd")
        .and_then(Value::as_str)
        .or_else(|| payload.get("workspace_roots")?.get(0)?.as_str())
        .filter(|d| !d.is_empty())
        .map(str::to_string)
}

/// The first string member of `payload` among `names`, shortened.
fn field<'a>(payload: &'a Value, names: &[&str]) -> Option<&'a str> {
    names
        .iter()
        .find_map(|n| payload.get(*n).and_then(Value::as_str))
        .filter(|s| !s.is_empty())
}

fn short(s: &str) -> String {
    s.chars()
        .filter(|c| !c.is_control())
        .take(MAX_ID_CHARS)
        .collect()
}

/// "<event> hook[ before <tool>] (session S[, turn T][, tool use U])".
fn message(payload: &Value) -> String {
    let event = field(payload, &["hook_event_name", "type"]).unwrap_or("agent");
    let mut m = format!("{} hook", short(event));
    if let Some(tool) = field(payload, &["tool_name"]) {
        m.push_str(&format!(" before {}", short(tool)));
    }
    let mut ids = Vec::new();
    for (label, names) in [
        (
            "session",
            &["session_id", "conversation_id", "thread-id", "thread_id"][..],
        ),
        (
            "turn",
            &["turn_id", "turn-id", "generation_id", "prompt_id"][..],
        ),
        ("tool use", &["tool_use_id"][..]),
    ] {
        if let Some(v) = field(payload, names) {
            ids.push(format!("{label} {}", short(v)));
        }
    }
    if !ids.is_empty() {
        m.push_str(&format!(" ({})", ids.join(", ")));
    }
    m
}

/// The request key of a payload: the same delivery twice is one
/// checkpoint. Claude Code's `Stop` payload carries no turn identifier,
/// so the transcript's length (it grows every turn) tells two turns of
/// one session apart.
fn request_key(text: &str, payload: &Value) -> String {
    let mut h = Sha256::new();
    h.update(b"stow-hook-v1\0");
    h.update(text.trim().as_bytes());
    if let Some(len) = field(payload, &["transcript_path"])
        .and_then(|p| std::fs::metadata(p).ok())
        .map(|m| m.len())
    {
        h.update(b"\0");
        h.update(len.to_le_bytes());
    }
    format!("hook-{}", &stow_store::hex(&h.finalize())[..32])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_name_the_event_session_and_tool() {
        let p: Value = serde_json::json!({
            "session_id": "abc", "hook_event_name": "PreToolUse", "tool_name": "Bash",
            "tool_use_id": "toolu_1", "cwd": "/x"
        });
        assert_eq!(
            message(&p),
            "PreToolUse hook before Bash (session abc, tool use toolu_1)"
        );
        let codex: Value =
            serde_json::json!({"type": "agent-turn-complete", "turn-id": "t9", "cwd": "/x"});
        assert_eq!(message(&codex), "agent-turn-complete hook (turn t9)");
        assert_eq!(directory(&codex).as_deref(), Some("/x"));
        let cursor: Value =
            serde_json::json!({"hook_event_name": "stop", "workspace_roots": ["/w"]});
        assert_eq!(directory(&cursor).as_deref(), Some("/w"));
        assert_eq!(directory(&serde_json::json!({"cwd": ""})), None);
    }

    #[test]
    fn keys_follow_the_payload() {
        let a = r#"{"cwd":"/x","session_id":"s"}"#;
        let v: Value = serde_json::from_str(a).unwrap();
        assert_eq!(request_key(a, &v), request_key(&format!("{a}\n"), &v));
        let b = r#"{"cwd":"/x","session_id":"t"}"#;
        assert_ne!(
            request_key(a, &v),
            request_key(b, &serde_json::from_str(b).unwrap())
        );
    }
}
