//! A minimal S3 client for load generation: HTTP/1.1 keep-alive over one
//! `std::net::TcpStream` (TCP_NODELAY), path-style addressing, AWS SigV4
//! header authentication with `x-amz-content-sha256: UNSIGNED-PAYLOAD`.
//!
//! It does only what the s3 suite needs (PUT/GET/DELETE object, PUT bucket,
//! ListObjectsV2) and talks only to loopback addresses.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use hmac::{Hmac, KeyInit, Mac};
use sha2::{Digest, Sha256};

use crate::harness::{context, Result};

type HmacSha256 = Hmac<Sha256>;

/// Credentials and region every request is signed with.
#[derive(Debug, Clone)]
pub struct Creds {
    pub access_key: String,
    pub secret_key: String,
    pub region: String,
}

/// A response: status and (unless discarded) the body.
pub struct Response {
    pub status: u16,
    pub body: Vec<u8>,
    /// Body bytes received (also when discarded).
    pub len: u64,
}

/// One keep-alive connection to one server.
pub struct Conn {
    addr: SocketAddr,
    host: String,
    creds: Creds,
    stream: Option<BufReader<TcpStream>>,
    /// Signing key and the date (YYYYMMDD) it was derived for.
    key: Option<(String, Vec<u8>)>,
    head: Vec<u8>,
    line: String,
}

const TIMEOUT: Duration = Duration::from_secs(120);

fn hmac(key: &[u8], data: &[u8]) -> Vec<u8> {
    let mut m = <HmacSha256 as KeyInit>::new_from_slice(key).expect("HMAC takes any key length");
    m.update(data);
    m.finalize().into_bytes().to_vec()
}

fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(DIGITS[(b >> 4) as usize] as char);
        s.push(DIGITS[(b & 15) as usize] as char);
    }
    s
}

/// `YYYYMMDD'T'HHMMSS'Z'` for a Unix time (UTC).
fn amz_date(unix: u64) -> String {
    let days = (unix / 86_400) as i64;
    let secs = unix % 86_400;
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}{m:02}{d:02}T{:02}{:02}{:02}Z",
        secs / 3600,
        secs / 60 % 60,
        secs % 60
    )
}

impl Conn {
    pub fn new(addr: SocketAddr, creds: &Creds) -> Result<Conn> {
        if !addr.ip().is_loopback() {
            return Err(format!("refusing to send load to {addr}: loopback only").into());
        }
        Ok(Conn {
            addr,
            host: addr.to_string(),
            creds: creds.clone(),
            stream: None,
            key: None,
            head: Vec::with_capacity(1024),
            line: String::new(),
        })
    }

    fn connect(&mut self) -> Result<&mut BufReader<TcpStream>> {
        if self.stream.is_none() {
            let s = TcpStream::connect_timeout(&self.addr, Duration::from_secs(5))
                .map_err(context(format!("connect to {}", self.addr)))?;
            s.set_nodelay(true)?;
            s.set_read_timeout(Some(TIMEOUT))?;
            s.set_write_timeout(Some(TIMEOUT))?;
            self.stream = Some(BufReader::with_capacity(256 << 10, s));
        }
        Ok(self.stream.as_mut().expect("connected above"))
    }

    fn signing_key(&mut self, date: &str) -> Vec<u8> {
        if let Some((d, k)) = &self.key {
            if d == date {
                return k.clone();
            }
        }
        let k = hmac(
            format!("AWS4{}", self.creds.secret_key).as_bytes(),
            date.as_bytes(),
        );
        let k = hmac(&k, self.creds.region.as_bytes());
        let k = hmac(&k, b"s3");
        let k = hmac(&k, b"aws4_request");
        self.key = Some((date.to_string(), k.clone()));
        k
    }

