//! Newline-delimited JSON-RPC over stdio with a 1 MiB line limit.
//!
//! rmcp's own `AsyncRwTransport` can bound lines too, but it drops an
//! over-long line silently, so the caller waits forever for an answer that
//! never comes. This transport never buffers more than the limit either: it
//! reads through `fill_buf`/`consume`, and once a line passes the limit it
//! discards the rest as it arrives. Before discarding it looks for the
//! request `id` among the leading top-level members of what it holds and,
//! when it finds one, answers that request with a JSON-RPC "invalid
//! request" error. The session stays open either way.

use std::io;
use std::sync::Arc;

use rmcp::model::{ClientJsonRpcMessage, ErrorData, RequestId, ServerJsonRpcMessage};
use rmcp::service::RoleServer;
use rmcp::transport::Transport;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::Mutex;

/// Longest accepted incoming line, newline included.
pub const MAX_LINE_BYTES: usize = 1 << 20;

const UTF8_BOM: &[u8] = b"\xEF\xBB\xBF";

/// Line buffer capacity kept between messages.
const KEEP_LINE_CAPACITY: usize = 64 << 10;

/// A server transport over a byte reader and writer (stdin and stdout).
pub struct LineTransport<R, W> {
    read: BufReader<R>,
    line: Vec<u8>,
    max_line: usize,
    /// Dropping the tail of a line that passed the limit.
    discarding: bool,
    write: Arc<Mutex<W>>,
}

enum LineRead {
    Line,
    Oversized(Option<RequestId>),
    Eof,
}

impl<R, W> LineTransport<R, W>
where
    R: AsyncRead + Unpin + Send,
    W: AsyncWrite + Unpin + Send + 'static,
{
    /// A transport refusing lines longer than `max_line` bytes.
    pub fn new(read: R, write: W, max_line: usize) -> Self {
        LineTransport {
            read: BufReader::with_capacity(64 << 10, read),
            line: Vec::new(),
            max_line,
            discarding: false,
            write: Arc::new(Mutex::new(write)),
        }
    }

    /// Reads one line into `self.line`. Cancel-safe: partial progress stays
    /// in `self.line` / `self.discarding` for the next call.
    async fn read_line(&mut self) -> io::Result<LineRead> {
        loop {
            let available = self.read.fill_buf().await?;
            if available.is_empty() {
                return Ok(LineRead::Eof);
            }
            let newline = available.iter().position(|b| *b == b'\n');
            let take = newline.map_or(available.len(), |i| i + 1);
            let mut result = None;
            if self.discarding {
                if newline.is_some() {
                    self.discarding = false;
                }
            } else if self.line.len() + take > self.max_line {
                let head: &[u8] = if self.line.is_empty() {
                    available
                } else {
                    &self.line
                };
                let id = request_id_prefix(head);
                self.line.clear();
                self.line.shrink_to(KEEP_LINE_CAPACITY);
                self.discarding = newline.is_none();
                result = Some(LineRead::Oversized(id));
            } else {
                self.line.extend_from_slice(&available[..take]);
                if newline.is_some() {
                    result = Some(LineRead::Line);
                }
            }
            self.read.consume(take);
            if let Some(r) = result {
                return Ok(r);
            }
        }
    }

    /// Sends a message from a spawned task, so a cancelled `receive` can
    /// never leave half a line on stdout.
    fn spawn_send(&self, msg: ServerJsonRpcMessage) {
        let write = Arc::clone(&self.write);
        tokio::spawn(async move {
            if let Err(e) = write_message(&write, &msg).await {
                tracing::warn!("cannot answer a refused message: {e}");
            }
        });
    }
}

async fn write_message<W: AsyncWrite + Unpin>(
    write: &Mutex<W>,
    msg: &ServerJsonRpcMessage,
) -> io::Result<()> {
    let mut buf = serde_json::to_vec(msg).map_err(io::Error::other)?;
    buf.push(b'\n');
    let mut w = write.lock().await;
    w.write_all(&buf).await?;
    w.flush().await
}

impl<R, W> Transport<RoleServer> for LineTransport<R, W>
where
    R: AsyncRead + Unpin + Send,
    W: AsyncWrite + Unpin + Send + 'static,
{
    type Error = io::Error;

    fn send(
        &mut self,
        item: ServerJsonRpcMessage,
    ) -> impl std::future::Future<Output = Result<(), Self::Error>> + Send + 'static {
        let write = Arc::clone(&self.write);
        async move { write_message(&write, &item).await }
    }

    async fn receive(&mut self) -> Option<ClientJsonRpcMessage> {
        loop {
            match self.read_line().await {
                Ok(LineRead::Eof) => return None,
                Err(e) => {
                    tracing::error!("cannot read stdin: {e}");
                    return None;
                }
                Ok(LineRead::Oversized(id)) => {
                    tracing::warn!(
                        limit = self.max_line,
                        "refused an incoming message over the line limit"
                    );
                    if let Some(id) = id {
                        let err = ErrorData::invalid_request(
                            format!("message exceeds the {} byte line limit", self.max_line),
                            None,
                        );
                        self.spawn_send(ServerJsonRpcMessage::error(err, Some(id)));
                    }
                }
                Ok(LineRead::Line) => {
                    let parsed = parse(&self.line);
                    self.line.clear();
                    // Do not keep a megabyte around after one long message.
                    self.line.shrink_to(KEEP_LINE_CAPACITY);
                    match parsed {
                        Parsed::Message(m) => return Some(*m),
                        Parsed::Skip => {}
                        Parsed::Invalid(id) => {
                            let err = ErrorData::invalid_request("Invalid request", None);
                            self.spawn_send(ServerJsonRpcMessage::error(err, Some(id)));
                        }
                    }
                }
            }
        }
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        self.write.lock().await.flush().await
    }
}

