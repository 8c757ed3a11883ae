//! Walking a workspace tree: the `.stow`/`.git` exclusions shared by
//! `base_identity`, seeding totals and checkpoint scans.

use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::error::{Result, WsError};
use crate::fsutil::hex;

/// Whether a walked name is excluded: a reserved name
/// ([`crate::paths::reserved_segment`]), file or directory.
pub fn excluded(depth: usize, name: &str) -> bool {
    crate::paths::reserved_segment(depth, name).is_some()
}

/// Directory entries sorted by name (byte order), the order every walk uses.
pub fn sorted_entries(dir: &Path) -> Result<Vec<fs::DirEntry>> {
    let mut entries: Vec<_> = fs::read_dir(dir)
        .map_err(|e| WsError::io_at("read directory", dir, e))?
        .collect::<std::io::Result<_>>()
        .map_err(|e| WsError::io_at("read directory", dir, e))?;
    entries.sort_by_key(|e| e.file_name());
    Ok(entries)
}

/// `"sha256:"` + hex SHA-256 over every regular file under `root` (sorted
/// per directory; `.stow` at the root and `.git` anywhere skipped; links
/// and special files are not regular files), feeding for each file: slash
/// path, NUL, bytes, NUL.
pub fn base_identity(root: &Path) -> Result<String> {
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 256 << 10];
    for (rel, path) in identity_files(root)? {
        feed_identity(&mut h, &rel, &path, &mut buf)?;
    }
    Ok(finish_identity(h))
}

/// The regular files `base_identity` covers, in its order: slash path (as
/// hashed) and the file.
pub fn identity_files(root: &Path) -> Result<Vec<(String, PathBuf)>> {
    let mut files = Vec::new();
    identity_walk(root, "", 0, &mut files)?;
    Ok(files)
}

/// Whether a slash path lies where `base_identity` never looks (under a
/// root-level `.stow`, or a `.git` anywhere).
pub fn identity_excludes(rel: &str) -> bool {
    rel.split('/')
        .enumerate()
        .any(|(depth, name)| excluded(depth, name))
}

/// The order of `base_identity`'s walk over slash paths: names compared
/// per directory level.
pub fn walk_order(a: &str, b: &str) -> std::cmp::Ordering {
    a.split('/').cmp(b.split('/'))
}

/// Feeds one file to a `base_identity` hash: slash path, NUL, bytes, NUL.
pub fn feed_identity(h: &mut Sha256, rel: &str, path: &Path, buf: &mut [u8]) -> Result<()> {
    let mut f = fs::File::open(path).map_err(|e| WsError::io_at("read", path, e))?;
    feed_identity_from(h, rel, &mut f, buf).map_err(|e| WsError::io_at("read", path, e))
}

/// [`feed_identity`] from a reader already open on the file's bytes.
pub fn feed_identity_from(
    h: &mut Sha256,
    rel: &str,
    bytes: &mut impl Read,
    buf: &mut [u8],
) -> std::io::Result<()> {
    h.update(rel.as_bytes());
    h.update([0u8]);
    loop {
        let n = match bytes.read(buf) {
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if n == 0 {
            break;
        }
        h.update(buf.get(..n).unwrap_or_default());
    }
    h.update([0u8]);
    Ok(())
}

/// The `base_identity` string of a finished hash.
pub fn finish_identity(h: Sha256) -> String {
    format!("sha256:{}", hex(&h.finalize()))
}

fn identity_walk(
    dir: &Path,
    rel: &str,
    depth: usize,
    files: &mut Vec<(String, PathBuf)>,
) -> Result<()> {
    for entry in sorted_entries(dir)? {
        let name = entry.file_name().to_string_lossy().into_owned();
        if excluded(depth, &name) {
            continue;
        }
        let path = entry.path();
        let child = if rel.is_empty() {
            name.clone()
        } else {
            format!("{rel}/{name}")
        };
        let ft = entry
            .file_type()
            .map_err(|e| WsError::io_at("stat", &path, e))?;
        if ft.is_dir() {
            identity_walk(&path, &child, depth + 1, files)?;
        } else if ft.is_file() {
            files.push((child, path));
        }
        // Symbolic links (never followed) and special files carry no
        // bytes of their own: the identity covers regular files.
    }
    Ok(())
}

/// Bytes and file count of everything under `dir` except a root-level
/// `.stow`, refusing symlinks and special files (used for seeded totals,
/// which include shallow Git metadata).
pub fn seeded_totals(dir: &Path, depth: usize) -> Result<(u64, u64)> {
    let (mut bytes, mut files) = (0u64, 0u64);
    for entry in sorted_entries(dir)? {
        let name = entry.file_name().to_string_lossy().into_owned();
        if depth == 0 && name.eq_ignore_ascii_case(".stow") {
            continue;
        }
        let path = entry.path();
        let meta = fs::symlink_metadata(&path).map_err(|e| WsError::io_at("stat", &path, e))?;
        let ft = meta.file_type();
        if ft.is_dir() {
            let (b, f) = seeded_totals(&path, depth + 1)?;
            bytes += b;
            files += f;
        } else if ft.is_file() {
            bytes += meta.len();
            files += 1;
        } else {
            return Err(WsError::InvalidInput {
                path,
                reason: "symbolic links and special files are refused".into(),
            });
        }
    }
    Ok((bytes, files))
}
