//! Each workspace tool's behaviour over `stow-workspace`, independent of
//! JSON-RPC: scope, limit narrowing, paging, and the mapping of engine
//! results onto the envelope. Storage decisions are the engine's.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64URL;
use base64::Engine;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use stow_checkpoint::keyed::KeyedEnvelope;
use stow_checkpoint::watch_service::{self, CaptureRequest, WatchReply};
use stow_checkpoint::{self as checkpoint, CaptureSpec, CheckpointManifest, TreeMonitor};
use stow_checkpoint::{archive::ArchiveLimits, WsError};
use stow_workspace::bundle;
use stow_workspace::handoff::AdoptOptions;

use super::config::WorkspaceSettings;
use super::envelope::{CaptureView, CheckpointView, WorkspaceView, WsEnvelope};

/// Page size bounds of inspect and diff.
const DEFAULT_LIMIT: i64 = 100;
const MAX_LIMIT: i64 = 1000;
/// Longest cursor accepted.
const MAX_CURSOR: usize = 256;
/// A page stops growing once its entries encode to this many bytes, so the
/// result (sent twice: structured and as text) stays under 256 KiB.
const PAGE_BYTES: usize = 120 << 10;

#[derive(Deserialize)]
pub struct WorkspaceArgs {
    workspace_id: String,
}

#[derive(Deserialize)]
pub struct CaptureArgs {
    workspace_id: String,
    request_key: String,
    parent_id: Option<String>,
    max_bytes: Option<i64>,
    max_files: Option<i64>,
}

#[derive(Deserialize)]
pub struct InspectArgs {
    checkpoint_id: String,
    limit: Option<i64>,
    cursor: Option<String>,
}

#[derive(Deserialize)]
pub struct DiffArgs {
    from_id: String,
    to_id: String,
    limit: Option<i64>,
    cursor: Option<String>,
}

#[derive(Deserialize)]
pub struct ExportArgs {
    workspace_id: String,
    checkpoint_id: String,
    bundle: String,
}

#[derive(Deserialize)]
pub struct AdoptArgs {
    bundle: String,
    destination: String,
}

/// The profile's state: settings and the workspaces in scope (the
/// configured one and those this server adopted).
pub struct WorkspaceCore {
    settings: WorkspaceSettings,
    adopted: Mutex<HashSet<String>>,
    /// A watch kept over each workspace this server captured recently, so
    /// the next capture reads only what changed.
    monitors: Mutex<Monitors>,
}

/// Monitors kept at most: each holds an inotify instance (128 per user by
/// default) and its tree's scan; the least recently captured goes first,
/// and its next capture scans the whole tree.
const MAX_MONITORS: usize = 8;

/// The kept monitors, each with the tick of its last capture.
#[derive(Default)]
struct Monitors {
    by_workspace: HashMap<String, (Arc<TreeMonitor>, u64)>,
    tick: u64,
}

impl Monitors {
    /// The monitor of `workspace`, made (and the oldest dropped) if needed.
    fn for_capture(&mut self, workspace: &str) -> Arc<TreeMonitor> {
        self.tick += 1;
        let tick = self.tick;
        if !self.by_workspace.contains_key(workspace) && self.by_workspace.len() >= MAX_MONITORS {
            let oldest = self
                .by_workspace
                .iter()
                .min_by_key(|(_, (_, t))| *t)
                .map(|(k, _)| k.clone());
            if let Some(k) = oldest {
                self.by_workspace.remove(&k);
            }
        }
        let entry = self
            .by_workspace
            .entry(workspace.to_string())
            .or_insert_with(|| (Arc::new(TreeMonitor::new()), tick));
        entry.1 = tick;
        Arc::clone(&entry.0)
    }
}

#[derive(Serialize, Deserialize)]
struct Cursor {
    identity: String,
    offset: usize,
}

impl WorkspaceCore {
    pub fn new(settings: WorkspaceSettings) -> WorkspaceCore {
        WorkspaceCore {
            settings,
            adopted: Mutex::new(HashSet::new()),
            monitors: Mutex::new(Monitors::default()),
        }
    }

