//! Bridges between async HTTP bodies and the store's blocking readers.

use std::io::{self, Read};
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use futures::{Stream, StreamExt, TryStreamExt};
use s3s::dto::StreamingBlob;
use stow_store::ObjectBody;
use tokio::sync::mpsc;
use tokio_util::io::{StreamReader, SyncIoBridge};

/// Bodies up to this size are read in one go instead of streamed.
const SMALL_BODY: u64 = 256 * 1024;
const CHUNK: usize = 256 * 1024;

/// Request bodies announced at up to this size are received on the
/// runtime before the store sees them.
const SMALL_REQUEST: i64 = 64 * 1024;

/// A request body as the store will read it.
pub enum RequestBody {
    /// Received whole, without error.
    Complete(Vec<u8>),
    /// Still to be read (large, or failed part-way): use inside
    /// `spawn_blocking`.
    Reader(Box<dyn Read + Send>),
}

impl RequestBody {
    /// A blocking reader over the body.
    pub fn into_reader(self) -> Box<dyn Read + Send> {
        match self {
            RequestBody::Complete(bytes) => Box::new(io::Cursor::new(bytes)),
            RequestBody::Reader(r) => r,
        }
    }
}

/// A blocking reader over a request body of `announced` bytes (the
/// request's Content-Length, decoded length for aws-chunked). Create it on
/// the runtime, use it inside `spawn_blocking`.
pub async fn request_reader(
    body: Option<StreamingBlob>,
    announced: Option<i64>,
) -> Box<dyn Read + Send> {
    request_body(body, announced).await.into_reader()
}

/// Receives a request body of `announced` bytes.
///
/// A small body is received here, on the runtime: a blocking reader would
/// cost a thread handoff per chunk, which dominates small PUTs. A large one
/// streams through a bridge with bounded memory. Errors from the body (a
/// broken connection, a failed chunk signature) surface as `InvalidData`
/// from the reader.
pub async fn request_body(body: Option<StreamingBlob>, announced: Option<i64>) -> RequestBody {
    let Some(mut blob) = body else {
        return RequestBody::Complete(Vec::new());
    };
    if !announced.is_some_and(|n| (0..=SMALL_REQUEST).contains(&n)) {
        return RequestBody::Reader(streaming_reader(blob));
    }
    let mut buf = Vec::with_capacity(announced.unwrap_or(0) as usize);
    while let Some(chunk) = blob.next().await {
        match chunk {
            Ok(bytes) => buf.extend_from_slice(&bytes),
            Err(e) => {
                let failed = io::Error::new(io::ErrorKind::InvalidData, e.to_string());
                return RequestBody::Reader(Box::new(
                    io::Cursor::new(buf).chain(FailingReader(Some(failed))),
                ));
            }
        }
        if buf.len() as i64 > SMALL_REQUEST {
            // More than announced: let the store see (and refuse) the rest.
            return RequestBody::Reader(Box::new(
                io::Cursor::new(buf).chain(streaming_reader(blob)),
            ));
        }
    }
    RequestBody::Complete(buf)
}

/// A reader that fails once with the error it holds, then reads nothing.
struct FailingReader(Option<io::Error>);

impl Read for FailingReader {
    fn read(&mut self, _buf: &mut [u8]) -> io::Result<usize> {
        match self.0.take() {
            Some(e) => Err(e),
            None => Ok(0),
        }
    }
}

fn streaming_reader(blob: StreamingBlob) -> Box<dyn Read + Send> {
    let stream = blob.map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.to_string()));
    Box::new(SyncIoBridge::new(StreamReader::new(stream)))
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
