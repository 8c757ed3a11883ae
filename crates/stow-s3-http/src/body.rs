//! Bridges between async HTTP bodies and the store's blocking readers.

use std::io::{self, Read};
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use futures::{Stream, TryStreamExt};
use s3s::dto::StreamingBlob;
use stow_store::ObjectBody;
use tokio::sync::mpsc;
use tokio_util::io::{StreamReader, SyncIoBridge};

/// Bodies up to this size are read in one go instead of streamed.
const SMALL_BODY: u64 = 256 * 1024;
const CHUNK: usize = 256 * 1024;

/// A blocking reader over a request body. Create it on the runtime, use it
/// inside `spawn_blocking`. Errors from the body (a broken connection, a
/// failed chunk signature) surface as `InvalidData`.
pub fn request_reader(body: Option<StreamingBlob>) -> Box<dyn Read + Send> {
    match body {
        None => Box::new(io::empty()),
        Some(blob) => {
            let stream =
                blob.map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.to_string()));
            Box::new(SyncIoBridge::new(StreamReader::new(stream)))
        }
    }
}

struct ChannelStream(mpsc::Receiver<Result<Bytes, io::Error>>);

impl Stream for ChannelStream {
    type Item = Result<Bytes, io::Error>;
    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.0.poll_recv(cx)
    }
}

/// Turns an object body into a response body. Call inside `spawn_blocking`:
/// small bodies are read right there; large ones are streamed by a
/// blocking task that reads ahead a few chunks.
pub fn response_body(mut body: ObjectBody) -> io::Result<StreamingBlob> {
    if body.len() <= SMALL_BODY {
        let mut buf = Vec::with_capacity(body.len() as usize);
        body.read_to_end(&mut buf)?;
        return Ok(StreamingBlob::from(s3s::Body::from(buf)));
    }
    let (tx, rx) = mpsc::channel(4);
    std::thread::Builder::new()
        .name("stow-get".into())
        .spawn(move || loop {
            let mut buf = vec![0u8; CHUNK];
            match body.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => {
                    buf.truncate(n);
                    if tx.blocking_send(Ok(Bytes::from(buf))).is_err() {
                        break;
                    }
                }
                Err(e) => {
                    let _ = tx.blocking_send(Err(e));
                    break;
                }
            }
        })?;
    Ok(StreamingBlob::wrap(ChannelStream(rx)))
}
