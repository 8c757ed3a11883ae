//! Gzip output as a sequence of independent members, compressed in
//! parallel: plain `gzip -d` (and so `tar xzf`) reads concatenated members
//! as one stream. Block boundaries depend only on the input's offsets, so
//! the same input always gives the same bytes, whatever the thread timing.

use std::collections::VecDeque;
use std::io::{self, Write};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use flate2::{Compression, GzBuilder};
use sha2::{Digest, Sha256};

/// Input bytes per gzip member.
const MEMBER_BYTES: usize = 1 << 20;
/// Bytes of a member compressed first to decide whether it compresses.
const SAMPLE_BYTES: usize = 64 << 10;
/// A sample that does not shrink below this share (in percent) marks its
/// member as incompressible: it is stored, not deflated (random or already
/// compressed payloads would cost compression time for nothing).
const STORE_ABOVE_PERCENT: usize = 97;
/// The deflate level of compressible members: fast, as `tar czf`'s
/// default (6) costs several times the CPU for ~10% smaller text.
const LEVEL: u32 = 1;

type Job = (Vec<u8>, SyncSender<io::Result<Vec<u8>>>);

/// Writes everything written to it to `out` as gzip members, hashing the
/// output (SHA-256) and counting its bytes.
pub(super) struct MemberWriter<W: Write> {
    out: W,
    buf: Vec<u8>,
    jobs: Option<SyncSender<Job>>,
    workers: Vec<JoinHandle<()>>,
    /// Members in input order, each arriving from a worker.
    pending: VecDeque<Receiver<io::Result<Vec<u8>>>>,
    max_pending: usize,
    sha: Sha256,
    written: u64,
}

impl<W: Write> MemberWriter<W> {
    /// A writer compressing on `threads` worker threads.
    pub(super) fn new(out: W, threads: usize) -> MemberWriter<W> {
        let threads = threads.max(1);
        let (tx, rx) = sync_channel::<Job>(threads * 2);
        let rx = Arc::new(Mutex::new(rx));
        let workers = (0..threads)
            .map(|_| {
                let rx = Arc::clone(&rx);
                std::thread::spawn(move || loop {
                    let job = match rx.lock() {
                        Ok(r) => r.recv(),
                        Err(_) => return,
                    };
                    let Ok((block, reply)) = job else { return };
                    let _ = reply.send(compress_member(&block));
                })
            })
            .collect();
        MemberWriter {
            out,
            buf: Vec::with_capacity(MEMBER_BYTES),
            jobs: Some(tx),
            workers,
            pending: VecDeque::new(),
            max_pending: threads * 3,
            sha: Sha256::new(),
            written: 0,
        }
    }

    fn submit(&mut self, block: Vec<u8>) -> io::Result<()> {
        let (reply, member) = sync_channel(1);
        let jobs = self
            .jobs
            .as_ref()
            .ok_or_else(|| io::Error::other("gzip writer already finished"))?;
        jobs.send((block, reply))
            .map_err(|_| io::Error::other("gzip worker stopped"))?;
        self.pending.push_back(member);
        while self.pending.len() > self.max_pending {
            self.drain_one()?;
        }
        Ok(())
    }

    fn drain_one(&mut self) -> io::Result<()> {
        let Some(member) = self.pending.pop_front() else {
            return Ok(());
        };
        let bytes = member
            .recv()
            .map_err(|_| io::Error::other("gzip worker stopped"))??;
        self.out.write_all(&bytes)?;
        self.sha.update(&bytes);
        self.written += bytes.len() as u64;
        Ok(())
    }

    /// Compresses what is left, waits for every member, and returns the
    /// output with its byte count and SHA-256.
    pub(super) fn finish(mut self) -> io::Result<(W, u64, [u8; 32])> {
        if !self.buf.is_empty() {
            let block = std::mem::take(&mut self.buf);
            self.submit(block)?;
        }
        while !self.pending.is_empty() {
            self.drain_one()?;
        }
        self.jobs = None;
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
        self.out.flush()?;
        let sha = self.sha.finalize().into();
        Ok((self.out, self.written, sha))
    }
}

impl<W: Write> Write for MemberWriter<W> {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        let room = MEMBER_BYTES - self.buf.len();
        let take = room.min(data.len());
        self.buf.extend_from_slice(&data[..take]);
        if self.buf.len() == MEMBER_BYTES {
            let block = std::mem::replace(&mut self.buf, Vec::with_capacity(MEMBER_BYTES));
            self.submit(block)?;
        }
        Ok(take)
    }

    /// Members are cut by size only (never by flushes), so the output
    /// does not depend on how the caller writes; `finish` ends the stream.
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// One complete gzip member (header mtime 0, no name) holding `block`:
/// stored when a sample of it does not compress, deflated otherwise.
fn compress_member(block: &[u8]) -> io::Result<Vec<u8>> {
    let sample = &block[..block.len().min(SAMPLE_BYTES)];
    let mut probe = flate2::write::DeflateEncoder::new(
        Vec::with_capacity(sample.len()),
        Compression::new(LEVEL),
    );
    probe.write_all(sample)?;
    let probed = probe.finish()?.len();
    let level = if probed * 100 > sample.len() * STORE_ABOVE_PERCENT {
        Compression::none()
    } else {
        Compression::new(LEVEL)
    };
    let mut gz = GzBuilder::new()
        .mtime(0)
        .write(Vec::with_capacity(block.len() / 2 + 64), level);
    gz.write_all(block)?;
    gz.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    fn encode(data: &[u8], threads: usize, chunk: usize) -> Vec<u8> {
        let mut w = MemberWriter::new(Vec::new(), threads);
        for c in data.chunks(chunk) {
            w.write_all(c).unwrap();
        }
        let (out, n, sha) = w.finish().unwrap();
        assert_eq!(n, out.len() as u64);
        assert_eq!(sha, <[u8; 32]>::from(Sha256::digest(&out)));
        out
    }

    #[test]
    fn members_decode_as_one_stream_and_do_not_depend_on_threads_or_writes() {
        // Text compresses; random bytes are stored; both across members.
        let mut data = Vec::new();
        for i in 0..200_000u32 {
            data.extend_from_slice(format!("line {i} of some text\n").as_bytes());
        }
        let mut x = 0x1234_5678_u64;
        for _ in 0..(3 * MEMBER_BYTES) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            data.push(x as u8);
        }
        let a = encode(&data, 1, 4096);
        let b = encode(&data, 3, 777_777);
        assert_eq!(a, b, "output depends on threads or write sizes");
        assert!(a.len() < data.len(), "text was not compressed");
        let mut back = Vec::new();
        flate2::read::MultiGzDecoder::new(&a[..])
            .read_to_end(&mut back)
            .unwrap();
        assert_eq!(back, data);
        // Several members, each with mtime 0 (bytes 4..8 of a header).
        assert!(data.len() / MEMBER_BYTES >= 2);
        assert_eq!(&a[..4], &[0x1f, 0x8b, 8, 0]);
        assert_eq!(&a[4..8], &[0, 0, 0, 0]);
    }
}
