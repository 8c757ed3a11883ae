//! Object bodies: small ones inline in the database, large ones as immutable
//! blob files.
//!
//! A large body is streamed to `tmp/<id>` and fsynced *before* the
//! transaction that references it commits; after the commit it is renamed to
//! `blobs/<xx>/<id>`. A crash between the two leaves a referenced blob in
//! `tmp/`, which [`BlobStore::recover`] moves into place on the next open;
//! a blob in `tmp/` that no row references was never committed and is
//! deleted. Readers look in `blobs/`, then `tmp/`, then `blobs/` again, so a
//! rename racing with a read is never mistaken for a missing blob.

use std::collections::HashMap;
use std::fs::{self, File};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};

use rusqlite::Connection;

mod dirs;
mod reclaim;

pub(crate) use dirs::{after_commit, open_blob_dir, DEFAULT_BLOB_DIR, META_BLOB_DIR, RESET_PREFIX};
pub(crate) use reclaim::{BlobHolds, ReadPin, Reclaimer};

use crate::checksum::{BodyDigests, BodyHasher};
use crate::error::{Result, StoreError};

/// Bodies up to this size are stored inline in the database.
pub(crate) const INLINE_MAX: usize = 32 * 1024;
const CHUNK: usize = 1 << 20;

/// Identifier of a body (random positive 63-bit integer).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct BlobId(pub i64);

impl BlobId {
    pub fn random() -> Self {
        BlobId((rand::random::<u64>() >> 1) as i64 | 1)
    }
    fn file_name(self) -> String {
        format!("{:016x}", self.0)
    }
    fn shard(self) -> String {
        format!("{:02x}", self.0 & 0xff)
    }
}

type MemBody = Arc<[u8]>;

/// Where large bodies live.
pub(crate) enum BlobStore {
    Disk {
        /// The store's data directory.
        root: PathBuf,
        /// The blob directory the database names (`blobs`, or the
        /// `blobs-<hex>` a reset switched to; see `dirs`).
        blobs: RwLock<Arc<Path>>,
        tmp: PathBuf,
    },
    Memory {
        staged: Mutex<HashMap<BlobId, MemBody>>,
        live: RwLock<HashMap<BlobId, MemBody>>,
    },
}

/// Fsyncs a directory, so a create, rename or unlink inside it survives a
/// crash (ARCHITECTURE.md, "Assumptions about the filesystem"): the one
/// directory flush every crate uses.
pub fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// A body that has been received and hashed but not yet committed. Dropping
/// it without [`Staged::keep`] deletes the staged blob.
pub(crate) struct Staged {
    pub id: BlobId,
    /// `Some` for bodies stored inline.
    pub inline: Option<Vec<u8>>,
    pub digests: BodyDigests,
    /// Bytes kept (the blob row's size): the body's size, or for a sealed
    /// body (SSE-C) its sealed size.
    pub stored: u64,
    /// The opaque digest a sealed body's ETag stands for (SSE-C; see
    /// `CustomerKey::etag_digest`), in place of the plaintext's MD5.
    pub opaque_etag: Option<[u8; 16]>,
    store: Arc<BlobStore>,
    armed: bool,
}

impl Staged {
    /// The digest the body's ETag stands for: the MD5 of the bytes
    /// received, or for a sealed body an opaque one (an ETag never reveals
    /// a digest of a customer-encrypted plaintext).
    pub fn etag_md5(&self) -> [u8; 16] {
        self.opaque_etag.unwrap_or(self.digests.md5)
    }

    /// The commit referencing this body succeeded: keep it.
    pub fn keep(mut self) {
        self.armed = false;
    }
}

