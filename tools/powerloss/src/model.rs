//! The durability model: what a disk would still hold if power went now.
//!
//! The backing directory always holds the *live* state (what processes
//! see). Beside it the model keeps the *durable* state, inode by inode:
//!
//! - a file's durable bytes, in `data/<ino>` of the state directory, once
//!   the file is first written (before that its live bytes are durable),
//!   plus the writes and truncations made since its last `fsync` or
//!   `fdatasync` (pending data operations, bytes kept in memory);
//! - a directory's durable entries (name → inode), snapshotted before its
//!   first change, plus a journal of pending entry changes (creates,
//!   unlinks, renames, links), each one atomic across the one or two
//!   directories it touches.
//!
//! `fsync` of a file applies its pending data operations; `fsync` of a
//! directory applies every pending entry change that touches it, together
//! with every earlier change sharing a directory with one applied (so a
//! directory never sees its changes out of order); `syncfs` applies
//! everything. A cut applies nothing more ([`CutMode::DropAll`]) or a random
//! subset ([`CutMode::Subset`]): each file's pending operations
//! independently, and entry changes closed under the same per-directory
//! order.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::ffi::OsString;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use crate::error::{Context, Result};

/// Pending data operations of one file above which they are folded into
/// one image of the file (a file rewritten in place many times, such as
/// SQLite's shared-memory index, stays bounded).
const FOLD_AT: usize = 512;

/// What a directory entry names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A regular file.
    File,
    /// A directory.
    Dir,
    /// A symbolic link.
    Symlink,
    /// A socket, FIFO or device node.
    Other,
}

/// One directory entry: the inode it names (the backing inode number) and
/// its kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry {
    /// Backing inode number.
    pub ino: u64,
    /// What the inode is.
    pub kind: Kind,
}

/// One change to a directory's entries: `(directory, name, new entry or
/// None for removal)`.
pub type Update = (u64, OsString, Option<Entry>);

/// How a cut decides what of the pending state reached the disk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CutMode {
    /// Nothing pending survives.
    DropAll,
    /// A random subset survives (seeded), respecting barriers and each
    /// directory's order of changes.
    Subset(u64),
}

/// Counts of what a cut kept and dropped.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CutStats {
    /// Pending entry changes applied by the cut (subset mode).
    pub meta_kept: usize,
    /// Pending entry changes lost.
    pub meta_dropped: usize,
    /// Pending data operations applied by the cut (subset mode).
    pub data_kept: usize,
    /// Pending data operations lost.
    pub data_dropped: usize,
}

enum DataOp {
    Write { off: u64, bytes: Vec<u8> },
    SetLen(u64),
    Image(Vec<u8>),
}

#[derive(Default)]
struct FileState {
    pending: Vec<DataOp>,
}

struct MetaOp {
    updates: Vec<Update>,
}

impl MetaOp {
    fn touches(&self, dir: u64) -> bool {
        self.updates.iter().any(|(d, _, _)| *d == dir)
    }
}

/// The durable state beside the live one (see the module docs).
pub struct Model {
    data_dir: PathBuf,
    files: HashMap<u64, FileState>,
    dirs: HashMap<u64, BTreeMap<OsString, Entry>>,
    journal: Vec<MetaOp>,
}

impl Model {
    /// A model keeping durable file bytes in `data_dir` (created).
    pub fn new(data_dir: &Path) -> Result<Self> {
        std::fs::create_dir_all(data_dir).ctx(|| format!("mkdir {}", data_dir.display()))?;
        Ok(Model {
            data_dir: data_dir.to_path_buf(),
            files: HashMap::new(),
            dirs: HashMap::new(),
            journal: Vec::new(),
        })
    }

    /// The file holding `ino`'s durable bytes once it is tracked.
    pub fn data_path(&self, ino: u64) -> PathBuf {
        self.data_dir.join(ino.to_string())
    }

    /// Whether `ino`'s bytes are tracked (it was written or created).
    pub fn tracks_file(&self, ino: u64) -> bool {
        self.files.contains_key(&ino)
    }

