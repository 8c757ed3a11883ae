//! The workspace pages' API (`workspace serve` only), under
//! `/_stow/console/api/`:
//!
//! | route | method | what it calls |
//! | --- | --- | --- |
//! | `checkpoints?limit=&cursor=` | `GET` | `stow_checkpoint::history::log` |
//! | `status?limit=&cursor=` | `GET` | `watch_service::status` (the live tree against the head) |
//! | `diff?from=&to=` | `GET` | `stow_checkpoint::diff`; `to=live`: `watch_service::status` against `from` |
//! | `rewind` | `POST {"to", "dry_run", "request_key"}` | dry run: `rewind::rewind` (changes nothing); else `watch_service::rewind` |
//! | `filediff?from=&to=&path=` | `GET` | one file's line diff ([`crate::textdiff`]): a checkpoint's blob (`open_verified`), or (`to=live`) the bucket view's object |
//!
//! Status and rewind go through the workspace's watch service, which the
//! serving process runs over the bucket view it owns
//! (`WatchService::start_owning`): the service's monitor reads only what
//! changed, and its rewinds take the bucket view's S3-write gate exactly
//! as a CLI rewind of the served workspace does. A dry run changes
//! nothing and runs here, as the CLI's does. Every engine refusal keeps
//! the engine's machine code ([`ConsoleError::Engine`]).

use std::collections::HashMap;
use std::io::Read as _;
use std::sync::Arc;

use serde::Deserialize;
use stow_checkpoint::rewind::{RewindRequest, RewindResult};
use stow_checkpoint::watch_service::{self, RewindCall, StatusCall, WatchReply};
use stow_checkpoint::Registry;

use crate::error::ConsoleError;
use crate::textdiff::{self, NotText, MAX_TEXT_BYTES};

/// Checkpoints in one page of the timeline.
pub const LOG_PAGE: usize = 50;
/// Changes in one page of a status or a live diff.
pub const STATUS_PAGE: usize = 500;
/// The `to` of a diff that means the live tree.
pub const LIVE: &str = "live";
/// Longest request key accepted from the page.
const MAX_REQUEST_KEY: usize = 128;

/// The workspace a `workspace serve` console shows.
#[derive(Clone)]
pub struct WorkspacePages {
    /// The registry holding the workspace.
    pub registry: Registry,
    /// The served workspace.
    pub workspace_id: String,
    /// The workspace's bucket (the live tree's files are its objects).
    pub bucket: String,
    /// The bucket view the S3 port serves (reads of live files only).
    pub objects: Arc<dyn stow_store::ObjectBackend>,
    /// This process's owning monitor of the workspace when its watch
    /// service could not start: a rewind no service takes then runs here
    /// with it (and so still holds the view's S3 writes). `None` while the
    /// process's watch service runs (it takes every rewind).
    pub monitor: Option<Arc<stow_checkpoint::TreeMonitor>>,
}

/// One side of a file diff.
enum Side {
    /// No such file on that side.
    Absent,
    /// Its bytes (at most [`MAX_TEXT_BYTES`]).
    Bytes(Vec<u8>),
    /// A file larger than a text view takes, with its size.
    TooLarge(u64),
}

impl Side {
    fn size(&self) -> Option<u64> {
        match self {
            Side::Absent => None,
            Side::Bytes(b) => Some(b.len() as u64),
            Side::TooLarge(n) => Some(*n),
        }
    }

    /// Its text; an absent file is empty.
    fn text(&self) -> Result<&str, NotText> {
        match self {
            Side::Absent => Ok(""),
            Side::Bytes(b) => textdiff::as_text(b),
            Side::TooLarge(_) => Err(NotText::TooLarge),
        }
    }
}

/// A `POST rewind` body.
#[derive(Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct RewindBody {
    /// The checkpoint to rewind to.
    pub to: String,
    /// Only plan (the default): nothing changes.
    #[serde(default = "yes")]
    pub dry_run: bool,
    /// The confirmation's key: a repeated request replays the first's result.
    #[serde(default)]
    pub request_key: Option<String>,
}

