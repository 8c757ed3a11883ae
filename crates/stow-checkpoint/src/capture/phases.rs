//! The phases of one capture, from the scanned tree to publication (see
//! the module above for their order).

use std::collections::{BTreeSet, HashMap, HashSet};
use std::path::PathBuf;
use std::sync::Mutex;

use super::admit::{admit, RetentionCaps};
use super::produce::{cache_entries, produce_all, Produced, StageDirs};
use super::{panicked, CaptureOptions, Committed, Left, Outcome, Reuse};
use crate::blobs::{blob_ok, discard_pairs, stage_bytes, stage_known, Payload};
use crate::error::{Result, WsError};
use crate::format::{CheckpointResult, Ignored, ManifestView, ObjectEntry, Origin, Summary};
use crate::fsutil::FileStamp;
use crate::fsutil::{create_private_dir, hex, now_rfc3339};
use crate::ignorefile::Rules;
use crate::monitor::ChangedDirs;
use crate::objects::{snapshot_objects, ObjectSnapshot};
use crate::progress::{check_deadline, PhaseClock};
use crate::publish;
use crate::registry::{Record, Registry};
use crate::scan::{tree_changes, Scan};
use crate::statcache::cached_digests;
use crate::statcache::StatCache;
use crate::tree::{self, BuiltTree};
use crate::watch::{Changes, TreeWatch};

/// A monitored capture rewrites the stat cache file (all of the tree's
/// entries) only once this many files were hashed since it last did; until
/// then the file holds an older cache, which is just as safe (any cache
/// file names only blobs that exist: GC deletes them all before any blob)
/// and costs a later unmonitored capture that many re-hashes.
const UNWRITTEN_FILES: u64 = 1024;

/// One capture in flight, from the scanned tree to publication.
pub(super) struct Capture<'a> {
    pub(super) registry: &'a Registry,
    pub(super) rec: &'a Record,
    pub(super) id: &'a str,
    pub(super) opts: &'a CaptureOptions<'a>,
    /// The parent recorded: the one asked for, else the workspace's head.
    pub(super) parent: Option<String>,
    pub(super) rules: Option<&'a Rules>,
    pub(super) scan_start: i64,
    pub(super) before: &'a Scan,
    pub(super) watch: Option<&'a TreeWatch>,
    pub(super) reuse: Option<&'a Reuse>,
    pub(super) cache_file: PathBuf,
    /// Where payloads are staged.
    pub(super) tmp: PathBuf,
    pub(super) clock: PhaseClock,
}

/// How much a capture holds.
struct Totals {
    files: u64,
    bytes: u64,
    objects: u64,
}

/// What a capture staged and has not published yet: a failure before
/// publication deletes it all (`discard`).
struct Staged {
    produced: Produced,
    objects: Vec<(Payload, u64)>,
    nodes: Vec<(Payload, u64)>,
}

impl Staged {
    fn discard(&self) {
        self.produced.discard();
        discard_pairs(&self.objects);
        discard_pairs(&self.nodes);
    }

    /// Every staged payload with its size, for publication.
    fn payloads(&self) -> Vec<(&Payload, u64)> {
        let files = self.produced.staged.iter();
        files
            .chain(&self.objects)
            .chain(&self.nodes)
            .map(|(p, n)| (p, *n))
            .collect()
    }
}

/// The summary and the manifest's parts, owned (the manifest is
/// serialized from a view of them).
struct Assembled {
    created: String,
    tree_root: String,
    excluded: Vec<String>,
    objects: Vec<ObjectEntry>,
    ignored: Option<Ignored>,
    summary: Summary,
}

