//! The files of a workspace view: what stands at a file key's path, found
//! without following symbolic links (a link could point outside the root);
//! installing a file atomically and durably; walking the tree.

use std::fs::{self, File};
use std::io;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use stow_store::{ObjectMeta, StoreError};

use super::props::{Stamp, StampedProps};
use super::{StoreResult, WorkspaceBucket};
use crate::paths::check_checkpoint_path;

/// What a file key's path holds.
pub(super) enum AtPath {
    /// Nothing yet: a file can be written there.
    Free,
    /// A regular file.
    File(PathBuf, fs::Metadata),
    /// A directory or special file at the key, or a file where a parent
    /// directory would be.
    Blocked,
    /// A symbolic link at the key or where a parent directory would be:
    /// never followed, and writes through it are refused.
    Link,
}

pub(super) use stow_store::sync_dir;

/// Whether an error says the path (or a parent) is not there.
pub(super) fn is_missing(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::NotFound | io::ErrorKind::NotADirectory
    )
}

impl WorkspaceBucket {
    /// The size of the regular file at a file key, if there is one.
    pub(super) fn file_size(&self, key: &str) -> StoreResult<Option<u64>> {
        Ok(self.regular_file(key)?.map(|(_, m)| m.len()))
    }

    /// Whether `bucket/key` names a file of the tree (if the path is free).
    pub(super) fn file_key(&self, bucket: &str, key: &str) -> bool {
        bucket == self.primary && check_checkpoint_path(key).is_ok()
    }

    /// What stands at a file key's path, found by walking it without
    /// following symbolic links (a link could point outside the root).
    pub(super) fn lookup(&self, key: &str) -> StoreResult<AtPath> {
        let mut path = self.root.clone();
        let segments: Vec<&str> = key.split('/').collect();
        for (i, seg) in segments.iter().enumerate() {
            path.push(seg);
            let meta = match fs::symlink_metadata(&path) {
                Ok(m) => m,
                Err(e) if is_missing(&e) => return Ok(AtPath::Free),
                Err(e) => return Err(e.into()),
            };
            let last = i + 1 == segments.len();
            if meta.file_type().is_symlink() {
                return Ok(AtPath::Link);
            }
            if last && meta.is_file() {
                return Ok(AtPath::File(path, meta));
            }
            if last || !meta.is_dir() {
                return Ok(AtPath::Blocked);
            }
        }
        Ok(AtPath::Free)
    }

    /// The regular file a file key names, if there is one.
    pub(super) fn regular_file(&self, key: &str) -> StoreResult<Option<(PathBuf, fs::Metadata)>> {
        Ok(match self.lookup(key)? {
            AtPath::File(path, meta) => Some((path, meta)),
            AtPath::Free | AtPath::Blocked | AtPath::Link => None,
        })
    }

    /// Whether a write of `bucket/key` goes to a file (else to the private
    /// store). A file key whose path runs through a symbolic link is
    /// refused: the write would land wherever the link points.
    pub(super) fn writes_file(&self, bucket: &str, key: &str) -> StoreResult<bool> {
        if !self.file_key(bucket, key) {
            return Ok(false);
        }
        match self.lookup(key)? {
            AtPath::Link => Err(StoreError::InvalidKey {
                reason: "the key's path goes through a symbolic link in the workspace",
            }),
            AtPath::Blocked => Ok(false),
            AtPath::Free | AtPath::File(..) => Ok(true),
        }
    }

    pub(super) fn open_file(&self, key: &str) -> StoreResult<Option<(File, fs::Metadata)>> {
        let Some((path, _)) = self.regular_file(key)? else {
            return Ok(None);
        };
        let file = match fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&path)
        {
            Ok(f) => f,
            Err(e) if is_missing(&e) => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        let meta = file.metadata()?;
        if !meta.is_file() {
            return Ok(None);
        }
        Ok(Some((file, meta)))
    }

