//! What push and pull both read from a remote: a checkpoint's manifest
//! document (bounded, decoded by the archive's rules), the distinct
//! payloads a manifest names, and read errors carrying the remote's own.

use std::collections::HashSet;
use std::io::Read;

use super::{RemoteError, RemoteStore};
use crate::archive::{decode_manifest_document, ArchiveLimits};
use crate::error::{Result, WsError};
use crate::{object_as_file, CheckpointManifest, FileEntry};

/// Largest manifest document read back from a remote.
const MAX_REMOTE_MANIFEST: u64 = crate::archive::MAX_MANIFEST_BYTES;

/// The distinct payloads of `m`, one entry per digest, in manifest order.
pub(crate) fn distinct_payloads(m: &CheckpointManifest) -> Vec<FileEntry> {
    let mut seen = HashSet::new();
    m.files
        .iter()
        .cloned()
        .chain(m.objects.iter().map(object_as_file))
        .filter(|f| seen.insert(f.sha256.clone()))
        .collect()
}

/// Reads a manifest document from the remote (bounded), or `None`.
pub(crate) fn fetch_document(remote: &dyn RemoteStore, key: &str) -> Result<Option<Vec<u8>>> {
    let Some(reader) = remote.get(key)? else {
        return Ok(None);
    };
    let mut bytes = Vec::new();
    reader
        .take(MAX_REMOTE_MANIFEST + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| remote_read_error(key, e))?;
    if bytes.len() as u64 > MAX_REMOTE_MANIFEST {
        return Err(WsError::CorruptRemote(format!(
            "{key} is larger than {MAX_REMOTE_MANIFEST} bytes"
        )));
    }
    Ok(Some(bytes))
}

/// Decodes a remote manifest document (any breach of the rules is a
/// corrupt remote; bounds are the caller's).
pub(crate) fn decode_remote(
    bytes: &[u8],
    key: &str,
    limits: ArchiveLimits,
) -> Result<CheckpointManifest> {
    decode_manifest_document(bytes, limits).map_err(|e| match e {
        crate::archive::DocumentError::Invalid(why) => {
            WsError::CorruptRemote(format!("{key} is {why}"))
        }
        crate::archive::DocumentError::Limit(e) => e,
    })
}

/// A stream error while reading from the remote: the remote's own error
/// when it carries one.
pub(crate) fn remote_read_error(key: &str, e: std::io::Error) -> WsError {
    match e
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<RemoteError>())
    {
        Some(r) => WsError::Remote(r.clone()),
        None => WsError::io(format!("read {key} from the remote"), e),
    }
}