    /// Starts tracking a file before its first change: its durable bytes
    /// are `live`'s current bytes, or none for a file just created
    /// (`live == None`).
    pub fn track_file(&mut self, ino: u64, live: Option<&Path>) -> Result<()> {
        if self.files.contains_key(&ino) {
            return Ok(());
        }
        let data = self.data_path(ino);
        match live {
            Some(p) => {
                std::fs::copy(p, &data)
                    .ctx(|| format!("copy {} to {}", p.display(), data.display()))?;
            }
            None => {
                File::create(&data).ctx(|| format!("create {}", data.display()))?;
            }
        }
        self.files.insert(ino, FileState::default());
        Ok(())
    }

    /// Whether `dir`'s durable entries are already recorded.
    pub fn tracks_dir(&self, dir: u64) -> bool {
        self.dirs.contains_key(&dir)
    }

    /// Records `dir`'s durable entries (its live entries before its first
    /// change, or none for a directory just made).
    pub fn track_dir(&mut self, dir: u64, entries: BTreeMap<OsString, Entry>) {
        self.dirs.entry(dir).or_insert(entries);
    }

    /// The durable entries of a tracked directory.
    pub fn durable_entries(&self, dir: u64) -> Option<&BTreeMap<OsString, Entry>> {
        self.dirs.get(&dir)
    }

    /// Records a write of a tracked file (not yet durable).
    pub fn write(&mut self, ino: u64, off: u64, bytes: &[u8]) -> Result<()> {
        self.push(
            ino,
            DataOp::Write {
                off,
                bytes: bytes.to_vec(),
            },
        )
    }

    /// Records a truncation or extension of a tracked file.
    pub fn set_len(&mut self, ino: u64, len: u64) -> Result<()> {
        self.push(ino, DataOp::SetLen(len))
    }

    fn push(&mut self, ino: u64, op: DataOp) -> Result<()> {
        let fold = {
            let Some(f) = self.files.get_mut(&ino) else {
                return Ok(());
            };
            f.pending.push(op);
            f.pending.len() > FOLD_AT
        };
        if fold {
            self.fold(ino)?;
        }
        Ok(())
    }

    /// Folds a file's pending operations into one image of what they make
    /// of its durable bytes (a later cut keeps all or none of them).
    fn fold(&mut self, ino: u64) -> Result<()> {
        let path = self.data_path(ino);
        let mut image = std::fs::read(&path).ctx(|| format!("read {}", path.display()))?;
        let Some(f) = self.files.get_mut(&ino) else {
            return Ok(());
        };
        for op in f.pending.drain(..) {
            match op {
                DataOp::Write { off, bytes } => {
                    let (off, end) = (off as usize, off as usize + bytes.len());
                    if image.len() < end {
                        image.resize(end, 0);
                    }
                    image[off..end].copy_from_slice(&bytes);
                }
                DataOp::SetLen(len) => image.resize(len as usize, 0),
                DataOp::Image(bytes) => image = bytes,
            }
        }
        f.pending.push(DataOp::Image(image));
        Ok(())
    }

    /// `fsync`/`fdatasync` of a file: its pending operations become durable.
    pub fn fsync_file(&mut self, ino: u64) -> Result<()> {
        let Some(f) = self.files.get_mut(&ino) else {
            return Ok(());
        };
        let ops = std::mem::take(&mut f.pending);
        apply_data(&self.data_dir.join(ino.to_string()), ops.iter())
    }

    /// Records a change of one or two directories' entries (every directory
    /// named must be tracked first).
    pub fn record(&mut self, updates: Vec<Update>) {
        self.journal.push(MetaOp { updates });
    }

    /// `fsync` of a directory: its pending changes, and the earlier ones
    /// they depend on, become durable.
    pub fn fsync_dir(&mut self, dir: u64) {
        let chosen: Vec<bool> = self.journal.iter().map(|op| op.touches(dir)).collect();
        self.apply_closed(chosen);
    }

