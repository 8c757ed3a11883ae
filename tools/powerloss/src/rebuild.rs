//! After a cut: the backing directory rewritten to the durable state.
//!
//! The tree is rebuilt beside it (in the state directory, on the same file
//! system) from the root's durable entries down: a tracked directory's
//! durable entries, an untracked one's live entries (unchanged since the
//! mount); a tracked file's durable copy, an untracked one's live inode
//! (hard-linked, so nothing is copied). Then the live entries are moved
//! out and the rebuilt ones in, and the state directory is removed.

use std::collections::{HashMap, HashSet};
use std::ffi::OsString;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::error::{Context, Result};
use crate::model::{list_dir, Entry, Kind, Model, STATE_DIR};

/// Where a live inode is now, and its mode and device number.
struct Live {
    path: PathBuf,
    mode: u32,
    rdev: u64,
}

/// Rebuilds `core`'s backing directory from `model`'s durable state;
/// returns the files and directories written.
pub fn rebuild(backing: &Path, state: &Path, root: u64, model: &Model) -> Result<(usize, usize)> {
    let mut live = HashMap::new();
    walk(backing, true, &mut live)?;
    walk(&state.join("stash"), false, &mut live)?;
    let out = state.join("rebuild");
    std::fs::create_dir(&out).ctx(|| format!("mkdir {}", out.display()))?;
    let mut b = Builder {
        model,
        live,
        root,
        built: HashMap::new(),
        seen: HashSet::new(),
        files: 0,
        dirs: 0,
    };
    b.dir(root, &out)?;
    let trash = state.join("trash");
    std::fs::create_dir(&trash).ctx(|| format!("mkdir {}", trash.display()))?;
    for e in std::fs::read_dir(backing).ctx(|| format!("list {}", backing.display()))? {
        let e = e.ctx(|| format!("list {}", backing.display()))?;
        if e.file_name() == STATE_DIR {
            continue;
        }
        let to = trash.join(e.file_name());
        std::fs::rename(e.path(), &to).ctx(|| format!("move {}", e.path().display()))?;
    }
    for e in std::fs::read_dir(&out).ctx(|| format!("list {}", out.display()))? {
        let e = e.ctx(|| format!("list {}", out.display()))?;
        let to = backing.join(e.file_name());
        std::fs::rename(e.path(), &to).ctx(|| format!("move {}", e.path().display()))?;
    }
    std::fs::remove_dir_all(state).ctx(|| format!("remove {}", state.display()))?;
    Ok((b.files, b.dirs))
}

/// Records every inode under `dir` (the state directory left out at the
/// backing root).
fn walk(dir: &Path, is_root: bool, live: &mut HashMap<u64, Live>) -> Result<()> {
    let mut stack = vec![(dir.to_path_buf(), is_root)];
    while let Some((d, root)) = stack.pop() {
        let meta = std::fs::symlink_metadata(&d).ctx(|| format!("stat {}", d.display()))?;
        live.entry(meta.ino()).or_insert(Live {
            path: d.clone(),
            mode: meta.mode(),
            rdev: meta.rdev(),
        });
        for e in std::fs::read_dir(&d).ctx(|| format!("list {}", d.display()))? {
            let e = e.ctx(|| format!("list {}", d.display()))?;
            if root && e.file_name() == STATE_DIR {
                continue;
            }
            let m = e
                .metadata()
                .ctx(|| format!("stat {}", e.path().display()))?;
            if m.is_dir() {
                stack.push((e.path(), false));
            } else {
                live.entry(m.ino()).or_insert(Live {
                    path: e.path(),
                    mode: m.mode(),
                    rdev: m.rdev(),
                });
            }
        }
    }
    Ok(())
}

struct Builder<'a> {
    model: &'a Model,
    live: HashMap<u64, Live>,
    root: u64,
    built: HashMap<u64, PathBuf>,
    seen: HashSet<u64>,
    files: usize,
    dirs: usize,
}

impl Builder<'_> {
    /// Writes directory `ino`'s durable entries into `out` (made).
    fn dir(&mut self, ino: u64, out: &Path) -> Result<()> {
        if !self.seen.insert(ino) {
            return Ok(());
        }
        self.dirs += 1;
        let entries: Vec<(OsString, Entry)> = match self.model.durable_entries(ino) {
            Some(e) => e.iter().map(|(n, e)| (n.clone(), *e)).collect(),
            None => match self.live.get(&ino) {
                Some(l) => list_dir(&l.path, ino == self.root)
                    .ctx(|| format!("list {}", l.path.display()))?
                    .into_iter()
                    .collect(),
                None => Vec::new(),
            },
        };
        for (name, e) in entries {
            if ino == self.root && name == STATE_DIR {
                continue;
            }
            self.entry(&out.join(&name), e)?;
        }
        Ok(())
    }

    fn entry(&mut self, to: &Path, e: Entry) -> Result<()> {
        let live = self.live.get(&e.ino);
        let mode = live.map(|l| l.mode & 0o7777);
        match e.kind {
            Kind::Dir => {
                if self.seen.contains(&e.ino) {
                    return Ok(());
                }
                std::fs::create_dir(to).ctx(|| format!("mkdir {}", to.display()))?;
                if let Some(m) = mode {
                    set_mode(to, m)?;
                }
                self.dir(e.ino, to)?;
            }
            Kind::File => {
                let from = if let Some(p) = self.built.get(&e.ino) {
                    p.clone()
                } else if self.model.tracks_file(e.ino) {
                    self.model.data_path(e.ino)
                } else if let Some(l) = live {
                    l.path.clone()
                } else {
                    eprintln!("powerloss: no inode {} for {}", e.ino, to.display());
                    return Ok(());
                };
                std::fs::hard_link(&from, to)
                    .ctx(|| format!("link {} to {}", from.display(), to.display()))?;
                if let std::collections::hash_map::Entry::Vacant(v) = self.built.entry(e.ino) {
                    if let Some(m) = mode {
                        set_mode(to, m)?;
                    }
                    v.insert(to.to_path_buf());
                    self.files += 1;
                }
            }
            Kind::Symlink => {
                if let Some(l) = live {
                    let target = std::fs::read_link(&l.path)
                        .ctx(|| format!("readlink {}", l.path.display()))?;
                    std::os::unix::fs::symlink(&target, to)
                        .ctx(|| format!("symlink {}", to.display()))?;
                }
            }
            Kind::Other => {
                if let Some(l) = live {
                    let c = std::ffi::CString::new(to.as_os_str().as_bytes())
                        .map_err(|_| std::io::Error::from_raw_os_error(libc::EINVAL))
                        .ctx(|| format!("mknod {}", to.display()))?;
                    // SAFETY: a valid C string; mode and device from a stat.
                    if unsafe { libc::mknod(c.as_ptr(), l.mode as libc::mode_t, l.rdev) } != 0 {
                        return Err(std::io::Error::last_os_error())
                            .ctx(|| format!("mknod {}", to.display()));
                    }
                }
            }
        }
        Ok(())
    }
}

fn set_mode(p: &Path, mode: u32) -> Result<()> {
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode))
        .ctx(|| format!("chmod {}", p.display()))
}
