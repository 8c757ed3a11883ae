//! Capture: scan, admit, copy new payloads into the blob store, check the
//! tree is unchanged, publish (see `publish`).

use std::fs::File;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::blobs::{
    blob_ok, discard, discard_pairs, stage_bytes, stage_reader, Payload, StageError,
};
use super::format::{
    check_belongs, summaries, CheckpointResult, FilesView, Ignored, ManifestView, ObjectEntry,
    Summary,
};
use super::objects::{snapshot_objects, ObjectSnapshot};
use super::publish;
use super::scan::{scan, tree_unchanged, Scanned};
use super::{cache_path, now_ns, state};
use crate::error::{Result, WsError};
use crate::fsutil::{create_private_dir, hex, now_rfc3339, random_hex, FileLock};
use crate::paths::check_checkpoint_id;
use crate::progress::{PhaseClock, Progress};
use crate::registry::{min_bound, Registry};
use crate::statcache::{unhex32, CacheEntry, StatCache};
use crate::watch::TreeWatch;

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
    /// Test hook run after payloads are copied and before the re-scan.
    #[doc(hidden)]
    pub after_copy: Option<&'a (dyn Fn() + Sync)>,
}

impl CaptureOptions<'_> {
    fn check_deadline(&self) -> Result<()> {
        match self.deadline {
            Some(d) if std::time::Instant::now() > d => Err(WsError::Cancelled(
                "the deadline passed before the checkpoint was published".into(),
            )),
            _ => Ok(()),
        }
    }
}

/// Cached digests for a sorted scan: both lists are in path order, so one
/// merge pass matches them without building a map.
pub(super) fn cached_digests(cache: &StatCache, files: &[Scanned]) -> Vec<Option<String>> {
    let mut entries = cache.entries.iter().peekable();
    files
        .iter()
        .map(|f| {
            while entries.next_if(|c| c.path < f.path).is_some() {}
            let c = entries.next_if(|c| c.path == f.path)?;
            let same = c.size == f.size
                && c.mode == f.mode
                && c.mtime_ns == f.mtime_ns
                && c.ctime_ns == f.ctime_ns
                && c.ino == f.ino;
            (same && f.mtime_ns < cache.scan_start_ns).then(|| hex(&c.sha256))
        })
        .collect()
}

