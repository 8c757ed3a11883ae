//! The S3 wire protocol over a [`stow_store::ObjectBackend`]: a store, or a
//! workspace's bucket view.
//!
//! [`Server`] accepts HTTP/1.1 connections and runs each request through a
//! short pipeline before the S3 operation itself: admin routes
//! (`/_stow/*`; `POST /_stow/reset` only with [`ServerConfig::allow_reset`],
//! and SigV4-verified like S3), CORS, refusal of SigV2, the concurrency cap (`503
//! SlowDown`), and the request-size cap (`400 EntityTooLarge`). Then `s3s`
//! verifies SigV4 (headers, presigned URLs, `aws-chunked` streaming with
//! trailers), parses the operation, and calls [`StowS3`], which maps it onto
//! the store. Storage logic lives only in `stow-store`.

mod body;
mod connections;
mod errors;
mod public;
mod reset;
mod s3;

/// Entry points for the fuzzer (`fuzz/`) and its corpus replay. Not an API.
#[doc(hidden)]
pub mod fuzzing {
    pub use crate::s3::fuzzing::request_headers;
}

use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use http::{header, HeaderValue, Method, Request, Response, StatusCode};
use hyper::body::Incoming;
use s3s::auth::{S3Auth, SecretKey};
use s3s::host::{S3Host, VirtualHost};
use s3s::service::{S3Service, S3ServiceBuilder};
use s3s::{s3_error, S3Error, S3Result};
use stow_store::ObjectBackend;
use tokio::net::TcpListener;

pub use connections::serve_connections;
use tokio::sync::Semaphore;

pub use reset::RESET_PATH;
pub use s3::StowS3;

/// Everything a server needs besides its listening socket.
#[derive(Clone)]
pub struct ServerConfig {
    /// The objects served.
    pub store: std::sync::Arc<dyn ObjectBackend>,
    pub access_key: String,
    pub secret_key: String,
    pub region: String,
    pub read_only: bool,
    /// Largest request body accepted (`400 EntityTooLarge` beyond).
    pub max_request_bytes: u64,
    /// Requests served at once (`503 SlowDown` beyond).
    pub max_concurrent_requests: usize,
    /// Allowed CORS origins; empty means loopback origins only; `*` any.
    pub cors_origins: Vec<String>,
    /// Token for admin routes from non-loopback peers.
    pub admin_token: Option<String>,
    /// Suffix for virtual-host addressing (`<bucket>.<base-host>`), besides
    /// `<bucket>.localhost`, which always works.
    pub base_host: Option<String>,
    /// Answer `POST /_stow/reset` (SigV4-signed), which empties the store;
    /// off, the route is refused with `405 MethodNotAllowed`. For test
    /// sessions only (`serve --allow-reset`).
    pub allow_reset: bool,
}

/// Virtual-host addressing for `<bucket>.localhost` and
/// `<bucket>.<base-host>`; every other host (an IP, `localhost` itself)
/// means path-style addressing.
struct LocalHosts {
    bases: Vec<String>,
}

impl S3Host for LocalHosts {
    fn parse_host_header<'a>(&'a self, host: &'a str) -> S3Result<VirtualHost<'a>> {
        let name = if host.starts_with('[') {
            host.split(']')
                .next()
                .map_or(host, |h| &host[..h.len() + 1])
        } else {
            host.rsplit_once(':').map_or(host, |(h, _)| h)
        };
        for base in &self.bases {
            let Some(prefix) = name.len().checked_sub(base.len() + 1) else {
                continue;
            };
            let (bucket, rest) = name.split_at(prefix);
            if rest.len() == base.len() + 1
                && rest.as_bytes()[0] == b'.'
                && rest[1..].eq_ignore_ascii_case(base)
                && !bucket.is_empty()
            {
                return Ok(VirtualHost::new(&rest[1..]).with_bucket(bucket));
            }
        }
        Ok(VirtualHost::new(name))
    }
}

