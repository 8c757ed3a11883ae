//! Reading archives: `preview` (validate, extract nothing) and `import`
//! (validate into private staging, then publish), over one streaming
//! validator.

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io::{BufReader, Read};
use std::path::Path;

use serde::Serialize;
use sha2::{Digest, Sha256};

use super::payloads::{Keep, Payloads};
use super::tarfmt::{next_entry, padding, skip};
use super::{
    check_sensitive, decode_manifest_document, expected_entries, sensitive_paths, ArchiveLimits,
    DocumentError, MANIFEST_ENTRY, MAX_MANIFEST_BYTES, MAX_TRAILER_BYTES,
};
use crate::error::{Result, WsError};
use crate::fsutil::{create_private_dir, hex, FileLock};
use crate::progress::{PhaseClock, Progress};
use crate::registry::Registry;
use crate::Origin;
use crate::{
    admit, discard, publish, summaries, CheckpointManifest, CheckpointResult, Payload,
    RetentionCaps, Summary,
};

fn invalid(msg: impl Into<String>) -> WsError {
    WsError::InvalidArchive(msg.into())
}

/// Reads an archive from `input`, checking every rule of the format;
/// `admit` sees the decoded manifest before any payload is read. Returns
/// the manifest and every payload by entry name. On failure, whatever was
/// staged is discarded.
fn read_archive(
    input: &mut dyn Read,
    limits: ArchiveLimits,
    admit: &mut dyn FnMut(&CheckpointManifest) -> Result<()>,
    keep: Keep,
    progress: Option<&dyn Progress>,
) -> Result<(CheckpointManifest, HashMap<String, Payload>)> {
    let mut gz = flate2::read::MultiGzDecoder::new(BufReader::with_capacity(1 << 20, input));
    let m = read_manifest(&mut gz, limits)?;
    admit(&m)?;
    let mut expected: HashMap<String, (u64, String)> = expected_entries(&m)
        .into_iter()
        .map(|e| (e.name, (e.size, e.sha256)))
        .collect();
    let total = m.payload_bytes();
    let mut done = 0u64;
    let mut seen: HashSet<String> = HashSet::with_capacity(expected.len());
    let mut payloads = Payloads::new(keep);
    let result = (|| -> Result<()> {
        while let Some((name, size)) = next_entry(&mut gz).map_err(invalid)? {
            let Some((want_size, sha)) = expected.remove(&name) else {
                return Err(invalid(if seen.contains(&name) || name == MANIFEST_ENTRY {
                    format!("entry {name:?} appears twice")
                } else {
                    format!("entry {name:?} is not a payload of the manifest")
                }));
            };
            if size != want_size {
                return Err(invalid(format!(
                    "entry {name:?} holds {size} bytes; the manifest says {want_size}"
                )));
            }
            seen.insert(name.clone());
            payloads.accept(name, &sha, size, &mut gz)?;
            skip(&mut gz, padding(size)).map_err(invalid)?;
            done += size;
            if let Some(pr) = progress {
                pr.update("import", done, total);
            }
        }
        if let Some(missing) = expected.keys().min() {
            return Err(invalid(format!("entry {missing:?} is missing")));
        }
        check_trailer(&mut gz)
    })();
    match result {
        Ok(()) => Ok((m, payloads.finish()?)),
        Err(e) => Err(payloads.abandon(e)),
    }
}

/// Reads and strictly decodes the first entry.
fn read_manifest(gz: &mut dyn Read, limits: ArchiveLimits) -> Result<CheckpointManifest> {
    let not_gzip = |e: String| {
        invalid(format!(
            "not a stow checkpoint archive (gzip tar with manifest.json first): {e}"
        ))
    };
    let (name, size) = next_entry(gz)
        .map_err(not_gzip)?
        .ok_or_else(|| invalid("the archive is empty"))?;
    if name != MANIFEST_ENTRY {
        return Err(invalid(format!(
            "the first entry is {name:?}, not {MANIFEST_ENTRY}"
        )));
    }
    if size > MAX_MANIFEST_BYTES {
        return Err(invalid(format!(
            "{MANIFEST_ENTRY} is {size} bytes, over the limit of {MAX_MANIFEST_BYTES}"
        )));
    }
    let mut bytes = vec![0u8; size as usize];
    gz.read_exact(&mut bytes)
        .map_err(|e| invalid(format!("the tar stream ends early ({e})")))?;
    skip(gz, padding(size)).map_err(invalid)?;
    decode_manifest_document(&bytes, limits).map_err(|e| match e {
        DocumentError::Invalid(why) => invalid(format!("{MANIFEST_ENTRY}: {why}")),
        DocumentError::Limit(e) => e,
    })
}

