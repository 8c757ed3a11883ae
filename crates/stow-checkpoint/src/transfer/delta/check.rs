//! Reading a delta document: its digest, its size, and every rule its
//! contents must keep before anything is applied.

use std::collections::HashMap;
use std::fs;
use std::path::Path;

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;
use serde::Deserialize;
use sha2::{Digest, Sha256};

use super::*;
use crate::error::{Result, WsError};
use crate::fsutil::hex;
use crate::paths::check_checkpoint_path;
use crate::Kind;

/// A delta document of `len` bytes is one `apply` reads: `delta` refuses
/// to write a larger one, which could never be applied.
pub(super) fn check_document_size(len: u64) -> Result<()> {
    if len > MAX_DOCUMENT_BYTES {
        return Err(WsError::CapacityExceeded(format!(
            "the delta document is {len} bytes, over the limit of {MAX_DOCUMENT_BYTES}"
        )));
    }
    Ok(())
}

/// Reads, checks and decodes a delta document.
pub fn read_document(path: &Path, expect_sha256: Option<&str>) -> Result<DeltaDocument> {
    let meta = fs::metadata(path).map_err(|e| WsError::io_at("read delta", path, e))?;
    if !meta.is_file() {
        return Err(WsError::InvalidDelta(format!(
            "{} is not a regular file",
            path.display()
        )));
    }
    check_document_size(meta.len())?;
    let raw = fs::read(path).map_err(|e| WsError::io_at("read delta", path, e))?;
    if raw.len() as u64 > MAX_DOCUMENT_BYTES {
        return Err(WsError::CapacityExceeded(
            "the delta document grew past its limit while it was read".into(),
        ));
    }
    if let Some(want) = expect_sha256 {
        let got = hex(&Sha256::digest(&raw));
        if got != want.trim().to_ascii_lowercase() {
            return Err(WsError::InvalidDelta(format!(
                "the document does not match the digest {} (it is {got})",
                want.trim()
            )));
        }
    }
    // Look at the version first, so a newer document gets a clear answer.
    #[derive(Deserialize)]
    struct Version {
        version: u32,
    }
    let v: Version = serde_json::from_slice(&raw)
        .map_err(|e| WsError::InvalidDelta(format!("the document is malformed: {e}")))?;
    if v.version != 1 && v.version != 2 {
        return Err(WsError::InvalidDelta(format!(
            "this build does not speak the document's version {} (supported: 1, 2)",
            v.version
        )));
    }
    let doc: DeltaDocument = serde_json::from_slice(&raw)
        .map_err(|e| WsError::InvalidDelta(format!("the document is malformed: {e}")))?;
    Ok(doc)
}

/// A decoded, checked payload of a document.
pub(super) struct Body {
    pub(super) bytes: Vec<u8>,
}

