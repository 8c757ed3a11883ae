//! The two sides of the store suite: stow-store, and the raw filesystem
//! doing the same work directly (one file per object).

use std::cell::RefCell;
use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use stow_store::{CopyOptions, ListQuery, PutOptions, SaveGuard, SaveRequest, Store, StoreOptions};

use crate::harness::{context, Result};

/// Size of the I/O buffer both sides stream bodies through (the store's
/// own chunk is 1 MiB too).
const BUF: usize = 1 << 20;

thread_local! {
    static BUFFER: RefCell<Vec<u8>> = RefCell::new(vec![0u8; BUF]);
}

/// Runs `f` with this thread's 1 MiB I/O buffer.
pub fn with_buffer<T>(f: impl FnOnce(&mut [u8]) -> T) -> T {
    BUFFER.with(|b| f(&mut b.borrow_mut()))
}

/// Reads `r` to its end through `buf`, returning the byte count.
pub fn drain(r: &mut dyn Read, buf: &mut [u8]) -> io::Result<u64> {
    let mut total = 0u64;
    loop {
        match r.read(buf) {
            Ok(0) => return Ok(total),
            Ok(n) => total += n as u64,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

/// The operations the store suite asks of each side.
pub trait Peer: Sync {
    fn name(&self) -> &'static str;
    fn create_bucket(&self, bucket: &str) -> Result<()>;
    /// A durable put: returns once the object survives a crash.
    fn put(&self, bucket: &str, key: &str, body: &mut dyn Read) -> Result<()>;
    /// A keyed, replace-guarded durable save. The raw filesystem has no
    /// such thing and does a put.
    fn save(&self, bucket: &str, key: &str, request_key: &str, body: &mut dyn Read) -> Result<()>;
    /// Reads a whole object through `buf`; returns its length.
    fn get(&self, bucket: &str, key: &str, buf: &mut [u8]) -> Result<u64>;
    /// One page of up to `max` keys after `start_after`, with sizes;
    /// returns the number of keys.
    fn list_page(&self, bucket: &str, start_after: &str, max: usize) -> Result<usize>;
    /// A durable copy within a bucket.
    fn copy(&self, bucket: &str, src: &str, dst: &str) -> Result<()>;
}

/// stow-store on disk.
pub struct Stow {
    pub store: Store,
}

impl Stow {
    /// Opens a disk store in `dir` with receipt limits high enough that a
    /// benchmark's keyed saves never fill the journal (the default keeps
    /// 1,024 receipts).
    pub fn open(dir: &Path) -> Result<Stow> {
        let opts = StoreOptions {
            max_receipts: 1 << 40,
            max_receipt_bytes: 1 << 50,
            ..StoreOptions::default()
        };
        let store =
            Store::open(dir, opts).map_err(context(format!("open store {}", dir.display())))?;
        Ok(Stow { store })
    }
}

impl Peer for Stow {
    fn name(&self) -> &'static str {
        "stow-store"
    }

    fn create_bucket(&self, bucket: &str) -> Result<()> {
        self.store.create_bucket(bucket)?;
        Ok(())
    }

    fn put(&self, bucket: &str, key: &str, body: &mut dyn Read) -> Result<()> {
        self.store
            .put_object(bucket, key, body, PutOptions::default())
            .map_err(context(format!("put {bucket}/{key}")))?;
        Ok(())
    }

    fn save(&self, bucket: &str, key: &str, request_key: &str, body: &mut dyn Read) -> Result<()> {
        let req = SaveRequest {
            bucket: bucket.to_string(),
            key: key.to_string(),
            props: Default::default(),
            checksum_algorithm: None,
            guard: SaveGuard::Replace,
            request_key: Some(request_key.to_string()),
        };
        let saved = self
            .store
            .save(req, body)
            .map_err(context(format!("save {bucket}/{key}")))?;
        if saved.replayed {
            return Err(format!("save {bucket}/{key} was replayed, not written").into());
        }
        Ok(())
    }

    fn get(&self, bucket: &str, key: &str, buf: &mut [u8]) -> Result<u64> {
        let mut read = self
            .store
            .get_object(bucket, key, None)
            .map_err(context(format!("get {bucket}/{key}")))?;
        drain(&mut read.body, buf).map_err(context(format!("read {bucket}/{key}")))
    }

    fn list_page(&self, bucket: &str, start_after: &str, max: usize) -> Result<usize> {
        let q = ListQuery {
            start_after: Some(start_after.to_string()),
            max_keys: max,
            ..ListQuery::default()
        };
        let page = self
            .store
            .list_objects(bucket, &q)
            .map_err(context(format!("list {bucket}")))?;
        let bytes: u64 = page.objects.iter().map(|o| o.size).sum();
        std::hint::black_box(bytes);
        Ok(page.objects.len())
    }

    fn copy(&self, bucket: &str, src: &str, dst: &str) -> Result<()> {
        self.store
            .copy_object(bucket, src, bucket, dst, CopyOptions::default())
            .map_err(context(format!("copy {bucket}/{src} to {dst}")))?;
        Ok(())
    }
}

/// The raw filesystem: a directory per bucket, a file per object, written
/// the way a careful program writes a file durably: to a temporary file,
/// fsync, rename into place, fsync the directory.
pub struct RawFs {
    root: PathBuf,
    seq: AtomicU64,
}

impl RawFs {
    pub fn new(root: PathBuf) -> Result<RawFs> {
        fs::create_dir_all(&root).map_err(context(format!("create {}", root.display())))?;
        Ok(RawFs {
            root,
            seq: AtomicU64::new(0),
        })
    }

    fn temp(&self, dir: &Path) -> PathBuf {
        dir.join(format!(".tmp-{}", self.seq.fetch_add(1, Ordering::Relaxed)))
    }

    /// Moves a written, fsynced temporary file into place and makes the
    /// rename durable.
    fn publish(dir: &Path, tmp: &Path, path: &Path) -> io::Result<()> {
        fs::rename(tmp, path)?;
        File::open(dir)?.sync_all()
    }
}

impl Peer for RawFs {
    fn name(&self) -> &'static str {
        "raw-fs"
    }

    fn create_bucket(&self, bucket: &str) -> Result<()> {
        let dir = self.root.join(bucket);
        fs::create_dir_all(&dir).map_err(context(format!("create {}", dir.display())))?;
        File::open(&self.root)
            .and_then(|d| d.sync_all())
            .map_err(context(format!("fsync {}", self.root.display())))?;
        Ok(())
    }

    fn put(&self, bucket: &str, key: &str, body: &mut dyn Read) -> Result<()> {
        let dir = self.root.join(bucket);
        let tmp = self.temp(&dir);
        let path = dir.join(key);
        let written = with_buffer(|buf| -> io::Result<()> {
            let mut f = File::create_new(&tmp)?;
            loop {
                let n = match body.read(buf) {
                    Ok(0) => break,
                    Ok(n) => n,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(e) => return Err(e),
                };
                f.write_all(&buf[..n])?;
            }
            f.sync_all()
        });
        written
            .and_then(|()| Self::publish(&dir, &tmp, &path))
            .map_err(|e| {
                let _ = fs::remove_file(&tmp);
                format!("put {}: {e}", path.display()).into()
            })
    }

    fn save(&self, bucket: &str, key: &str, _request_key: &str, body: &mut dyn Read) -> Result<()> {
        self.put(bucket, key, body)
    }

    fn get(&self, bucket: &str, key: &str, buf: &mut [u8]) -> Result<u64> {
        let path = self.root.join(bucket).join(key);
        File::open(&path)
            .and_then(|mut f| drain(&mut f, buf))
            .map_err(context(format!("get {}", path.display())))
    }

    fn list_page(&self, bucket: &str, start_after: &str, max: usize) -> Result<usize> {
        let dir = self.root.join(bucket);
        let mut names = Vec::new();
        for entry in fs::read_dir(&dir).map_err(context(format!("list {}", dir.display())))? {
            let entry = entry.map_err(context(format!("list {}", dir.display())))?;
            if let Ok(name) = entry.file_name().into_string() {
                names.push(name);
            }
        }
        names.sort_unstable();
        let from = names.partition_point(|n| n.as_str() <= start_after);
        let page = &names[from..names.len().min(from + max)];
        // A listing carries sizes: stat each listed file.
        let mut bytes = 0u64;
        for name in page {
            let path = dir.join(name);
            bytes += fs::symlink_metadata(&path)
                .map_err(context(format!("stat {}", path.display())))?
                .len();
        }
        std::hint::black_box(bytes);
        Ok(page.len())
    }

    fn copy(&self, bucket: &str, src: &str, dst: &str) -> Result<()> {
        let dir = self.root.join(bucket);
        let tmp = self.temp(&dir);
        let (from, to) = (dir.join(src), dir.join(dst));
        fs::copy(&from, &tmp)
            .and_then(|_| File::open(&tmp)?.sync_all())
            .and_then(|()| Self::publish(&dir, &tmp, &to))
            .map_err(|e| {
                let _ = fs::remove_file(&tmp);
                format!("copy {} to {}: {e}", from.display(), to.display()).into()
            })
    }
}