fn yes() -> bool {
    true
}

impl RewindBody {
    /// Parses and checks a body: a checkpoint is named, and a real rewind
    /// carries a request key (one per confirmation) of sane length.
    pub fn parse(body: serde_json::Value) -> Result<RewindBody, ConsoleError> {
        let body: RewindBody = serde_json::from_value(body)
            .map_err(|e| ConsoleError::BadRequest(format!("bad rewind request: {e}")))?;
        if body.to.trim().is_empty() {
            return Err(ConsoleError::BadRequest("\"to\" is required".into()));
        }
        match &body.request_key {
            None if !body.dry_run => Err(ConsoleError::BadRequest(
                "a rewind needs a \"request_key\" (one per confirmation)".into(),
            )),
            Some(k) if k.is_empty() || k.len() > MAX_REQUEST_KEY => Err(ConsoleError::BadRequest(
                format!("\"request_key\" must be 1 to {MAX_REQUEST_KEY} characters"),
            )),
            _ => Ok(body),
        }
    }
}

/// A page size from the query (`limit`), `default` when absent, at most `max`.
pub fn limit_of(
    query: &HashMap<String, String>,
    default: usize,
    max: usize,
) -> Result<usize, ConsoleError> {
    match query.get("limit").filter(|v| !v.is_empty()) {
        None => Ok(default),
        Some(v) => match v.parse::<usize>() {
            Ok(n) if (1..=max).contains(&n) => Ok(n),
            _ => Err(ConsoleError::BadRequest(format!(
                "\"limit\" must be 1 to {max}"
            ))),
        },
    }
}

fn cursor_of(query: &HashMap<String, String>) -> Option<&str> {
    query
        .get("cursor")
        .map(String::as_str)
        .filter(|c| !c.is_empty())
}

fn to_json<T: serde::Serialize>(value: &T) -> Result<serde_json::Value, ConsoleError> {
    serde_json::to_value(value).map_err(|e| ConsoleError::Internal(format!("encode: {e}")))
}

/// A watch reply other than the one expected.
fn mismatched() -> ConsoleError {
    ConsoleError::Internal("the watch service answered another kind of request".into())
}

impl WorkspacePages {
    /// `GET checkpoints`: a page of the log, newest first.
    pub fn checkpoints(
        &self,
        query: &HashMap<String, String>,
    ) -> Result<serde_json::Value, ConsoleError> {
        let limit = limit_of(query, LOG_PAGE, stow_checkpoint::history::MAX_LOG_LIMIT)?;
        let page = stow_checkpoint::history::log(
            &self.registry,
            &self.workspace_id,
            limit,
            cursor_of(query),
        )?;
        to_json(&page)
    }

    /// The live tree against `against` (the head when `None`), one page.
    fn live(
        &self,
        against: Option<String>,
        query: &HashMap<String, String>,
    ) -> Result<serde_json::Value, ConsoleError> {
        let limit = limit_of(query, STATUS_PAGE, stow_checkpoint::status::MAX_PAGE)?;
        let call = StatusCall {
            workspace_id: self.workspace_id.clone(),
            against,
        };
        let result = match watch_service::status(&self.registry, &call) {
            WatchReply::Status { result } => *result,
            WatchReply::Refused { code, message, .. } => {
                return Err(ConsoleError::Engine { code, message })
            }
            _ => return Err(mismatched()),
        };
        let page = stow_checkpoint::status::page(result, limit, cursor_of(query))?;
        to_json(&page)
    }

    /// `GET status`: the live tree against the head.
    pub fn status(
        &self,
        query: &HashMap<String, String>,
    ) -> Result<serde_json::Value, ConsoleError> {
        self.live(None, query)
    }