/// After the end-of-archive block: the second zero block and at most
/// 1 MiB of further zeros, then the end of the (intact) gzip stream.
fn check_trailer(gz: &mut dyn Read) -> Result<()> {
    let mut buf = vec![0u8; 64 << 10];
    let mut total = 0u64;
    loop {
        let n = match gz.read(&mut buf) {
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(invalid(format!("the gzip stream is corrupt: {e}"))),
        };
        if n == 0 {
            break;
        }
        if buf[..n].iter().any(|&b| b != 0) {
            return Err(invalid("non-zero data follows the end of the tar"));
        }
        total += n as u64;
        if total > MAX_TRAILER_BYTES {
            return Err(invalid("more than 1 MiB follows the end of the tar"));
        }
    }
    if total < 512 {
        return Err(invalid("the tar's end-of-archive marker is incomplete"));
    }
    Ok(())
}

/// One file of a preview.
#[derive(Debug, Clone, Serialize)]
pub struct PreviewFile {
    pub path: String,
    pub size: u64,
}

/// One object of a portable archive's preview.
#[derive(Debug, Clone, Serialize)]
pub struct PreviewObject {
    pub bucket: String,
    pub key: String,
    pub size: u64,
}

/// The result of `preview`.
#[derive(Debug, Clone, Serialize)]
pub struct PreviewResult {
    pub version: u32,
    pub checkpoint_id: String,
    pub workspace_id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parent_checkpoint_id: Option<String>,
    /// The checkpoint format (1 files; 2 portable, with the bucket).
    pub format_version: u32,
    pub created: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub primary_bucket: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub buckets: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub objects: Option<Vec<PreviewObject>>,
    /// Every file, sorted by path.
    pub files: Vec<PreviewFile>,
    /// Payload bytes (files and objects).
    pub bytes: u64,
    /// Paths the capture excluded as sensitive-looking.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub excluded_sensitive_paths: Vec<String>,
    /// Included paths that look sensitive (objects as `s3://bucket/key`),
    /// for review before import.
    pub sensitive_paths: Vec<String>,
    /// The checkpoint's message.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

fn open_archive(path: &Path) -> Result<File> {
    // Looked at before opening: opening a FIFO would block.
    let meta = std::fs::metadata(path).map_err(|e| WsError::io_at("open archive", path, e))?;
    if !meta.is_file() {
        return Err(invalid(format!("{} is not a regular file", path.display())));
    }
    let f = File::open(path).map_err(|e| WsError::io_at("open archive", path, e))?;
    let meta = f
        .metadata()
        .map_err(|e| WsError::io_at("open archive", path, e))?;
    if !meta.is_file() {
        return Err(invalid(format!("{} is not a regular file", path.display())));
    }
    Ok(f)
}

/// Validates an archive completely (paths, types, sizes, digests, trailer)
/// without extracting anything or touching a registry.
pub fn preview(archive: &Path, limits: ArchiveLimits) -> Result<PreviewResult> {
    let mut f = open_archive(archive)?;
    let (m, _) = read_archive(&mut f, limits, &mut |_| Ok(()), Keep::Nothing, None)?;
    let mut files: Vec<PreviewFile> = m
        .files
        .iter()
        .map(|f| PreviewFile {
            path: f.path.clone(),
            size: f.size,
        })
        .collect();
    files.sort_by(|a, b| a.path.cmp(&b.path));
    let portable = m.version == 2;
    Ok(PreviewResult {
        version: 1,
        message: m.message.clone(),
        checkpoint_id: m.id.clone(),
        workspace_id: m.workspace_id.clone(),
        parent_checkpoint_id: m.parent_id.clone(),
        format_version: m.version,
        created: m.created.clone(),
        primary_bucket: m.primary_bucket.clone(),
        buckets: portable.then(|| m.buckets.clone()),
        objects: portable.then(|| {
            m.objects
                .iter()
                .map(|o| PreviewObject {
                    bucket: o.bucket.clone(),
                    key: o.key.clone(),
                    size: o.size,
                })
                .collect()
        }),
        files,
        bytes: m.payload_bytes(),
        excluded_sensitive_paths: m.excluded.clone(),
        sensitive_paths: sensitive_paths(&m),
    })
}

/// Options of an import.
#[derive(Default)]
pub struct ImportOptions<'a> {
    /// Import sensitive-looking paths (refused without it).
    pub include_sensitive: bool,
    pub limits: ArchiveLimits,
    /// Receives payload bytes read so far.
    pub progress: Option<&'a dyn Progress>,
}