    pub fn settings(&self) -> &WorkspaceSettings {
        &self.settings
    }

    pub(super) fn in_scope(&self, ws: &str) -> bool {
        ws == self.settings.workspace_id
            || self.adopted.lock().map(|a| a.contains(ws)).unwrap_or(false)
    }

    pub(super) fn out_of_scope(outcome: &'static str, what: &str) -> WsEnvelope {
        WsEnvelope::refused(
            outcome,
            "invalid_scope",
            "lookup",
            format!("{what} is not in this server's scope"),
        )
    }

    /// `stow_workspace_inspect`: a read-only lookup (never a claim).
    pub fn inspect_workspace(&self, a: WorkspaceArgs) -> WsEnvelope {
        if !self.in_scope(&a.workspace_id) {
            return Self::out_of_scope("ok", &format!("workspace {}", a.workspace_id));
        }
        match self.settings.registry.get(&a.workspace_id) {
            Ok(rec) => {
                let mut env = WsEnvelope::new("ok");
                env.workspace = Some(WorkspaceView {
                    workspace_id: rec.id,
                    directory: rec.dir.display().to_string(),
                    bucket: rec.bucket,
                    max_checkpoint_bytes: rec.max_checkpoint_bytes,
                    max_checkpoints: rec.max_checkpoints,
                });
                env
            }
            Err(e) => WsEnvelope::from_error("ok", "lookup", &e),
        }
    }

    /// A per-call bound: absent or 0 keeps the configured one, a smaller
    /// positive one narrows it, anything else is refused.
    fn narrow(asked: Option<i64>, configured: u64, what: &str) -> Result<u64, String> {
        match asked {
            None | Some(0) => Ok(configured),
            Some(n) if n > 0 && n as u64 <= configured => Ok(n as u64),
            Some(n) => Err(format!(
                "{what} {n} must be between 1 and the configured {configured}"
            )),
        }
    }

    /// `stow_checkpoint_create` (`resolve` false) and
    /// `stow_checkpoint_resolve`: a keyed portable capture under the
    /// configured deadline, sharing receipts with the CLI.
    pub fn capture(&self, a: CaptureArgs, resolve: bool) -> WsEnvelope {
        if !self.in_scope(&a.workspace_id) {
            return Self::out_of_scope("not_committed", &format!("workspace {}", a.workspace_id));
        }
        let bounds =
            Self::narrow(a.max_bytes, self.settings.max_bytes, "max_bytes").and_then(|b| {
                Self::narrow(a.max_files, self.settings.max_files, "max_files").map(|f| (b, f))
            });
        let (max_bytes, max_files) = match bounds {
            Ok(b) => b,
            Err(m) => {
                return WsEnvelope::refused("not_committed", "invalid_request", "validate", m)
            }
        };
        let monitor = self.monitor_for(&a.workspace_id);
        // Through the workspace's watch service when one runs (a
        // `workspace serve` owns the objects a portable capture reads),
        // else here with this server's monitor.
        let req = CaptureRequest {
            workspace_id: a.workspace_id,
            spec: CaptureSpec {
                parent: a.parent_id.filter(|p| !p.is_empty()),
                max_bytes,
                max_files,
                include_sensitive: false,
                portable: true,
                no_ignore: false,
                message: None,
            },
            request_key: Some(a.request_key),
            resolve,
            timeout_nanos: u64::try_from(self.settings.timeout.as_nanos()).unwrap_or(u64::MAX),
        };
        match watch_service::capture_in(&self.settings.registry, &req, None, Some(&monitor)) {
            WatchReply::Keyed {
                mut envelope,
                message,
            } => {
                // The error's message travels beside the envelope.
                if let (Some(e), Some(m)) = (envelope.error.as_mut(), message) {
                    e.message = m;
                }
                capture_envelope(envelope)
            }
            WatchReply::Refused {
                code,
                message,
                retryable,
            } => WsEnvelope::watch_refusal(&code, message, retryable),
            other => WsEnvelope::mismatched(&other),
        }
    }