    /// `GET diff?from=&to=`: two checkpoints, or (`to=live`) a checkpoint
    /// and the live tree.
    pub fn diff(&self, query: &HashMap<String, String>) -> Result<serde_json::Value, ConsoleError> {
        let get = |name: &str| {
            query
                .get(name)
                .filter(|v| !v.is_empty())
                .cloned()
                .ok_or_else(|| {
                    ConsoleError::BadRequest(format!("query parameter \"{name}\" is required"))
                })
        };
        let (from, to) = (get("from")?, get("to")?);
        if to == LIVE {
            let mut page = self.live(Some(from.clone()), query)?;
            if let serde_json::Value::Object(fields) = &mut page {
                fields.insert("from".into(), from.into());
                fields.insert("to".into(), LIVE.into());
            }
            return Ok(page);
        }
        // Only this workspace's checkpoints are shown (the registry may
        // hold others'); status checks its own `against` likewise.
        for id in [&from, &to] {
            stow_checkpoint::check_belongs(&self.registry, id, &self.workspace_id)?;
        }
        let result = stow_checkpoint::diff(&self.registry, &from, &to)?;
        let mut value = to_json(&result)?;
        if let serde_json::Value::Object(fields) = &mut value {
            fields.insert("from".into(), from.into());
            fields.insert("to".into(), to.into());
        }
        Ok(value)
    }

    /// `path` in checkpoint `id` of this workspace.
    fn checkpoint_file(&self, id: &str, path: &str) -> Result<Side, ConsoleError> {
        stow_checkpoint::check_belongs(&self.registry, id, &self.workspace_id)?;
        let manifest = stow_checkpoint::load_manifest(&self.registry, id)?;
        let Some(f) = manifest.files.iter().find(|f| f.path == path) else {
            return Ok(Side::Absent);
        };
        if f.size > MAX_TEXT_BYTES as u64 {
            return Ok(Side::TooLarge(f.size));
        }
        let mut bytes = Vec::with_capacity(MAX_TEXT_BYTES.min(f.size as usize));
        stow_checkpoint::open_verified(&self.registry, f)?
            .read_to_end(&mut bytes)
            .map_err(|e| {
                stow_checkpoint::WsError::Corrupt(format!("payload of {}: {e}", f.path))
            })?;
        Ok(Side::Bytes(bytes))
    }

    /// `path` in the live tree, read as the bucket view's object.
    fn live_file(&self, path: &str) -> Result<Side, ConsoleError> {
        let read = match self.objects.get_object(&self.bucket, path, None) {
            Ok(read) => read,
            Err(stow_store::StoreError::NoSuchKey { .. }) => return Ok(Side::Absent),
            Err(e) => {
                return Err(ConsoleError::Engine {
                    code: e.code().to_string(),
                    message: e.to_string(),
                })
            }
        };
        if read.meta.size > MAX_TEXT_BYTES as u64 {
            return Ok(Side::TooLarge(read.meta.size));
        }
        let mut bytes = Vec::new();
        read.body
            .take(MAX_TEXT_BYTES as u64 + 1)
            .read_to_end(&mut bytes)
            .map_err(|e| ConsoleError::Internal(format!("read {path}: {e}")))?;
        Ok(Side::Bytes(bytes))
    }

    /// `GET filediff?from=&to=&path=`: one file's line diff, or why it is
    /// not shown as text (`too_large`, `binary`) with the two sizes.
    pub fn file_diff(
        &self,
        query: &HashMap<String, String>,
    ) -> Result<serde_json::Value, ConsoleError> {
        let get = |name: &str| {
            query
                .get(name)
                .filter(|v| !v.is_empty())
                .cloned()
                .ok_or_else(|| {
                    ConsoleError::BadRequest(format!("query parameter \"{name}\" is required"))
                })
        };
        let (from, to, path) = (get("from")?, get("to")?, get("path")?);
        // A path of the tree as checkpoints name it (`invalid_path`
        // otherwise), never `..`, absolute or under `.stow`.
        stow_checkpoint::paths::check_checkpoint_path(&path)?;
        let old = self.checkpoint_file(&from, &path)?;
        let new = if to == LIVE {
            self.live_file(&path)?
        } else {
            self.checkpoint_file(&to, &path)?
        };
        if matches!((&old, &new), (Side::Absent, Side::Absent)) {
            // Not "no change": there is no such file to compare.
            return Err(stow_checkpoint::WsError::NotFound(format!(
                "a file {path} in {from} or {to}"
            ))
            .into());
        }
        let mut doc = serde_json::json!({
            "path": path, "from": from, "to": to,
            "from_size": old.size(), "to_size": new.size(),
        });
        match (old.text(), new.text()) {
            (Ok(a), Ok(b)) => {
                doc["text"] = true.into();
                doc["lines"] = to_json(&textdiff::unified(a, b))?;
            }
            (Err(e), _) | (_, Err(e)) => {
                doc["text"] = false.into();
                doc["reason"] = e.reason().into();
            }
        }
        Ok(doc)
    }