impl Staged {
    /// Moves the received body to `path` as a durable file with permission
    /// bits `mode`, replacing whatever is there atomically. A large body's
    /// staged file is renamed (no bytes copied); a small one is written to a
    /// staged file first, so `path` never holds a partial body.
    pub fn persist_as(mut self, path: &Path, mode: u32) -> io::Result<()> {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = path
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        let staged_path = match &*self.store {
            BlobStore::Disk { tmp, .. } => tmp.join(self.id.file_name()),
            BlobStore::Memory { .. } => dir.join(format!(".stow-put-{}", self.id.file_name())),
        };
        let body = match (&self.inline, &*self.store) {
            (Some(bytes), _) => Some(bytes.clone()),
            (None, BlobStore::Memory { staged, .. }) => {
                lock(staged).get(&self.id).map(|b| b.to_vec())
            }
            (None, BlobStore::Disk { .. }) => None,
        };
        let result = (|| {
            if let Some(bytes) = body {
                let mut f = File::create_new(&staged_path)?;
                f.write_all(&bytes)?;
                f.sync_all()?;
            }
            fs::set_permissions(&staged_path, fs::Permissions::from_mode(mode))?;
            match fs::rename(&staged_path, path) {
                Err(e) if e.raw_os_error() == Some(libc::EXDEV) => {
                    // The store lives on another filesystem: copy beside the
                    // target, then rename there.
                    let beside = dir.join(format!(".stow-put-{}", self.id.file_name()));
                    let copied = fs::copy(&staged_path, &beside)
                        .and_then(|_| File::open(&beside)?.sync_all())
                        .and_then(|()| fs::rename(&beside, path));
                    if copied.is_err() {
                        let _ = fs::remove_file(&beside);
                    }
                    copied?;
                    let _ = fs::remove_file(&staged_path);
                }
                other => other?,
            }
            sync_dir(dir)
        })();
        if result.is_err() {
            let _ = fs::remove_file(&staged_path);
        }
        self.store.discard(self.id);
        self.armed = false;
        result
    }
}

impl Drop for Staged {
    fn drop(&mut self) {
        if self.armed && self.inline.is_none() {
            self.store.discard(self.id);
        }
    }
}

impl BlobStore {
    /// A disk store under `dir`, creating its staging folder. The blob
    /// directory is `blobs` until [`BlobStore::use_dir`] names the one the
    /// database records (made then).
    pub fn disk(dir: &Path) -> Result<Self> {
        let tmp = dir.join("tmp");
        fs::create_dir_all(&tmp)?;
        // Shard directories are made on first use: making all 256 up front
        // costs a fresh store tens of milliseconds before it can answer.
        Ok(Self::Disk {
            root: dir.to_path_buf(),
            blobs: RwLock::new(Arc::from(dir.join(DEFAULT_BLOB_DIR))),
            tmp,
        })
    }

    /// The data directory of a disk store.
    pub fn root(&self) -> Option<&Path> {
        match self {
            BlobStore::Disk { root, .. } => Some(root),
            BlobStore::Memory { .. } => None,
        }
    }

    /// Makes `name` (inside the data directory) the blob directory from now
    /// on and returns the one it replaces (see [`BlobStore::create_current`]).
    /// A memory store forgets every committed body instead.
    pub fn use_dir(&self, name: &str) -> Option<Arc<Path>> {
        match self {
            BlobStore::Disk { root, blobs, .. } => {
                let dir: Arc<Path> = Arc::from(root.join(name));
                Some(std::mem::replace(&mut *write_lock(blobs), dir))
            }
            BlobStore::Memory { live, .. } => {
                write_lock(live).clear();
                None
            }
        }
    }

    /// Creates the current blob directory durably if it is missing.
    pub fn create_current(&self) -> io::Result<()> {
        let BlobStore::Disk { root, blobs, .. } = self else {
            return Ok(());
        };
        let dir = Self::blob_dir(blobs);
        if !dir.is_dir() {
            fs::create_dir_all(&dir)?;
            sync_dir(root)?;
        }
        Ok(())
    }

    fn blob_dir(blobs: &RwLock<Arc<Path>>) -> Arc<Path> {
        Arc::clone(&read_lock(blobs))
    }

    pub fn memory() -> Self {
        Self::Memory {
            staged: Mutex::new(HashMap::new()),
            live: RwLock::new(HashMap::new()),
        }
    }

    fn final_path(blobs: &Path, id: BlobId) -> PathBuf {
        blobs.join(id.shard()).join(id.file_name())
    }