    /// The watch kept over `workspace` for its captures (made if needed).
    pub(super) fn monitor_for(&self, workspace: &str) -> Arc<TreeMonitor> {
        self.monitors
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .for_capture(workspace)
    }

    fn load_in_scope(&self, id: &str) -> Result<CheckpointManifest, Box<WsEnvelope>> {
        let m = checkpoint::load_manifest(&self.settings.registry, id)
            .map_err(|e| Box::new(WsEnvelope::from_error("ok", "lookup", &e)))?;
        if !self.in_scope(&m.workspace_id) {
            return Err(Box::new(Self::out_of_scope(
                "ok",
                &format!("checkpoint {id}"),
            )));
        }
        Ok(m)
    }

    fn identity(&self, key: &str) -> String {
        let mut h = Sha256::new();
        h.update(self.settings.registry.dir().as_os_str().as_encoded_bytes());
        h.update([0u8]);
        h.update(self.settings.workspace_id.as_bytes());
        h.update([0u8]);
        h.update(key.as_bytes());
        stow_store::hex(&h.finalize())
    }

    /// The first entry of a page: 0, or where `cursor` says.
    fn start(
        &self,
        key: &str,
        cursor: Option<&str>,
        total: usize,
    ) -> Result<usize, Box<WsEnvelope>> {
        let Some(c) = cursor.filter(|c| !c.is_empty()) else {
            return Ok(0);
        };
        let bad = || {
            Box::new(WsEnvelope::refused(
                "ok",
                "invalid_request",
                "validate",
                "the cursor is malformed or belongs to another result".into(),
            ))
        };
        if c.len() > MAX_CURSOR {
            return Err(bad());
        }
        let cur: Cursor = B64URL
            .decode(c)
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .ok_or_else(bad)?;
        if cur.identity != self.identity(key) || cur.offset > total {
            return Err(bad());
        }
        Ok(cur.offset)
    }

    fn cursor(&self, key: &str, offset: usize) -> String {
        let c = Cursor {
            identity: self.identity(key),
            offset,
        };
        B64URL.encode(serde_json::to_vec(&c).unwrap_or_default())
    }

    /// One page of `total` entries made by `entry(i)`, starting at the
    /// cursor's offset: at most `limit`, fewer when they would not fit.
    pub(super) fn page(
        &self,
        key: &str,
        limit: Option<i64>,
        cursor: Option<&str>,
        total: usize,
        entry: impl Fn(usize) -> Value,
    ) -> WsEnvelope {
        let limit = limit.unwrap_or(DEFAULT_LIMIT);
        if !(1..=MAX_LIMIT).contains(&limit) {
            return WsEnvelope::refused(
                "ok",
                "invalid_request",
                "validate",
                format!("limit must be between 1 and {MAX_LIMIT}"),
            );
        }
        let start = match self.start(key, cursor, total) {
            Ok(s) => s,
            Err(env) => return *env,
        };
        let mut entries = Vec::new();
        let mut bytes = 0usize;
        let mut i = start;
        while i < total && entries.len() < limit as usize {
            let e = entry(i);
            bytes += serde_json::to_string(&e).map_or(0, |s| s.len() + 1);
            if bytes > PAGE_BYTES && !entries.is_empty() {
                break;
            }
            entries.push(e);
            i += 1;
        }
        let mut env = WsEnvelope::new("ok");
        env.entries = Some(entries);
        if i < total {
            env.next_cursor = Some(self.cursor(key, i));
        }
        env
    }

    /// `stow_checkpoint_inspect`: files, objects, buckets, exclusions.
    pub fn inspect_checkpoint(&self, a: InspectArgs) -> WsEnvelope {
        let m = match self.load_in_scope(&a.checkpoint_id) {
            Ok(m) => m,
            Err(env) => return *env,
        };
        let (nf, no, nb) = (m.files.len(), m.objects.len(), m.buckets.len());
        let total = nf + no + nb + m.excluded.len();
        let mut env = self.page(&m.id, a.limit, a.cursor.as_deref(), total, |i| {
            if i < nf {
                let f = &m.files[i];
                json!({"kind": "file", "file": {"path": f.path, "size": f.size, "mode": f.mode, "sha256": f.sha256}})
            } else if i < nf + no {
                json!({"kind": "object", "object": object_view(&m.objects[i - nf])})
            } else if i < nf + no + nb {
                json!({"kind": "bucket", "bucket": m.buckets[i - nf - no]})
            } else {
                json!({"kind": "excluded", "excluded": m.excluded[i - nf - no - nb]})
            }
        });
        env.checkpoint_id = Some(m.id.clone());
        env
    }