/// Imports an archive into `registry`: validated in private staging, then
/// published as a checkpoint atomically (payloads the blob store holds are
/// not stored twice). An existing checkpoint ID is refused; receipts are
/// not imported. The workspace need not be registered here.
pub fn import(
    registry: &Registry,
    archive: &Path,
    opts: &ImportOptions,
) -> Result<CheckpointResult> {
    import_with_digest(registry, archive, opts, None)
}

/// What a handoff says its archive is.
pub struct Expectation<'a> {
    /// SHA-256 of the archive file.
    pub sha256: &'a str,
    pub workspace_id: &'a str,
    pub checkpoint_id: Option<&'a str>,
}

impl Expectation<'_> {
    /// Refuses an archive manifest that is not the checkpoint the handoff
    /// names.
    fn check(&self, m: &CheckpointManifest) -> Result<()> {
        let cp_differs = self.checkpoint_id.is_some_and(|cp| cp != m.id);
        if self.workspace_id != m.workspace_id || cp_differs {
            return Err(invalid(format!(
                "the archive holds checkpoint {} of workspace {}, not the one the handoff names",
                m.id, m.workspace_id
            )));
        }
        Ok(())
    }
}

/// [`import`] of a handed-off archive: its checkpoint must be the one the
/// handoff names, and the file's SHA-256 as read must be the handoff's
/// (adopt checks the digest before creating anything; this check keeps a
/// file swapped in meanwhile from being imported).
///
/// With an expectation (adopt), a checkpoint this registry already holds
/// is reused when its manifest is the archive's: nothing is written, and
/// the result's `stored_bytes` is 0. A different manifest under the same
/// ID is refused (`already_exists`), as a plain import refuses any.
pub fn import_with_digest(
    registry: &Registry,
    archive: &Path,
    opts: &ImportOptions,
    expect: Option<&Expectation>,
) -> Result<CheckpointResult> {
    if let Some(x) = expect {
        if let Some(held) = held_identical(registry, archive, opts.limits, x)? {
            return Ok(held);
        }
    }
    let file = open_archive(archive)?;
    let mut reader = HashingReader {
        inner: file,
        sha: Sha256::new(),
    };
    // The registry is touched only once the manifest is read and valid (a
    // malformed archive leaves a missing partition missing).
    let fresh = !registry.state_dir().exists();
    let tmp = registry.state_dir().join("tmp");
    let mut lock = None;
    let mut admit_manifest = |m: &CheckpointManifest| -> Result<()> {
        if let Some(x) = expect {
            x.check(m)?;
        }
        lock = Some(admit_outside_manifest(registry, m, opts.include_sensitive)?);
        Ok(())
    };
    let mut clock = PhaseClock::start("import");
    let keep = Keep::Stage {
        registry: registry.clone(),
        tmp: tmp.clone(),
    };
    let read = read_archive(
        &mut reader,
        opts.limits,
        &mut admit_manifest,
        keep,
        opts.progress,
    );
    let (m, got) = match read {
        Ok(r) => r,
        Err(e) => {
            // A partition this import created holds nothing but its lock
            // and an empty staging directory now.
            if fresh {
                let _ = std::fs::remove_dir(&tmp);
            }
            return Err(e);
        }
    };
    let _lock = lock;
    clock.lap("read+stage");
    // Payloads in manifest order (files, then distinct object bodies);
    // the reader checked that every entry is there.
    let mut order: Vec<(&Payload, u64)> = Vec::with_capacity(got.len());
    let mut bodies: HashSet<&str> = HashSet::new();
    let mut missing = None;
    for f in &m.files {
        match got.get(&format!("files/{}", f.path)) {
            Some(p) => order.push((p, f.size)),
            None => missing = Some(f.path.clone()),
        }
    }
    for o in &m.objects {
        if bodies.insert(o.sha256.as_str()) {
            match got.get(&format!("objects/{}", o.sha256)) {
                Some(p) => order.push((p, o.size)),
                None => missing = Some(format!("s3://{}/{}", o.bucket, o.key)),
            }
        }
    }
    let abandon = |e: WsError| -> Result<CheckpointResult> {
        let staged: Vec<&Payload> = got.values().collect();
        for p in staged {
            discard(std::slice::from_ref(p));
        }
        Err(e)
    };
    if let Some(name) = missing {
        return abandon(WsError::InvalidRequest(format!(
            "the payload of {name} went missing"
        )));
    }
    if let Some(want) = expect.map(|x| x.sha256) {
        // Drain what the validator did not need to read (nothing, for a
        // well-formed archive) so the digest covers the whole file.
        if let Err(e) = std::io::copy(&mut reader, &mut std::io::sink()) {
            return abandon(WsError::io_at("read archive", archive, e));
        }
        if hex(&reader.sha.clone().finalize()) != want {
            return abandon(invalid(format!(
                "{} changed while it was imported",
                archive.display()
            )));
        }
    }
    let summary = Summary::of_outside(&m, Origin::Import);
    let stored_bytes = match publish(registry, &m.id, &order, &m, &summary) {
        Ok(n) => n,
        Err(e) => return abandon(e),
    };
    clock.lap("publish");
    Ok(CheckpointResult::of(&m, stored_bytes))
}