    /// Receives a body from `reader`, hashing it on the way. Small bodies stay
    /// in memory for inline storage; large ones are written to a durable
    /// staged blob.
    pub fn stage(
        self: &Arc<Self>,
        reader: &mut dyn Read,
        mut hasher: BodyHasher,
    ) -> Result<Staged> {
        let id = BlobId::random();
        let mut head = Vec::with_capacity(8 * 1024);
        let n = reader.take(INLINE_MAX as u64 + 1).read_to_end(&mut head)?;
        hasher.update(&head);
        if n <= INLINE_MAX {
            return Ok(Staged {
                id,
                stored: head.len() as u64,
                opaque_etag: None,
                inline: Some(head),
                digests: hasher.finish(),
                store: Arc::clone(self),
                armed: true,
            });
        }
        let mut staged = Staged {
            id,
            inline: None,
            stored: 0,
            opaque_etag: None,
            digests: BodyHasher::new(&[], false).finish(),
            store: Arc::clone(self),
            armed: true,
        };
        match &**self {
            BlobStore::Disk { tmp, .. } => {
                let path = tmp.join(id.file_name());
                let file = File::create_new(&path)?;
                write_hashing(file, head, reader, &mut hasher)?;
                // Orders the staged file's name before the commit that
                // references it: after a power loss the row's blob is in
                // `tmp/` (or, once published, in `blobs/`), never nowhere.
                if !crate::fault::skipped("store-skip-stage-dir-fsync") {
                    sync_dir(tmp)?;
                }
            }
            BlobStore::Memory { staged: map, .. } => {
                let mut body = head;
                let mut buf = vec![0u8; CHUNK];
                loop {
                    let got = read_full(reader, &mut buf)?;
                    if got == 0 {
                        break;
                    }
                    hasher.update(&buf[..got]);
                    body.extend_from_slice(&buf[..got]);
                }
                lock(map).insert(id, Arc::from(body));
            }
        }
        staged.digests = hasher.finish();
        staged.stored = staged.digests.size;
        Ok(staged)
    }

    /// Moves a committed staged blob into place. Failure is logged, not
    /// returned: the blob stays readable from `tmp/` and the next open
    /// finishes the move.
    pub fn publish(&self, id: BlobId) {
        match self {
            BlobStore::Disk { blobs, tmp, .. } => {
                let blobs = Self::blob_dir(blobs);
                let blobs = &*blobs;
                let from = tmp.join(id.file_name());
                let to = Self::final_path(blobs, id);
                let mut moved = fs::rename(&from, &to);
                if matches!(&moved, Err(e) if e.kind() == io::ErrorKind::NotFound) && from.exists()
                {
                    // The shard directory does not exist yet. Its name is
                    // fsynced into the blob directory before the move: the
                    // move itself becomes durable with the next fsync of
                    // `tmp/` (another body's staging), and without this a
                    // power loss could then leave the blob in neither
                    // directory (found by the power-loss harness).
                    moved = fs::create_dir_all(blobs.join(id.shard()))
                        .and_then(|()| sync_dir(blobs))
                        .and_then(|()| fs::rename(&from, &to));
                }
                if let Err(e) = moved {
                    if e.kind() != io::ErrorKind::NotFound {
                        tracing::warn!("cannot move blob {} into place: {e}", id.file_name());
                    }
                }
            }
            BlobStore::Memory { staged, live } => {
                if let Some(body) = lock(staged).remove(&id) {
                    write_lock(live).insert(id, body);
                }
            }
        }
    }

    /// Deletes a blob no committed row references.
    pub fn remove(&self, id: BlobId) {
        match self {
            BlobStore::Disk { blobs, tmp, .. } => {
                let blobs = Self::blob_dir(blobs);
                for path in [Self::final_path(&blobs, id), tmp.join(id.file_name())] {
                    if let Err(e) = fs::remove_file(&path) {
                        if e.kind() != io::ErrorKind::NotFound {
                            tracing::warn!("cannot delete blob {}: {e}", path.display());
                        }
                    }
                }
            }
            BlobStore::Memory { staged, live } => {
                write_lock(live).remove(&id);
                lock(staged).remove(&id);
            }
        }
    }