    /// `stow_checkpoint_diff`: file changes, object changes, bucket changes.
    pub fn diff(&self, a: DiffArgs) -> WsEnvelope {
        let (from, to) = match (self.load_in_scope(&a.from_id), self.load_in_scope(&a.to_id)) {
            (Ok(f), Ok(t)) => (f, t),
            (Err(env), _) | (_, Err(env)) => return *env,
        };
        let d = match checkpoint::diff(&self.settings.registry, &from.id, &to.id) {
            Ok(d) => d,
            Err(e) => return WsEnvelope::from_error("ok", "lookup", &e),
        };
        let objects = d.objects.unwrap_or_default();
        let buckets = d.buckets.unwrap_or_default();
        let (nc, no) = (d.changes.len(), objects.len());
        let total = nc + no + buckets.len();
        let key = format!("{}:{}", from.id, to.id);
        self.page(&key, a.limit, a.cursor.as_deref(), total, |i| {
            if i < nc {
                change_entry(&d.changes[i])
            } else if i < nc + no {
                let c = &objects[i - nc];
                let mut v = json!({"bucket": c.bucket, "key": c.key, "kind": c.kind});
                if let Some(f) = &c.from {
                    v["from"] = object_view(f);
                }
                if let Some(t) = &c.to {
                    v["to"] = object_view(t);
                }
                json!({"kind": "object_change", "object_change": v})
            } else {
                let c = &buckets[i - nc - no];
                json!({"kind": "bucket_change", "bucket_change": {"bucket": c.bucket, "kind": c.kind}})
            }
        })
    }

    /// `stow_handoff_export`: a new named bundle in the export root.
    pub fn export(&self, a: ExportArgs) -> WsEnvelope {
        let Some(root) = &self.settings.export_root else {
            return WsEnvelope::refused(
                "not_committed",
                "invalid_request",
                "validate",
                "no export root is configured".into(),
            );
        };
        if !self.in_scope(&a.workspace_id) {
            return Self::out_of_scope("not_committed", &format!("workspace {}", a.workspace_id));
        }
        match bundle::export_bundle(
            &self.settings.registry,
            &a.workspace_id,
            &a.checkpoint_id,
            root,
            &a.bundle,
        ) {
            Ok(b) => {
                let mut env = WsEnvelope::new("committed");
                env.checkpoint_id = Some(a.checkpoint_id);
                env.bundle = Some(b.bundle);
                env.handoff = Some(b.handoff);
                env
            }
            Err(e @ WsError::OutcomeUnknown(_)) => {
                let mut env = WsEnvelope::from_error("unknown", "commit", &e);
                if let Some(err) = env.error.as_mut() {
                    err.attempts = 1;
                }
                env.bundle = Some(a.bundle);
                env
            }
            Err(e) => WsEnvelope::from_error("not_committed", "validate", &e),
        }
    }

