//! `export`: a checkpoint into a new archive file, never replacing one.

use std::fs::{self, File};
use std::io::{BufWriter, Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use serde::Serialize;
use sha2::{Digest, Sha256};

use super::gz::MemberWriter;
use super::tarfmt::{padding, write_end, write_header};
use super::{check_sensitive, expected_entries, ArchiveLimits, MANIFEST_ENTRY};
use crate::error::{Result, WsError};
use crate::fsutil::{absolute, hex, link_new, random_hex};
use crate::progress::Progress;
use crate::registry::Registry;
use crate::{blob_path, load_manifest, validate_manifest};

/// Options of an export.
#[derive(Default)]
pub struct ExportOptions<'a> {
    /// Export sensitive-looking paths (refused without it).
    pub include_sensitive: bool,
    pub limits: ArchiveLimits,
    /// Receives payload bytes written so far.
    pub progress: Option<&'a dyn Progress>,
}

/// The result of `export`.
#[derive(Debug, Clone, Serialize)]
pub struct ExportResult {
    pub version: u32,
    pub checkpoint_id: String,
    /// The archive's path as given.
    pub archive: PathBuf,
    /// SHA-256 of the archive file (lowercase hex).
    pub sha256: String,
    /// Size of the archive file.
    pub bytes: u64,
    /// Files of the checkpoint.
    pub files: u64,
}

/// Compression threads: one per core, at most 4.
fn threads() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(2)
        .clamp(1, 4)
}

/// `flock` on `file`; whether it was taken.
fn flock(file: &fs::File, how: libc::c_int) -> bool {
    use std::os::unix::io::AsRawFd;
    // SAFETY: flock on a descriptor we own.
    unsafe { libc::flock(file.as_raw_fd(), how) == 0 }
}

/// Removes the temp archives an earlier export to the same name left when
/// it was killed: unlocked, and untouched for a while (so one just created,
/// not locked yet, is spared).
fn remove_abandoned_exports(dir: &Path, prefix: &str) {
    let Ok(rd) = fs::read_dir(dir) else { return };
    for e in rd.flatten() {
        if !e.file_name().to_string_lossy().starts_with(prefix) {
            continue;
        }
        let path = e.path();
        let old = fs::symlink_metadata(&path)
            .ok()
            .filter(|m| m.is_file())
            .and_then(|m| m.modified().ok())
            .and_then(|t| t.elapsed().ok())
            .is_some_and(|age| age > std::time::Duration::from_secs(10));
        let abandoned =
            old && fs::File::open(&path).is_ok_and(|f| flock(&f, libc::LOCK_EX | libc::LOCK_NB));
        if abandoned {
            let _ = fs::remove_file(&path);
        }
    }
}

/// Exports checkpoint `id` to `output`, which must not exist: the archive
/// is written to a temporary file beside it, fsynced, and linked into
/// place (a link never replaces a file), so `output` is either absent or
/// complete. Every payload is verified while it is written.
pub fn export(
    registry: &Registry,
    id: &str,
    output: &Path,
    opts: &ExportOptions,
) -> Result<ExportResult> {
    let m = load_manifest(registry, id)?;
    validate_manifest(&m).map_err(|e| WsError::Corrupt(format!("checkpoint {id}: {e}")))?;
    check_sensitive(&m, opts.include_sensitive)?;
    opts.limits.check(&m)?;
    let target = absolute(output)?;
    if fs::symlink_metadata(&target).is_ok() {
        return Err(WsError::AlreadyExists(target.display().to_string()));
    }
    let dir = target
        .parent()
        .ok_or_else(|| WsError::InvalidRequest(format!("{} has no parent", target.display())))?;
    if !dir.is_dir() {
        return Err(WsError::InvalidRequest(format!(
            "{} is not an existing directory",
            dir.display()
        )));
    }
    let name = target
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let prefix = format!(".{name}.stow-export-");
    remove_abandoned_exports(dir, &prefix);
    let tmp = dir.join(format!("{prefix}{}", random_hex(6)));
    let file = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(|e| WsError::io_at("create", &tmp, e))?;
    // Held while the archive is written: a later export to the same name
    // tells an abandoned temp file (its exporter was killed) by the lock.
    flock(&file, libc::LOCK_EX);
    let written =
        write_archive(registry, &m, file, opts.progress).and_then(|(file, bytes, sha)| {
            file.sync_all()
                .map_err(|e| WsError::io_at("fsync", &tmp, e))?;
            Ok((bytes, sha))
        });
    let (bytes, sha) = match written {
        Ok(r) => r,
        Err(e) => {
            let _ = fs::remove_file(&tmp);
            return Err(e);
        }
    };
    link_new(&tmp, &target)?;
    Ok(ExportResult {
        version: 1,
        checkpoint_id: m.id.clone(),
        archive: output.to_path_buf(),
        sha256: hex(&sha),
        bytes,
        files: m.files.len() as u64,
    })
}

/// Writes the archive of `m` to `file`; returns it with the archive's
/// size and SHA-256.
fn write_archive(
    registry: &Registry,
    m: &crate::CheckpointManifest,
    file: File,
    progress: Option<&dyn Progress>,
) -> Result<(File, u64, [u8; 32])> {
    let io = |e: std::io::Error| WsError::io("write archive", e);
    let mut out = MemberWriter::new(BufWriter::with_capacity(1 << 20, file), threads());
    let header = serde_json::to_vec(&ArchiveHeaderRef {
        format_version: m.version,
        manifest: m,
    })
    .map_err(|e| WsError::InvalidRequest(format!("encode manifest: {e}")))?;
    write_header(&mut out, MANIFEST_ENTRY, header.len() as u64).map_err(io)?;
    out.write_all(&header).map_err(io)?;
    out.write_all(&[0u8; 512][..padding(header.len() as u64)])
        .map_err(io)?;
    let total = m.payload_bytes();
    let mut done = 0u64;
    let mut buf = vec![0u8; 256 << 10];
    for e in expected_entries(m) {
        write_header(&mut out, &e.name, e.size).map_err(io)?;
        let src = blob_path(registry, &e.sha256);
        let mut blob = File::open(&src)
            .map_err(|err| WsError::Corrupt(format!("payload {} ({}): {err}", e.name, e.sha256)))?;
        let mut h = Sha256::new();
        let mut left = e.size;
        while left > 0 {
            let want = buf.len().min(left as usize);
            let n = match blob.read(&mut buf[..want]) {
                Ok(0) => break,
                Ok(n) => n,
                Err(err) if err.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(err) => return Err(WsError::io_at("read", &src, err)),
            };
            h.update(&buf[..n]);
            out.write_all(&buf[..n]).map_err(io)?;
            left -= n as u64;
            done += n as u64;
            if let Some(p) = progress {
                p.update("export", done, total);
            }
        }
        if left > 0 || hex(&h.finalize()) != e.sha256 {
            return Err(WsError::Corrupt(format!(
                "payload {} does not match its digest",
                e.name
            )));
        }
        out.write_all(&[0u8; 512][..padding(e.size)]).map_err(io)?;
    }
    write_end(&mut out).map_err(io)?;
    let (writer, bytes, sha) = out.finish().map_err(io)?;
    let file = writer
        .into_inner()
        .map_err(|e| WsError::io("write archive", e.into_error()))?;
    Ok((file, bytes, sha))
}

/// The first entry (`ArchiveHeader` on the reading side), borrowing its
/// manifest.
#[derive(Serialize)]
struct ArchiveHeaderRef<'a> {
    format_version: u32,
    manifest: &'a crate::CheckpointManifest,
}