    /// Creates the missing directories above `path`, each made durable in
    /// its parent.
    pub(super) fn create_parents(&self, path: &Path) -> StoreResult<()> {
        let Some(dir) = path.parent() else {
            return Ok(());
        };
        let mut missing = Vec::new();
        let mut at = dir;
        while at != self.root && !at.is_dir() {
            missing.push(at.to_path_buf());
            match at.parent() {
                Some(p) => at = p,
                None => break,
            }
        }
        for d in missing.iter().rev() {
            match fs::create_dir(d) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(e.into()),
            }
            if let Some(parent) = d.parent() {
                sync_dir(parent)?;
            }
        }
        Ok(())
    }

    /// Puts a file in place with `write` (which must replace `path`
    /// atomically and durably), then records its properties. The caller
    /// holds the write lock.
    pub(super) fn install(
        &self,
        key: &str,
        props: StampedProps,
        write: impl FnOnce(&Path, u32) -> StoreResult<()>,
    ) -> StoreResult<ObjectMeta> {
        let path = self.root.join(key);
        let mode = fs::symlink_metadata(&path)
            .ok()
            .filter(fs::Metadata::is_file)
            .map_or(0o644, |m| m.mode() & 0o7777);
        self.create_parents(&path)?;
        write(&path, mode)?;
        let m = fs::symlink_metadata(&path)?;
        self.props.save(key, Stamp::of(&m), &props)?;
        // A private object of this key (from a time the path was blocked)
        // would be shadowed by the file; drop it.
        self.store.delete_object(&self.primary, key)?;
        Ok(self.meta_from(key, &m, props))
    }

    /// Drops the primary bucket's private objects that a file of the same
    /// key shadows, returning how many. Such an object is never listed or
    /// read (the file wins) yet counts in usage: [`WorkspaceBucket::install`]
    /// drops it as it puts the file in place, but a crash in between, or a
    /// multipart completion by an older version (which joined the parts
    /// into a private object before moving it into the file), can leave
    /// one behind. Run at open, when nothing else uses the view.
    pub(super) fn drop_shadowed_objects(&self) -> StoreResult<u64> {
        let mut dropped = 0;
        for o in self.private_summaries(&self.primary)? {
            if !self.file_key(&self.primary, &o.key) || self.regular_file(&o.key)?.is_none() {
                continue;
            }
            if self.store.delete_object(&self.primary, &o.key)? {
                dropped += 1;
            }
        }
        Ok(dropped)
    }

    /// Removes now-empty directories from `dir` up to (not including) the root.
    pub(super) fn prune_empty_dirs(&self, mut dir: &Path) {
        while dir != self.root && dir.starts_with(&self.root) {
            if fs::remove_dir(dir).is_err() {
                return;
            }
            match dir.parent() {
                Some(p) => {
                    let _ = sync_dir(p);
                    dir = p;
                }
                None => return,
            }
        }
    }

    /// Every file of the tree under `base` (a slash path, "" for the root)
    /// whose path is a portable key, with its metadata.
    pub(super) fn walk_files(&self, base: &str) -> StoreResult<Vec<(String, fs::Metadata)>> {
        let mut out = Vec::new();
        let start = if base.is_empty() {
            self.root.clone()
        } else {
            self.root.join(base)
        };
        let mut stack = vec![(start, base.to_string())];
        while let Some((dir, rel)) = stack.pop() {
            let entries = match fs::read_dir(&dir) {
                Ok(e) => e,
                Err(e) if is_missing(&e) => continue,
                Err(e) => return Err(e.into()),
            };
            for entry in entries {
                let entry = entry?;
                let Ok(name) = entry.file_name().into_string() else {
                    continue;
                };
                let key = if rel.is_empty() {
                    name
                } else {
                    format!("{rel}/{name}")
                };
                if check_checkpoint_path(&key).is_err() {
                    continue;
                }
                let meta = match entry.metadata() {
                    Ok(m) => m,
                    Err(e) if is_missing(&e) => continue,
                    Err(e) => return Err(e.into()),
                };
                if meta.is_dir() {
                    stack.push((entry.path(), key));
                } else if meta.is_file() {
                    out.push((key, meta));
                }
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use std::fs;
    use std::os::unix::fs::{symlink, PermissionsExt};

    use stow_store::{ObjectBackend, PutOptions, StoreError};

    use super::super::props::{Stamp, StampedProps};
    use super::super::scratch_view;
    use super::AtPath;

    fn kind(at: AtPath) -> &'static str {
        match at {
            AtPath::Free => "free",
            AtPath::File(..) => "file",
            AtPath::Blocked => "blocked",
            AtPath::Link => "link",
        }
    }

    #[test]
    fn lookup_never_goes_through_a_symbolic_link() {
        let (tmp, view) = scratch_view(None);
        let outside = tempfile::tempdir().unwrap();
        let root = tmp.path();
        fs::create_dir(root.join("real")).unwrap();
        fs::write(root.join("real/f.txt"), b"f").unwrap();
        symlink(root.join("real"), root.join("link")).unwrap();
        symlink(root.join("real/f.txt"), root.join("lf.txt")).unwrap();
        symlink(outside.path(), root.join("out")).unwrap();

        let at = |key: &str| kind(view.lookup(key).unwrap());
        assert_eq!(at("real/f.txt"), "file");
        assert_eq!(at("real/g.txt"), "free");
        assert_eq!(at("new/deeper/g.txt"), "free");
        assert_eq!(at("real"), "blocked");
        assert_eq!(at("real/f.txt/under"), "blocked");
        assert_eq!(at("link/f.txt"), "link");
        assert_eq!(at("lf.txt"), "link");
        assert_eq!(at("out/new.txt"), "link");
        assert!(view.regular_file("link/f.txt").unwrap().is_none());
        assert!(view.open_file("lf.txt").unwrap().is_none());

        // A write through a link is refused and lands nowhere.
        for key in ["out/new.txt", "link/new.txt", "lf.txt"] {
            let err = view.writes_file("wsb", key).unwrap_err();
            assert!(matches!(err, StoreError::InvalidKey { .. }), "{key}: {err}");
            let put = ObjectBackend::put_object(
                &view,
                "wsb",
                key,
                &mut &b"evil"[..],
                PutOptions::default(),
            );
            assert_eq!(put.unwrap_err().code(), "invalid_key", "{key}");
        }
        assert_eq!(fs::read_dir(outside.path()).unwrap().count(), 0);
        assert!(!root.join("real/new.txt").exists());
        assert_eq!(fs::read(root.join("real/f.txt")).unwrap(), b"f");
        // A blocked path goes to the private store; other buckets never
        // name files.
        assert!(!view.writes_file("wsb", "real").unwrap());
        assert!(!view.writes_file("other", "real/g.txt").unwrap());
        assert!(view.writes_file("wsb", "real/g.txt").unwrap());
    }

    #[test]
    fn install_replaces_the_file_keeping_its_mode_and_drops_a_shadowed_object() {
        let (tmp, view) = scratch_view(None);
        let path = tmp.path().join("d/f.txt");
        fs::create_dir(tmp.path().join("d")).unwrap();
        fs::write(&path, b"old").unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(0o600)).unwrap();
        // A private object of the same key, shadowed by the file.
        view.store
            .put_object("wsb", "d/f.txt", &mut &b"stale"[..], PutOptions::default())
            .unwrap();

        let received = view
            .store
            .receive(&mut &b"new bytes"[..], PutOptions::default())
            .unwrap();
        let props = StampedProps {
            etag: received.etag.clone(),
            ..StampedProps::default()
        };
        let meta = view
            .install("d/f.txt", props, |p, mode| received.persist_as(p, mode))
            .unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"new bytes");
        let m = fs::metadata(&path).unwrap();
        assert_eq!(m.permissions().mode() & 0o7777, 0o600);
        assert_eq!(meta.size, 9);
        let saved = view.props.load("d/f.txt", Stamp::of(&m)).unwrap().unwrap();
        assert_eq!(saved.etag, meta.etag);
        assert!(view.store.head_object("wsb", "d/f.txt").is_err());
        // Nothing else is left in the directory (the bytes were renamed in).
        let names: Vec<_> = fs::read_dir(tmp.path().join("d"))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["f.txt"]);
    }

    #[test]
    fn a_failed_install_leaves_the_old_file_and_creates_parents_for_a_new_one() {
        let (tmp, view) = scratch_view(None);
        let path = tmp.path().join("f.txt");
        fs::write(&path, b"old").unwrap();
        let failed = view.install("f.txt", StampedProps::default(), |_, _| {
            Err(StoreError::Corrupt("refused".into()))
        });
        assert!(failed.is_err());
        assert_eq!(fs::read(&path).unwrap(), b"old");
        let m = fs::metadata(&path).unwrap();
        assert!(view.props.load("f.txt", Stamp::of(&m)).unwrap().is_none());

        let received = view
            .store
            .receive(&mut &b"x"[..], PutOptions::default())
            .unwrap();
        view.install("a/b/c.txt", StampedProps::default(), |p, mode| {
            assert_eq!(mode, 0o644, "a new file's mode");
            received.persist_as(p, mode)
        })
        .unwrap();
        assert_eq!(fs::read(tmp.path().join("a/b/c.txt")).unwrap(), b"x");
    }

    #[test]
    fn the_walk_finds_portable_regular_files_only() {
        let (tmp, view) = scratch_view(None);
        let root = tmp.path();
        fs::create_dir_all(root.join("d/e")).unwrap();
        fs::create_dir_all(root.join(".git")).unwrap();
        fs::write(root.join("a.txt"), b"a").unwrap();
        fs::write(root.join("d/e/b.txt"), b"bb").unwrap();
        fs::write(root.join(".git/config"), b"c").unwrap();
        fs::write(root.join("d/odd\\name"), b"c").unwrap();
        symlink(root.join("a.txt"), root.join("d/link.txt")).unwrap();
        let mut found: Vec<(String, u64)> = view
            .walk_files("")
            .unwrap()
            .into_iter()
            .map(|(k, m)| (k, m.len()))
            .collect();
        found.sort();
        assert_eq!(found, [("a.txt".into(), 1), ("d/e/b.txt".into(), 2)]);
        let under: Vec<String> = view
            .walk_files("d")
            .unwrap()
            .into_iter()
            .map(|f| f.0)
            .collect();
        assert_eq!(under, ["d/e/b.txt"]);
        assert!(view.walk_files("missing").unwrap().is_empty());
    }
}
