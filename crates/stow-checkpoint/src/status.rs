//! `workspace status`: the live tree against a checkpoint (by default the
//! workspace's head), as the changes `diff` would report between that
//! checkpoint and a capture taken now. Changes nothing in the registry.
//!
//! The tree is read by the rules a capture reads it by (`.stowignore`,
//! sensitive paths left out unless the checkpoint holds some, `.git` and
//! `.stow` never), and only files whose stat differs from the stat cache
//! are read and hashed.
//!
//! The cost follows the change, not the tree, past the reading itself:
//! the tree read is built into tree nodes in memory (a capture's nodes,
//! never stored), and only directories whose node differs from the
//! checkpoint's are expanded and compared (as a rewind plans). With a
//! long-lived process's [`TreeMonitor`] (a running `workspace watch` or
//! `serve`, the MCP server) even the reading follows the change: the
//! monitor's kept scan is brought up to date from its watch's events and
//! the nodes of unchanged directories are the last capture's.

use std::collections::{BTreeSet, HashMap};
use std::path::Path;

use serde::Serialize;

pub use crate::diff::{StatusChange, StatusKind};

use crate::diff::{diff_files, diff_links, Kind, LinkChange};
use crate::error::{Result, WsError};
use crate::format::{check_belongs, FileEntry};
use crate::fsutil::FileStamp;
use crate::fsutil::{hash_file, hex};
use crate::history;
use crate::ignorefile::Rules;
use crate::layout::cache_path;
use crate::monitor::{CaptureKey, ChangedDirs, Kept, TreeMonitor};
use crate::parallel::drop_in_background;
use crate::paths::{check_checkpoint_id, is_sensitive};
use crate::progress::PhaseClock;
use crate::registry::{Record, Registry};
use crate::scan::{scan, Scan, Scanned};
use crate::statcache::{cached_digest, cached_digests, unhex32, CacheFile, StatCache};
use crate::stored::{layout, load_manifest};
use crate::tree::{build_reusing, direct_members, expand_differing_in, reused_nodes, Expanded};
use crate::watch::TreeWatch;

/// The live tree against a checkpoint.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct StatusResult {
    pub version: u32,
    pub workspace_id: String,
    /// The checkpoint compared with.
    pub checkpoint_id: String,
    /// Nothing differs.
    pub clean: bool,
    pub added: u64,
    pub changed: u64,
    pub deleted: u64,
    /// File changes in `diff`'s shape with finer kinds, sorted by path
    /// (`from`: the checkpoint's entry, `to`: the tree's).
    pub changes: Vec<StatusChange>,
    /// Symbolic links added, removed or retargeted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub links: Vec<LinkChange>,
    /// A paged status ([`page`]) with more entries: pass back as the
    /// cursor of the next page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

/// Most entries one page of a status may hold.
pub const MAX_PAGE: usize = 10_000;

const CURSOR_PREFIX: &str = "status1:";

/// One page of `status`: at most `limit` (1 to [`MAX_PAGE`]) of its
/// entries — file changes and link changes merged in path order, a file's
/// before a link's at one path — after `cursor` (the `next_cursor` of an
/// earlier page of a status of the same workspace against the same
/// checkpoint). The counts and `clean` stay the whole status's. A cursor
/// names the last path listed, so a tree changed between pages neither
/// repeats nor skips an entry that stayed.
pub fn page(mut s: StatusResult, limit: usize, cursor: Option<&str>) -> Result<StatusResult> {
    if !(1..=MAX_PAGE).contains(&limit) {
        return Err(WsError::InvalidRequest(format!(
            "limit must be 1 to {MAX_PAGE}, not {limit}"
        )));
    }
    let after = cursor
        .map(|c| decode_cursor(c, &s.workspace_id, &s.checkpoint_id))
        .transpose()?;
    let past = |path: &str, rank: u8| {
        after
            .as_ref()
            .is_none_or(|(p, r)| (path, rank) > (p.as_str(), *r))
    };
    let mut changes = std::mem::take(&mut s.changes)
        .into_iter()
        .filter(|c| past(&c.path, 0))
        .peekable();
    let mut links = std::mem::take(&mut s.links)
        .into_iter()
        .filter(|l| past(&l.path, 1))
        .peekable();
    let mut last = None;
    while s.changes.len() + s.links.len() < limit {
        let file_first = match (changes.peek(), links.peek()) {
            (Some(c), Some(l)) => c.path <= l.path,
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (None, None) => break,
        };
        if let Some(c) = file_first.then(|| changes.next()).flatten() {
            last = Some((c.path.clone(), 0));
            s.changes.push(c);
        } else if let Some(l) = links.next() {
            last = Some((l.path.clone(), 1));
            s.links.push(l);
        }
    }
    let more = changes.peek().is_some() || links.peek().is_some();
    s.next_cursor = last
        .filter(|_| more)
        .map(|(path, rank)| encode_cursor(&s.workspace_id, &s.checkpoint_id, &path, rank));
    Ok(s)
}