/// One key pair; unknown access keys are refused as AccessDenied.
struct OneKey {
    access_key: String,
    secret_key: SecretKey,
}

#[async_trait::async_trait]
impl S3Auth for OneKey {
    async fn get_secret_key(&self, access_key: &str) -> S3Result<SecretKey> {
        if access_key == self.access_key {
            Ok(self.secret_key.clone())
        } else {
            Err(s3_error!(
                AccessDenied,
                "The access key is not known to this server"
            ))
        }
    }
}

struct Handler {
    s3: S3Service,
    config: ServerConfig,
    slots: Arc<Semaphore>,
    started: Instant,
    listen: SocketAddr,
    requests: AtomicU64,
    refused_busy: AtomicU64,
}

/// A bound S3 server.
pub struct Server {
    listener: TcpListener,
    handler: Arc<Handler>,
}

type Body = s3s::Body;

impl Server {
    /// Binds the listening socket. Port 0 picks a free port; see
    /// [`Server::local_addr`].
    pub async fn bind(addr: SocketAddr, config: ServerConfig) -> std::io::Result<Server> {
        let listener = TcpListener::bind(addr).await?;
        let listen = listener.local_addr()?;
        let mut builder = S3ServiceBuilder::new(StowS3::new(
            config.store.clone(),
            config.read_only,
            config.region.clone(),
        ));
        let mut bases = vec!["localhost".to_string()];
        bases.extend(config.base_host.clone().filter(|b| !b.is_empty()));
        builder.set_host(LocalHosts { bases });
        builder.set_auth(OneKey {
            access_key: config.access_key.clone(),
            secret_key: SecretKey::from(config.secret_key.as_str()),
        });
        builder.set_access(public::PublicReads {
            store: config.store.clone(),
        });
        if config.allow_reset {
            builder.set_route(reset::ResetRoute {
                store: config.store.clone(),
            });
            builder.set_validation(reset::WithAdminPath);
        }
        let handler = Arc::new(Handler {
            s3: builder.build(),
            slots: Arc::new(Semaphore::new(config.max_concurrent_requests.max(1))),
            config,
            started: Instant::now(),
            listen,
            requests: AtomicU64::new(0),
            refused_busy: AtomicU64::new(0),
        });
        Ok(Server { listener, handler })
    }

    /// The bound address.
    pub fn local_addr(&self) -> SocketAddr {
        self.handler.listen
    }

    /// Serves until `shutdown` resolves, then stops accepting and gives
    /// in-flight requests up to `grace` to finish.
    pub async fn run(self, shutdown: impl Future<Output = ()>, grace: Duration) {
        let handler = self.handler;
        let handle = move |req, peer| {
            let handler = Arc::clone(&handler);
            async move { handler.handle(req, peer).await }
        };
        serve_connections(self.listener, "s3", handle, shutdown, grace).await;
    }
}

fn xml_error(err: S3Error) -> Response<Body> {
    match err.to_http_response() {
        Ok(resp) => resp,
        Err(_) => plain(StatusCode::INTERNAL_SERVER_ERROR, "internal error"),
    }
}

/// 32 hex characters identifying one request in logs and responses.
fn request_id() -> String {
    let n: u128 = rand::random();
    format!("{n:032x}")
}

fn plain(status: StatusCode, text: &str) -> Response<Body> {
    let mut resp = Response::new(Body::from(text.to_string()));
    *resp.status_mut() = status;
    resp
}

fn json(status: StatusCode, value: serde_json::Value) -> Response<Body> {
    let mut resp = Response::new(Body::from(value.to_string()));
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp
}

fn header_str<'a>(req: &'a Request<Incoming>, name: &str) -> Option<&'a str> {
    req.headers().get(name).and_then(|v| v.to_str().ok())
}

/// Constant-time comparison, so a token cannot be guessed byte by byte.
fn same_secret(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
}

