//! The rewind tools of the workspace profile (issue 27): status, list and
//! rewind, over `stow_checkpoint`'s status, history and rewind. Scope and
//! the envelope are the profile's; every storage decision is the engine's.

use serde::Deserialize;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use stow_checkpoint::rewind::{rewind, RewindRequest, RewindResult};
use stow_checkpoint::watch_service::{self, RewindCall, WatchReply};
use stow_checkpoint::{self as checkpoint, LinkChange, WsError};

use super::envelope::{ErrorView, RewindView, WsEnvelope};
use super::tools::{change_entry, WorkspaceCore};

/// Most `paths` of one rewind.
const MAX_PATHS: usize = 1000;

#[derive(Deserialize)]
pub struct StatusArgs {
    workspace_id: String,
    checkpoint_id: Option<String>,
    limit: Option<i64>,
    cursor: Option<String>,
}

#[derive(Deserialize)]
pub struct ListArgs {
    workspace_id: String,
    limit: Option<i64>,
    cursor: Option<String>,
}

#[derive(Deserialize)]
pub struct RewindArgs {
    workspace_id: String,
    checkpoint_id: String,
    request_key: String,
    /// `None`: the whole tree (an empty list is refused, never read as
    /// the whole tree).
    paths: Option<Vec<String>>,
    #[serde(default)]
    dry_run: bool,
}

/// A link change as a `link_change` entry.
fn link_entry(l: &LinkChange) -> Value {
    json!({"kind": "link_change", "link_change": l})
}

impl WorkspaceCore {
    /// `stow_workspace_status`: the files against a checkpoint, paged.
    pub fn status(&self, a: StatusArgs) -> WsEnvelope {
        if !self.in_scope(&a.workspace_id) {
            return Self::out_of_scope("ok", &format!("workspace {}", a.workspace_id));
        }
        let registry = &self.settings().registry;
        let against = a.checkpoint_id.as_deref().filter(|c| !c.is_empty());
        // The monitor the captures use: a status reads only what changed.
        let monitor = self.monitor_for(&a.workspace_id);
        let s = match checkpoint::status::status_monitored(
            registry,
            &a.workspace_id,
            against,
            Some(&monitor),
        ) {
            Ok(s) => s,
            Err(e) => return WsEnvelope::from_error("ok", "lookup", &e),
        };
        // File and link changes merged in path order (a file's before a
        // link's at one path), as the description says and the CLI pages.
        let mut order: Vec<(&str, u8, usize)> = s
            .changes
            .iter()
            .enumerate()
            .map(|(i, c)| (c.path.as_str(), 0, i))
            .chain(
                s.links
                    .iter()
                    .enumerate()
                    .map(|(i, l)| (l.path.as_str(), 1, i)),
            )
            .collect();
        order.sort_unstable();
        // The cursor is bound to this very result: a tree that changed
        // between pages makes it stale (refused), never a page that skips
        // or repeats an entry.
        let mut listed = Sha256::new();
        for (path, rank, i) in &order {
            let kind = match rank {
                0 => serde_json::to_string(&s.changes[*i].to_diff()),
                _ => serde_json::to_string(&s.links[*i]),
            };
            listed.update(path.as_bytes());
            listed.update(kind.unwrap_or_default().as_bytes());
        }
        let key = format!(
            "status:{}:{}:{}",
            a.workspace_id,
            s.checkpoint_id,
            stow_store::hex(&listed.finalize())
        );
        let mut env = self.page(
            &key,
            a.limit,
            a.cursor.as_deref(),
            order.len(),
            |n| match order.get(n) {
                Some(&(_, 0, i)) => change_entry(&s.changes[i].to_diff()),
                Some(&(_, _, i)) => link_entry(&s.links[i]),
                None => Value::Null,
            },
        );
        env.checkpoint_id = Some(s.checkpoint_id);
        env
    }