/// The archive's checkpoint when this registry already holds it with the
/// very same manifest; `None` when it holds no checkpoint of that ID; an
/// `already_exists` refusal when it holds a different one. Reads only the
/// archive's manifest (its first entry), under the registry lock.
fn held_identical(
    registry: &Registry,
    archive: &Path,
    limits: ArchiveLimits,
    expect: &Expectation,
) -> Result<Option<CheckpointResult>> {
    let mut file = open_archive(archive)?;
    let mut gz = flate2::read::MultiGzDecoder::new(BufReader::new(&mut file));
    let theirs = read_manifest(&mut gz, limits)?;
    expect.check(&theirs)?;
    if !registry.state_dir().exists() {
        return Ok(None);
    }
    let _lock = registry.lock()?;
    let ours = match crate::load_manifest(registry, &theirs.id) {
        Ok(m) => m,
        Err(WsError::NotFound(_)) => return Ok(None),
        Err(e) => return Err(e),
    };
    if !same_manifest(&ours, &theirs)? {
        return Err(WsError::AlreadyExists(format!(
            "checkpoint {} (with a different manifest)",
            theirs.id
        )));
    }
    Ok(Some(CheckpointResult::of(&ours, 0)))
}

/// Whether two manifests say exactly the same thing: their canonical
/// documents (as an archive or a remote stores them) are equal.
fn same_manifest(a: &CheckpointManifest, b: &CheckpointManifest) -> Result<bool> {
    Ok(super::manifest_document(a)? == super::manifest_document(b)?)
}

/// Admits a checkpoint from outside (an archive, a remote) into
/// `registry`: sensitive paths only with the opt-in, no checkpoint with its
/// ID here yet, no parent cycle, within the retention caps and policy.
/// Returns the registry lock, to be held until publication (garbage
/// collection, which clears `tmp/`, and captures wait meanwhile, and the
/// checks stay true); `tmp/` exists for staging.
pub(crate) fn admit_outside_manifest(
    registry: &Registry,
    m: &CheckpointManifest,
    include_sensitive: bool,
) -> Result<FileLock> {
    check_sensitive(m, include_sensitive)?;
    registry.ensure()?;
    let lock = registry.lock()?;
    create_private_dir(&registry.state_dir().join("tmp"))?;
    if registry
        .state_dir()
        .join("checkpoints")
        .join(&m.id)
        .exists()
    {
        return Err(WsError::AlreadyExists(format!("checkpoint {}", m.id)));
    }
    let all = summaries(registry)?;
    refuse_foreign_parent(m, &all)?;
    refuse_parent_cycle(m, &all)?;
    let caps = registry
        .get(&m.workspace_id)
        .map(|r| RetentionCaps::of(&r))
        .unwrap_or_default();
    admit(registry, &m.workspace_id, caps, m.payload_bytes(), &all)?;
    Ok(lock)
}