/// Checks a document's own invariants and decodes its content: kinds agree
/// with `from`/`to`, paths are valid and unique, every `to` has content of
/// its size and digest, no content is unreferenced, the totals add up.
///
/// Long on purpose: one rule after another over the document's sections,
/// in the order they are read.
pub(super) fn check_document(
    doc: &DeltaDocument,
) -> Result<(HashMap<String, Body>, HashMap<String, Body>)> {
    let bad = |m: String| WsError::InvalidDelta(m);
    crate::paths::check_workspace_id(&doc.workspace_id).map_err(|e| bad(e.to_string()))?;
    crate::paths::check_checkpoint_id(&doc.base_id).map_err(|e| bad(e.to_string()))?;
    crate::paths::check_checkpoint_id(&doc.target_id).map_err(|e| bad(e.to_string()))?;
    if doc.version == 1
        && (!doc.bucket_changes.is_empty()
            || !doc.object_changes.is_empty()
            || !doc.object_content.is_empty())
    {
        return Err(bad("a version-1 delta carries bucket changes".into()));
    }
    if doc.changes.len() + doc.object_changes.len() > MAX_CHANGES {
        return Err(WsError::CapacityExceeded(
            "the delta holds too many changes".into(),
        ));
    }
    let mut seen = std::collections::HashSet::new();
    let mut files = HashMap::new();
    let mut total = 0u64;
    for c in &doc.changes {
        check_checkpoint_path(&c.path).map_err(|e| bad(e.to_string()))?;
        if !seen.insert(c.path.as_str()) {
            return Err(bad(format!("{} changes twice", c.path)));
        }
        let shape_ok = match c.kind {
            Kind::Added => c.from.is_none() && c.to.is_some(),
            Kind::Deleted => c.from.is_some() && c.to.is_none(),
            Kind::Changed => c.from.is_some() && c.to.is_some(),
        };
        let paths_ok = [&c.from, &c.to]
            .into_iter()
            .flatten()
            .all(|e| e.path == c.path && e.mode <= 0o777);
        if !shape_ok || !paths_ok {
            return Err(bad(format!("the change of {} is malformed", c.path)));
        }
        match (&c.to, doc.content.get(&c.path)) {
            (Some(to), Some(b64)) => {
                let bytes = B64
                    .decode(b64)
                    .map_err(|_| bad(format!("the content of {} is not base64", c.path)))?;
                if bytes.len() as u64 != to.size || hex(&Sha256::digest(&bytes)) != to.sha256 {
                    return Err(bad(format!(
                        "the content of {} disagrees with the delta's manifest entry",
                        c.path
                    )));
                }
                total += to.size;
                files.insert(c.path.clone(), Body { bytes });
            }
            (Some(_), None) => return Err(bad(format!("no content for {}", c.path))),
            (None, Some(_)) => return Err(bad(format!("{} is deleted but has content", c.path))),
            (None, None) => {}
        }
    }
    let mut link_paths = std::collections::HashSet::new();
    for c in &doc.link_changes {
        check_checkpoint_path(&c.path).map_err(|e| bad(e.to_string()))?;
        let shape_ok = match c.kind {
            Kind::Added => c.from.is_none() && c.to.is_some(),
            Kind::Deleted => c.from.is_some() && c.to.is_none(),
            Kind::Changed => c.from.is_some() && c.to.is_some(),
        };
        if !shape_ok || !link_paths.insert(c.path.as_str()) {
            return Err(bad(format!("the change of link {} is malformed", c.path)));
        }
    }
    if doc.content.len() != files.len() {
        return Err(bad("the document holds content no change names".into()));
    }
    // What the document alone decides of the result is refused here as
    // the document's fault; a result that still fails validation is the
    // base and the delta disagreeing (a conflict).
    if let Some(dirs) = &doc.dirs {
        crate::validate::check_dirs(dirs).map_err(bad)?;
    }
    if let Some(message) = &doc.message {
        crate::format::check_message(message).map_err(|e| bad(e.to_string()))?;
    }
    let mut keys = std::collections::HashSet::new();
    let mut objects = HashMap::new();
    for c in &doc.object_changes {
        if !keys.insert((c.bucket.as_str(), c.key.as_str())) {
            return Err(bad(format!("object {}/{} changes twice", c.bucket, c.key)));
        }
        let shape_ok = match c.kind {
            Kind::Added => c.from.is_none() && c.to.is_some(),
            Kind::Deleted => c.from.is_some() && c.to.is_none(),
            Kind::Changed => c.from.is_some() && c.to.is_some(),
        };
        let names_ok = [&c.from, &c.to]
            .into_iter()
            .flatten()
            .all(|e| e.bucket == c.bucket && e.key == c.key);
        if !shape_ok || !names_ok {
            return Err(bad(format!(
                "the change of object {}/{} is malformed",
                c.bucket, c.key
            )));
        }
        if let Some(to) = &c.to {
            if let Some(body) = objects.get(&to.sha256) {
                let body: &Body = body;
                if body.bytes.len() as u64 != to.size {
                    return Err(bad(format!(
                        "the content of object {}/{} disagrees with the delta's manifest entry",
                        c.bucket, c.key
                    )));
                }
                continue;
            }
            let b64 = doc
                .object_content
                .get(&to.sha256)
                .ok_or_else(|| bad(format!("no content for object {}/{}", c.bucket, c.key)))?;
            let bytes = B64.decode(b64).map_err(|_| {
                bad(format!(
                    "the content of object {}/{} is not base64",
                    c.bucket, c.key
                ))
            })?;
            if bytes.len() as u64 != to.size || hex(&Sha256::digest(&bytes)) != to.sha256 {
                return Err(bad(format!(
                    "the content of object {}/{} disagrees with the delta's manifest entry",
                    c.bucket, c.key
                )));
            }
            total += to.size;
            objects.insert(to.sha256.clone(), Body { bytes });
        }
    }
    if doc.object_content.len() != objects.len() {
        return Err(bad(
            "the document holds object content no change names".into()
        ));
    }
    if total > MAX_DELTA_BYTES {
        return Err(WsError::CapacityExceeded(format!(
            "the delta carries {total} content bytes, over the limit of {MAX_DELTA_BYTES}"
        )));
    }
    if total != doc.bytes || doc.files != doc.changes.len() as u64 {
        return Err(bad("the document's totals disagree with its changes".into()));
    }
    Ok((files, objects))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::FileEntry;

    #[test]
    fn a_document_apply_would_refuse_is_too_large_to_write() {
        assert!(check_document_size(MAX_DOCUMENT_BYTES).is_ok());
        let e = check_document_size(MAX_DOCUMENT_BYTES + 1).unwrap_err();
        assert_eq!(e.code(), "capacity_exceeded");
    }

    fn entry(path: &str, bytes: &[u8]) -> FileEntry {
        FileEntry {
            path: path.into(),
            size: bytes.len() as u64,
            mode: 0o644,
            sha256: hex(&Sha256::digest(bytes)),
            content_type: None,
            metadata: Default::default(),
        }
    }

    /// A version-1 document adding `a.txt` with the bytes `hello`.
    fn doc() -> DeltaDocument {
        DeltaDocument {
            version: 1,
            workspace_id: "ws_0000000000000001".into(),
            base_id: "cp_000000000000000000000001".into(),
            target_id: "cp_000000000000000000000002".into(),
            created: "2026-12-02T00:00:00Z".into(),
            changes: vec![Change {
                path: "a.txt".into(),
                kind: Kind::Added,
                from: None,
                to: Some(entry("a.txt", b"hello")),
            }],
            bucket_changes: vec![],
            object_changes: vec![],
            files: 1,
            bytes: 5,
            content: [("a.txt".to_string(), B64.encode(b"hello"))].into(),
            object_content: BTreeMap::new(),
            include_sensitive: false,
            link_changes: vec![],
            dirs: None,
            message: None,
        }
    }

    fn refusal(d: &DeltaDocument) -> String {
        match check_document(d) {
            Ok(_) => panic!("accepted: {d:?}"),
            Err(e) => {
                assert_eq!(e.code(), "invalid_delta", "{e}");
                e.to_string()
            }
        }
    }

    #[test]
    fn a_well_formed_document_decodes_its_content() {
        let (files, objects) = check_document(&doc()).unwrap();
        assert_eq!(files["a.txt"].bytes, b"hello");
        assert!(objects.is_empty());
    }

    #[test]
    fn content_must_agree_with_its_entry() {
        let mut d = doc();
        d.content.insert("a.txt".into(), B64.encode(b"HELLO"));
        assert!(refusal(&d).contains("disagrees"));
        let mut d = doc();
        d.content.clear();
        assert!(refusal(&d).contains("no content"));
        let mut d = doc();
        d.content.insert("a.txt".into(), "not base64!".into());
        assert!(refusal(&d).contains("base64"));
    }

    #[test]
    fn a_change_must_have_its_kind_s_shape_and_appear_once() {
        let mut d = doc();
        d.changes[0].kind = Kind::Changed;
        assert!(refusal(&d).contains("malformed"));
        let mut d = doc();
        d.changes.push(d.changes[0].clone());
        assert!(refusal(&d).contains("twice"));
        let mut d = doc();
        d.changes[0].path = "../escape".into();
        d.content = [("../escape".to_string(), B64.encode(b"hello"))].into();
        refusal(&d);
    }

    /// What the document alone sets of the result (its directories, its
    /// message) is the document's fault when malformed, not a conflict.
    #[test]
    fn malformed_directories_and_messages_are_the_document_s_fault() {
        let mut d = doc();
        d.dirs = Some(vec![DirectoryEntry {
            path: "../up".into(),
            mode: 0o755,
        }]);
        refusal(&d);
        let mut d = doc();
        let dir = DirectoryEntry {
            path: "src".into(),
            mode: 0o755,
        };
        d.dirs = Some(vec![dir.clone(), dir]);
        assert!(refusal(&d).contains("twice"));
        let mut d = doc();
        d.message = Some("x".repeat(100_000));
        refusal(&d);
    }

    #[test]
    fn a_version_1_document_carries_no_bucket_changes() {
        let mut d = doc();
        d.bucket_changes.push(BucketChange {
            bucket: "b".into(),
            kind: Kind::Added,
        });
        assert!(refusal(&d).contains("version-1"));
    }
}