pub(crate) enum Parsed {
    Message(Box<ClientJsonRpcMessage>),
    /// Blank lines, non-JSON, and messages without an id that we do not
    /// understand (unknown notifications): ignored, as the SDKs do.
    Skip,
    /// Well-formed JSON with an id that is not a valid message.
    Invalid(RequestId),
}

pub(crate) fn parse(line: &[u8]) -> Parsed {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let line = line.strip_prefix(UTF8_BOM).unwrap_or(line);
    if line.iter().all(u8::is_ascii_whitespace) {
        return Parsed::Skip;
    }
    match serde_json::from_slice::<ClientJsonRpcMessage>(line) {
        Ok(m) => Parsed::Message(Box::new(m)),
        Err(e) => {
            let id = serde_json::from_slice::<serde_json::Value>(line)
                .ok()
                .and_then(|v| v.get("id").cloned())
                .and_then(|id| serde_json::from_value::<RequestId>(id).ok());
            tracing::warn!("ignoring or refusing an unparsable message: {e}");
            id.map_or(Parsed::Skip, Parsed::Invalid)
        }
    }
}

/// Finds a top-level `"id"` member among the leading members of a JSON
/// object prefix, skipping members whose values fit in the prefix.
pub(crate) fn request_id_prefix(buf: &[u8]) -> Option<RequestId> {
    let mut s = Scanner { buf, pos: 0 };
    if buf.starts_with(UTF8_BOM) {
        s.pos = UTF8_BOM.len();
    }
    s.ws();
    s.eat(b'{')?;
    loop {
        s.ws();
        let key_start = s.pos;
        s.string()?;
        let key = &buf[key_start..s.pos];
        s.ws();
        s.eat(b':')?;
        s.ws();
        let value_start = s.pos;
        s.value()?;
        if key == b"\"id\"" {
            return serde_json::from_slice::<RequestId>(&buf[value_start..s.pos]).ok();
        }
        s.ws();
        s.eat(b',')?;
    }
}

struct Scanner<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl Scanner<'_> {
    fn peek(&self) -> Option<u8> {
        self.buf.get(self.pos).copied()
    }

    fn ws(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\r' | b'\n')) {
            self.pos += 1;
        }
    }

    fn eat(&mut self, b: u8) -> Option<()> {
        (self.peek()? == b).then(|| self.pos += 1)
    }

    fn string(&mut self) -> Option<()> {
        self.eat(b'"')?;
        loop {
            match self.peek()? {
                b'"' => {
                    self.pos += 1;
                    return Some(());
                }
                b'\\' => self.pos += 2,
                _ => self.pos += 1,
            }
        }
    }

    fn value(&mut self) -> Option<()> {
        match self.peek()? {
            b'"' => self.string(),
            b'{' | b'[' => {
                let mut depth = 0usize;
                loop {
                    match self.peek()? {
                        b'"' => {
                            self.string()?;
                            continue;
                        }
                        b'{' | b'[' => depth += 1,
                        b'}' | b']' => {
                            depth -= 1;
                            if depth == 0 {
                                self.pos += 1;
                                return Some(());
                            }
                        }
                        _ => {}
                    }
                    self.pos += 1;
                }
            }
            _ => {
                let start = self.pos;
                while matches!(self.peek(), Some(b) if !matches!(b, b',' | b'}' | b']' | b' ' | b'\t' | b'\r' | b'\n'))
                {
                    self.pos += 1;
                }
                // A scalar cut off by the end of the prefix is not complete.
                (self.pos > start && self.pos < self.buf.len()).then_some(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::model::NumberOrString;

    #[test]
    fn finds_leading_ids() {
        let id = request_id_prefix(
            br#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"a":"xxxx"#,
        );
        assert_eq!(id, Some(NumberOrString::Number(7)));
        let id = request_id_prefix(br#" {"method":"x","params":{"n":[1,{"b":"}"}]},"id":"abc","#);
        assert_eq!(id, Some(NumberOrString::String("abc".into())));
        assert_eq!(request_id_prefix(br#"{"method":"x","params":{"n":"#), None);
        assert_eq!(request_id_prefix(br#"{"jsonrpc":"2.0","id":12"#), None);
        assert_eq!(request_id_prefix(b"garbage"), None);
    }

    #[tokio::test(flavor = "current_thread")]
    async fn oversized_lines_are_refused_and_the_session_goes_on() {
        let big = format!(
            "{{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"ping\",\"params\":{{\"x\":\"{}\"}}}}\n",
            "a".repeat(2000)
        );
        let ok = "{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"ping\"}\n";
        let input = format!("{big}{ok}");
        let (out_w, mut out_r) = tokio::io::duplex(1 << 16);
        let mut t = LineTransport::new(input.as_bytes(), out_w, 1000);
        let msg = Transport::<RoleServer>::receive(&mut t).await.unwrap();
        let json = serde_json::to_value(&msg).unwrap();
        assert_eq!(json["id"], 4);
        assert!(Transport::<RoleServer>::receive(&mut t).await.is_none());
        tokio::task::yield_now().await;
        drop(t);
        let mut answer = String::new();
        tokio::io::AsyncReadExt::read_to_string(&mut out_r, &mut answer)
            .await
            .unwrap();
        let v: serde_json::Value = serde_json::from_str(answer.trim()).unwrap();
        assert_eq!(v["id"], 3);
        assert_eq!(v["error"]["code"], -32600);
    }
}