    /// `syncfs`: everything pending becomes durable.
    pub fn sync_all(&mut self) -> Result<()> {
        let inos: Vec<u64> = self.files.keys().copied().collect();
        for ino in inos {
            self.fsync_file(ino)?;
        }
        let all = vec![true; self.journal.len()];
        self.apply_closed(all);
        Ok(())
    }

    /// Counts of pending entry changes and data operations.
    pub fn pending(&self) -> (usize, usize) {
        let data = self.files.values().map(|f| f.pending.len()).sum();
        (self.journal.len(), data)
    }

    /// Power is cut: decides what of the pending state survives and applies
    /// it; the rest is forgotten. Afterwards the durable state is final.
    pub fn cut(&mut self, mode: CutMode) -> Result<CutStats> {
        let mut stats = CutStats::default();
        let mut rng = match mode {
            CutMode::DropAll => None,
            CutMode::Subset(seed) => Some(SmallRng::seed_from_u64(seed)),
        };
        let mut inos: Vec<u64> = self.files.keys().copied().collect();
        inos.sort_unstable();
        for ino in inos {
            let Some(f) = self.files.get_mut(&ino) else {
                continue;
            };
            let ops = std::mem::take(&mut f.pending);
            let keep: Vec<bool> = ops
                .iter()
                .map(|_| rng.as_mut().is_some_and(|r| r.random_bool(0.5)))
                .collect();
            let kept = ops.iter().zip(&keep).filter(|(_, k)| **k).map(|(o, _)| o);
            stats.data_kept += keep.iter().filter(|k| **k).count();
            stats.data_dropped += keep.iter().filter(|k| !**k).count();
            apply_data(&self.data_dir.join(ino.to_string()), kept)?;
        }
        let chosen: Vec<bool> = self
            .journal
            .iter()
            .map(|_| rng.as_mut().is_some_and(|r| r.random_bool(0.5)))
            .collect();
        let before = self.journal.len();
        self.apply_closed(chosen);
        stats.meta_kept = before - self.journal.len();
        stats.meta_dropped = self.journal.len();
        self.journal.clear();
        Ok(stats)
    }

    /// Applies the chosen journal entries, closed under "an earlier change
    /// sharing a directory with an applied one is applied too", in order,
    /// and removes them from the journal.
    fn apply_closed(&mut self, mut chosen: Vec<bool>) {
        let mut dirs: HashSet<u64> = HashSet::new();
        for i in (0..self.journal.len()).rev() {
            let op = &self.journal[i];
            if !chosen[i] && op.updates.iter().any(|(d, _, _)| dirs.contains(d)) {
                chosen[i] = true;
            }
            if chosen[i] {
                dirs.extend(op.updates.iter().map(|(d, _, _)| *d));
            }
        }
        let journal = std::mem::take(&mut self.journal);
        for (op, apply) in journal.into_iter().zip(chosen) {
            if !apply {
                self.journal.push(op);
                continue;
            }
            for (dir, name, entry) in op.updates {
                let entries = self.dirs.entry(dir).or_default();
                match entry {
                    Some(e) => {
                        entries.insert(name, e);
                    }
                    None => {
                        entries.remove(&name);
                    }
                }
            }
        }
    }
}

/// Applies data operations, in order, to a durable copy.
fn apply_data<'a>(path: &Path, ops: impl Iterator<Item = &'a DataOp>) -> Result<()> {
    let mut ops = ops.peekable();
    if ops.peek().is_none() {
        return Ok(());
    }
    let f = OpenOptions::new()
        .write(true)
        .open(path)
        .ctx(|| format!("open {}", path.display()))?;
    for op in ops {
        match op {
            DataOp::Write { off, bytes } => f.write_all_at(bytes, *off),
            DataOp::SetLen(len) => f.set_len(*len),
            DataOp::Image(bytes) => f.set_len(0).and_then(|()| f.write_all_at(bytes, 0)),
        }
        .ctx(|| format!("apply to {}", path.display()))?;
    }
    Ok(())
}

/// The hidden directory inside the backing directory that holds the
/// model's durable copies and the stash of unlinked inodes; never shown
/// through the mount.
pub const STATE_DIR: &str = ".powerloss-state";