    /// `POST rewind`: the plan (dry run), or the rewind itself through the
    /// watch service. A rewind that left conflicts still answers its
    /// result (the page shows them); only a refusal is an error.
    pub fn rewind(&self, body: RewindBody) -> Result<serde_json::Value, ConsoleError> {
        let result: RewindResult = if body.dry_run {
            stow_checkpoint::rewind::rewind(
                &self.registry,
                &RewindRequest {
                    workspace_id: &self.workspace_id,
                    to: &body.to,
                    paths: Vec::new(),
                    dry_run: true,
                    include_sensitive: false,
                    message: None,
                    request_key: None,
                    progress: None,
                    monitor: None,
                },
            )?
        } else {
            let call = RewindCall {
                workspace_id: self.workspace_id.clone(),
                to: body.to,
                paths: Vec::new(),
                message: Some("rewind from the console".into()),
                request_key: body.request_key,
                include_sensitive: false,
            };
            match watch_service::rewind_in(&self.registry, &call, None, self.monitor.as_deref()) {
                WatchReply::Rewound { result } => *result,
                WatchReply::Refused { code, message, .. } => {
                    return Err(ConsoleError::Engine { code, message })
                }
                _ => return Err(mismatched()),
            }
        };
        let error = result.error();
        let mut value = to_json(&result)?;
        if let (Some(e), serde_json::Value::Object(fields)) = (error, &mut value) {
            fields.insert(
                "error".into(),
                serde_json::json!({ "code": e.code(), "message": e.to_string() }),
            );
        }
        Ok(value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_rewind_body_defaults_to_a_dry_run() {
        let b = RewindBody::parse(json!({"to": "abc"})).unwrap();
        assert!(b.dry_run);
        assert_eq!(b.request_key, None);
    }

    #[test]
    fn a_real_rewind_needs_a_request_key() {
        let e = RewindBody::parse(json!({"to": "abc", "dry_run": false})).unwrap_err();
        assert_eq!(e.code(), "bad_request");
        let b =
            RewindBody::parse(json!({"to": "abc", "dry_run": false, "request_key": "k1"})).unwrap();
        assert!(!b.dry_run);
        let long = "k".repeat(MAX_REQUEST_KEY + 1);
        assert!(
            RewindBody::parse(json!({"to": "a", "dry_run": false, "request_key": long})).is_err()
        );
        assert!(
            RewindBody::parse(json!({"to": "a", "dry_run": false, "request_key": ""})).is_err()
        );
    }

    #[test]
    fn a_rewind_body_names_a_checkpoint_and_nothing_else() {
        assert!(RewindBody::parse(json!({"to": " "})).is_err());
        assert!(RewindBody::parse(json!({})).is_err());
        assert!(RewindBody::parse(json!({"to": "a", "paths": ["x"]})).is_err());
        assert!(RewindBody::parse(json!("a")).is_err());
    }

    #[test]
    fn limits_are_bounded() {
        let q = |v: &str| HashMap::from([("limit".to_string(), v.to_string())]);
        assert_eq!(limit_of(&HashMap::new(), 50, 1000).unwrap(), 50);
        assert_eq!(limit_of(&q(""), 50, 1000).unwrap(), 50);
        assert_eq!(limit_of(&q("7"), 50, 1000).unwrap(), 7);
        for bad in ["0", "1001", "-1", "x"] {
            assert_eq!(
                limit_of(&q(bad), 50, 1000).unwrap_err().code(),
                "bad_request"
            );
        }
    }
}
