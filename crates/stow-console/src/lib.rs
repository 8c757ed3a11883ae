//! The web console of `stow-s3`: buckets and objects in a browser.
//!
//! [`Console`] serves, on a port of its own (never the S3 port, so an
//! uploaded HTML object can never run script in the console's origin):
//!
//! - the page at [`CONSOLE_PATH`]: hand-written HTML, CSS and ES modules
//!   embedded in the binary ([`assets`]), under a strict
//!   Content-Security-Policy (no inline script);
//! - a small JSON API under `/_stow/console/api/` ([`api`]): sign-in with
//!   the server's key pair gives a session cookie ([`session`]), and each
//!   call is then made as the S3 request it stands for, through the same
//!   [`stow_s3_http::StowS3`] service the S3 port runs (so the same
//!   authorization, read-only refusal and error codes apply).
//!
//! For `workspace serve` it also shows the workspace's checkpoints
//! ([`workspace`]): the timeline, status, diffs and rewind, through the
//! checkpoint engine's own functions and the workspace's watch service.
//!
//! It holds no storage logic.

pub mod api;
pub mod assets;
pub mod error;
pub mod presign;
pub mod session;
pub mod textdiff;
pub mod workspace;

use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use http::{header, HeaderMap, HeaderValue, Method, Request, Response, StatusCode};
use hyper::body::Incoming;
use stow_store::ObjectBackend;
use tokio::net::TcpListener;

pub use error::ConsoleError;

/// Where the console lives on its port.
pub const CONSOLE_PATH: &str = "/_stow/console/";

/// The response body type.
pub type Body = s3s::Body;

/// The Content-Security-Policy of the page and the API: only the
/// console's own files, no inline script or style, never framed.
const CSP: &str = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; \
connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'";

/// What the console serves and how it signs in.
#[derive(Clone)]
pub struct ConsoleConfig {
    /// The objects shown: the same backend the S3 port serves.
    pub store: Arc<dyn ObjectBackend>,
    /// The server's access key (sign-in and the S3 requests' identity).
    pub access_key: String,
    /// The server's secret key.
    pub secret_key: String,
    /// Region of the S3 service.
    pub region: String,
    /// Refuse every mutation, as the S3 port does.
    pub read_only: bool,
    /// Largest upload accepted (the S3 port's request-body limit).
    pub max_upload_bytes: u64,
    /// The workspace whose checkpoint pages are shown (`workspace serve`);
    /// `None` for `serve`.
    pub workspace: Option<workspace::WorkspacePages>,
    /// The store's quotas, shown beside its usage.
    pub quota: Quota,
    /// The S3 port's URL (`http://host:port`), which share links point
    /// at; `None` offers no share links.
    pub s3_endpoint: Option<String>,
}

/// The store's limits, as the server was started with them.
#[derive(Clone, Copy, Debug, Default)]
pub struct Quota {
    /// Most stored bytes (`--max-bytes`), if limited.
    pub max_bytes: Option<u64>,
    /// Most stored objects (`--max-objects`), if limited.
    pub max_objects: Option<u64>,
}

/// A bound console.
pub struct Console {
    listener: TcpListener,
    addr: SocketAddr,
    state: Arc<api::State>,
}

impl Console {
    /// Binds the console's socket (port 0 picks a free one).
    pub async fn bind(addr: SocketAddr, config: ConsoleConfig) -> std::io::Result<Console> {
        let listener = TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        Ok(Console {
            listener,
            addr,
            state: Arc::new(api::State::new(config)),
        })
    }

    /// The bound address.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// The URL to open: `http://<addr>/_stow/console/`, with an
    /// unspecified bind address shown as loopback.
    pub fn url(&self) -> String {
        let shown = match self.addr.ip() {
            ip if ip.is_unspecified() => {
                SocketAddr::new(IpAddr::from([127, 0, 0, 1]), self.addr.port())
            }
            _ => self.addr,
        };
        format!("http://{shown}{CONSOLE_PATH}")
    }

    /// Serves until `shutdown` resolves, then gives open requests up to
    /// `grace` to finish.
    pub async fn run(self, shutdown: impl Future<Output = ()>, grace: Duration) {
        let state = self.state;
        let answer = move |req, _peer| {
            let state = Arc::clone(&state);
            async move { handle(&state, req).await }
        };
        stow_s3_http::serve_connections(self.listener, "console", answer, shutdown, grace).await;
    }
}

/// A console serving on the runtime; [`Running::stop`] ends it.
pub struct Running {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
}

