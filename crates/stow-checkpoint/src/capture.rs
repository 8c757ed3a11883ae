//! Capture: scan, admit, copy new payloads into the blob store, check the
//! tree is unchanged, publish (see `publish`).

use crate::admit::{admit, RetentionCaps};
use crate::blobs::{blob_ok, discard_pairs, stage_bytes, stage_known, Payload};
use crate::error::{Result, WsError};
use crate::format::{
    check_belongs, summaries, CheckpointResult, FileProps, Ignored, ManifestView, ObjectEntry,
    Summary,
};
use crate::fsutil::{create_private_dir, hex, now_rfc3339, random_hex, FileLock};
use crate::layout::{cache_path, now_ns, state};
use crate::monitor::{CaptureKey, ChangedDirs, Kept, TreeMonitor};
use crate::objects::{snapshot_objects, ObjectSnapshot};
use crate::paths::check_checkpoint_id;
use crate::produce::{cache_entries, cached_digests, produce_all, StageDirs};
use crate::progress::{PhaseClock, Progress};
use crate::publish;
use crate::registry::Registry;
use crate::scan::Scan;
use crate::scan::{scan, tree_changes};
use crate::statcache::FileStamp;
use crate::statcache::StatCache;
use crate::tree;
use crate::watch::{Changes, TreeWatch};
use std::collections::{BTreeSet, HashMap};
use std::sync::Mutex;

/// Options of a capture.
#[derive(Default)]
pub struct CaptureOptions<'a> {
    /// Parent checkpoint to record (must belong to the same workspace).
    pub parent: Option<String>,
    /// Per-capture byte cap (0 = none).
    pub max_bytes: u64,
    /// Per-capture file cap (0 = none).
    pub max_files: u64,
    /// Capture sensitive-looking paths instead of excluding them.
    pub include_sensitive: bool,
    /// Capture what `.stowignore` would keep out, too.
    pub no_ignore: bool,
    /// Portable (v2): capture the workspace bucket's objects and buckets too.
    pub portable: bool,
    /// Stop with `cancelled` (nothing published) once this instant has
    /// passed before the checkpoint is published.
    pub deadline: Option<std::time::Instant>,
    /// Receives bytes copied so far.
    pub progress: Option<&'a dyn Progress>,
    /// A long-lived server's watch over this workspace: captures then read
    /// only what changed since the last one (see `monitor`).
    pub monitor: Option<&'a TreeMonitor>,
    /// Test hook run after payloads are copied and before the re-scan.
    #[doc(hidden)]
    pub after_copy: Option<&'a (dyn Fn() + Sync)>,
}

impl CaptureOptions<'_> {
    pub(super) fn check_deadline(&self) -> Result<()> {
        match self.deadline {
            Some(d) if std::time::Instant::now() > d => Err(WsError::Cancelled(
                "the deadline passed before the checkpoint was published".into(),
            )),
            _ => Ok(()),
        }
    }
}

/// Captures workspace `ws` into a new checkpoint.
pub fn capture(registry: &Registry, ws: &str, opts: &CaptureOptions) -> Result<CheckpointResult> {
    let rec = registry.get(ws)?;
    registry.ensure()?;
    let locks = state(registry).join("capture-locks");
    create_private_dir(&locks)?;
    let _capture = FileLock::try_lock(&locks.join(format!("{ws}.lock")))?
        .ok_or_else(|| WsError::InProgress(ws.to_string()))?;
    let _registry_lock = registry.lock()?;
    let id = format!("cp_{}", random_hex(12));
    capture_locked(registry, &rec, &id, opts, None)
}