    /// Makes the deletion of these blobs' files durable. Their `dead_blobs`
    /// rows are dropped by the next transaction; without this, a power loss
    /// could bring a file back after its row is gone, leaving it unreferenced.
    pub fn sync_removed(&self, ids: &[BlobId]) {
        let BlobStore::Disk { blobs, tmp, .. } = self else {
            return;
        };
        let blobs = Self::blob_dir(blobs);
        let mut shards: Vec<String> = ids.iter().map(|id| id.shard()).collect();
        shards.sort_unstable();
        shards.dedup();
        let dirs = shards
            .iter()
            .map(|s| blobs.join(s))
            .chain(std::iter::once(tmp.clone()));
        for dir in dirs {
            match sync_dir(&dir) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => tracing::warn!("cannot sync {}: {e}", dir.display()),
            }
        }
    }

    fn discard(&self, id: BlobId) {
        match self {
            BlobStore::Disk { tmp, .. } => {
                let _ = fs::remove_file(tmp.join(id.file_name()));
            }
            BlobStore::Memory { staged, .. } => {
                lock(staged).remove(&id);
            }
        }
    }

    /// Opens a committed blob for reading.
    pub fn open(&self, id: BlobId) -> Result<BlobReader> {
        match self {
            BlobStore::Disk { blobs, tmp, .. } => {
                let fin = Self::final_path(&Self::blob_dir(blobs), id);
                let candidates = [fin.clone(), tmp.join(id.file_name()), fin];
                for path in &candidates {
                    match File::open(path) {
                        Ok(f) => return Ok(BlobReader::File(f)),
                        Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                        Err(e) => return Err(e.into()),
                    }
                }
                Err(StoreError::Corrupt(format!(
                    "blob {} is missing",
                    id.file_name()
                )))
            }
            BlobStore::Memory { staged, live } => {
                if let Some(b) = read_lock(live).get(&id) {
                    return Ok(BlobReader::Memory(io::Cursor::new(Arc::clone(b))));
                }
                if let Some(b) = lock(staged).get(&id) {
                    return Ok(BlobReader::Memory(io::Cursor::new(Arc::clone(b))));
                }
                Err(StoreError::Corrupt(format!("blob {} is missing", id.0)))
            }
        }
    }

    /// Size of a committed file blob, for integrity checks.
    pub fn len_of(&self, id: BlobId) -> Result<u64> {
        match self.open(id)? {
            BlobReader::File(f) => Ok(f.metadata()?.len()),
            BlobReader::Memory(c) => Ok(c.get_ref().len() as u64),
        }
    }

    /// Finishes what a crash interrupted: moves committed staged blobs into
    /// place, deletes uncommitted ones, and deletes blobs whose last
    /// reference was dropped. Runs at open, before any other access.
    pub fn recover(&self, conn: &Connection) -> Result<()> {
        let BlobStore::Disk { tmp, .. } = self else {
            return Ok(());
        };
        let mut referenced = conn.prepare("SELECT 1 FROM blobs WHERE id = ?1 AND data IS NULL")?;
        let mut moved = 0usize;
        let mut deleted = 0usize;
        for entry in fs::read_dir(tmp)? {
            let entry = entry?;
            let name = entry.file_name();
            let id = name
                .to_str()
                .and_then(|s| i64::from_str_radix(s, 16).ok())
                .map(BlobId);
            match id {
                Some(id) if referenced.exists([id.0])? => {
                    self.publish(id);
                    moved += 1;
                }
                _ => {
                    fs::remove_file(entry.path())?;
                    deleted += 1;
                }
            }
        }
        let dead: Vec<i64> = conn
            .prepare("SELECT id FROM dead_blobs")?
            .query_map([], |r| r.get(0))?
            .collect::<rusqlite::Result<_>>()?;
        let dead_ids: Vec<BlobId> = dead.iter().copied().map(BlobId).collect();
        for id in &dead_ids {
            self.remove(*id);
        }
        self.sync_removed(&dead_ids);
        conn.execute("DELETE FROM dead_blobs", [])?;
        if moved + deleted + dead.len() > 0 {
            tracing::info!(
                moved,
                deleted,
                dead = dead.len(),
                "recovered blobs left by an interrupted run"
            );
        }
        Ok(())
    }

    /// Ids of every blob file present (disk), for integrity checks.
    pub fn list_files(&self) -> Result<Vec<BlobId>> {
        let mut out = Vec::new();
        match self {
            BlobStore::Disk { blobs, tmp, .. } => {
                let blobs = Self::blob_dir(blobs);
                for shard in fs::read_dir(&*blobs)? {
                    for entry in fs::read_dir(shard?.path())? {
                        let name = entry?.file_name();
                        let id = name.to_str().and_then(|s| i64::from_str_radix(s, 16).ok());
                        out.push(id.map(BlobId).ok_or_else(|| {
                            StoreError::Corrupt(format!("stray file {name:?} among blobs"))
                        })?);
                    }
                }
                for entry in fs::read_dir(tmp)? {
                    let name = entry?.file_name();
                    let id = name.to_str().and_then(|s| i64::from_str_radix(s, 16).ok());
                    out.push(id.map(BlobId).ok_or_else(|| {
                        StoreError::Corrupt(format!("stray file {name:?} in tmp"))
                    })?);
                }
            }
            BlobStore::Memory { live, staged } => {
                out.extend(read_lock(live).keys().copied());
                out.extend(lock(staged).keys().copied());
            }
        }
        Ok(out)
    }
}