/// An opaque cursor bound to the workspace and the checkpoint compared
/// with: the last entry listed.
fn encode_cursor(ws: &str, checkpoint: &str, path: &str, rank: u8) -> String {
    crate::cursor::encode(&format!("{CURSOR_PREFIX}{ws}:{checkpoint}:{rank}:{path}"))
}

fn decode_cursor(cursor: &str, ws: &str, checkpoint: &str) -> Result<(String, u8)> {
    let bad = || {
        WsError::InvalidRequest(
            "invalid cursor (not from a status of this workspace against this checkpoint)".into(),
        )
    };
    let rest = crate::cursor::decode(cursor, CURSOR_PREFIX, 16_384).ok_or_else(bad)?;
    let mut parts = rest.splitn(4, ':');
    let (Some(owner), Some(cp), Some(rank), Some(path)) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(bad());
    };
    let rank = match rank {
        "0" => 0,
        "1" => 1,
        _ => return Err(bad()),
    };
    if owner != ws || cp != checkpoint {
        return Err(bad());
    }
    Ok((path.to_string(), rank))
}

/// Compares the tree of workspace `ws` with checkpoint `against` (one of
/// the workspace's own), or with its head.
pub fn status(registry: &Registry, ws: &str, against: Option<&str>) -> Result<StatusResult> {
    status_monitored(registry, ws, against, None)
}

/// [`status`] in a long-lived process that keeps `monitor` over the
/// workspace: the tree is read from the monitor's kept scan when it has
/// one, and a scan made here is left in it for the next status or capture.
pub fn status_monitored(
    registry: &Registry,
    ws: &str,
    against: Option<&str>,
    monitor: Option<&TreeMonitor>,
) -> Result<StatusResult> {
    let rec = registry.get(ws)?;
    // An interrupted rewind is finished first: the tree is then one the
    // history knows.
    crate::apply::finish_pending_in(registry, ws, monitor.and_then(TreeMonitor::view))?;
    let checkpoint_id = match against {
        Some(id) => {
            check_checkpoint_id(id)?;
            check_belongs(registry, id, ws)?;
            id.to_string()
        }
        None => history::head(registry, ws)?.ok_or_else(|| {
            WsError::NotFound(format!(
                "a checkpoint of workspace {ws} to compare with (take one with `workspace checkpoint`)"
            ))
        })?,
    };
    if !rec.dir.is_dir() {
        return Err(WsError::NotFound(format!(
            "workspace directory {}",
            rec.dir.display()
        )));
    }
    let rules = crate::ignorefile::load(&rec.dir, rec.gitignore)?;
    let clock = std::cell::RefCell::new(PhaseClock::start("status"));
    let (_, tree) = layout(registry, &checkpoint_id)?;
    let (was, now) = match tree {
        Some(root) => {
            let root = unhex32(&root).ok_or_else(|| {
                WsError::Corrupt(format!("checkpoint {checkpoint_id}: bad tree root"))
            })?;
            let reader = Reader {
                registry,
                rec: &rec,
                rules: rules.as_ref(),
                root,
                clock: &clock,
            };
            let compared = match monitor {
                Some(m) => reader.monitored(m)?,
                None => reader.scanned(false, None)?,
            };
            // The checkpoint holds sensitive paths (the tree read without
            // them lacks them, so their directories were expanded): the
            // tree is read again with them, as its capture read it.
            if holds_sensitive(&compared.0) {
                reader.scanned(true, None)?
            } else {
                compared
            }
        }
        None => flat(registry, &rec, &checkpoint_id, rules.as_ref())?,
    };
    crate::fault::point("status.compared");
    let result = result(ws, checkpoint_id, &was, &now);
    clock.borrow_mut().lap("diff");
    Ok(result)
}

