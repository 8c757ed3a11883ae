//! Verifying (and, for import, staging) an archive's payload entries while
//! the reader inflates the next ones: small entries go to worker threads
//! as buffers, large ones are streamed in the reader's own thread, so
//! memory stays bounded whatever the archive holds.

use std::collections::HashMap;
use std::io::Read;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{sync_channel, SyncSender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use sha2::{Digest, Sha256};

use crate::error::{Result, WsError};
use crate::fsutil::hex;
use crate::registry::Registry;
use crate::{blob_ok, discard, stage_known, stage_reader, Payload, StageError};

/// Entries up to this size are read into memory and handed to a worker.
const SMALL: u64 = 1 << 20;
/// Small entries waiting for a worker (each at most [`SMALL`] bytes).
const QUEUED: usize = 8;
const WORKERS: usize = 2;

fn invalid(msg: impl Into<String>) -> WsError {
    WsError::InvalidArchive(msg.into())
}

/// What becomes of verified payloads.
#[derive(Clone)]
pub(super) enum Keep {
    /// Nothing: preview.
    Nothing,
    /// Staged in `tmp` unless the registry's blob store has them.
    Stage { registry: Registry, tmp: PathBuf },
}

struct Job {
    name: String,
    sha256: String,
    body: Vec<u8>,
}

type Results = Arc<Mutex<Vec<(String, Result<Payload>)>>>;

/// The payload entries of one archive being read.
pub(super) struct Payloads {
    keep: Keep,
    jobs: Option<SyncSender<Job>>,
    workers: Vec<JoinHandle<()>>,
    results: Results,
    /// Set by a worker whose entry failed, so the reader stops early.
    failed: Arc<AtomicBool>,
    sent: usize,
    inline: Vec<(String, Payload)>,
}

impl Payloads {
    pub(super) fn new(keep: Keep) -> Payloads {
        let (tx, rx) = sync_channel::<Job>(QUEUED);
        let rx = Arc::new(Mutex::new(rx));
        let results: Results = Arc::default();
        let failed = Arc::new(AtomicBool::new(false));
        let workers = (0..WORKERS)
            .map(|_| {
                let rx = Arc::clone(&rx);
                let results = Arc::clone(&results);
                let failed = Arc::clone(&failed);
                let keep = keep.clone();
                std::thread::spawn(move || loop {
                    let job = match rx.lock() {
                        Ok(r) => r.recv(),
                        Err(_) => return,
                    };
                    let Ok(job) = job else { return };
                    let r = finish_small(&keep, &job);
                    if r.is_err() {
                        failed.store(true, Ordering::Relaxed);
                    }
                    if let Ok(mut all) = results.lock() {
                        all.push((job.name, r));
                    }
                })
            })
            .collect();
        Payloads {
            keep,
            jobs: Some(tx),
            workers,
            results,
            failed,
            sent: 0,
            inline: Vec::new(),
        }
    }

    /// Takes entry `name` (expected: `size` bytes hashing to `sha256`) from
    /// `body`, reading exactly `size` bytes.
    pub(super) fn accept(
        &mut self,
        name: String,
        sha256: &str,
        size: u64,
        body: &mut dyn Read,
    ) -> Result<()> {
        if self.failed.load(Ordering::Relaxed) {
            // The worker's own error is reported by `finish`.
            return Err(invalid("a payload entry was refused"));
        }
        if size <= SMALL {
            let mut buf = vec![0u8; size as usize];
            body.read_exact(&mut buf).map_err(read_error)?;
            let job = Job {
                name,
                sha256: sha256.to_string(),
                body: buf,
            };
            let jobs = self
                .jobs
                .as_ref()
                .ok_or_else(|| WsError::InvalidRequest("payload workers stopped".into()))?;
            jobs.send(job)
                .map_err(|_| WsError::InvalidRequest("payload workers stopped".into()))?;
            self.sent += 1;
            return Ok(());
        }
        let p = match &self.keep {
            Keep::Stage { registry, tmp } if !blob_ok(registry, sha256, size) => {
                let mut entry = body.take(size);
                stage_reader(registry, tmp, &mut entry, size).map_err(|e| match e {
                    StageError::Io(e) if is_decode_error(&e) => read_error(e),
                    StageError::Io(e) => WsError::io_at("stage", tmp, e),
                    StageError::Size { got } => invalid(format!(
                        "the tar stream ends inside entry {name:?} ({got} of {size} bytes)"
                    )),
                })?
            }
            _ => Payload {
                sha256: hash_exact(body, size)?,
                staged: None,
            },
        };
        let ok = p.sha256 == sha256;
        self.inline.push((name.clone(), p));
        if !ok {
            return Err(mismatch(&name));
        }
        Ok(())
    }

    /// Waits for the workers; every entry's payload by name, or the first
    /// failure (after discarding everything staged).
    pub(super) fn finish(mut self) -> Result<HashMap<String, Payload>> {
        self.jobs = None;
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
        let done = std::mem::take(&mut *self.results.lock().unwrap_or_else(|e| e.into_inner()));
        let mut out: HashMap<String, Payload> = self.inline.drain(..).collect();
        // A worker that died (panicked) took its entry's answer with it.
        let mut first_err = (done.len() != self.sent)
            .then(|| WsError::InvalidRequest("a payload worker stopped".into()));
        for (name, r) in done {
            match r {
                Ok(p) => {
                    out.insert(name, p);
                }
                Err(e) => {
                    first_err.get_or_insert(e);
                }
            }
        }
        match first_err {
            None => Ok(out),
            Some(e) => {
                let staged: Vec<Payload> = out.into_values().collect();
                discard(&staged);
                Err(e)
            }
        }
    }

    /// Stops after the reader failed with `e`, discarding everything
    /// staged; returns the error to report (a worker's, which came from
    /// earlier in the stream, before the reader's).
    pub(super) fn abandon(self, e: WsError) -> WsError {
        match self.finish() {
            Ok(staged) => {
                let staged: Vec<Payload> = staged.into_values().collect();
                discard(&staged);
                e
            }
            Err(worker) => worker,
        }
    }
}

fn finish_small(keep: &Keep, job: &Job) -> Result<Payload> {
    let sha = hex(&Sha256::digest(&job.body));
    if sha != job.sha256 {
        return Err(mismatch(&job.name));
    }
    match keep {
        Keep::Stage { registry, tmp } if !blob_ok(registry, &sha, job.body.len() as u64) => {
            stage_known(tmp, &job.body, sha)
        }
        _ => Ok(Payload {
            sha256: sha,
            staged: None,
        }),
    }
}

fn mismatch(name: &str) -> WsError {
    invalid(format!(
        "entry {name:?} does not match its digest in the manifest"
    ))
}

/// Whether a read error came from decoding (not from the disk).
fn is_decode_error(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::InvalidInput
            | std::io::ErrorKind::InvalidData
            | std::io::ErrorKind::UnexpectedEof
    )
}

/// A failure reading the (decompressed) archive stream.
pub(super) fn read_error(e: std::io::Error) -> WsError {
    if e.kind() == std::io::ErrorKind::UnexpectedEof {
        invalid("the tar stream ends inside an entry")
    } else {
        invalid(format!("the gzip stream is corrupt: {e}"))
    }
}

/// Reads `size` bytes, returning their digest.
fn hash_exact(body: &mut dyn Read, size: u64) -> Result<String> {
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 256 << 10];
    let mut left = size;
    while left > 0 {
        let want = buf.len().min(left as usize);
        let n = match body.read(&mut buf[..want]) {
            Ok(0) => return Err(invalid("the tar stream ends inside an entry")),
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(read_error(e)),
        };
        h.update(&buf[..n]);
        left -= n as u64;
    }
    Ok(hex(&h.finalize()))
}