/// The entries of a directory (the state directory left out of the
/// backing root), as the model records them.
pub(crate) fn list_dir(path: &Path, is_root: bool) -> std::io::Result<BTreeMap<OsString, Entry>> {
    let mut out = BTreeMap::new();
    for e in std::fs::read_dir(path)? {
        let e = e?;
        let name = e.file_name();
        if is_root && name == STATE_DIR {
            continue;
        }
        let m = e.metadata()?;
        out.insert(
            name,
            Entry {
                ino: m.ino(),
                kind: kind_of_mode(m.mode()),
            },
        );
    }
    Ok(out)
}

/// The model's kind of a `st_mode`.
pub(crate) fn kind_of_mode(mode: u32) -> Kind {
    match mode & libc::S_IFMT {
        libc::S_IFREG => Kind::File,
        libc::S_IFDIR => Kind::Dir,
        libc::S_IFLNK => Kind::Symlink,
        _ => Kind::Other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(ino: u64) -> Option<Entry> {
        Some(Entry {
            ino,
            kind: Kind::File,
        })
    }

    #[test]
    fn a_dir_fsync_applies_earlier_changes_of_the_same_directories() {
        let tmp = tempfile::tempdir().unwrap();
        let mut m = Model::new(tmp.path()).unwrap();
        m.track_dir(1, BTreeMap::new());
        m.track_dir(2, BTreeMap::new());
        m.record(vec![(1, "x".into(), entry(10))]);
        m.record(vec![(1, "x".into(), None), (2, "y".into(), entry(10))]);
        m.record(vec![(1, "z".into(), entry(11))]);
        m.fsync_dir(2);
        assert!(m.durable_entries(1).unwrap().is_empty());
        assert_eq!(m.durable_entries(2).unwrap().len(), 1);
        // The later create in 1 is still pending.
        assert_eq!(m.pending().0, 1);
        m.cut(CutMode::DropAll).unwrap();
        assert!(m.durable_entries(1).unwrap().is_empty());
    }

    #[test]
    fn file_bytes_are_durable_only_after_fsync() {
        let tmp = tempfile::tempdir().unwrap();
        let mut m = Model::new(tmp.path()).unwrap();
        m.track_file(5, None).unwrap();
        m.write(5, 0, b"hello").unwrap();
        m.fsync_file(5).unwrap();
        m.write(5, 5, b" world").unwrap();
        m.cut(CutMode::DropAll).unwrap();
        assert_eq!(std::fs::read(m.data_path(5)).unwrap(), b"hello");
    }

    #[test]
    fn many_writes_fold_into_one_image() {
        let tmp = tempfile::tempdir().unwrap();
        let mut m = Model::new(tmp.path()).unwrap();
        m.track_file(5, None).unwrap();
        for i in 0..(FOLD_AT as u64 + 10) {
            m.write(5, i, &[b'a' + (i % 26) as u8]).unwrap();
        }
        assert!(m.pending().1 < 20);
        m.set_len(5, 3).unwrap();
        m.fsync_file(5).unwrap();
        assert_eq!(std::fs::read(m.data_path(5)).unwrap(), b"abc");
    }

    #[test]
    fn subset_cuts_differ_by_seed_and_keep_directory_order() {
        let tmp = tempfile::tempdir().unwrap();
        let mut seen = HashSet::new();
        for seed in 0..32 {
            let mut m = Model::new(&tmp.path().join(seed.to_string())).unwrap();
            m.track_dir(1, BTreeMap::new());
            m.record(vec![(1, "a".into(), entry(10))]);
            m.record(vec![(1, "a".into(), None), (1, "b".into(), entry(10))]);
            m.cut(CutMode::Subset(seed)).unwrap();
            let names: Vec<OsString> = m.durable_entries(1).unwrap().keys().cloned().collect();
            // Never the rename without the create: "b" alone is the only
            // state with the rename, and it implies the create came first.
            assert!(names.len() <= 1, "{names:?}");
            seen.insert(names);
        }
        assert_eq!(seen.len(), 3, "{seen:?}");
    }
}