    /// Writes the signed request head. `path` is already URI-encoded;
    /// `query` is the canonical (sorted, encoded) query string or empty.
    fn write_head(&mut self, method: &str, path: &str, query: &str, len: u64) -> Result<()> {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let stamp = amz_date(now);
        let date = &stamp[..8];
        let canonical = format!(
            "{method}\n{path}\n{query}\nhost:{}\nx-amz-content-sha256:UNSIGNED-PAYLOAD\n\
             x-amz-date:{stamp}\n\nhost;x-amz-content-sha256;x-amz-date\nUNSIGNED-PAYLOAD",
            self.host
        );
        let scope = format!("{date}/{}/s3/aws4_request", self.creds.region);
        let to_sign = format!(
            "AWS4-HMAC-SHA256\n{stamp}\n{scope}\n{}",
            hex(&Sha256::digest(canonical.as_bytes()))
        );
        let key = self.signing_key(date);
        let sig = hex(&hmac(&key, to_sign.as_bytes()));
        self.head.clear();
        let q = if query.is_empty() { "" } else { "?" };
        write!(
            self.head,
            "{method} {path}{q}{query} HTTP/1.1\r\nHost: {}\r\n\
             x-amz-content-sha256: UNSIGNED-PAYLOAD\r\nx-amz-date: {stamp}\r\n\
             Authorization: AWS4-HMAC-SHA256 Credential={}/{scope}, \
             SignedHeaders=host;x-amz-content-sha256;x-amz-date, Signature={sig}\r\n",
            self.host, self.creds.access_key
        )?;
        if method == "PUT" || len > 0 {
            write!(self.head, "Content-Length: {len}\r\n")?;
        }
        self.head.extend_from_slice(b"\r\n");
        let head = std::mem::take(&mut self.head);
        let r = self.connect()?.get_mut().write_all(&head);
        self.head = head;
        r.map_err(context("send a request"))
    }

    /// Sends a request with `body` and reads the response (keeping the
    /// body unless `discard`). Retries once on a fresh connection if the
    /// server had closed the kept-alive one before the request.
    pub fn request(
        &mut self,
        method: &str,
        path: &str,
        query: &str,
        body: &[u8],
        discard: bool,
    ) -> Result<Response> {
        let reused = self.stream.is_some();
        match self.try_request(method, path, query, body, discard) {
            Err(_) if reused => {
                self.stream = None;
                self.try_request(method, path, query, body, discard)
            }
            r => r,
        }
    }

    fn try_request(
        &mut self,
        method: &str,
        path: &str,
        query: &str,
        body: &[u8],
        discard: bool,
    ) -> Result<Response> {
        self.write_head(method, path, query, body.len() as u64)?;
        if !body.is_empty() {
            self.connect()?
                .get_mut()
                .write_all(body)
                .map_err(context("send a body"))?;
        }
        self.read_response(method == "HEAD", discard)
    }

    /// Sends a PUT whose body (`len` bytes) comes from `src`, in chunks.
    pub fn put_stream(&mut self, path: &str, len: u64, src: &mut dyn Read) -> Result<Response> {
        self.write_head("PUT", path, "", len)?;
        let mut buf = vec![0u8; 1 << 20];
        let mut left = len;
        while left > 0 {
            let want = buf.len().min(left as usize);
            let n = src.read(&mut buf[..want])?;
            if n == 0 {
                return Err("the body source ended early".into());
            }
            self.connect()?
                .get_mut()
                .write_all(&buf[..n])
                .map_err(context("send a body"))?;
            left -= n as u64;
        }
        self.read_response(false, true)
    }

    fn read_response(&mut self, head_only: bool, discard: bool) -> Result<Response> {
        let mut line = std::mem::take(&mut self.line);
        let r = self.read_response_inner(&mut line, head_only, discard);
        self.line = line;
        if r.is_err() {
            self.stream = None;
        }
        r
    }

