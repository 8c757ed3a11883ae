//! Remotes: an S3 service as the transport and shared store of
//! checkpoints (push, pull, listing), with nothing of ours in between.
//!
//! This crate knows no HTTP: it drives a [`RemoteStore`] (create-only
//! writes, reads, listings of one bucket prefix), which `stow-remote`
//! implements over a real S3 client. Remotes are named per registry
//! partition (`config`), like git's per repository; they never hold a
//! credential.
//!
//! Layout under the remote's prefix:
//!
//! ```text
//! blobs/<sha256>              one payload, named by its digest, written
//!                             create-only (metadata sha256 = the name)
//! checkpoints/<cp>.json       {"format_version", "manifest"}: written last,
//!                             create-only, once every blob it names is there
//! ```
//!
//! A checkpoint is on a remote exactly when its manifest object is; a push
//! killed mid-way leaves only complete blobs (reused by the rerun), never
//! a manifest. Pull verifies every byte against the manifest before it
//! publishes through the same path as import.

mod config;
mod document;
pub mod memory;
mod pull;
mod push;

use std::io::Read;

use serde::{Deserialize, Serialize};

pub use crate::error::{RemoteError, RemoteFailure};
pub use config::check_spec;
pub use config::{add_remote, get_remote, list_remotes, remove_remote, RemoteEntry, RemoteList};
pub use pull::{pull, remote_list, PullOptions, PullResult, RemoteCheckpoint, RemoteListResult};
pub use push::{push, verify_remote_copy, PushOptions, PushResult};

/// Where a remote is: `s3://BUCKET[/PREFIX]` plus how to reach it. Holds
/// no credentials (they come from the standard AWS chain where used).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RemoteSpec {
    /// `s3://BUCKET[/PREFIX]`.
    pub url: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint_url: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,
    /// A profile of the shared AWS config and credentials files.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<String>,
}

impl RemoteSpec {
    /// The bucket and the prefix (no leading or trailing `/`; may be
    /// empty) of a valid `s3://` URL.
    pub fn bucket_and_prefix(&self) -> Result<(String, String), String> {
        parse_s3_url(&self.url)
    }
}

/// Splits `s3://BUCKET[/PREFIX]`, refusing what S3 cannot name.
pub fn parse_s3_url(url: &str) -> Result<(String, String), String> {
    let rest = url
        .strip_prefix("s3://")
        .ok_or_else(|| format!("{url:?} is not an s3://BUCKET[/PREFIX] URL"))?;
    let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
    let bucket_ok = (3..=63).contains(&bucket.len())
        && bucket
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
        && !bucket.starts_with(['-', '.'])
        && !bucket.ends_with(['-', '.']);
    if !bucket_ok {
        return Err(format!(
            "{bucket:?} is not a bucket name (3-63 lowercase letters, digits, '-' or '.')"
        ));
    }
    let prefix = prefix.trim_end_matches('/');
    let prefix_ok = prefix.len() <= 512
        && prefix
            .split('/')
            .all(|c| prefix.is_empty() || (!c.is_empty() && c != "." && c != ".."))
        && !prefix.chars().any(char::is_control);
    if !prefix_ok {
        return Err(format!(
            "{prefix:?} is not a usable prefix (no empty, '.' or '..' components, no control characters, at most 512 bytes)"
        ));
    }
    Ok((bucket.to_string(), prefix.to_string()))
}

/// What a remote holds under one key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoteObject {
    pub size: u64,
    /// The `sha256` metadata the writer recorded, if any.
    pub sha256: Option<String>,
}

/// The body of a create-only write.
pub enum Body {
    Bytes(Vec<u8>),
    /// Exactly `size` bytes; a read error (a local blob that does not
    /// verify) abandons the write, so nothing is created.
    Reader {
        reader: Box<dyn Read + Send>,
        size: u64,
    },
}

/// Whether a create-only write created the object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Created {
    Created,
    /// Something already had the key; nothing was written.
    AlreadyExists,
}

