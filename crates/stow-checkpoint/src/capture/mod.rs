//! Capture: a workspace's tree (and, for a portable capture, its bucket
//! view) into a new checkpoint.
//!
//! `capture` takes the locks; `capture_locked` reads the tree — through a
//! monitor that kept the last capture's scan, or by a full scan — and runs
//! a [`Capture`] phase by phase:
//!
//! 1. `limits`: per-capture caps and retention admission (`admit`);
//! 2. `produce`: the payload of every file the stat cache cannot vouch for
//!    (`produce`), a refusal for a change keeping what it produced;
//! 3. `stage_objects`: the bucket's object bodies (portable captures);
//! 4. `build_tree`: one node per directory, unchanged ones reused;
//! 5. `assemble`: the summary and the manifest;
//! 6. `publish`: blobs and the stage directory made durable while the tree
//!    is checked unchanged, then the rename into place (`publish`).
//!
//! `phases` holds the phases; each returns its value; what the capture leaves for a monitor
//! comes back with the outcome ([`Left`]) and is kept by `keep_for_monitor`.

use std::collections::{BTreeSet, HashMap};

mod admit;
mod phases;
mod produce;

pub(crate) use admit::{admit, RetentionCaps};
pub(crate) use produce::cache_entry;

use serde::{Deserialize, Serialize};

use crate::archive::ArchiveLimits;
use crate::error::{Result, WsError};
use crate::format::{
    check_belongs, check_message, summaries, CheckpointResult, FileProps, Origin, Summary,
};
use crate::fsutil::FileStamp;
use crate::fsutil::{create_private_dir, random_hex, FileLock};
use crate::history;
use crate::ignorefile::Rules;
use crate::layout::{cache_path, now_ns, state};
use crate::monitor::{CaptureKey, Kept, TreeMonitor};
use crate::paths::check_checkpoint_id;
use crate::progress::{PhaseClock, Progress};
use crate::registry::{Record, Registry};
use crate::scan::{scan, Scan};
use crate::statcache::StatCache;
use crate::watch::TreeWatch;
use phases::Capture;

/// What to capture, as every caller states it (CLI, watch service, MCP,
/// keyed captures): the options a checkpoint's content depends on. A keyed
/// capture's request digest covers exactly these.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct CaptureSpec {
    /// Parent checkpoint to record (must belong to the same workspace).
    pub parent: Option<String>,
    /// Per-capture byte cap (0 = none; the archive default for a portable
    /// capture).
    pub max_bytes: u64,
    /// Per-capture file cap (0 = none; the archive default for a portable
    /// capture).
    pub max_files: u64,
    /// Capture sensitive-looking paths instead of excluding them.
    pub include_sensitive: bool,
    /// Portable (v2): capture the workspace bucket's objects and buckets too.
    pub portable: bool,
    /// Capture what `.stowignore` would keep out, too.
    pub no_ignore: bool,
    /// A message stored with the checkpoint (at most
    /// [`crate::MAX_MESSAGE_BYTES`] of UTF-8).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

impl CaptureSpec {
    /// The per-capture byte and file caps in force: a portable capture
    /// always applies the archive bounds (its 0s are their defaults), so
    /// it can be exported; a plain one applies only what it was given
    /// (0 = none).
    pub(crate) fn bounds(&self) -> (u64, u64) {
        if self.portable {
            let l = ArchiveLimits {
                max_bytes: self.max_bytes,
                max_files: self.max_files,
            };
            (l.effective_bytes(), l.effective_files())
        } else {
            (self.max_bytes, self.max_files)
        }
    }
}