    fn read_response_inner(
        &mut self,
        line: &mut String,
        head_only: bool,
        discard: bool,
    ) -> Result<Response> {
        let s = self.connect()?;
        line.clear();
        if s.read_line(line)? == 0 {
            return Err("the server closed the connection".into());
        }
        let mut parts = line.split_whitespace();
        let version = parts.next().unwrap_or("").to_string();
        let status: u16 = parts
            .next()
            .and_then(|c| c.parse().ok())
            .ok_or_else(|| format!("bad status line {line:?}"))?;
        let mut length: Option<u64> = None;
        let mut chunked = false;
        let mut close = version == "HTTP/1.0";
        for _ in 0..200 {
            line.clear();
            if s.read_line(line)? == 0 {
                return Err("the server closed the connection in the headers".into());
            }
            let l = line.trim_end();
            if l.is_empty() {
                break;
            }
            let Some((name, value)) = l.split_once(':') else {
                continue;
            };
            let value = value.trim();
            if name.eq_ignore_ascii_case("content-length") {
                length = value.parse().ok();
            } else if name.eq_ignore_ascii_case("transfer-encoding") {
                chunked = value.to_ascii_lowercase().contains("chunked");
            } else if name.eq_ignore_ascii_case("connection") {
                let v = value.to_ascii_lowercase();
                close = v.contains("close") || (close && !v.contains("keep-alive"));
            }
        }
        let mut body = Vec::new();
        let mut len = 0u64;
        let mut take = |s: &mut BufReader<TcpStream>, n: u64| -> Result<()> {
            let mut left = n;
            while left > 0 {
                let buf = s.fill_buf()?;
                if buf.is_empty() {
                    return Err("the server closed the connection in a body".into());
                }
                let k = buf.len().min(left as usize);
                if !discard {
                    body.extend_from_slice(&buf[..k]);
                }
                s.consume(k);
                left -= k as u64;
                len += k as u64;
            }
            Ok(())
        };
        if head_only || status == 204 || status == 304 || (100..200).contains(&status) {
        } else if chunked {
            for _ in 0..10_000_000u64 {
                line.clear();
                s.read_line(line)?;
                let size = u64::from_str_radix(line.trim().split(';').next().unwrap_or(""), 16)
                    .map_err(|_| format!("bad chunk size {line:?}"))?;
                if size == 0 {
                    // Trailers, then the empty line.
                    for _ in 0..100 {
                        line.clear();
                        if s.read_line(line)? == 0 || line.trim_end().is_empty() {
                            break;
                        }
                    }
                    break;
                }
                take(s, size)?;
                line.clear();
                s.read_line(line)?;
            }
        } else if let Some(n) = length {
            take(s, n)?;
        } else {
            // No length: the body runs to the end of the connection.
            let mut rest = Vec::new();
            s.read_to_end(&mut rest)?;
            len = rest.len() as u64;
            if !discard {
                body = rest;
            }
            close = true;
        }
        if close {
            self.stream = None;
        }
        Ok(Response { status, body, len })
    }
}

/// Fails unless the response has a 2xx status.
pub fn ok(what: &str, r: Response) -> Result<Response> {
    if (200..300).contains(&r.status) {
        Ok(r)
    } else {
        let text = String::from_utf8_lossy(&r.body[..r.body.len().min(400)]).into_owned();
        Err(format!("{what}: HTTP {} {text}", r.status).into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_format() {
        assert_eq!(amz_date(0), "19700101T000000Z");
        assert_eq!(amz_date(1_440_938_160), "20150830T123600Z");
        assert_eq!(amz_date(1_709_251_199), "20240229T235959Z");
    }

    #[test]
    fn sigv4_signing_key_matches_the_aws_example() {
        // From the AWS SigV4 documentation ("Examples of how to derive a
        // signing key"), service iam.
        let k = hmac(b"AWS4wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", b"20150830");
        let k = hmac(&k, b"us-east-1");
        let k = hmac(&k, b"iam");
        let k = hmac(&k, b"aws4_request");
        assert_eq!(
            hex(&k),
            "c4afb1cc5771d871763a393e44b703571b55cc28424d1a5e86da6ed3c154a4b9"
        );
    }
}