/// The status of the flat manifest layout (older checkpoints): the whole
/// manifest against the whole tree.
fn flat(
    registry: &Registry,
    rec: &Record,
    checkpoint_id: &str,
    rules: Option<&Rules>,
) -> Result<(Expanded, Expanded)> {
    let m = load_manifest(registry, checkpoint_id)?;
    let include_sensitive = m.files.iter().any(|f| is_sensitive(&f.path));
    let tree = scan(&rec.dir, include_sensitive, rules, None)?;
    let cache = StatCache::load(&cache_path(registry, &rec.id));
    let all: Vec<&Scanned> = tree.files.iter().collect();
    let digests = digests(&rec.dir, &all, cached_digests(&cache, all.iter().copied()))?;
    let files = tree
        .files
        .iter()
        .zip(digests)
        .map(|(f, sha)| FileEntry {
            path: f.path.to_string(),
            size: f.size,
            mode: f.mode,
            sha256: hex(&sha),
            content_type: None,
            metadata: Default::default(),
        })
        .collect();
    let was = Expanded {
        files: m.files,
        links: m.links,
        ..Expanded::default()
    };
    let now = Expanded {
        files,
        links: tree.links,
        ..Expanded::default()
    };
    Ok((was, now))
}

/// Reads the tree of one workspace and compares it with a checkpoint's
/// tree (root node `root`).
struct Reader<'a> {
    registry: &'a Registry,
    rec: &'a Record,
    rules: Option<&'a Rules>,
    root: [u8; 32],
    clock: &'a std::cell::RefCell<PhaseClock>,
}