/// An open committed blob.
pub(crate) enum BlobReader {
    File(File),
    Memory(io::Cursor<MemBody>),
}

impl Read for BlobReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            BlobReader::File(f) => f.read(buf),
            BlobReader::Memory(c) => c.read(buf),
        }
    }
}

impl Seek for BlobReader {
    fn seek(&mut self, pos: SeekFrom) -> io::Result<u64> {
        match self {
            BlobReader::File(f) => f.seek(pos),
            BlobReader::Memory(c) => c.seek(pos),
        }
    }
}

/// Streams `head` and the rest of `reader` into `file` and fsyncs it,
/// hashing on this thread while a second thread writes: the digest (MD5 for
/// the ETag) and the disk work overlap instead of adding up.
fn write_hashing(
    mut file: File,
    head: Vec<u8>,
    reader: &mut dyn Read,
    hasher: &mut BodyHasher,
) -> io::Result<()> {
    std::thread::scope(|scope| {
        let (tx, rx) = std::sync::mpsc::sync_channel::<Arc<Vec<u8>>>(4);
        let writer = scope.spawn(move || -> io::Result<()> {
            let (mut written, mut flushed) = (0u64, 0u64);
            for chunk in rx {
                file.write_all(&chunk)?;
                written += chunk.len() as u64;
                if written - flushed >= 8 * CHUNK as u64 {
                    start_writeback(&file, flushed, written - flushed);
                    flushed = written;
                }
            }
            file.sync_all()
        });
        // `head` is already hashed by the caller.
        let feed = || -> io::Result<()> {
            if tx.send(Arc::new(head)).is_err() {
                return Ok(());
            }
            loop {
                let mut buf = vec![0u8; CHUNK];
                let got = read_full(reader, &mut buf)?;
                if got == 0 {
                    return Ok(());
                }
                buf.truncate(got);
                let chunk = Arc::new(buf);
                // The writer gets the chunk first; hashing it here overlaps
                // with the write. A closed channel means the writer failed.
                if tx.send(Arc::clone(&chunk)).is_err() {
                    return Ok(());
                }
                hasher.update(&chunk);
            }
        };
        let fed = feed();
        drop(tx);
        let wrote = writer
            .join()
            .unwrap_or_else(|_| Err(io::Error::other("blob writer thread panicked")));
        fed.and(wrote)
    })
}

/// Reads until `buf` is full or the reader ends.
fn read_full(reader: &mut dyn Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match reader.read(&mut buf[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    }
    Ok(filled)
}

/// Starts writeback of a written range so the closing fsync has little left
/// to do; the disk works while the next chunks are hashed.
#[cfg(target_os = "linux")]
fn start_writeback(file: &File, offset: u64, len: u64) {
    use std::os::fd::AsRawFd;
    // SAFETY: sync_file_range only reads its integer arguments; the fd is
    // owned by `file` and open for the duration of the call.
    unsafe {
        libc::sync_file_range(
            file.as_raw_fd(),
            offset as libc::off64_t,
            len as libc::off64_t,
            libc::SYNC_FILE_RANGE_WRITE,
        );
    }
}

#[cfg(not(target_os = "linux"))]
fn start_writeback(_file: &File, _offset: u64, _len: u64) {}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
fn read_lock<T>(m: &RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    m.read().unwrap_or_else(|e| e.into_inner())
}
fn write_lock<T>(m: &RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
    m.write().unwrap_or_else(|e| e.into_inner())
}