pub(crate) fn capture_locked(
    registry: &Registry,
    rec: &crate::registry::Record,
    id: &str,
    opts: &CaptureOptions,
    receipt: Option<Vec<u8>>,
) -> Result<CheckpointResult> {
    let ws = rec.id.as_str();
    if let Some(parent) = &opts.parent {
        check_checkpoint_id(parent).map_err(|e| WsError::InvalidParent(e.to_string()))?;
        check_belongs(registry, parent, ws).map_err(|e| WsError::InvalidParent(e.to_string()))?;
    }
    if !rec.dir.is_dir() {
        return Err(WsError::NotFound(format!(
            "workspace directory {}",
            rec.dir.display()
        )));
    }
    let rules = if opts.no_ignore {
        None
    } else {
        crate::ignorefile::load(&rec.dir)?
    };
    let scan_start = now_ns();
    let mut clock = PhaseClock::start("capture");
    let cache_file = cache_path(registry, ws);
    let key = CaptureKey {
        include_sensitive: opts.include_sensitive,
        no_ignore: opts.no_ignore,
        portable: opts.portable,
    };
    // A monitored workspace reads only what changed since its last capture.
    let refreshed = opts
        .monitor
        .and_then(|m| m.take(key))
        .and_then(|k| k.refresh(&rec.dir, rules.as_ref(), &cache_file));
    let (before, watch, cache, retained, reuse) = match refreshed {
        Some(r) => {
            tracing::debug!(changed = r.changed.len(), "capture from the monitor's scan");
            let (cache, disk) = match r.cache {
                Some((c, stamp)) => (c, Some(stamp)),
                None => {
                    let c = StatCache::load(&cache_file);
                    (c, FileStamp::of(&cache_file))
                }
            };
            let retained = summaries(registry);
            let reuse = Reuse {
                changed: r.changed,
                nodes: r.nodes,
                props: r.props,
                disk,
                unwritten: r.unwritten,
            };
            (Ok(r.scan), Some(r.watch), cache, retained, Some(reuse))
        }
        None => {
            // Every directory is watched from before it is read, so the
            // check after copying needs no second scan (see `watch`).
            let watch = TreeWatch::new();
            // The stat cache and the retained checkpoints (for the
            // retention caps) are read while the tree is scanned.
            let (before, cache, retained) = std::thread::scope(|s| {
                let cache = s.spawn(|| StatCache::load(&cache_file));
                let retained = s.spawn(|| summaries(registry));
                let before = scan(
                    &rec.dir,
                    opts.include_sensitive,
                    rules.as_ref(),
                    watch.as_ref(),
                );
                let panicked = || WsError::InvalidRequest("capture worker panicked".into());
                (
                    before,
                    cache.join().unwrap_or_default(),
                    retained.join().unwrap_or_else(|_| Err(panicked())),
                )
            });
            (before, watch, cache, retained, None)
        }
    };
    let before = before?;
    let retained = retained?;
    clock.lap("scan");
    let mut after = After::default();
    let scanned = ScannedTree {
        rules: rules.as_ref(),
        scan_start,
        before: &before,
        watch: watch.as_ref(),
        retained,
        reuse: reuse.as_ref(),
    };
    let result = capture_scanned(
        registry, rec, id, opts, receipt, scanned, cache, &mut clock, &mut after,
    );
    if let (Some(monitor), Some(watch)) = (opts.monitor, watch) {
        let keep = match (&result, after.pending) {
            (Ok(_), _) => Some(BTreeSet::new()),
            (Err(WsError::WorkspaceChanged(_)), Some(mut p)) => {
                // Changes already applied to `before` are read again next
                // time; the kept nodes are the last committed capture's.
                if let Some(r) = &reuse {
                    p.extend(r.changed.iter().cloned());
                }
                Some(p)
            }
            _ => None,
        };
        if let Some(pending) = keep {
            let (nodes, props, unwritten) = match (after.nodes, reuse) {
                (Some(n), _) => (n, after.props, after.unwritten),
                (None, Some(r)) => (r.nodes, r.props, r.unwritten),
                (None, None) => (HashMap::new(), HashMap::new(), 0),
            };
            monitor.keep(Kept {
                key,
                watch,
                scan: before,
                pending,
                cache: after.cache,
                nodes,
                props,
                unwritten,
            });
        }
    }
    result
}

