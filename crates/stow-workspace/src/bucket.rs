//! The workspace bucket view (D4): the primary bucket's objects are the
//! files under the root (key = slash path, `.stow` and `.git` excluded); a
//! PUT with a portable key writes a real file atomically. Keys that are not
//! portable paths, and every other bucket, live in a private `stow-store`
//! under `<root>/.stow/objects`.
//!
//! Files carry default properties; properties of file-backed objects are
//! not yet persisted (a later stage keeps them in `.stow`).

use std::fs;
use std::io::{Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use stow_store::{ListQuery, ObjectProps, PutOptions, Store, StoreError, StoreOptions};

use crate::error::{Result, WsError};
use crate::fsutil::random_hex;
use crate::paths::check_checkpoint_path;

/// One object as the view reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ViewObject {
    pub bucket: String,
    pub key: String,
    pub size: u64,
    /// `true` when the object is a file of the workspace tree.
    pub file: bool,
}

/// A workspace's buckets over its directory and private store.
pub struct WorkspaceBucket {
    root: PathBuf,
    primary: String,
    store: Store,
}

fn store_err(e: StoreError) -> WsError {
    match e {
        StoreError::NoSuchKey { bucket, key } => {
            WsError::NotFound(format!("object {bucket}/{key}"))
        }
        StoreError::NoSuchBucket { bucket } => WsError::NotFound(format!("bucket {bucket}")),
        StoreError::StoreLocked { dir } => {
            WsError::InProgress(format!("object store {}", dir.display()))
        }
        other => WsError::InvalidRequest(other.to_string()),
    }
}

/// The private store directory of a workspace root.
pub fn private_store_dir(root: &Path) -> PathBuf {
    root.join(".stow").join("objects")
}

impl WorkspaceBucket {
    /// Opens (creating if needed) the view of `root` with `primary` as its
    /// primary bucket. The private store is owned exclusively while open.
    pub fn open(root: &Path, primary: &str) -> Result<WorkspaceBucket> {
        let store =
            Store::open(private_store_dir(root), StoreOptions::default()).map_err(store_err)?;
        store.create_bucket(primary).map_err(store_err)?;
        Ok(WorkspaceBucket {
            root: root.to_path_buf(),
            primary: primary.to_string(),
            store,
        })
    }

    /// The primary bucket's name.
    pub fn primary(&self) -> &str {
        &self.primary
    }

    /// The underlying private store (for the S3 server later).
    pub fn store(&self) -> &Store {
        &self.store
    }

    fn file_key(&self, bucket: &str, key: &str) -> bool {
        bucket == self.primary && check_checkpoint_path(key).is_ok()
    }

    /// Creates an extra bucket (idempotent).
    pub fn create_bucket(&self, name: &str) -> Result<()> {
        self.store
            .create_bucket(name)
            .map_err(store_err)
            .map(|_| ())
    }

    /// Bucket names, sorted.
    pub fn list_buckets(&self) -> Result<Vec<String>> {
        let mut names: Vec<String> = self
            .store
            .list_buckets()
            .map_err(store_err)?
            .into_iter()
            .map(|b| b.name)
            .collect();
        names.sort();
        Ok(names)
    }

    /// Writes an object: a real file (atomically) for a portable key of the
    /// primary bucket, else a private-store object.
    pub fn put_object(
        &self,
        bucket: &str,
        key: &str,
        body: &[u8],
        props: ObjectProps,
    ) -> Result<()> {
        if self.file_key(bucket, key) {
            let path = self.root.join(key);
            let dir = path.parent().unwrap_or(&self.root).to_path_buf();
            fs::create_dir_all(&dir).map_err(|e| WsError::io_at("create directory", &dir, e))?;
            let tmp = dir.join(format!(".stow-put-{}", random_hex(8)));
            let write = || -> std::io::Result<()> {
                let mut f = fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .mode(0o644)
                    .open(&tmp)?;
                f.write_all(body)?;
                f.sync_all()?;
                fs::rename(&tmp, &path)
            };
            if let Err(e) = write() {
                let _ = fs::remove_file(&tmp);
                return Err(WsError::io_at("write object", &path, e));
            }
            // A private object of the same key would shadow nothing now.
            let _ = self.store.delete_object(bucket, key);
            return Ok(());
        }
        let opts = PutOptions {
            props,
            ..Default::default()
        };
        self.store
            .put_object(bucket, key, &mut &body[..], opts)
            .map_err(store_err)
            .map(|_| ())
    }

    /// Reads an object's bytes and properties.
    pub fn get_object(&self, bucket: &str, key: &str) -> Result<(Vec<u8>, ObjectProps)> {
        if self.file_key(bucket, key) {
            let path = self.root.join(key);
            if path.is_file() {
                let bytes = fs::read(&path).map_err(|e| WsError::io_at("read", &path, e))?;
                return Ok((bytes, ObjectProps::default()));
            }
        }
        let read = self
            .store
            .get_object(bucket, key, None)
            .map_err(store_err)?;
        let props = read.meta.props.clone();
        let mut body = read.body;
        let mut bytes = Vec::new();
        body.read_to_end(&mut bytes)
            .map_err(|e| WsError::io(format!("read object {bucket}/{key}"), e))?;
        Ok((bytes, props))
    }

    /// Deletes an object (absent is fine).
    pub fn delete_object(&self, bucket: &str, key: &str) -> Result<()> {
        if self.file_key(bucket, key) {
            let path = self.root.join(key);
            match fs::remove_file(&path) {
                Ok(()) => return Ok(()),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(WsError::io_at("delete", &path, e)),
            }
        }
        self.store
            .delete_object(bucket, key)
            .map_err(store_err)
            .map(|_| ())
    }

    /// Every object of a bucket in key byte order: files (primary only) and
    /// private-store objects.
    pub fn list_objects(&self, bucket: &str) -> Result<Vec<ViewObject>> {
        let mut out = if bucket == self.primary {
            let scan = crate::checkpoint::scan_files(&self.root)?;
            scan.into_iter()
                .map(|(key, size)| ViewObject {
                    bucket: bucket.to_string(),
                    key,
                    size,
                    file: true,
                })
                .collect()
        } else {
            Vec::new()
        };
        out.extend(self.private_objects(bucket)?);
        out.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(out)
    }

    /// Objects of a bucket held in the private store only.
    pub fn private_objects(&self, bucket: &str) -> Result<Vec<ViewObject>> {
        let mut out = Vec::new();
        let mut after: Option<String> = None;
        loop {
            let page = self
                .store
                .list_objects(
                    bucket,
                    &ListQuery {
                        prefix: String::new(),
                        delimiter: None,
                        start_after: after.clone(),
                        max_keys: 1000,
                    },
                )
                .map_err(store_err)?;
            for o in &page.objects {
                out.push(ViewObject {
                    bucket: bucket.to_string(),
                    key: o.key.clone(),
                    size: o.size,
                    file: false,
                });
            }
            after = page.objects.last().map(|o| o.key.clone());
            if !page.is_truncated || after.is_none() {
                break;
            }
        }
        Ok(out)
    }
}