impl Console {
    /// Serves on a task of the current runtime until [`Running::stop`];
    /// open requests then get up to `grace` to finish.
    pub fn spawn(self, grace: Duration) -> Running {
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(self.run(
            async move {
                let _ = rx.await;
            },
            grace,
        ));
        Running {
            stop: Some(tx),
            task,
        }
    }
}

impl Running {
    /// Stops accepting and waits for open requests (up to the grace).
    pub async fn stop(mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        if let Err(e) = (&mut self.task).await {
            tracing::warn!("the console task ended badly: {e}");
        }
    }
}

/// One request: route it, turn a refusal into its JSON answer, and add
/// the security headers every answer carries.
async fn handle(state: &api::State, req: Request<Incoming>) -> Response<Body> {
    let method = req.method().clone();
    let path = req.uri().path().to_string();
    let mut resp = match route(state, req).await {
        Ok(resp) => resp,
        Err(e) => {
            if e.status().is_server_error() {
                tracing::warn!("console {method} {path}: {e}");
            }
            error_response(&e)
        }
    };
    secure_headers(resp.headers_mut());
    resp
}

async fn route(state: &api::State, req: Request<Incoming>) -> Result<Response<Body>, ConsoleError> {
    session::check_host(req.headers())?;
    let path = req.uri().path().to_string();
    if path == "/" || path == CONSOLE_PATH.trim_end_matches('/') {
        return Ok(redirect(CONSOLE_PATH));
    }
    let Some(rest) = path.strip_prefix(CONSOLE_PATH) else {
        return Err(ConsoleError::NotFound);
    };
    if let Some(api_route) = rest.strip_prefix("api/") {
        let api_route = api_route.to_string();
        return api::handle(state, req, &api_route).await;
    }
    asset(req.method(), req.headers(), rest)
}

/// An embedded file, with its ETag (`304` on a match) and a
/// revalidate-always cache policy.
fn asset(method: &Method, headers: &HeaderMap, name: &str) -> Result<Response<Body>, ConsoleError> {
    if method != Method::GET && method != Method::HEAD {
        return Err(ConsoleError::Method);
    }
    let asset = assets::find(name).ok_or(ConsoleError::NotFound)?;
    let etag = asset.etag();
    let fresh = headers
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').any(|t| t.trim() == etag));
    let mut resp = if fresh {
        let mut r = Response::new(Body::empty());
        *r.status_mut() = StatusCode::NOT_MODIFIED;
        r
    } else if method == Method::HEAD {
        Response::new(Body::empty())
    } else {
        Response::new(Body::from(bytes::Bytes::from_static(asset.bytes)))
    };
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(asset.content_type),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    if let Ok(v) = HeaderValue::from_str(etag) {
        h.insert(header::ETAG, v);
    }
    Ok(resp)
}

fn redirect(to: &'static str) -> Response<Body> {
    let mut resp = Response::new(Body::empty());
    *resp.status_mut() = StatusCode::PERMANENT_REDIRECT;
    resp.headers_mut()
        .insert(header::LOCATION, HeaderValue::from_static(to));
    resp
}

/// A JSON answer.
pub(crate) fn json(status: StatusCode, value: &serde_json::Value) -> Response<Body> {
    let mut resp = Response::new(Body::from(value.to_string()));
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp
}

/// The one place a refusal becomes an HTTP answer.
fn error_response(e: &ConsoleError) -> Response<Body> {
    let mut resp = json(e.status(), &e.body());
    if let ConsoleError::TooManySignIns { retry_after } = e {
        resp.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(*retry_after));
    }
    if matches!(e, ConsoleError::Unauthenticated) {
        if let Ok(v) = HeaderValue::from_str(&session::clearing_cookie()) {
            resp.headers_mut().insert(header::SET_COOKIE, v);
        }
    }
    resp
}

/// Headers on every answer; a handler's own Content-Security-Policy or
/// Cache-Control (a download's) is kept.
fn secure_headers(h: &mut HeaderMap) {
    if !h.contains_key(header::CONTENT_SECURITY_POLICY) {
        h.insert(
            header::CONTENT_SECURITY_POLICY,
            HeaderValue::from_static(CSP),
        );
    }
    if !h.contains_key(header::CACHE_CONTROL) {
        h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    h.insert(
        "cross-origin-opener-policy",
        HeaderValue::from_static("same-origin"),
    );
    h.insert(
        "cross-origin-resource-policy",
        HeaderValue::from_static("same-origin"),
    );
}