/// One payload to produce: a file whose digest is unknown (hash + store) or
/// known from the cache (verify the blob exists).
pub(super) struct Work<'a> {
    pub(super) file: &'a Scanned,
    pub(super) cached: Option<String>,
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
    // Every directory is watched from before it is read, so the check after
    // copying needs no second scan (see `watch`).
    let watch = TreeWatch::new();
    // The stat cache and the retained checkpoints (for the retention caps)
    // are read while the tree is scanned.
    let (before, cache, retained) = std::thread::scope(|s| {
        let cache = s.spawn(|| StatCache::load(&cache_path(registry, ws)));
        let retained = s.spawn(|| summaries(registry));
        let before = scan(
            &rec.dir,
            opts.include_sensitive,
            rules.as_ref(),
            watch.as_ref(),
        );
        (
            before,
            cache.join().unwrap_or_default(),
            retained
                .join()
                .unwrap_or_else(|_| Err(WsError::InvalidRequest("capture worker panicked".into()))),
        )
    });
    let before = before?;
    let retained = retained?;
    clock.lap("scan");
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

    let work: Vec<Work> = before
        .files
        .iter()
        .zip(cached_digests(&cache, &before.files))
        .map(|(file, cached)| Work { file, cached })
        .collect();
    drop(cache);
    let tmp = state(registry).join("tmp");
    create_private_dir(&tmp)?;
    clock.lap("admit");
    let produced = produce_all(registry, &rec.dir, &tmp, &work, opts)?;
    clock.lap("copy");
    let mut object_payloads: Vec<(Payload, u64)> = Vec::new();
    if let Some(snap) = &objects_before {
        for o in &snap.objects {
            match stage_bytes(registry, &tmp, &o.body) {
                Ok(p) => object_payloads.push((p, o.size)),
                Err(e) => {
                    discard(&produced);
                    discard_pairs(&object_payloads);
                    return Err(e);
                }
            }
        }
    }
    if let Some(hook) = opts.after_copy {
        hook();
    }
    // Until the blobs are published, a failure deletes what was staged.
    let abandon = |e: WsError| -> Result<CheckpointResult> {
        discard(&produced);
        discard_pairs(&object_payloads);
        Err(e)
    };
    if let Err(e) = opts.check_deadline() {
        return abandon(e);
    }
    let mut to_publish: Vec<(&Payload, u64)> = produced
        .iter()
        .zip(&work)
        .map(|(p, w)| (p, w.file.size))
        .collect();
    to_publish.extend(object_payloads.iter().map(|(p, s)| (p, *s)));
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
        files: FilesView {
            scanned: &before.files,
            produced: &produced,
            props: objects_before.as_ref().map(|o| &o.file_props),
        },
        excluded: &excluded_paths,
        primary_bucket: objects_before.as_ref().map(|_| rec.bucket.as_str()),
        buckets: objects_before.as_ref().map_or(&[], |o| &o.buckets),
        objects: &objects,
        dirs: &before.dirs,
        links: &before.links,
        skipped: &before.skipped,
        ignored: ignored_view.as_ref(),
    };
    // The stat cache is an optimisation: failing to save it is harmless.
    // Not fsynced: after a crash the cache is the old one, the new one or
    // unreadable (then ignored); each entry names a published blob.
    let encode_cache = || {
        StatCache {
            scan_start_ns: scan_start,
            entries: before
                .files
                .iter()
                .zip(&produced)
                .filter_map(|(f, p)| {
                    Some(CacheEntry {
                        path: f.path.clone(),
                        size: f.size,
                        mode: f.mode,
                        mtime_ns: f.mtime_ns,
                        ctime_ns: f.ctime_ns,
                        ino: f.ino,
                        sha256: unhex32(&p.sha256)?,
                    })
                })
                .collect(),
        }
        .encode()
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
        let check = tree_unchanged(
            &rec.dir,
            &before,
            opts.include_sensitive,
            rules.as_ref(),
            watch.as_ref(),
        )
        .and_then(|same| Ok((same, snapshot()?)));
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
    let (tree_same, objects_after) = match check {
        Ok(r) => r,
        Err(e) => {
            pending.discard();
            return abandon(e);
        }
    };
    let stored_bytes = pending.stored_bytes;
    clock.lap("check+flush");
    let objects_same = objects_identity == objects_after.as_ref().map(ObjectSnapshot::identity);
    let refusal = if !tree_same || !objects_same {
        Err(WsError::WorkspaceChanged(
            "files or objects changed while the capture copied them; pause writers and retry"
                .into(),
        ))
    } else {
        opts.check_deadline()
    };
    if let Err(e) = refusal {
        pending.discard();
        return abandon(e);
    }
    // Saved only once the blob names it holds are durable (digests from the
    // cache are trusted without looking at the blob), while the checkpoint
    // is renamed into place.
    let save_cache = || {
        if let Some(bytes) = &cache_bytes {
            StatCache::write_encoded(&cache_path(registry, ws), bytes);
        }
    };
    pending.commit(registry, id, &save_cache)?;
    clock.lap("publish");
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

/// A workspace's retention caps (0 = unlimited); a workspace not
/// registered here (an imported checkpoint's) has none.
#[derive(Clone, Copy, Default)]
pub(crate) struct RetentionCaps {
    pub max_checkpoints: u64,
    pub max_checkpoint_bytes: u64,
}

impl RetentionCaps {
    pub(crate) fn of(rec: &crate::registry::Record) -> RetentionCaps {
        RetentionCaps {
            max_checkpoints: rec.max_checkpoints,
            max_checkpoint_bytes: rec.max_checkpoint_bytes,
        }
    }
}

/// Admits a new checkpoint of `bytes` for workspace `ws` under its
/// retention caps and the partition's standing policy; refuses rather
/// than evicting. `all`: every checkpoint of the registry partition.
pub(crate) fn admit(
    registry: &Registry,
    ws: &str,
    caps: RetentionCaps,
    bytes: u64,
    all: &[Summary],
) -> Result<()> {
    let mine: Vec<&Summary> = all.iter().filter(|s| s.workspace_id == ws).collect();
    let my_bytes: u64 = mine.iter().map(|s| s.bytes).sum();
    if caps.max_checkpoints > 0 && mine.len() as u64 >= caps.max_checkpoints {
        return Err(WsError::CapacityExceeded(format!(
            "workspace {ws} retains {} checkpoints, at its limit of {}; delete one first",
            mine.len(),
            caps.max_checkpoints
        )));
    }
    if caps.max_checkpoint_bytes > 0 && my_bytes + bytes > caps.max_checkpoint_bytes {
        return Err(WsError::CapacityExceeded(format!(
            "retained checkpoint bytes {} + {bytes} would exceed the limit of {}",
            my_bytes, caps.max_checkpoint_bytes
        )));
    }
    let policy = registry.policy()?;
    let total_bytes: u64 = all.iter().map(|s| s.bytes).sum();
    if min_bound(policy.max_checkpoints, 0) > 0 && all.len() as u64 >= policy.max_checkpoints {
        return Err(WsError::CapacityExceeded(format!(
            "the registry retains {} checkpoints, at its policy limit of {}",
            all.len(),
            policy.max_checkpoints
        )));
    }
    if policy.max_checkpoint_bytes > 0 && total_bytes + bytes > policy.max_checkpoint_bytes {
        return Err(WsError::CapacityExceeded(format!(
            "registry checkpoint bytes {total_bytes} + {bytes} would exceed the policy limit of {}",
            policy.max_checkpoint_bytes
        )));
    }
    Ok(())
}

pub(super) fn produce_all(
    registry: &Registry,
    root: &Path,
    tmp: &Path,
    work: &[Work],
    opts: &CaptureOptions,
) -> Result<Vec<Payload>> {
    // Cached digests need no I/O: the cache is dropped whenever GC deletes
    // blobs, so a digest it holds names a blob that still exists.
    let mut slots: Vec<Option<Payload>> = work
        .iter()
        .map(|w| {
            w.cached.as_ref().map(|sha| Payload {
                sha256: sha.clone(),
                staged: None,
            })
        })
        .collect();
    let todo: Vec<usize> = (0..work.len()).filter(|&i| slots[i].is_none()).collect();
    let total: u64 = todo.iter().map(|&i| work[i].file.size).sum();
    let done = std::sync::atomic::AtomicU64::new(0);
    let next = AtomicUsize::new(0);
    let failed = std::sync::atomic::AtomicBool::new(false);
    let threads = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(2)
        .clamp(2, 4)
        .min(todo.len().max(1));
    let outcomes: Vec<Vec<(usize, Result<Payload>)>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| {
                    let mut local = Vec::new();
                    loop {
                        let k = next.fetch_add(1, Ordering::Relaxed);
                        if k >= todo.len() || failed.load(Ordering::Relaxed) {
                            break;
                        }
                        let i = todo[k];
                        let r = opts
                            .check_deadline()
                            .and_then(|()| produce_one(registry, root, tmp, &work[i]));
                        if r.is_err() {
                            failed.store(true, Ordering::Relaxed);
                        }
                        local.push((i, r));
                        if let Some(p) = opts.progress {
                            let size = work[i].file.size;
                            let now = done.fetch_add(size, Ordering::Relaxed) + size;
                            p.update("capture", now, total);
                        }
                    }
                    local
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_default())
            .collect()
    });
    let mut first_err = None;
    for (i, r) in outcomes.into_iter().flatten() {
        match r {
            Ok(p) => slots[i] = Some(p),
            Err(e) => {
                first_err.get_or_insert(e);
            }
        }
    }
    let complete = slots.iter().all(Option::is_some);
    let produced: Vec<Payload> = slots.into_iter().flatten().collect();
    if let Some(e) = first_err {
        discard(&produced);
        return Err(e);
    }
    if !complete {
        discard(&produced);
        return Err(WsError::InvalidRequest("a capture worker failed".into()));
    }
    Ok(produced)
}

pub(super) fn produce_one(
    registry: &Registry,
    root: &Path,
    tmp: &Path,
    w: &Work,
) -> Result<Payload> {
    if let Some(sha) = &w.cached {
        if blob_ok(registry, sha, w.file.size) {
            return Ok(Payload {
                sha256: sha.clone(),
                staged: None,
            });
        }
    }
    // Hash and stage in one read. Staging even when the blob may already
    // exist keeps this single-pass; the duplicate is dropped at publication.
    let src = root.join(&w.file.path);
    let mut input = File::open(&src).map_err(|e| WsError::io_at("read", &src, e))?;
    stage_reader(registry, tmp, &mut input, w.file.size).map_err(|e| match e {
        StageError::Io(e) => WsError::io_at("copy", &src, e),
        StageError::Size { .. } => {
            WsError::WorkspaceChanged(format!("{} changed size while it was copied", w.file.path))
        }
    })
}
