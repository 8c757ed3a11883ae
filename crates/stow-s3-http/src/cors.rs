//! CORS for browser clients: which origins may read responses, and the
//! answer to preflights. Without configured origins, loopback pages only.

use http::{header, HeaderValue, Request, Response, StatusCode};
use hyper::body::Incoming;

use crate::respond::{header_str, plain, Body};

/// The origins allowed to read responses (`serve --cors-origin`).
pub(crate) struct Cors {
    /// Empty: loopback origins only; `*`: any.
    pub(crate) origins: Vec<String>,
}

impl Cors {
    pub(crate) fn allowed(&self, origin: &str) -> bool {
        if self.origins.is_empty() {
            return is_loopback_origin(origin);
        }
        self.origins.iter().any(|o| o == "*" || o == origin)
    }

    /// Adds `Vary: Origin`, and for an allowed origin the headers that let
    /// its script read the response.
    pub(crate) fn decorate(
        &self,
        origin: Option<&HeaderValue>,
        mut resp: Response<Body>,
    ) -> Response<Body> {
        let headers = resp.headers_mut();
        headers.append(header::VARY, HeaderValue::from_static("Origin"));
        if let Some(origin) = origin {
            if origin.to_str().is_ok_and(|o| self.allowed(o)) {
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

    /// The answer to a CORS preflight (`OPTIONS` with `Origin`).
    pub(crate) fn preflight(&self, req: &Request<Incoming>) -> Response<Body> {
        let mut resp = plain(StatusCode::OK, "");
        let allowed = header_str(req, "origin").is_some_and(|o| self.allowed(o));
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
}