    /// `stow_handoff_adopt`: a bundle of the export root into a new
    /// directory of the adopt root, as a new workspace that joins the scope.
    pub fn adopt(&self, a: AdoptArgs) -> WsEnvelope {
        let (Some(export_root), Some(adopt_root)) =
            (&self.settings.export_root, &self.settings.adopt_root)
        else {
            return WsEnvelope::refused(
                "not_committed",
                "invalid_request",
                "validate",
                "adoption needs an export root and an adopt root".into(),
            );
        };
        let opts = AdoptOptions {
            include_sensitive: false,
            limits: ArchiveLimits {
                max_bytes: self.settings.max_bytes,
                max_files: self.settings.max_files,
            },
            progress: None,
            // Bundles carry their archive; a remote is never contacted.
            connector: None,
        };
        match bundle::adopt_bundle(
            &self.settings.registry,
            export_root,
            &a.bundle,
            adopt_root,
            &a.destination,
            &opts,
        ) {
            Ok(r) => {
                if let Ok(mut s) = self.adopted.lock() {
                    s.insert(r.workspace_id.clone());
                }
                let mut env = WsEnvelope::new("committed");
                env.origin_checkpoint_id = r.checkpoint_id.clone();
                env.workspace = Some(WorkspaceView {
                    workspace_id: r.workspace_id,
                    directory: r.root.display().to_string(),
                    bucket: r.bucket,
                    max_checkpoint_bytes: r.capabilities.checkpoint_limits.max_bytes,
                    max_checkpoints: r.capabilities.checkpoint_limits.max_count,
                });
                env
            }
            Err(e @ WsError::PartialImport { .. }) => {
                let mut env = WsEnvelope::from_error("partial_import", "restore", &e);
                if let WsError::PartialImport { checkpoint_id, .. } = &e {
                    env.origin_checkpoint_id = Some(checkpoint_id.clone());
                }
                env
            }
            Err(e) => WsEnvelope::from_error("not_committed", "validate", &e),
        }
    }
}

/// A file change as a `change` entry of diff and status.
pub(super) fn change_entry(c: &checkpoint::Change) -> Value {
    let file = |e: &Option<checkpoint::FileEntry>| {
        e.as_ref()
            .map(|f| json!({"path": f.path, "size": f.size, "mode": f.mode, "sha256": f.sha256}))
    };
    let mut v = json!({"path": c.path, "kind": c.kind});
    if let Some(f) = file(&c.from) {
        v["from"] = f;
    }
    if let Some(t) = file(&c.to) {
        v["to"] = t;
    }
    json!({"kind": "change", "change": v})
}

/// An object entry as the output schema has it (`payload` names its
/// archive entry; `content_type` is always present).
fn object_view(o: &checkpoint::ObjectEntry) -> Value {
    let mut v = json!({
        "bucket": o.bucket,
        "key": o.key,
        "payload": format!("objects/{}", o.sha256),
        "size": o.size,
        "sha256": o.sha256,
        "content_type": o.content_type.clone().unwrap_or_else(|| "application/octet-stream".into()),
    });
    if !o.metadata.is_empty() {
        v["metadata"] = json!(o.metadata);
    }
    v
}

/// The envelope of a keyed capture or resolution: its outcome, the
/// checkpoint (zero-valued when the engine reported none), the error.
fn capture_envelope(k: KeyedEnvelope) -> WsEnvelope {
    let outcome = k
        .error
        .as_ref()
        .map(|e| e.outcome)
        .unwrap_or(k.result.outcome)
        .as_str();
    let mut env = WsEnvelope::new(outcome);
    let checkpoint = k
        .result
        .checkpoint
        .map(|c| CheckpointView {
            version: Some(c.version),
            objects: c.objects,
            id: c.id,
            workspace_id: c.workspace_id,
            parent_id: c.parent_id.unwrap_or_default(),
            created: c.created,
            files: c.files,
            bytes: c.bytes,
            excluded: c.excluded,
        })
        .unwrap_or_default();
    if !checkpoint.id.is_empty() {
        env.checkpoint_id = Some(checkpoint.id.clone());
    }
    env.capture = Some(CaptureView {
        checkpoint,
        replayed: k.result.replayed,
        outcome: k.result.outcome.as_str(),
    });
    env.error = k.error.map(|e| super::envelope::ErrorView {
        code: e.code.to_string(),
        phase: e.phase.to_string(),
        attempts: e.attempts,
        retryable: e.retryable,
        message: e.message,
    });
    env
}

#[cfg(test)]
mod tests {
    use super::super::config::WorkspaceConfig;
    use super::*;