/// One bucket prefix of an S3 service, as push and pull need it. Keys are
/// relative to the remote's prefix. Calls block; they are made from
/// several threads at once.
pub trait RemoteStore: Send + Sync {
    /// `s3://bucket/prefix`, for messages and results.
    fn url(&self) -> String;
    /// Size and recorded digest of `key`, or `None` when absent.
    fn head(&self, key: &str) -> Result<Option<RemoteObject>, RemoteError>;
    /// The bytes of `key`, or `None` when absent. A read error of the
    /// stream is an `io::Error` whose inner error may be a [`RemoteError`].
    fn get(&self, key: &str) -> Result<Option<Box<dyn Read + Send>>, RemoteError>;
    /// Writes `key` only if nothing has it (`If-None-Match: *`), with
    /// `sha256` recorded as metadata; large bodies go up in parts.
    fn create(&self, key: &str, body: Body, sha256: &str) -> Result<Created, RemoteError>;
    /// Every key under `prefix` with its size, in key order; `None` once
    /// there prove to be more than `most` (the listing stops there).
    fn list_at_most(
        &self,
        prefix: &str,
        most: usize,
    ) -> Result<Option<Vec<(String, u64)>>, RemoteError>;

    /// Every key under `prefix` with its size, in key order.
    fn list(&self, prefix: &str) -> Result<Vec<(String, u64)>, RemoteError> {
        Ok(self.list_at_most(prefix, usize::MAX)?.unwrap_or_default())
    }
}

/// Opens a [`RemoteStore`] for a spec (the CLI passes `stow-remote`'s).
pub trait Connector {
    fn connect(&self, spec: &RemoteSpec) -> Result<Box<dyn RemoteStore>, RemoteError>;
}

/// The key of a payload.
pub(crate) fn blob_key(sha256: &str) -> String {
    format!("blobs/{sha256}")
}

/// The key of a checkpoint's manifest document.
pub(crate) fn manifest_key(checkpoint_id: &str) -> String {
    format!("checkpoints/{checkpoint_id}.json")
}

/// Transfers in flight at once (blobs are independent objects).
pub(crate) const PARALLEL_TRANSFERS: usize = 8;

/// Runs `work` over `items` on up to `PARALLEL_TRANSFERS` threads, stopping
/// at the first error (which is returned); results come back in order.
pub(crate) fn parallel<T: Sync, R: Send, E: Send>(
    items: &[T],
    work: impl Fn(&T) -> Result<R, E> + Sync,
) -> Result<Vec<R>, E> {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::sync::Mutex;
    let next = AtomicUsize::new(0);
    let stop = AtomicBool::new(false);
    let results: Mutex<Vec<Option<R>>> = Mutex::new((0..items.len()).map(|_| None).collect());
    let first_err: Mutex<Option<E>> = Mutex::new(None);
    std::thread::scope(|s| {
        for _ in 0..items.len().min(PARALLEL_TRANSFERS) {
            s.spawn(|| {
                while !stop.load(Ordering::Relaxed) {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(item) = items.get(i) else { break };
                    match work(item) {
                        Ok(r) => {
                            if let Ok(mut slots) = results.lock() {
                                if let Some(slot) = slots.get_mut(i) {
                                    *slot = Some(r);
                                }
                            }
                        }
                        Err(e) => {
                            stop.store(true, Ordering::Relaxed);
                            if let Ok(mut slot) = first_err.lock() {
                                slot.get_or_insert(e);
                            }
                        }
                    }
                }
            });
        }
    });
    if let Some(e) = first_err.into_inner().ok().flatten() {
        return Err(e);
    }
    Ok(results
        .into_inner()
        .unwrap_or_default()
        .into_iter()
        .flatten()
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parallel_stops_at_the_first_error_and_keeps_order() {
        let items: Vec<u32> = (0..100).collect();
        let ok: Result<Vec<u32>, String> = parallel(&items, |i| Ok(i * 2));
        assert_eq!(ok.unwrap(), items.iter().map(|i| i * 2).collect::<Vec<_>>());
        let err: Result<Vec<u32>, String> = parallel(&items, |i| {
            if *i == 37 {
                Err(format!("bad {i}"))
            } else {
                Ok(*i)
            }
        });
        assert_eq!(err.unwrap_err(), "bad 37");
    }
}