impl Reader<'_> {
    /// A whole scan (watched from before each directory is read when
    /// `watch` is given), every node built here.
    fn scanned(
        &self,
        include_sensitive: bool,
        watch: Option<&TreeWatch>,
    ) -> Result<(Expanded, Expanded)> {
        let cache_file = cache_path(self.registry, &self.rec.id);
        let (scan, cache) = std::thread::scope(|s| {
            let cache = s.spawn(|| CacheFile::read(&cache_file));
            let scan = scan(&self.rec.dir, include_sensitive, self.rules, watch);
            (scan, cache.join().ok().flatten())
        });
        self.lap("scan");
        let scan = scan?;
        let compared = self.compare(&scan, Vouched::File(cache.as_ref()), &|_| None);
        drop_in_background((scan, cache));
        compared
    }

    /// A whole scan, and the stat cache read (and decoded, to be kept by
    /// a monitor) meanwhile.
    fn scan_and_cache(
        &self,
        include_sensitive: bool,
        watch: Option<&TreeWatch>,
    ) -> Result<(Scan, StatCache)> {
        let cache_file = cache_path(self.registry, &self.rec.id);
        let (scan, cache) = std::thread::scope(|s| {
            let cache = s.spawn(|| StatCache::load(&cache_file));
            let scan = scan(&self.rec.dir, include_sensitive, self.rules, watch);
            (scan, cache.join().unwrap_or_default())
        });
        self.lap("scan");
        Ok((scan?, cache))
    }

    /// Through `monitor`: its kept scan brought up to date, or (nothing
    /// kept for a plain read) a watched scan made here and left in it.
    fn monitored(&self, monitor: &TreeMonitor) -> Result<(Expanded, Expanded)> {
        let cache_file = cache_path(self.registry, &self.rec.id);
        let Some(kept) = monitor.take_if(|k| !k.include_sensitive && !k.no_ignore) else {
            return self.watched_scan(monitor, &cache_file);
        };
        let key = kept.key;
        let Some(r) = kept.refresh(&self.rec.dir, self.rules, &cache_file) else {
            return self.watched_scan(monitor, &cache_file);
        };
        self.lap("refresh");
        let loaded;
        let cache = match &r.cache {
            Some((c, _)) => c,
            None => {
                loaded = StatCache::load(&cache_file);
                &loaded
            }
        };
        let dirs = ChangedDirs::new(&r.changed);
        let reuse = |dir: &str| {
            r.nodes
                .get(dir)
                .copied()
                .filter(|_| dirs.node_unchanged(dir))
        };
        let compared = self.compare(&r.scan, Vouched::Decoded(cache), &reuse);
        // The kept nodes stay the last capture's: the changes found here
        // are kept pending, so the next capture builds those again.
        monitor.keep_if_empty(Kept {
            key,
            watch: r.watch,
            scan: r.scan,
            pending: r.changed,
            cache: r.cache,
            nodes: r.nodes,
            props: r.props,
            unwritten: r.unwritten,
            exclude: self.rules.map(Rules::exclude_stamp).unwrap_or_default(),
        });
        compared
    }

    /// A plain watched scan, left in `monitor` (with no nodes: the next
    /// capture builds them all, as after any whole scan).
    fn watched_scan(
        &self,
        monitor: &TreeMonitor,
        cache_file: &Path,
    ) -> Result<(Expanded, Expanded)> {
        let Some(watch) = TreeWatch::new() else {
            return self.scanned(false, None);
        };
        let stamp = FileStamp::of(cache_file);
        let (scan, cache) = self.scan_and_cache(false, Some(&watch))?;
        let compared = self.compare(&scan, Vouched::Decoded(&cache), &|_| None)?;
        monitor.keep_if_empty(Kept {
            key: CaptureKey {
                include_sensitive: false,
                no_ignore: false,
                portable: false,
            },
            watch,
            scan,
            pending: BTreeSet::new(),
            cache: stamp.map(|s| (cache, s)),
            nodes: HashMap::new(),
            props: HashMap::new(),
            unwritten: 0,
            exclude: self.rules.map(Rules::exclude_stamp).unwrap_or_default(),
        });
        Ok(compared)
    }

    /// Builds the nodes of `scan` (reusing those `reuse` names) and
    /// expands them against the checkpoint's where they differ.
    fn compare(
        &self,
        scan: &Scan,
        cache: Vouched<'_>,
        reuse: &dyn Fn(&str) -> Option<[u8; 32]>,
    ) -> Result<(Expanded, Expanded)> {
        // Only the files of directories whose node is built here need
        // their digests (a reused node already names its files'): after a
        // few changes, a few directories' files, found by binary search.
        let reused = reused_nodes(scan, reuse);
        let rebuilt: Vec<&str> = std::iter::once("")
            .chain(scan.dirs.iter().map(|d| d.path.as_str()))
            .zip(&reused)
            .filter_map(|(d, r)| r.is_none().then_some(d))
            .collect();
        let all = if rebuilt.len() == scan.dirs.len() + 1 {
            let files: Vec<&Scanned> = scan.files.iter().collect();
            digests(&self.rec.dir, &files, cache.digests(&scan.files, None))?
        } else {
            let mut wanted: Vec<usize> = rebuilt
                .iter()
                .flat_map(|d| direct_members(&scan.files, |f| &f.path, d))
                .collect();
            wanted.sort_unstable();
            let cached = cache.digests(&scan.files, Some(&wanted));
            let files: Vec<&Scanned> = wanted.iter().map(|&i| &scan.files[i]).collect();
            let found = digests(&self.rec.dir, &files, cached)?;
            let mut all = vec![[0u8; 32]; scan.files.len()];
            for (i, sha) in wanted.into_iter().zip(found) {
                all[i] = sha;
            }
            all
        };
        self.lap("digests");
        let built = build_reusing(scan, &all, None, reused)?;
        self.lap("nodes");
        let in_memory: HashMap<[u8; 32], &[u8]> = built
            .nodes
            .iter()
            .map(|(sha, bytes)| (*sha, bytes.as_slice()))
            .collect();
        let expanded = expand_differing_in(self.registry, &in_memory, self.root, built.root);
        drop(in_memory);
        drop_in_background((built, all));
        self.lap("expand");
        expanded
    }

    fn lap(&self, phase: &str) {
        self.clock.borrow_mut().lap(phase);
    }
}

/// Where a status finds the digests the stat cache vouches for.
#[derive(Clone, Copy)]
enum Vouched<'a> {
    /// A decoded cache (a monitor keeps it, or will).
    Decoded(&'a StatCache),
    /// A cache file read for this status alone (`None`: no usable cache).
    File(Option<&'a CacheFile>),
}

impl Vouched<'_> {
    /// The cached digests of `files` (sorted), or of `files[i]` for each
    /// `i` of sorted `wanted`.
    fn digests(self, files: &[Scanned], wanted: Option<&[usize]>) -> Vec<Option<[u8; 32]>> {
        match (self, wanted) {
            (Vouched::Decoded(c), None) => cached_digests(c, files),
            // A few directories' files: each found by binary search.
            (Vouched::Decoded(c), Some(w)) => {
                w.iter().map(|&i| cached_digest(c, &files[i])).collect()
            }
            (Vouched::File(Some(c)), None) => c.cached_digests(files.iter()),
            (Vouched::File(Some(c)), Some(w)) => c.cached_digests(w.iter().map(|&i| &files[i])),
            (Vouched::File(None), w) => vec![None; w.map_or(files.len(), <[usize]>::len)],
        }
    }
}