fn is_loopback_origin(origin: &str) -> bool {
    [
        "http://localhost",
        "http://127.0.0.1",
        "http://[::1]",
        "https://localhost",
        "https://127.0.0.1",
    ]
    .iter()
    .any(|base| {
        origin.strip_prefix(base).is_some_and(|rest| {
            rest.is_empty()
                || (rest.starts_with(':') && rest[1..].bytes().all(|b| b.is_ascii_digit()))
        })
    })
}

/// An S3 error body names the request (`<RequestId>`) as its
/// `x-amz-request-id` header does, so a report quoting either finds it.
fn error_with_request_id(resp: Response<Body>, id: &str) -> Response<Body> {
    let (mut parts, body) = resp.into_parts();
    let Some(xml) = body.bytes() else {
        return Response::from_parts(parts, body);
    };
    let text = String::from_utf8_lossy(&xml);
    let Some(end) = text.rfind("</Error>") else {
        return Response::from_parts(parts, body);
    };
    let element = format!("<RequestId>{id}</RequestId>");
    let text = match (text.find("<RequestId>"), text.find("</RequestId>")) {
        (Some(a), Some(b)) if a < b => {
            format!(
                "{}{element}{}",
                &text[..a],
                &text[b + "</RequestId>".len()..]
            )
        }
        _ => format!("{}{element}{}", &text[..end], &text[end..]),
    };
    if let Ok(v) = HeaderValue::from_str(&text.len().to_string()) {
        parts.headers.insert(header::CONTENT_LENGTH, v);
    }
    Response::from_parts(parts, Body::from(text))
}

/// GetObjectAttributes names the ETag without quotes on AWS (unlike every
/// other response), and SDKs compare it as sent; `s3s` always quotes it.
fn unquote_attributes_etag(resp: Response<Body>) -> Response<Body> {
    let (mut parts, body) = resp.into_parts();
    let Some(xml) = body.bytes().filter(|_| parts.status == StatusCode::OK) else {
        return Response::from_parts(parts, body);
    };
    let text = String::from_utf8_lossy(&xml)
        .replace("<ETag>\"", "<ETag>")
        .replace("\"</ETag>", "</ETag>");
    if let Ok(v) = HeaderValue::from_str(&text.len().to_string()) {
        parts.headers.insert(header::CONTENT_LENGTH, v);
    }
    Response::from_parts(parts, Body::from(text))
}

/// SigV4 lets a request carry its time in `Date` instead of `x-amz-date`
/// (the string to sign holds it in ISO 8601 basic form either way); `s3s`
/// reads only `x-amz-date`, so a header-signed request dated by `Date`
/// alone gets the same instant as `x-amz-date` too. The signed headers are
/// untouched: `date` stays what was signed.
fn date_as_amz_date(headers: &mut http::HeaderMap) {
    let sigv4 = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|a| a.starts_with("AWS4-HMAC-SHA256"));
    if !sigv4 || headers.contains_key("x-amz-date") {
        return;
    }
    let Some(date) = headers.get(header::DATE).and_then(|v| v.to_str().ok()) else {
        return;
    };
    if let Some(v) = http_date_to_amz(date).and_then(|d| HeaderValue::from_str(&d).ok()) {
        headers.insert("x-amz-date", v);
    }
}

/// An HTTP date (`Tue, 01 Dec 2026 12:00:00 GMT`, or with `+0000`/`-0000`)
/// as `20261201T120000Z`.
fn http_date_to_amz(date: &str) -> Option<String> {
    let fields: Vec<&str> = date.split_whitespace().collect();
    let [_, day, month, year, clock, zone] = fields.as_slice() else {
        return None;
    };
    if !matches!(*zone, "GMT" | "UTC" | "UT" | "Z" | "+0000" | "-0000") {
        return None;
    }
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let month = MONTHS.iter().position(|m| m.eq_ignore_ascii_case(month))? + 1;
    let day: u32 = day.parse().ok()?;
    let year: u32 = year.parse().ok()?;
    let hms: Vec<u32> = clock
        .split(':')
        .map(|p| p.parse().ok())
        .collect::<Option<_>>()?;
    let [h, m, s] = hms.as_slice() else {
        return None;
    };
    let valid = (1..=31).contains(&day) && *h < 24 && *m < 60 && *s < 61 && year >= 1970;
    valid.then(|| format!("{year:04}{month:02}{day:02}T{h:02}{m:02}{s:02}Z"))
}