/// A capture's scan and what came with it.
struct ScannedTree<'a> {
    rules: Option<&'a ignore::gitignore::Gitignore>,
    scan_start: i64,
    before: &'a Scan,
    watch: Option<&'a TreeWatch>,
    retained: Vec<Summary>,
    /// A monitored capture: what the last committed one left.
    reuse: Option<&'a Reuse>,
}

/// What a monitored capture may reuse from the last committed one.
struct Reuse {
    /// Paths changed since its nodes were built.
    changed: BTreeSet<String>,
    /// Its node of each directory.
    nodes: HashMap<String, [u8; 32]>,
    /// Its files' S3 properties (portable captures).
    props: HashMap<String, FileProps>,
    /// The stamp of the stat cache file on disk, when it is one this
    /// monitor wrote or read.
    disk: Option<FileStamp>,
    /// Files hashed since the cache file was last written.
    unwritten: u64,
}

/// A monitored capture rewrites the stat cache file (all of the tree's
/// entries) only once this many files were hashed since it last did; until
/// then the file holds an older cache, which is just as safe (any cache
/// file names only blobs that exist: GC deletes them all before any blob)
/// and costs a later unmonitored capture that many re-hashes.
const UNWRITTEN_FILES: u64 = 1024;

/// What a capture leaves for its monitor.
#[derive(Default)]
struct After {
    /// A refusal for a change: the paths that changed (`None`: unknown).
    pending: Option<BTreeSet<String>>,
    /// The stat cache written, with the file's stamp.
    cache: Option<(StatCache, FileStamp)>,
    /// A commit: every directory's tree node.
    nodes: Option<HashMap<String, [u8; 32]>>,
    /// A commit: the files' S3 properties it captured.
    props: HashMap<String, FileProps>,
    /// Files hashed since the cache file was last written.
    unwritten: u64,
}