    fn core_with_checkpoint(files: usize) -> (tempfile::TempDir, WorkspaceCore, String) {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        std::fs::create_dir_all(dir.join("in")).unwrap();
        for i in 0..files {
            std::fs::write(dir.join(format!("in/f{i:04}.txt")), format!("{i}")).unwrap();
        }
        std::fs::write(
            dir.join("t.json"),
            r#"{"version":1,"root":"ws","registry_dir":"reg","inputs":[{"source":"in","destination":"."}]}"#,
        )
        .unwrap();
        let p = stow_workspace::prepare(&dir.join("t.json")).unwrap();
        let settings = WorkspaceConfig {
            registry_dir: dir.join("reg").display().to_string(),
            workspace_id: p.workspace_id.clone(),
            timeout: Some("30s".into()),
            ..Default::default()
        }
        .validate()
        .unwrap();
        let core = WorkspaceCore::new(settings);
        let env = core.capture(
            CaptureArgs {
                workspace_id: p.workspace_id,
                request_key: "k".into(),
                parent_id: None,
                max_bytes: None,
                max_files: None,
            },
            false,
        );
        assert_eq!(env.outcome, "committed", "{:?}", env.error);
        let cp = env.checkpoint_id.unwrap();
        (tmp, core, cp)
    }

    #[test]
    fn pages_cover_every_entry_once_and_cursors_are_bound_to_their_result() {
        let (_tmp, core, cp) = core_with_checkpoint(250);
        let mut seen = Vec::new();
        let mut cursor = None;
        let mut pages = 0;
        loop {
            let env = core.inspect_checkpoint(InspectArgs {
                checkpoint_id: cp.clone(),
                limit: Some(100),
                cursor: cursor.clone(),
            });
            assert!(env.error.is_none(), "{:?}", env.error);
            pages += 1;
            seen.extend(env.entries.unwrap());
            match env.next_cursor {
                Some(c) => cursor = Some(c),
                None => break,
            }
        }
        // 250 files, then the primary bucket.
        assert_eq!((pages, seen.len()), (3, 251));
        let paths: Vec<&str> = seen[..250]
            .iter()
            .map(|e| e["file"]["path"].as_str().unwrap())
            .collect();
        let mut sorted = paths.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(paths, sorted);
        assert_eq!(seen[250]["kind"], "bucket");
        // A cursor of this result does not page another one, and garbage
        // or out-of-range limits are refused.
        let first = core.inspect_checkpoint(InspectArgs {
            checkpoint_id: cp.clone(),
            limit: Some(1),
            cursor: None,
        });
        let c = first.next_cursor.unwrap();
        let diff = core.diff(DiffArgs {
            from_id: cp.clone(),
            to_id: cp.clone(),
            limit: None,
            cursor: Some(c),
        });
        assert_eq!(diff.error.unwrap().code, "invalid_request");
        for (limit, cursor) in [
            (Some(0), None),
            (Some(1001), None),
            (None, Some("x!".into())),
        ] {
            let env = core.inspect_checkpoint(InspectArgs {
                checkpoint_id: cp.clone(),
                limit,
                cursor,
            });
            assert_eq!(env.outcome, "ok");
            assert_eq!(env.error.unwrap().code, "invalid_request");
        }
    }

    #[test]
    fn limits_only_narrow() {
        assert_eq!(WorkspaceCore::narrow(None, 10, "m"), Ok(10));
        assert_eq!(WorkspaceCore::narrow(Some(0), 10, "m"), Ok(10));
        assert_eq!(WorkspaceCore::narrow(Some(3), 10, "m"), Ok(3));
        assert!(WorkspaceCore::narrow(Some(11), 10, "m").is_err());
        assert!(WorkspaceCore::narrow(Some(-1), 10, "m").is_err());
    }

    #[test]
    fn the_least_recently_captured_monitor_goes_first() {
        let mut m = Monitors::default();
        let first = m.for_capture("ws_0");
        for i in 1..MAX_MONITORS {
            m.for_capture(&format!("ws_{i}"));
        }
        // ws_0 captured again: ws_1 is now the oldest.
        assert!(Arc::ptr_eq(&first, &m.for_capture("ws_0")));
        m.for_capture("ws_new");
        assert_eq!(m.by_workspace.len(), MAX_MONITORS);
        assert!(m.by_workspace.contains_key("ws_0"));
        assert!(!m.by_workspace.contains_key("ws_1"));
    }
}