/// How one capture runs: what to capture, and the process's part in it.
#[derive(Default)]
pub struct CaptureOptions<'a> {
    /// What to capture.
    pub spec: CaptureSpec,
    /// Stop with `cancelled` (nothing published) once this instant has
    /// passed before the checkpoint is published.
    pub deadline: Option<std::time::Instant>,
    /// Receives bytes copied so far.
    pub progress: Option<&'a dyn Progress>,
    /// A long-lived server's watch over this workspace: captures then read
    /// only what changed since the last one (see `monitor`).
    pub monitor: Option<&'a TreeMonitor>,
    /// How the checkpoint is recorded (`None`: a capture; a rewind's
    /// capture says `Origin::Rewind`).
    pub origin: Option<Origin>,
    /// A checkpoint of this workspace to answer with when the tree read
    /// equals its tree (same root node): nothing is published then. (A
    /// rewind's undo capture reuses a clean head this way; portable
    /// captures always publish.)
    pub same_as: Option<String>,
    /// Test hook run after payloads are copied and before the re-scan.
    #[doc(hidden)]
    pub after_copy: Option<&'a (dyn Fn() + Sync)>,
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
    crate::apply::finish_locked(registry, &rec, opts.monitor.and_then(TreeMonitor::view))?;
    let id = format!("cp_{}", random_hex(12));
    capture_locked(registry, &rec, &id, opts, None)
}

/// Captures `rec` as checkpoint `id`, the caller holding the workspace's
/// capture lock and the registry lock; `receipt` is stored beside the
/// manifest (keyed captures).
pub(crate) fn capture_locked(
    registry: &Registry,
    rec: &Record,
    id: &str,
    opts: &CaptureOptions,
    receipt: Option<Vec<u8>>,
) -> Result<CheckpointResult> {
    let ws = rec.id.as_str();
    if let Some(message) = &opts.spec.message {
        check_message(message)?;
    }
    // An explicit parent must be this workspace's; without one, a capture
    // of an attached workspace continues its history from the head (while
    // the head is still there). (Prepared workspaces keep parentless
    // captures: a checkpoint another names as parent cannot be deleted.)
    let parent = match &opts.spec.parent {
        Some(parent) => {
            check_checkpoint_id(parent).map_err(|e| WsError::InvalidParent(e.to_string()))?;
            check_belongs(registry, parent, ws)
                .map_err(|e| WsError::InvalidParent(e.to_string()))?;
            Some(parent.clone())
        }
        None if rec.attached => {
            history::head(registry, ws)?.filter(|head| check_belongs(registry, head, ws).is_ok())
        }
        None => None,
    };
    if !rec.dir.is_dir() {
        return Err(WsError::NotFound(format!(
            "workspace directory {}",
            rec.dir.display()
        )));
    }
    let rules = if opts.spec.no_ignore {
        None
    } else {
        crate::ignorefile::load(&rec.dir, rec.gitignore)?
    };
    let key = CaptureKey {
        include_sensitive: opts.spec.include_sensitive,
        no_ignore: opts.spec.no_ignore,
        portable: opts.spec.portable,
    };
    let mut clock = PhaseClock::start("capture");
    let read = read_tree(registry, rec, opts, rules.as_ref(), key)?;
    clock.lap("scan");
    let mut capture = Capture {
        registry,
        rec,
        id,
        opts,
        parent,
        rules: rules.as_ref(),
        scan_start: read.scan_start,
        before: &read.before,
        watch: read.watch.as_ref(),
        reuse: read.reuse.as_ref(),
        cache_file: cache_path(registry, ws),
        tmp: state(registry).join("tmp"),
        clock,
    };
    let (result, left) = match capture.run(read.cache, &read.retained, receipt) {
        Ok((done, left)) => (Ok(done), left),
        Err((e, left)) => (Err(e), left),
    };
    if let (Some(monitor), Some(watch)) = (opts.monitor, read.watch) {
        let exclude = rules.as_ref().map(Rules::exclude_stamp).unwrap_or_default();
        keep_for_monitor(monitor, key, watch, read.before, read.reuse, left, exclude);
    }
    result
}

/// The tree as a capture starts from it, and what was read alongside.
struct ReadTree {
    /// When the scan started (the stat cache's racy-timestamp bound).
    scan_start: i64,
    before: Scan,
    /// Placed on every directory before it was read (`None`: inotify is
    /// unavailable; the check after copying scans again).
    watch: Option<TreeWatch>,
    cache: StatCache,
    /// The retained checkpoints, for the retention caps.
    retained: Vec<Summary>,
    /// A monitored capture: what the last committed one left.
    reuse: Option<Reuse>,
}