/// The longest validity a presigned URL may claim (SigV4: one week).
const MAX_PRESIGNED_EXPIRES: i64 = 604_800;

/// Refuses a presigned URL whose `X-Amz-Expires` is not a whole number of
/// seconds between 1 and a week, before anything else looks at it: a URL
/// that claims to live longer must not be served (AWS refuses it with 400
/// AuthorizationQueryParametersError); one of zero seconds or less has
/// expired (403 AccessDenied, as AWS answers).
fn presigned_expiry_refusal(query: &str) -> Option<s3s::S3Error> {
    let value = query.split('&').find_map(|p| {
        let (k, v) = p.split_once('=').unwrap_or((p, ""));
        (k == "X-Amz-Expires").then_some(v)
    })?;
    // AWS's code and messages (400 AuthorizationQueryParametersError).
    let refuse = |msg: &str| {
        Some(s3s::S3Error::with_message(
            s3s::S3ErrorCode::AuthorizationQueryParametersError,
            msg.to_string(),
        ))
    };
    match value.parse::<i64>() {
        Ok(n) if (1..=MAX_PRESIGNED_EXPIRES).contains(&n) => None,
        Ok(n) if n > MAX_PRESIGNED_EXPIRES => {
            refuse("X-Amz-Expires must be less than a week (in seconds) that is 604800")
        }
        // A URL valid for no time (or less) expired when it was signed:
        // AWS answers 403 AccessDenied, as for any expired URL.
        Ok(_) => Some(s3s::S3Error::with_message(
            s3s::S3ErrorCode::AccessDenied,
            "Request has expired".to_string(),
        )),
        _ => refuse("X-Amz-Expires should be a number from 1 to 604800"),
    }
}

/// What a request's `Expect: 100-continue` means for its connection.
///
/// hyper sends `100 Continue` when a handler first reads the body, so a
/// request whose body is never read (an announced empty body, or one
/// refused before reading) gets its final response with no `100 Continue`
/// first. HTTP allows that, but botocore up to at least 1.43 (the AWS CLI
/// v1) then misreads a later response on the same pooled connection and
/// stalls for 30 s (boto/botocore#3755; seen here in about half the `aws s3
/// sync` runs of a tree holding an empty file). Closing such connections
/// (`Connection: close`) leaves nothing to misread.
struct Continuation {
    expected: bool,
    empty_body: bool,
}

impl Continuation {
    fn of<B>(req: &Request<B>) -> Continuation {
        let expected = req
            .headers()
            .get(header::EXPECT)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.trim().eq_ignore_ascii_case("100-continue"));
        let empty_body = req
            .headers()
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.trim() == "0");
        Continuation {
            expected,
            empty_body,
        }
    }

    /// Whether the connection must close after a response of `status`:
    /// the request expected `100 Continue` and either announced no body or
    /// was refused (its body possibly unread).
    fn close_after(&self, status: hyper::StatusCode) -> bool {
        self.expected && (self.empty_body || status.as_u16() >= 400)
    }
}

impl Handler {
    fn allowed_origin(&self, origin: &str) -> bool {
        if self.config.cors_origins.is_empty() {
            return is_loopback_origin(origin);
        }
        self.config
            .cors_origins
            .iter()
            .any(|o| o == "*" || o == origin)
    }