/// Whether an expanded checkpoint side names a sensitive path.
fn holds_sensitive(was: &Expanded) -> bool {
    was.files.iter().any(|f| is_sensitive(&f.path))
        || was.links.iter().any(|l| is_sensitive(&l.path))
        || was
            .dirs
            .iter()
            .any(|d| is_sensitive(&format!("{}/", d.path)))
}

/// Files hashed by one worker: (index, SHA-256).
type Hashed = Vec<(usize, [u8; 32])>;

/// Every file's SHA-256: the cached ones, and the rest read now (on a few
/// threads when there are many).
fn digests(
    root: &Path,
    files: &[&Scanned],
    cached: Vec<Option<[u8; 32]>>,
) -> Result<Vec<[u8; 32]>> {
    let missing: Vec<usize> = (0..files.len()).filter(|&i| cached[i].is_none()).collect();
    let threads = crate::parallel::worker_threads(missing.len() / 64 + 1);
    let chunk = missing.len().div_ceil(threads).max(1);
    let hashed: Vec<Result<Hashed>> = std::thread::scope(|s| {
        let workers: Vec<_> = missing
            .chunks(chunk)
            .map(|part| {
                s.spawn(move || {
                    part.iter()
                        .map(|&i| Ok((i, hash_now(root, &files[i].path)?)))
                        .collect::<Result<Vec<_>>>()
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| {
                w.join().unwrap_or_else(|_| {
                    Err(WsError::InvalidRequest("status worker panicked".into()))
                })
            })
            .collect()
    });
    let mut out: Vec<[u8; 32]> = cached.into_iter().map(Option::unwrap_or_default).collect();
    for part in hashed {
        for (i, sha) in part? {
            out[i] = sha;
        }
    }
    Ok(out)
}

/// The SHA-256 of the file at `path` (relative to `root`) now.
fn hash_now(root: &Path, path: &str) -> Result<[u8; 32]> {
    let changed =
        || WsError::WorkspaceChanged(format!("{path} was removed or replaced while read"));
    let hexed = hash_file(&root.join(path))?.ok_or_else(changed)?;
    unhex32(&hexed).ok_or_else(changed)
}

/// The result from the two sides' entries (each sorted by path).
fn result(ws: &str, checkpoint_id: String, was: &Expanded, now: &Expanded) -> StatusResult {
    let links = diff_links(&was.links, &now.links);
    let link_kind: HashMap<&str, Kind> = links.iter().map(|l| (l.path.as_str(), l.kind)).collect();
    let changes: Vec<StatusChange> = diff_files(&was.files, &now.files)
        .into_iter()
        .map(|c| {
            let kind = match (c.kind, link_kind.get(c.path.as_str())) {
                (Kind::Added, Some(Kind::Deleted)) | (Kind::Deleted, Some(Kind::Added)) => {
                    StatusKind::TypeChanged
                }
                (Kind::Added, _) => StatusKind::Added,
                (Kind::Deleted, _) => StatusKind::Deleted,
                (Kind::Changed, _) => match (&c.from, &c.to) {
                    (Some(f), Some(t)) if f.sha256 == t.sha256 && f.size == t.size => {
                        StatusKind::ModeChanged
                    }
                    _ => StatusKind::Modified,
                },
            };
            StatusChange {
                path: c.path,
                kind,
                from: c.from,
                to: c.to,
            }
        })
        .collect();
    // A type change is counted once, as changed (by its file's entry).
    let retyped: BTreeSet<&str> = changes
        .iter()
        .filter(|c| c.kind == StatusKind::TypeChanged)
        .map(|c| c.path.as_str())
        .collect();
    let count = |k: Kind| {
        let files = changes
            .iter()
            .filter(|c| c.kind != StatusKind::TypeChanged && c.diff_kind() == k)
            .count();
        let links = links
            .iter()
            .filter(|l| l.kind == k && !retyped.contains(l.path.as_str()))
            .count();
        (files + links) as u64
    };
    StatusResult {
        version: 1,
        workspace_id: ws.to_string(),
        checkpoint_id,
        clean: changes.is_empty() && links.is_empty(),
        added: count(Kind::Added),
        changed: count(Kind::Changed) + retyped.len() as u64,
        deleted: count(Kind::Deleted),
        changes,
        links,
        next_cursor: None,
    }
}