/// Reads the tree: only what changed when a monitor kept the last scan
/// for these options, else a full scan (reading the stat cache and the
/// retained checkpoints meanwhile).
fn read_tree(
    registry: &Registry,
    rec: &Record,
    opts: &CaptureOptions,
    rules: Option<&Rules>,
    key: CaptureKey,
) -> Result<ReadTree> {
    let scan_start = now_ns();
    let cache_file = cache_path(registry, &rec.id);
    let refreshed = opts
        .monitor
        .and_then(|m| m.take(key))
        .and_then(|k| k.refresh(&rec.dir, rules, &cache_file));
    if let Some(r) = refreshed {
        tracing::debug!(changed = r.changed.len(), "capture from the monitor's scan");
        let (cache, disk) = match r.cache {
            Some((c, stamp)) => (c, Some(stamp)),
            None => (StatCache::load(&cache_file), FileStamp::of(&cache_file)),
        };
        let reuse = Reuse {
            changed: r.changed,
            nodes: r.nodes,
            props: r.props,
            disk,
            unwritten: r.unwritten,
        };
        return Ok(ReadTree {
            scan_start,
            before: r.scan,
            watch: Some(r.watch),
            cache,
            retained: summaries(registry)?,
            reuse: Some(reuse),
        });
    }
    // Every directory is watched from before it is read, so the check
    // after copying needs no second scan (see `watch`).
    let watch = TreeWatch::new();
    let (before, cache, retained) = std::thread::scope(|s| {
        let cache = s.spawn(|| StatCache::load(&cache_file));
        let retained = s.spawn(|| summaries(registry));
        let before = scan(&rec.dir, opts.spec.include_sensitive, rules, watch.as_ref());
        (
            before,
            cache.join().unwrap_or_default(),
            retained.join().unwrap_or_else(|_| Err(panicked())),
        )
    });
    Ok(ReadTree {
        scan_start,
        before: before?,
        watch,
        cache,
        retained: retained?,
        reuse: None,
    })
}

fn panicked() -> WsError {
    WsError::InvalidRequest("capture worker panicked".into())
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

/// What a capture leaves for its monitor (boxed: it travels beside every
/// error).
enum Left {
    /// Committed.
    Committed(Box<Committed>),
    /// Refused for a change: the paths that changed, and the stat cache
    /// written with the files the watch vouches for.
    Changed(Box<(BTreeSet<String>, WrittenCache)>),
    /// Nothing a monitor can build on.
    Nothing,
}

/// A stat cache a capture wrote, with its file's stamp.
type WrittenCache = Option<(StatCache, FileStamp)>;

/// What a committed capture leaves for its monitor.
struct Committed {
    /// The stat cache written.
    cache: WrittenCache,
    /// Every directory's node.
    nodes: HashMap<String, [u8; 32]>,
    /// The files' S3 properties (portable captures).
    props: HashMap<String, FileProps>,
    /// Files hashed since the cache file was last written.
    unwritten: u64,
}

/// A capture's end: its result, or its refusal; either with what it
/// leaves for a monitor.
type Outcome<T> = std::result::Result<(T, Left), (WsError, Left)>;

/// Hands the monitor what the next capture may start from.
fn keep_for_monitor(
    monitor: &TreeMonitor,
    key: CaptureKey,
    watch: TreeWatch,
    scan: Scan,
    reuse: Option<Reuse>,
    left: Left,
    exclude: crate::ignorefile::ExcludeStamps,
) {
    let (pending, cache, nodes, props, unwritten) = match left {
        Left::Committed(c) => {
            let Committed {
                cache,
                nodes,
                props,
                unwritten,
            } = *c;
            (BTreeSet::new(), cache, nodes, props, unwritten)
        }
        Left::Changed(changed) => {
            let (mut pending, cache) = *changed;
            // Changes already applied to `scan` are read again next time;
            // the kept nodes are the last committed capture's.
            let (nodes, props, unwritten) = match reuse {
                Some(r) => {
                    pending.extend(r.changed);
                    (r.nodes, r.props, r.unwritten)
                }
                None => (HashMap::new(), HashMap::new(), 0),
            };
            (pending, cache, nodes, props, unwritten)
        }
        Left::Nothing => return,
    };
    monitor.keep(Kept {
        key,
        watch,
        scan,
        pending,
        cache,
        nodes,
        props,
        unwritten,
        exclude,
    });
}
