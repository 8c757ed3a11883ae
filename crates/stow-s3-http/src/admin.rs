//! The admin routes under `/_stow/` (besides the reset route): health,
//! status and Prometheus metrics, for loopback peers or the admin token.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use http::{header, HeaderValue, Method, Request, Response, StatusCode};
use hyper::body::Incoming;

use crate::auth::same_secret;
use crate::config::ServerConfig;
use crate::respond::{header_str, json, plain, Body};

/// What the status and metrics routes report of a running server.
pub(crate) struct Stats {
    pub(crate) started: Instant,
    pub(crate) listen: SocketAddr,
    pub(crate) requests: AtomicU64,
    pub(crate) refused_busy: AtomicU64,
}

impl Stats {
    pub(crate) fn new(listen: SocketAddr) -> Stats {
        Stats {
            started: Instant::now(),
            listen,
            requests: AtomicU64::new(0),
            refused_busy: AtomicU64::new(0),
        }
    }
}

/// Answers an admin route (`GET /_stow/health`, `/_stow/status`,
/// `/_stow/metrics`) for a loopback peer or one holding the admin token;
/// anyone else gets a bare 404, as for a route that does not exist.
pub(crate) fn answer(
    config: &ServerConfig,
    stats: &Stats,
    req: &Request<Incoming>,
    peer: SocketAddr,
) -> Response<Body> {
    let token_ok = match (&config.admin_token, header_str(req, "x-stow-admin")) {
        (Some(want), Some(got)) => !want.is_empty() && same_secret(want, got),
        _ => false,
    };
    if !(peer.ip().is_loopback() || token_ok) || req.method() != Method::GET {
        return plain(StatusCode::NOT_FOUND, "");
    }
    match req.uri().path() {
        "/_stow/health" => json(StatusCode::OK, serde_json::json!({"status": "ok"})),
        "/_stow/status" => {
            let store = &config.store;
            let usage = store.usage().unwrap_or_default();
            let buckets = store.list_buckets().map(|b| b.len()).unwrap_or(0);
            json(
                StatusCode::OK,
                serde_json::json!({
                    "mode": "local",
                    "listen": stats.listen.to_string(),
                    "region": config.region,
                    "backend": store.backend_name(),
                    "read_only": config.read_only,
                    "bucket_count": buckets,
                    "object_count": usage.objects,
                    "stored_bytes": usage.bytes,
                    "cache_policy": "none",
                    "write_policy": "local-only",
                    "uptime_sec": stats.started.elapsed().as_secs(),
                    "version": env!("CARGO_PKG_VERSION"),
                }),
            )
        }
        "/_stow/metrics" => {
            let usage = config.store.usage().unwrap_or_default();
            let text = format!(
                "# TYPE stow_requests_total counter\nstow_requests_total {}\n\
                 # TYPE stow_requests_refused_busy_total counter\nstow_requests_refused_busy_total {}\n\
                 # TYPE stow_stored_bytes gauge\nstow_stored_bytes {}\n\
                 # TYPE stow_objects gauge\nstow_objects {}\n",
                stats.requests.load(Ordering::Relaxed),
                stats.refused_busy.load(Ordering::Relaxed),
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