    /// `stow_checkpoint_list`: the workspace's log, newest first.
    pub fn list(&self, a: ListArgs) -> WsEnvelope {
        if !self.in_scope(&a.workspace_id) {
            return Self::out_of_scope("ok", &format!("workspace {}", a.workspace_id));
        }
        let limit = match a.limit {
            None => 100,
            Some(n) if (1..=checkpoint::history::MAX_LOG_LIMIT as i64).contains(&n) => n as usize,
            Some(_) => {
                return WsEnvelope::refused(
                    "ok",
                    "invalid_request",
                    "validate",
                    format!(
                        "limit must be between 1 and {}",
                        checkpoint::history::MAX_LOG_LIMIT
                    ),
                )
            }
        };
        let cursor = a.cursor.as_deref().filter(|c| !c.is_empty());
        match checkpoint::history::log(&self.settings().registry, &a.workspace_id, limit, cursor) {
            Ok(page) => {
                let mut env = WsEnvelope::new("ok");
                env.entries = Some(
                    page.checkpoints
                        .iter()
                        .map(|e| serde_json::to_value(e).unwrap_or(Value::Null))
                        .collect(),
                );
                env.head = page.head;
                env.next_cursor = page.next_cursor;
                env
            }
            Err(e) => WsEnvelope::from_error("ok", "lookup", &e),
        }
    }

    /// `stow_workspace_rewind`: a keyed rewind (or its plan).
    pub fn rewind(&self, a: RewindArgs) -> WsEnvelope {
        if !self.in_scope(&a.workspace_id) {
            return Self::out_of_scope("not_committed", &format!("workspace {}", a.workspace_id));
        }
        let scope_refusal = match a.paths.as_ref().map(Vec::len) {
            Some(0) => Some(
                "paths names no file or directory (leave it out to rewind the whole tree)".into(),
            ),
            Some(n) if n > MAX_PATHS => Some(format!("at most {MAX_PATHS} paths")),
            _ => None,
        };
        if let Some(message) = scope_refusal {
            return WsEnvelope::refused("not_committed", "invalid_request", "validate", message);
        }
        let paths = a.paths.unwrap_or_default();
        let monitor = self.monitor_for(&a.workspace_id);
        let registry = &self.settings().registry;
        if !a.dry_run {
            // Through the workspace's watch service when one runs (a
            // `workspace serve` owns the objects a portable rewind writes),
            // else here with this server's monitor.
            let call = RewindCall {
                workspace_id: a.workspace_id,
                to: a.checkpoint_id,
                paths,
                message: None,
                request_key: Some(a.request_key),
                // MCP captures never hold sensitive paths: never touched.
                include_sensitive: false,
            };
            return match watch_service::rewind_in(registry, &call, None, Some(&monitor)) {
                WatchReply::Rewound { result } => rewind_envelope(*result),
                WatchReply::Refused {
                    code,
                    message,
                    retryable,
                } => WsEnvelope::watch_refusal(&code, message, retryable),
                other => WsEnvelope::mismatched(&other),
            };
        }
        let req = RewindRequest {
            workspace_id: &a.workspace_id,
            to: &a.checkpoint_id,
            paths,
            dry_run: true,
            include_sensitive: false,
            message: None,
            request_key: Some(&a.request_key),
            progress: None,
            monitor: Some(&monitor),
        };
        match rewind(registry, &req) {
            Ok(r) => rewind_envelope(r),
            Err(e @ WsError::OutcomeUnknown(_)) => {
                let mut env = WsEnvelope::from_error("unknown", "apply", &e);
                if let Some(err) = env.error.as_mut() {
                    err.attempts = 1;
                    err.retryable = true;
                }
                env
            }
            Err(e) => WsEnvelope::from_error("not_committed", "validate", &e),
        }
    }
}

/// The envelope of a rewind that ran (committed, conflicts or not) or was
/// planned (a dry run: not committed, its changes as entries).
fn rewind_envelope(r: RewindResult) -> WsEnvelope {
    let mut env = WsEnvelope::new(if r.dry_run {
        "not_committed"
    } else {
        "committed"
    });
    if let Some(e) = r.error() {
        env.error = Some(ErrorView {
            code: e.code().to_string(),
            phase: "apply".into(),
            attempts: 1,
            // The same key replays these conflicts: only a new rewind (a
            // new key, once the writer is done) can do better.
            retryable: false,
            message: e.to_string(),
        });
    }
    if r.dry_run {
        let changes = r.changes.as_deref().unwrap_or_default();
        env.entries = Some(
            changes
                .iter()
                .map(|c| change_entry(&c.to_diff()))
                .chain(r.links.iter().map(link_entry))
                .collect(),
        );
    }
    env.checkpoint_id = Some(r.checkpoint_id);
    env.head = r.head;
    env.rewind = Some(RewindView {
        undo_checkpoint_id: r.undo_checkpoint_id,
        dry_run: r.dry_run,
        replayed: r.replayed,
        written: r.written,
        deleted: r.deleted,
        unchanged: r.unchanged,
        conflicts: r.conflicts,
        skipped: r.skipped,
    });
    env
}