    fn with_cors(&self, origin: Option<&HeaderValue>, mut resp: Response<Body>) -> Response<Body> {
        let headers = resp.headers_mut();
        headers.append(header::VARY, HeaderValue::from_static("Origin"));
        if let Some(origin) = origin {
            if origin.to_str().is_ok_and(|o| self.allowed_origin(o)) {
                headers.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, origin.clone());
                headers.insert(
                    header::ACCESS_CONTROL_EXPOSE_HEADERS,
                    HeaderValue::from_static(
                        "ETag, x-amz-request-id, x-amz-version-id, Content-Range, Content-Length",
                    ),
                );
            }
        }
        resp
    }

    async fn handle(&self, req: Request<Incoming>, peer: SocketAddr) -> Response<Body> {
        self.requests.fetch_add(1, Ordering::Relaxed);
        let started = Instant::now();
        let origin = req.headers().get(header::ORIGIN).cloned();
        let method = req.method().clone();
        let admin = req.uri().path().starts_with("/_stow/");
        let path = if admin {
            req.uri().path().to_string()
        } else {
            "/s3".to_string()
        };
        let continuation = Continuation::of(&req);
        let mut resp = self.route(req, peer).await;
        if continuation.close_after(resp.status()) {
            resp.headers_mut()
                .insert(header::CONNECTION, HeaderValue::from_static("close"));
        }
        let request_id = request_id();
        if resp.status().as_u16() >= 400 {
            resp = error_with_request_id(resp, &request_id);
        }
        if let Ok(v) = HeaderValue::from_str(&request_id) {
            resp.headers_mut().insert("x-amz-request-id", v);
        }
        tracing::info!(
            "{method} {path} {} {:.3}ms id={request_id}",
            resp.status().as_u16(),
            started.elapsed().as_secs_f64() * 1e3
        );
        self.with_cors(origin.as_ref(), resp)
    }

    async fn route(&self, mut req: Request<Incoming>, peer: SocketAddr) -> Response<Body> {
        if req.uri().path() == RESET_PATH {
            // Signed like an S3 request, so it takes the S3 path below
            // (slot, early refusals, SigV4) when the server allows it.
            if !self.config.allow_reset || req.method() != Method::POST {
                return xml_error(reset::refusal(self.config.allow_reset));
            }
        } else if req.uri().path().starts_with("/_stow/") {
            return self.admin(&req, peer);
        }
        if req.method() == Method::OPTIONS && req.headers().contains_key(header::ORIGIN) {
            return self.preflight(&req);
        }
        if let Some(refusal) = self.refuse_early(&req) {
            return refusal;
        }
        let Ok(_slot) = Arc::clone(&self.slots).try_acquire_owned() else {
            self.refused_busy.fetch_add(1, Ordering::Relaxed);
            let mut resp = xml_error(s3_error!(
                SlowDown,
                "Too many concurrent requests; retry shortly"
            ));
            resp.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
            return resp;
        };
        date_as_amz_date(req.headers_mut());
        let attributes = req.method() == Method::GET
            && req.uri().query().is_some_and(|q| {
                q.split('&')
                    .any(|p| p.split('=').next() == Some("attributes"))
            });
        let req = req.map(Body::from);
        match self.s3.call(req).await {
            Ok(resp) if attributes => unquote_attributes_etag(resp),
            Ok(resp) => resp,
            Err(e) => {
                tracing::error!("request failed: {e:?}");
                plain(StatusCode::INTERNAL_SERVER_ERROR, "internal error")
            }
        }
    }

    /// Refusals that need no SigV4 work: SigV2, IAM/STS calls, oversized bodies.
    fn refuse_early(&self, req: &Request<Incoming>) -> Option<Response<Body>> {
        let query = req.uri().query().unwrap_or("");
        let has_param = |name: &str| query.split('&').any(|p| p.split('=').next() == Some(name));
        let sigv2 = header_str(req, "authorization").is_some_and(|a| a.starts_with("AWS "))
            || (has_param("AWSAccessKeyId") && has_param("Signature"));
        if sigv2 {
            return Some(xml_error(s3_error!(
                AccessDenied,
                "Signature Version 2 is not supported; sign requests with AWS Signature Version 4"
            )));
        }
        // An empty Content-MD5 is a malformed digest, not an absent one.
        if req
            .headers()
            .get("content-md5")
            .is_some_and(|v| v.as_bytes().iter().all(u8::is_ascii_whitespace))
        {
            return Some(xml_error(s3_error!(
                InvalidDigest,
                "The Content-MD5 you specified is not valid"
            )));
        }
        if let Some(refusal) = presigned_expiry_refusal(query) {
            return Some(xml_error(refusal));
        }
        if has_param("Action") {
            return Some(xml_error(s3_error!(
                NotImplemented,
                "IAM and STS actions are not served by this S3 endpoint"
            )));
        }
        // Checksum headers of algorithms S3 does not define must not be
        // silently ignored: the caller expects them verified.
        let unknown_checksum = req.headers().keys().any(|name| {
            name.as_str()
                .strip_prefix("x-amz-checksum-")
                .is_some_and(|alg| {
                    !matches!(
                        alg,
                        "crc32"
                            | "crc32c"
                            | "crc64nvme"
                            | "sha1"
                            | "sha256"
                            | "mode"
                            | "type"
                            | "algorithm"
                    )
                })
        });
        if unknown_checksum {
            return Some(xml_error(s3_error!(
                InvalidRequest,
                "Unsupported checksum header; use CRC32, CRC32C, CRC64NVME, SHA1 or SHA256"
            )));
        }
        let declared = ["x-amz-decoded-content-length", "content-length"]
            .iter()
            .filter_map(|h| header_str(req, h)?.trim().parse::<u64>().ok())
            .max();
        if declared.is_some_and(|n| n > self.config.max_request_bytes) {
            return Some(xml_error(s3_error!(
                EntityTooLarge,
                "Your proposed upload exceeds the maximum allowed size"
            )));
        }
        None
    }

    fn preflight(&self, req: &Request<Incoming>) -> Response<Body> {
        let mut resp = plain(StatusCode::OK, "");
        let allowed = header_str(req, "origin").is_some_and(|o| self.allowed_origin(o));
        if allowed {
            let h = resp.headers_mut();
            h.insert(
                header::ACCESS_CONTROL_ALLOW_METHODS,
                HeaderValue::from_static("GET, PUT, POST, DELETE, HEAD"),
            );
            let asked = req
                .headers()
                .get(header::ACCESS_CONTROL_REQUEST_HEADERS)
                .cloned()
                .unwrap_or_else(|| HeaderValue::from_static("*"));
            h.insert(header::ACCESS_CONTROL_ALLOW_HEADERS, asked);
            h.insert(
                header::ACCESS_CONTROL_MAX_AGE,
                HeaderValue::from_static("600"),
            );
        }
        resp
    }

    fn admin(&self, req: &Request<Incoming>, peer: SocketAddr) -> Response<Body> {
        let token_ok = match (&self.config.admin_token, header_str(req, "x-stow-admin")) {
            (Some(want), Some(got)) => !want.is_empty() && same_secret(want, got),
            _ => false,
        };
        if !(peer.ip().is_loopback() || token_ok) || req.method() != Method::GET {
            return plain(StatusCode::NOT_FOUND, "");
        }
        match req.uri().path() {
            "/_stow/health" => json(StatusCode::OK, serde_json::json!({"status": "ok"})),
            "/_stow/status" => {
                let store = &self.config.store;
                let usage = store.usage().unwrap_or_default();
                let buckets = store.list_buckets().map(|b| b.len()).unwrap_or(0);
                json(
                    StatusCode::OK,
                    serde_json::json!({
                        "mode": "local",
                        "listen": self.listen.to_string(),
                        "region": self.config.region,
                        "backend": store.backend_name(),
                        "read_only": self.config.read_only,
                        "bucket_count": buckets,
                        "object_count": usage.objects,
                        "stored_bytes": usage.bytes,
                        "cache_policy": "none",
                        "write_policy": "local-only",
                        "uptime_sec": self.started.elapsed().as_secs(),
                        "version": env!("CARGO_PKG_VERSION"),
                    }),
                )
            }
            "/_stow/metrics" => {
                let usage = self.config.store.usage().unwrap_or_default();
                let text = format!(
                    "# TYPE stow_requests_total counter\nstow_requests_total {}\n\
                     # TYPE stow_requests_refused_busy_total counter\nstow_requests_refused_busy_total {}\n\
                     # TYPE stow_stored_bytes gauge\nstow_stored_bytes {}\n\
                     # TYPE stow_objects gauge\nstow_objects {}\n",
                    self.requests.load(Ordering::Relaxed),
                    self.refused_busy.load(Ordering::Relaxed),
                    usage.bytes,
                    usage.objects,
                );
                let mut resp = plain(StatusCode::OK, &text);
                resp.headers_mut().insert(
                    header::CONTENT_TYPE,
                    HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
                );
                resp
            }
            _ => json(
                StatusCode::NOT_FOUND,
                serde_json::json!({"error": "not found"}),
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_origins() {
        assert!(is_loopback_origin("http://localhost:5173"));
        assert!(is_loopback_origin("http://127.0.0.1"));
        assert!(!is_loopback_origin("http://localhost.evil.com"));
        assert!(!is_loopback_origin("http://example.com"));
    }

    #[test]
    fn virtual_hosts() {
        let hosts = LocalHosts {
            bases: vec!["localhost".into(), "s3.test".into()],
        };
        let bucket = |h: &str| {
            hosts
                .parse_host_header(h)
                .unwrap()
                .bucket()
                .map(String::from)
        };
        assert_eq!(
            bucket("my-bucket.localhost:9000").as_deref(),
            Some("my-bucket")
        );
        assert_eq!(bucket("a.b.s3.test").as_deref(), Some("a.b"));
        assert_eq!(bucket("localhost:9000"), None);
        assert_eq!(bucket("127.0.0.1:9000"), None);
        assert_eq!(bucket("[::1]:9000"), None);
        assert_eq!(bucket("example.com"), None);
    }

    #[test]
    fn secrets_compare_exactly() {
        assert!(same_secret("abc", "abc"));
        assert!(!same_secret("abc", "abd"));
        assert!(!same_secret("abc", "ab"));
    }

    #[test]
    fn presigned_urls_live_at_most_a_week() {
        let q = |e: &str| {
            format!("X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Expires={e}&X-Amz-Signature=x")
        };
        assert!(presigned_expiry_refusal(&q("1")).is_none());
        assert!(presigned_expiry_refusal(&q("604800")).is_none());
        for bad in [
            "604801",
            "609901",
            "0",
            "-5",
            "1e3",
            "",
            "99999999999999999999",
        ] {
            assert!(presigned_expiry_refusal(&q(bad)).is_some(), "{bad}");
        }
        assert!(presigned_expiry_refusal("list-type=2").is_none());
        // A lifetime of zero or less has expired: 403 AccessDenied, not 400.
        for expired in ["0", "-5", "-1000"] {
            let refusal = presigned_expiry_refusal(&q(expired));
            let code = refusal.as_ref().map(|e| e.code().clone());
            assert_eq!(code, Some(s3s::S3ErrorCode::AccessDenied), "{expired}");
        }
        let code = presigned_expiry_refusal(&q("604801")).map(|e| e.code().clone());
        assert_eq!(
            code,
            Some(s3s::S3ErrorCode::AuthorizationQueryParametersError)
        );
    }

    #[test]
    fn http_dates_become_amz_dates() {
        assert_eq!(
            http_date_to_amz("Tue, 01 Dec 2026 12:03:04 GMT").as_deref(),
            Some("20261201T120304Z")
        );
        assert_eq!(
            http_date_to_amz("Tue, 01 Dec 2026 12:03:04 -0000").as_deref(),
            Some("20261201T120304Z")
        );
        for bad in [
            "",
            "Tue, 01 Dec 2026 12:03:04 +0100",
            "Tue, 41 Dec 2026 12:03:04 GMT",
            "yesterday",
        ] {
            assert_eq!(http_date_to_amz(bad), None, "{bad}");
        }
    }
}