/// Refuses a manifest whose parent is a checkpoint here of another
/// workspace: a checkpoint's parent is its own workspace's. (A parent not
/// here is fine: it may come later. Should it come from another
/// workspace, the child does not keep it from deletion: see
/// `delete::delete`.)
fn refuse_foreign_parent(m: &CheckpointManifest, all: &[Summary]) -> Result<()> {
    let Some(parent) = m.parent_id.as_deref() else {
        return Ok(());
    };
    match all.iter().find(|s| s.id == parent) {
        Some(p) if p.workspace_id != m.workspace_id => Err(invalid(format!(
            "checkpoint {}'s parent {parent} belongs to workspace {} here, not to {}",
            m.id, p.workspace_id, m.workspace_id
        ))),
        _ => Ok(()),
    }
}

/// Refuses a manifest whose parent chain, through the checkpoints here,
/// leads back to itself (such checkpoints could never be deleted).
fn refuse_parent_cycle(m: &CheckpointManifest, all: &[Summary]) -> Result<()> {
    let parents: HashMap<&str, Option<&str>> = all
        .iter()
        .map(|s| (s.id.as_str(), s.parent_id.as_deref()))
        .collect();
    let mut next = m.parent_id.as_deref();
    for _ in 0..=all.len() {
        match next {
            Some(p) if p == m.id => {
                return Err(invalid(format!(
                    "checkpoint {} would be its own ancestor here",
                    m.id
                )))
            }
            Some(p) => next = parents.get(p).copied().flatten(),
            None => return Ok(()),
        }
    }
    Ok(())
}

/// Hashes everything read through it.
struct HashingReader<R> {
    inner: R,
    sha: Sha256,
}

impl<R: Read> Read for HashingReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.sha.update(&buf[..n]);
        Ok(n)
    }
}

/// Reads a whole archive file's SHA-256 (a handoff's digest check).
pub fn file_sha256(path: &Path) -> Result<(String, u64)> {
    let mut r = HashingReader {
        inner: open_archive(path)?,
        sha: Sha256::new(),
    };
    let n = std::io::copy(&mut r, &mut std::io::sink())
        .map_err(|e| WsError::io_at("read archive", path, e))?;
    Ok((hex(&r.sha.finalize()), n))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn summary(id: &str, parent: Option<&str>) -> Summary {
        Summary {
            version: 1,
            id: id.into(),
            workspace_id: "ws_0000000000000000".into(),
            parent_id: parent.map(str::to_string),
            created: String::new(),
            files: 0,
            bytes: 0,
            message: None,
            origin: None,
        }
    }

    /// A manifest of workspace `ws_0000000000000000` with no files.
    fn manifest(id: &str) -> CheckpointManifest {
        serde_json::from_str(&format!(
            r#"{{"version":1,"id":"{id}","workspace_id":"ws_0000000000000000","created":"x","files":[]}}"#
        ))
        .unwrap()
    }

    #[test]
    fn a_parent_of_another_workspace_is_refused() {
        let mut m = manifest("cp_a");
        m.parent_id = Some("cp_b".into());
        let mut theirs = summary("cp_b", None);
        theirs.workspace_id = "ws_00000000000000ff".into();
        let err = refuse_foreign_parent(&m, &[theirs]).unwrap_err();
        assert_eq!(err.code(), "invalid_archive", "{err}");
        assert!(refuse_foreign_parent(&m, &[summary("cp_b", None)]).is_ok());
        assert!(refuse_foreign_parent(&m, &[]).is_ok());
    }

    #[test]
    fn a_parent_chain_back_to_the_import_is_refused() {
        let mut m = manifest("cp_a");
        m.parent_id = Some("cp_b".into());
        // Here: cp_c <- cp_b <- (cp_a, being imported): fine.
        let chain = [summary("cp_b", Some("cp_c")), summary("cp_c", None)];
        assert!(refuse_parent_cycle(&m, &chain).is_ok());
        // Here: cp_b's parent is cp_a: importing cp_a closes a cycle.
        let cycle = [summary("cp_b", Some("cp_c")), summary("cp_c", Some("cp_a"))];
        let err = refuse_parent_cycle(&m, &cycle).unwrap_err();
        assert_eq!(err.code(), "invalid_archive");
        // A dangling parent is fine (its parent may arrive later).
        m.parent_id = Some("cp_z".into());
        assert!(refuse_parent_cycle(&m, &cycle).is_ok());
    }

    #[test]
    fn a_fifo_is_refused_without_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("archive.tar.gz");
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let err = preview(&fifo, ArchiveLimits::default()).unwrap_err();
        assert_eq!(err.code(), "invalid_archive", "{err}");
    }
}