#[allow(clippy::too_many_arguments)]
fn capture_scanned(
    registry: &Registry,
    rec: &crate::registry::Record,
    id: &str,
    opts: &CaptureOptions,
    receipt: Option<Vec<u8>>,
    scanned: ScannedTree,
    cache: StatCache,
    clock: &mut PhaseClock,
    after: &mut After,
) -> Result<CheckpointResult> {
    let ws = rec.id.as_str();
    let ScannedTree {
        rules,
        scan_start,
        before,
        watch,
        retained,
        reuse,
    } = scanned;
    // Portable captures compare the bucket's objects before and after too.
    let snapshot = || {
        opts.portable
            .then(|| snapshot_objects(&rec.dir, &rec.bucket, opts.include_sensitive))
            .transpose()
    };
    let objects_before = snapshot()?;
    let object_bytes: u64 = objects_before
        .as_ref()
        .map(|o| o.objects.iter().map(|x| x.size).sum())
        .unwrap_or(0);
    let object_count = objects_before
        .as_ref()
        .map(|o| o.objects.len() as u64)
        .unwrap_or(0);
    let files = before.files.len() as u64;
    let bytes: u64 = before.files.iter().map(|f| f.size).sum::<u64>() + object_bytes;
    // Portable captures always apply archive bounds (1 GiB / 100,000).
    let (max_bytes, max_files) = if opts.portable {
        (
            if opts.max_bytes == 0 {
                1 << 30
            } else {
                opts.max_bytes
            },
            if opts.max_files == 0 {
                100_000
            } else {
                opts.max_files
            },
        )
    } else {
        (opts.max_bytes, opts.max_files)
    };
    if max_files > 0 && files + object_count > max_files {
        return Err(WsError::CapacityExceeded(format!(
            "{} files and objects exceed the per-capture limit of {max_files}",
            files + object_count
        )));
    }
    if max_bytes > 0 && bytes > max_bytes {
        return Err(WsError::CapacityExceeded(format!(
            "{bytes} bytes exceed the per-capture limit of {max_bytes}"
        )));
    }
    admit(registry, ws, RetentionCaps::of(rec), bytes, &retained)?;

    let digests = cached_digests(&cache, &before.files);
    // Tree nodes the last capture named are in the blob store (the cache
    // is dropped whenever GC deletes blobs).
    let old_nodes = cache.nodes;
    let known_nodes: std::collections::HashSet<[u8; 32]> = old_nodes.iter().copied().collect();
    let tmp = state(registry).join("tmp");
    create_private_dir(&tmp)?;
    clock.lap("admit");
    // Held to the end of the capture: the staged payloads lie in them.
    let stages = StageDirs::for_capture(&tmp, &digests)?;
    let produced = produce_all(registry, &rec.dir, &stages, &before.files, digests, opts);
    clock.lap("copy");
    // A refusal keeps its progress: what was verified and made durable
    // stays as unreferenced blobs, with stat-cache entries for the files
    // that did not change, so a retry costs what changed. (With no watch
    // to vouch for them, the old cache stays.)
    let save_progress = |digests: &[Option<[u8; 32]>], changes: Changes, after: &mut After| {
        let Changes::Paths(paths) = changes else {
            return;
        };
        let kept = StatCache {
            scan_start_ns: scan_start,
            entries: cache_entries(&before.files, digests, |f| {
                Changes::untouched_in(&paths, &f.path)
            }),
            nodes: old_nodes.clone(),
        };
        after.cache = StatCache::write_encoded(&cache_path(registry, ws), &kept.encode())
            .map(|stamp| (kept, stamp));
        after.pending = Some(paths);
    };
    let produced = match produced {
        Ok(p) => p,
        Err((partial, e)) => {
            let staged: Vec<(&Payload, u64)> =
                partial.staged.iter().map(|(p, n)| (p, *n)).collect();
            if !matches!(e, WsError::WorkspaceChanged(_))
                || publish::keep_blobs(registry, &staged).is_err()
            {
                partial.discard();
                return Err(e);
            }
            let changes = watch.map_or(Changes::Unknown, |w| {
                w.changes(opts.include_sensitive, rules)
            });
            save_progress(&partial.digests, changes, after);
            return Err(e);
        }
    };
    let digests: Vec<[u8; 32]> = produced.digests.iter().flatten().copied().collect();
    let mut object_payloads: Vec<(Payload, u64)> = Vec::new();
    if let Some(snap) = &objects_before {
        for o in &snap.objects {
            match stage_bytes(registry, &tmp, &o.body) {
                Ok(p) => object_payloads.push((p, o.size)),
                Err(e) => {
                    produced.discard();
                    discard_pairs(&object_payloads);
                    return Err(e);
                }
            }
        }
    }
    // The tree's nodes; the ones the blob store lacks are staged as blobs.
    let mut node_payloads: Vec<(Payload, u64)> = Vec::new();
    // A monitored capture reuses the node of every directory nothing
    // changed in (not for portable captures: S3 properties live outside
    // the tree the watch sees).
    let props_changed: BTreeSet<String> = match (reuse, &objects_before) {
        (Some(r), Some(o)) => r
            .props
            .keys()
            .chain(o.file_props.keys())
            .filter(|k| r.props.get(*k) != o.file_props.get(*k))
            .cloned()
            .collect(),
        _ => BTreeSet::new(),
    };
    let changed_dirs = reuse.map(|r| {
        (
            ChangedDirs::new(&r.changed),
            ChangedDirs::new(&props_changed),
        )
    });
    let reusable = |dir: &str| -> Option<[u8; 32]> {
        let r = reuse?;
        let (files, props) = changed_dirs.as_ref()?;
        (files.node_unchanged(dir) && props.node_unchanged(dir))
            .then(|| r.nodes.get(dir).copied())
            .flatten()
    };
    let built = tree::build(
        before,
        &digests,
        objects_before.as_ref().map(|o| &o.file_props),
        &reusable,
    )
    .and_then(|built| {
        for (sha, bytes) in &built.nodes {
            let name = hex(sha);
            if known_nodes.contains(sha) || blob_ok(registry, &name, bytes.len() as u64) {
                continue;
            }
            node_payloads.push((stage_known(&tmp, bytes, name)?, bytes.len() as u64));
        }
        Ok(built)
    });
    // Until the blobs are published, a failure deletes what was staged.
    let abandon = |e: WsError| -> Result<CheckpointResult> {
        produced.discard();
        discard_pairs(&object_payloads);
        discard_pairs(&node_payloads);
        Err(e)
    };
    let built = match built {
        Ok(b) => b,
        Err(e) => return abandon(e),
    };
    let tree_root = hex(&built.root);
    clock.lap("tree");
    if let Some(hook) = opts.after_copy {
        hook();
    }
    if let Err(e) = opts.check_deadline() {
        return abandon(e);
    }
    let mut to_publish: Vec<(&Payload, u64)> =
        produced.staged.iter().map(|(p, n)| (p, *n)).collect();
    to_publish.extend(object_payloads.iter().map(|(p, s)| (p, *s)));
    to_publish.extend(node_payloads.iter().map(|(p, s)| (p, *s)));
    let objects_identity = objects_before.as_ref().map(ObjectSnapshot::identity);
    let mut excluded_paths = before.excluded.clone();
    if let Some(o) = &objects_before {
        excluded_paths.extend(o.excluded.iter().cloned());
    }
    let created = now_rfc3339();
    let summary = Summary {
        version: 1,
        id: id.to_string(),
        workspace_id: ws.to_string(),
        parent_id: opts.parent.clone(),
        created: created.clone(),
        files,
        bytes,
    };
    let extra: Vec<(&str, Vec<u8>)> = receipt.map(|r| ("receipt.json", r)).into_iter().collect();
    let objects: Vec<ObjectEntry> = objects_before
        .as_ref()
        .map(|o| {
            o.objects
                .iter()
                .zip(&object_payloads)
                .map(|(o, (p, _))| ObjectEntry {
                    bucket: o.bucket.clone(),
                    key: o.key.clone(),
                    size: o.size,
                    sha256: p.sha256.clone(),
                    content_type: o.content_type.clone(),
                    metadata: o.metadata.clone(),
                })
                .collect()
        })
        .unwrap_or_default();
    let ignored_view = Ignored::of(&before.ignored);
    let manifest = ManifestView {
        version: if objects_before.is_some() { 2 } else { 1 },
        id,
        workspace_id: ws,
        parent_id: opts.parent.as_deref(),
        created: &created,
        tree: &tree_root,
        excluded: &excluded_paths,
        primary_bucket: objects_before.as_ref().map(|_| rec.bucket.as_str()),
        buckets: objects_before.as_ref().map_or(&[], |o| &o.buckets),
        objects: &objects,
        ignored: ignored_view.as_ref(),
    };
    // The stat cache is an optimisation: failing to save it is harmless.
    // Not fsynced: after a crash the cache is the old one, the new one or
    // unreadable (then ignored); each entry names a published blob.
    let hashed = produced.staged.len() as u64;
    let defer_write = reuse
        .filter(|r| r.disk.is_some() && r.unwritten + hashed < UNWRITTEN_FILES)
        .map(|r| r.unwritten + hashed);
    let encode_cache = || {
        let mut nodes = built.dir_shas.clone();
        nodes.sort_unstable();
        nodes.dedup();
        let cache = StatCache {
            scan_start_ns: scan_start,
            entries: cache_entries(&before.files, &produced.digests, |_| true),
            nodes,
        };
        let bytes = if defer_write.is_some() {
            Vec::new()
        } else {
            cache.encode()
        };
        (cache, bytes)
    };
    // Meanwhile the staged blobs and the checkpoint's own files are written
    // and flushed, and the next stat cache is encoded. The checkpoint stays a
    // stage directory until the tree is known unchanged. Its blobs take their
    // content address as soon as their bytes are durable: a refused capture
    // leaves only complete blobs no checkpoint names, which garbage
    // collection removes (and a retry reuses).
    let (check, pending, cache_bytes) = std::thread::scope(|s| {
        let pending =
            s.spawn(|| publish::prepare(registry, &to_publish, &manifest, &summary, &extra));
        let cache_bytes = s.spawn(encode_cache);
        let check = tree_changes(&rec.dir, before, opts.include_sensitive, rules, watch)
            .and_then(|changes| Ok((changes, snapshot()?)));
        let panicked = || WsError::InvalidRequest("capture worker panicked".into());
        (
            check,
            pending.join().unwrap_or_else(|_| Err(panicked())),
            cache_bytes.join().ok(),
        )
    });
    let pending = match pending {
        Ok(pending) => pending,
        Err(e) => return abandon(e),
    };
    let (changes, objects_after) = match check {
        Ok(r) => r,
        Err(e) => {
            pending.discard();
            return abandon(e);
        }
    };
    // Payload bytes: tree nodes stand in for the manifest, which was never
    // counted either.
    let node_bytes: u64 = node_payloads.iter().map(|(_, n)| n).sum();
    let stored_bytes = pending.stored_bytes.saturating_sub(node_bytes);
    clock.lap("check+flush");
    let objects_same = objects_identity == objects_after.as_ref().map(ObjectSnapshot::identity);
    if !changes.none() || !objects_same {
        // The blobs are durable and named already (`prepare`).
        pending.discard();
        let e = WsError::WorkspaceChanged(
            "files or objects changed while the capture copied them; pause writers and retry"
                .into(),
        );
        save_progress(&produced.digests, changes, after);
        return Err(e);
    }
    if let Err(e) = opts.check_deadline() {
        pending.discard();
        return abandon(e);
    }
    // Saved only once the blob names it holds are durable (digests from the
    // cache are trusted without looking at the blob), while the checkpoint
    // is renamed into place.
    let written: Mutex<Option<FileStamp>> = Mutex::new(None);
    let save_cache = || {
        if let Some((_, bytes)) = cache_bytes.as_ref().filter(|_| defer_write.is_none()) {
            let stamp = StatCache::write_encoded(&cache_path(registry, ws), bytes);
            *written.lock().unwrap_or_else(|e| e.into_inner()) = stamp;
        }
    };
    pending.commit(registry, id, &save_cache)?;
    clock.lap("publish");
    if opts.monitor.is_some() {
        let stamp = match defer_write {
            Some(_) => reuse.and_then(|r| r.disk),
            None => written.into_inner().unwrap_or_else(|e| e.into_inner()),
        };
        after.unwritten = defer_write.unwrap_or(0);
        after.cache = cache_bytes.zip(stamp).map(|((c, _), s)| (c, s));
        let mut nodes = HashMap::with_capacity(before.dirs.len() + 1);
        nodes.insert(String::new(), built.root);
        for (d, sha) in before.dirs.iter().zip(built.dir_shas.iter().skip(1)) {
            nodes.insert(d.path.clone(), *sha);
        }
        after.nodes = Some(nodes);
        after.props = objects_before.map(|o| o.file_props).unwrap_or_default();
    }
    Ok(CheckpointResult {
        version: 1,
        checkpoint_id: id.to_string(),
        workspace_id: ws.to_string(),
        parent_checkpoint_id: opts.parent.clone(),
        created,
        files,
        bytes,
        stored_bytes,
        objects: opts.portable.then_some(object_count),
        excluded_sensitive_paths: excluded_paths,
        links: before.links.len() as u64,
        skipped: before.skipped.clone(),
        ignored: ignored_view,
    })
}