impl Capture<'_> {
    /// Runs the phases in order.
    pub(super) fn run(
        &mut self,
        cache: StatCache,
        retained: &[Summary],
        receipt: Option<Vec<u8>>,
    ) -> Outcome<CheckpointResult> {
        let nothing = |e| (e, Left::Nothing);
        let objects = self.snapshot().map_err(nothing)?;
        let totals = self.limits(objects.as_ref(), retained).map_err(nothing)?;
        let digests = cached_digests(&cache, &self.before.files);
        // Tree nodes the last capture named are in the blob store (the
        // cache is dropped whenever GC deletes blobs).
        let old_nodes = cache.nodes;
        create_private_dir(&self.tmp).map_err(nothing)?;
        self.clock.lap("admit");
        // Held to the end of the capture: the staged payloads lie in them.
        let stages = StageDirs::for_capture(&self.tmp, &digests).map_err(nothing)?;
        let produced = self.produce(&stages, digests, &old_nodes)?;
        self.clock.lap("copy");
        let mut staged = Staged {
            produced,
            objects: Vec::new(),
            nodes: Vec::new(),
        };
        let built = self
            .stage_objects(objects.as_ref(), &mut staged)
            .and_then(|()| self.build_tree(objects.as_ref(), &old_nodes, &mut staged));
        let built = match built {
            Ok(b) => b,
            Err(e) => {
                staged.discard();
                return Err(nothing(e));
            }
        };
        self.clock.lap("tree");
        if let Some(same) = self.unchanged_since(&built) {
            staged.discard();
            // Nothing committed: a monitor keeps its last commit's state
            // and reads again what changed since (no full scan). The stat
            // cache it started from stays its own while the file on disk
            // is the one it knows: dropping it would cost the next capture
            // a reload and every node rebuilt (a rewind's clean-tree undo
            // ends here).
            let cache = self.reuse.and_then(|r| r.disk).map(|stamp| {
                let kept = StatCache {
                    scan_start_ns: cache.scan_start_ns,
                    entries: cache.entries,
                    nodes: old_nodes,
                };
                (kept, stamp)
            });
            return Ok((same, Left::Changed(Box::new((BTreeSet::new(), cache)))));
        }
        if let Some(hook) = self.opts.after_copy {
            hook();
        }
        if let Err(e) = check_deadline(self.opts.deadline) {
            staged.discard();
            return Err(nothing(e));
        }
        let assembled = self.assemble(&totals, objects.as_ref(), &staged, &built);
        self.publish(
            &totals, objects, &staged, &built, assembled, &old_nodes, receipt,
        )
    }

    /// The checkpoint `same_as` names, when the tree just built is its
    /// tree (`None` for a portable capture, a flat manifest, or a
    /// checkpoint that is gone).
    fn unchanged_since(&self, built: &BuiltTree) -> Option<CheckpointResult> {
        let same = self.opts.same_as.as_deref()?;
        if self.opts.spec.portable {
            return None;
        }
        let root = crate::stored::layout(self.registry, same).ok()?.1?;
        if root != hex(&built.root) {
            return None;
        }
        // The summary says what a caller needs; the manifest (every
        // file) is not read.
        let s = crate::format::load_summary(self.registry, same).ok()?;
        (s.workspace_id == self.rec.id).then(|| CheckpointResult {
            version: 1,
            checkpoint_id: s.id,
            workspace_id: s.workspace_id,
            parent_checkpoint_id: s.parent_id,
            created: s.created,
            files: s.files,
            bytes: s.bytes,
            message: s.message,
            ..CheckpointResult::default()
        })
    }

    /// The bucket's objects now (portable captures; compared again after
    /// copying).
    fn snapshot(&self) -> Result<Option<ObjectSnapshot>> {
        let (rec, opts) = (self.rec, self.opts);
        opts.spec
            .portable
            .then(|| {
                let owned = opts.monitor.and_then(|m| m.view());
                snapshot_objects(&rec.dir, &rec.bucket, opts.spec.include_sensitive, owned)
            })
            .transpose()
    }

    /// Phase 1: the per-capture caps, then the retention caps and the
    /// registry's standing policy.
    fn limits(&self, objects: Option<&ObjectSnapshot>, retained: &[Summary]) -> Result<Totals> {
        let (object_count, object_bytes) = objects.map_or((0, 0), |o| {
            (
                o.objects.len() as u64,
                o.objects.iter().map(|x| x.size).sum(),
            )
        });
        let files = self.before.files.len() as u64;
        let bytes = self.before.files.iter().map(|f| f.size).sum::<u64>() + object_bytes;
        let (max_bytes, max_files) = self.opts.spec.bounds();
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
        let ws = self.rec.id.as_str();
        admit(
            self.registry,
            ws,
            RetentionCaps::of(self.rec),
            bytes,
            retained,
        )?;
        Ok(Totals {
            files,
            bytes,
            objects: object_count,
        })
    }

    /// Phase 2: the payload of every file without a cached digest. A
    /// refusal for a change keeps its progress (see `keep_progress`).
    fn produce(
        &self,
        stages: &StageDirs,
        digests: Vec<Option<[u8; 32]>>,
        old_nodes: &[[u8; 32]],
    ) -> std::result::Result<Produced, (WsError, Left)> {
        let produced = produce_all(
            self.registry,
            &self.rec.dir,
            stages,
            &self.before.files,
            digests,
            self.opts.deadline,
            self.opts.progress,
        );
        let (partial, e) = match produced {
            Ok(p) => return Ok(p),
            Err(failed) => failed,
        };
        let staged: Vec<(&Payload, u64)> = partial.staged.iter().map(|(p, n)| (p, *n)).collect();
        if !matches!(e, WsError::WorkspaceChanged(_))
            || publish::keep_blobs(self.registry, &staged).is_err()
        {
            partial.discard();
            return Err((e, Left::Nothing));
        }
        let changes = self.watch.map_or(Changes::Unknown, |w| {
            w.changes(self.opts.spec.include_sensitive, self.rules)
        });
        let left = self.keep_progress(&partial.digests, changes, old_nodes);
        Err((e, left))
    }

    /// A refusal keeps its progress: what was verified and made durable
    /// stays as unreferenced blobs, with stat-cache entries for the files
    /// that did not change, so a retry costs what changed. (With no watch
    /// to vouch for them, the old cache stays.)
    fn keep_progress(
        &self,
        digests: &[Option<[u8; 32]>],
        changes: Changes,
        old_nodes: &[[u8; 32]],
    ) -> Left {
        let Changes::Paths(pending) = changes else {
            return Left::Nothing;
        };
        let kept = StatCache {
            scan_start_ns: self.scan_start,
            entries: cache_entries(&self.before.files, digests, |f| {
                Changes::untouched_in(&pending, &f.path)
            }),
            nodes: old_nodes.to_vec(),
        };
        let cache =
            StatCache::write_encoded(&self.cache_file, &kept.encode()).map(|stamp| (kept, stamp));
        Left::Changed(Box::new((pending, cache)))
    }

    /// Phase 3: the bucket's object bodies, staged (portable captures).
    fn stage_objects(&self, objects: Option<&ObjectSnapshot>, staged: &mut Staged) -> Result<()> {
        for o in objects.map_or(&[][..], |o| &o.objects) {
            let payload = stage_bytes(self.registry, &self.tmp, &o.body)?;
            staged.objects.push((payload, o.size));
        }
        Ok(())
    }

    /// Phase 4: the tree's nodes; those the blob store lacks are staged as
    /// blobs. A monitored capture reuses the node of every directory
    /// nothing changed in (for a portable capture also no file's S3
    /// properties, which live outside the tree the watch sees).
    fn build_tree(
        &self,
        objects: Option<&ObjectSnapshot>,
        old_nodes: &[[u8; 32]],
        staged: &mut Staged,
    ) -> Result<BuiltTree> {
        let props_changed: BTreeSet<String> = match (self.reuse, objects) {
            (Some(r), Some(o)) => r
                .props
                .keys()
                .chain(o.file_props.keys())
                .filter(|k| r.props.get(*k) != o.file_props.get(*k))
                .cloned()
                .collect(),
            _ => BTreeSet::new(),
        };
        let changed_dirs = self.reuse.map(|r| {
            (
                ChangedDirs::new(&r.changed),
                ChangedDirs::new(&props_changed),
            )
        });
        let reusable = |dir: &str| -> Option<[u8; 32]> {
            let r = self.reuse?;
            let (files, props) = changed_dirs.as_ref()?;
            (files.node_unchanged(dir) && props.node_unchanged(dir))
                .then(|| r.nodes.get(dir).copied())
                .flatten()
        };
        let digests: Vec<[u8; 32]> = staged.produced.digests.iter().flatten().copied().collect();
        let built = tree::build(
            self.before,
            &digests,
            objects.map(|o| &o.file_props),
            &reusable,
        )?;
        let known: HashSet<[u8; 32]> = old_nodes.iter().copied().collect();
        for (sha, bytes) in &built.nodes {
            let name = hex(sha);
            if known.contains(sha) || blob_ok(self.registry, &name, bytes.len() as u64) {
                continue;
            }
            let payload = stage_known(&self.tmp, bytes, name)?;
            staged.nodes.push((payload, bytes.len() as u64));
        }
        Ok(built)
    }

    /// Phase 5: the summary and the manifest's parts.
    fn assemble(
        &self,
        totals: &Totals,
        objects: Option<&ObjectSnapshot>,
        staged: &Staged,
        built: &BuiltTree,
    ) -> Assembled {
        let mut excluded = self.before.excluded.clone();
        if let Some(o) = objects {
            excluded.extend(o.excluded.iter().cloned());
        }
        let created = now_rfc3339();
        let entries = objects.map_or(Vec::new(), |o| {
            o.objects
                .iter()
                .zip(&staged.objects)
                .map(|(o, (p, _))| ObjectEntry {
                    bucket: o.bucket.clone(),
                    key: o.key.clone(),
                    size: o.size,
                    sha256: p.sha256.clone(),
                    content_type: o.content_type.clone(),
                    metadata: o.metadata.clone(),
                })
                .collect()
        });
        Assembled {
            summary: Summary {
                version: 1,
                id: self.id.to_string(),
                workspace_id: self.rec.id.clone(),
                parent_id: self.parent.clone(),
                created: created.clone(),
                files: totals.files,
                bytes: totals.bytes,
                message: self.opts.spec.message.clone(),
                origin: Some(self.opts.origin.unwrap_or(Origin::Capture)),
            },
            created,
            tree_root: hex(&built.root),
            excluded,
            objects: entries,
            ignored: Ignored::of(&self.before.ignored),
        }
    }

    /// Phase 6: the staged blobs and the checkpoint's own files are written
    /// and flushed (and the next stat cache encoded) while the tree is
    /// checked unchanged; only then is the stage renamed into place. The
    /// blobs take their content address as soon as their bytes are
    /// durable: a refused capture leaves only complete blobs no checkpoint
    /// names, which garbage collection removes (and a retry reuses).
    ///
    /// Long because the three parallel jobs, their joint outcome and the
    /// stat cache's write rule belong together.
    #[allow(clippy::too_many_arguments)]
    fn publish(
        &mut self,
        totals: &Totals,
        objects: Option<ObjectSnapshot>,
        staged: &Staged,
        built: &BuiltTree,
        assembled: Assembled,
        old_nodes: &[[u8; 32]],
        receipt: Option<Vec<u8>>,
    ) -> Outcome<CheckpointResult> {
        let (registry, opts, before) = (self.registry, self.opts, self.before);
        let a = &assembled;
        let manifest = ManifestView {
            version: if objects.is_some() { 2 } else { 1 },
            id: self.id,
            workspace_id: &self.rec.id,
            parent_id: self.parent.as_deref(),
            created: &a.created,
            tree: &a.tree_root,
            excluded: &a.excluded,
            primary_bucket: objects.as_ref().map(|_| self.rec.bucket.as_str()),
            buckets: objects.as_ref().map_or(&[], |o| &o.buckets),
            objects: &a.objects,
            ignored: a.ignored.as_ref(),
            message: opts.spec.message.as_deref(),
        };
        let extra: Vec<(&str, Vec<u8>)> =
            receipt.map(|r| ("receipt.json", r)).into_iter().collect();
        // The stat cache is an optimisation: failing to save it is
        // harmless. Not fsynced: after a crash the cache is the old one,
        // the new one or unreadable (then ignored); each entry names a
        // published blob.
        let hashed = staged.produced.staged.len() as u64;
        let defer_write = self
            .reuse
            .filter(|r| r.disk.is_some() && r.unwritten + hashed < UNWRITTEN_FILES)
            .map(|r| r.unwritten + hashed);
        let encode_cache = || {
            let mut nodes = built.dir_shas.clone();
            nodes.sort_unstable();
            nodes.dedup();
            let cache = StatCache {
                scan_start_ns: self.scan_start,
                entries: cache_entries(&before.files, &staged.produced.digests, |_| true),
                nodes,
            };
            let bytes = if defer_write.is_some() {
                Vec::new()
            } else {
                cache.encode()
            };
            (cache, bytes)
        };
        let to_publish = staged.payloads();
        let (check, pending, cache_bytes) = std::thread::scope(|s| {
            let pending =
                s.spawn(|| publish::prepare(registry, &to_publish, &manifest, &a.summary, &extra));
            let cache_bytes = s.spawn(encode_cache);
            let check = tree_changes(
                &self.rec.dir,
                before,
                opts.spec.include_sensitive,
                self.rules,
                self.watch,
            )
            .and_then(|changes| Ok((changes, self.snapshot()?)));
            (
                check,
                pending.join().unwrap_or_else(|_| Err(panicked())),
                cache_bytes.join().ok(),
            )
        });
        let abandon = |e| {
            staged.discard();
            Err((e, Left::Nothing))
        };
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
        // Payload bytes: tree nodes stand in for the manifest, which was
        // never counted either.
        let node_bytes: u64 = staged.nodes.iter().map(|(_, n)| n).sum();
        let stored_bytes = pending.stored_bytes.saturating_sub(node_bytes);
        self.clock.lap("check+flush");
        let identity = objects.as_ref().map(ObjectSnapshot::identity);
        if !changes.none() || identity != objects_after.as_ref().map(ObjectSnapshot::identity) {
            // The blobs are durable and named already (`prepare`).
            pending.discard();
            let e = WsError::WorkspaceChanged(
                "files or objects changed while the capture copied them; pause writers and retry"
                    .into(),
            );
            let left = self.keep_progress(&staged.produced.digests, changes, old_nodes);
            return Err((e, left));
        }
        if let Err(e) = check_deadline(opts.deadline) {
            pending.discard();
            return abandon(e);
        }
        // Saved only once the blob names it holds are durable (digests from
        // the cache are trusted without looking at the blob), while the
        // checkpoint is renamed into place.
        let written: Mutex<Option<FileStamp>> = Mutex::new(None);
        let save_cache = || {
            if let Some((_, bytes)) = cache_bytes.as_ref().filter(|_| defer_write.is_none()) {
                let stamp = StatCache::write_encoded(&self.cache_file, bytes);
                *written.lock().unwrap_or_else(|e| e.into_inner()) = stamp;
            }
        };
        if let Err(e) = pending.commit(registry, self.id, &save_cache) {
            return Err((e, Left::Nothing));
        }
        self.clock.lap("publish");
        let left = if opts.monitor.is_some() {
            let stamp = match defer_write {
                Some(_) => self.reuse.and_then(|r| r.disk),
                None => written.into_inner().unwrap_or_else(|e| e.into_inner()),
            };
            let mut nodes = HashMap::with_capacity(before.dirs.len() + 1);
            nodes.insert(String::new(), built.root);
            for (d, sha) in before.dirs.iter().zip(built.dir_shas.iter().skip(1)) {
                nodes.insert(d.path.clone(), *sha);
            }
            Left::Committed(Box::new(Committed {
                cache: cache_bytes.zip(stamp).map(|((c, _), s)| (c, s)),
                nodes,
                props: objects.map(|o| o.file_props).unwrap_or_default(),
                unwritten: defer_write.unwrap_or(0),
            }))
        } else {
            Left::Nothing
        };
        let result = CheckpointResult {
            version: 1,
            checkpoint_id: self.id.to_string(),
            workspace_id: self.rec.id.clone(),
            parent_checkpoint_id: self.parent.clone(),
            created: assembled.created,
            files: totals.files,
            bytes: totals.bytes,
            stored_bytes,
            objects: opts.spec.portable.then_some(totals.objects),
            excluded_sensitive_paths: assembled.excluded,
            links: before.links.len() as u64,
            skipped: before.skipped.clone(),
            ignored: assembled.ignored,
            message: opts.spec.message.clone(),
        };
        Ok((result, left))
    }
}
