//! A bucket's own CORS rules (PutBucketCors) at work: which rule answers a
//! browser's preflight or actual request, and the `Access-Control-*`
//! headers it earns. A bucket without rules is `cors.rs`'s (the
//! server-wide origins); a bucket with rules answers only by them, as S3
//! does.

use std::sync::Arc;

use http::{header, HeaderMap, HeaderValue, Method, Request, Response, StatusCode};
use s3s::host::S3Host;
use s3s::{S3Error, S3ErrorCode};
use stow_store::{CorsRule, ObjectBackend};

use crate::hosts::LocalHosts;
use crate::respond::{plain, xml_error, Body};

/// Finds the bucket a request addresses and reads its rules.
pub(crate) struct BucketCors {
    pub(crate) store: Arc<dyn ObjectBackend>,
    pub(crate) hosts: LocalHosts,
}

/// What a request addresses, for the refusal's `<ResourceType>`.
pub(crate) struct Target {
    pub(crate) bucket: String,
    pub(crate) object: bool,
}

impl BucketCors {
    /// The bucket (and whether an object in it) a request addresses:
    /// virtual-host style by `Host`, else the path's first segment.
    pub(crate) fn target<B>(&self, req: &Request<B>) -> Option<Target> {
        let path = req.uri().path().trim_start_matches('/');
        let host_bucket = req
            .headers()
            .get(header::HOST)
            .and_then(|h| h.to_str().ok())
            .and_then(|h| {
                self.hosts
                    .parse_host_header(h)
                    .ok()?
                    .bucket()
                    .map(String::from)
            });
        if let Some(bucket) = host_bucket {
            return Some(Target {
                bucket,
                object: !path.is_empty(),
            });
        }
        let (bucket, rest) = path.split_once('/').unwrap_or((path, ""));
        (!bucket.is_empty()).then(|| Target {
            bucket: bucket.to_string(),
            object: !rest.is_empty(),
        })
    }

    /// The bucket's rules; `None` when it has none, does not exist, or
    /// cannot be read (then the server-wide origins apply).
    pub(crate) async fn rules(&self, bucket: &str) -> Option<Vec<CorsRule>> {
        let found = if self.store.point_reads_are_cheap() {
            self.store.bucket_cors(bucket)
        } else {
            let (store, bucket) = (self.store.clone(), bucket.to_string());
            tokio::task::spawn_blocking(move || store.bucket_cors(&bucket))
                .await
                .ok()?
        };
        found.ok().flatten()
    }
}

/// Whether `value` matches `pattern`, which holds at most one `*`
/// standing for any run of characters (validated when stored).
fn wildcard_match(pattern: &str, value: &str) -> bool {
    match pattern.split_once('*') {
        None => pattern == value,
        Some((head, tail)) => {
            value.len() >= head.len() + tail.len()
                && value.starts_with(head)
                && value.ends_with(tail)
        }
    }
}

/// The rule's origin pattern that matches `origin`, if any.
fn matching_origin<'r>(rule: &'r CorsRule, origin: &str) -> Option<&'r str> {
    rule.allowed_origins
        .iter()
        .find(|o| wildcard_match(o, origin))
        .map(String::as_str)
}

/// The first rule allowing `origin` to use `method`.
fn rule_for<'r>(rules: &'r [CorsRule], origin: &str, method: &str) -> Option<&'r CorsRule> {
    rules.iter().find(|r| {
        matching_origin(r, origin).is_some() && r.allowed_methods.iter().any(|m| m == method)
    })
}

/// The headers a matching rule gives any answer: the origin (`*` when the
/// rule allows every origin), the rule's methods, the headers a script
/// may read, and how long a preflight may be cached.
fn allow(headers: &mut HeaderMap, rule: &CorsRule, origin: &HeaderValue, origin_str: &str) {
    if matching_origin(rule, origin_str) == Some("*") {
        headers.insert(
            header::ACCESS_CONTROL_ALLOW_ORIGIN,
            HeaderValue::from_static("*"),
        );
    } else {
        headers.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, origin.clone());
        headers.insert(
            header::ACCESS_CONTROL_ALLOW_CREDENTIALS,
            HeaderValue::from_static("true"),
        );
    }
    let joined = |list: &[String]| HeaderValue::from_str(&list.join(", ")).ok();
    if let Some(v) = joined(&rule.allowed_methods) {
        headers.insert(header::ACCESS_CONTROL_ALLOW_METHODS, v);
    }
    if !rule.expose_headers.is_empty() {
        if let Some(v) = joined(&rule.expose_headers) {
            headers.insert(header::ACCESS_CONTROL_EXPOSE_HEADERS, v);
        }
    }
    if let Some(age) = rule.max_age_seconds {
        headers.insert(header::ACCESS_CONTROL_MAX_AGE, HeaderValue::from(age));
    }
}

/// Adds to an actual (non-preflight) answer the headers of the first rule
/// allowing its origin and method, and always `Vary: Origin`. The method
/// is `Access-Control-Request-Method` when the request names one (as Ceph
/// RGW does, and ceph/s3-tests checks), else the request's own.
pub(crate) fn decorate(
    rules: &[CorsRule],
    origin: &HeaderValue,
    method: &str,
    mut resp: Response<Body>,
) -> Response<Body> {
    let headers = resp.headers_mut();
    headers.append(header::VARY, HeaderValue::from_static("Origin"));
    if let Ok(origin_str) = origin.to_str() {
        if let Some(rule) = rule_for(rules, origin_str, method) {
            allow(headers, rule, origin, origin_str);
        }
    }
    resp
}

/// The method an actual request is matched by (see [`decorate`]).
pub(crate) fn request_method<B>(req: &Request<B>) -> String {
    req.headers()
        .get(header::ACCESS_CONTROL_REQUEST_METHOD)
        .and_then(|v| v.to_str().ok())
        .map_or_else(|| req.method().to_string(), str::to_string)
}

/// A 400 BadRequest for an `OPTIONS` that is no CORS preflight.
pub(crate) fn bad_preflight(message: &'static str) -> Response<Body> {
    let mut err = S3Error::with_message(S3ErrorCode::Custom("BadRequest".into()), message);
    err.set_status_code(StatusCode::BAD_REQUEST);
    xml_error(err)
}

/// The answer to a preflight by the bucket's rules: the first rule that
/// allows the origin, the requested method and every requested header;
/// none → 403 AccessForbidden with S3's CORSResponse message.
pub(crate) fn preflight<B>(
    rules: &[CorsRule],
    target: &Target,
    req: &Request<B>,
) -> Response<Body> {
    let h = req.headers();
    let Some(origin) = h.get(header::ORIGIN) else {
        return bad_preflight("Insufficient information. Origin request header needed.");
    };
    let Some(method) = h
        .get(header::ACCESS_CONTROL_REQUEST_METHOD)
        .and_then(|v| v.to_str().ok())
        .filter(|m| Method::from_bytes(m.as_bytes()).is_ok())
    else {
        return bad_preflight("Invalid Access-Control-Request-Method: null");
    };
    let asked: Vec<String> = h
        .get(header::ACCESS_CONTROL_REQUEST_HEADERS)
        .and_then(|v| v.to_str().ok())
        .map(|v| {
            v.split(',')
                .map(|s| s.trim().to_ascii_lowercase())
                .filter(|s| !s.is_empty())
                .collect()
        })
        .unwrap_or_default();
    let origin_str = origin.to_str().unwrap_or("");
    let rule = rules.iter().find(|r| {
        matching_origin(r, origin_str).is_some()
            && r.allowed_methods.iter().any(|m| m == method)
            && asked.iter().all(|a| {
                r.allowed_headers
                    .iter()
                    .any(|p| wildcard_match(&p.to_ascii_lowercase(), a))
            })
    });
    let Some(rule) = rule else {
        return forbidden(method, target);
    };
    let mut resp = plain(StatusCode::OK, "");
    let headers = resp.headers_mut();
    allow(headers, rule, origin, origin_str);
    if let Some(v) = h.get(header::ACCESS_CONTROL_REQUEST_HEADERS) {
        headers.insert(header::ACCESS_CONTROL_ALLOW_HEADERS, v.clone());
    }
    headers.insert(
        header::VARY,
        HeaderValue::from_static(
            "Origin, Access-Control-Request-Headers, Access-Control-Request-Method",
        ),
    );
    resp
}

/// S3's refusal of a preflight no rule allows: 403 AccessForbidden, the
/// CORSResponse message, and the method and resource type it was about.
fn forbidden(method: &str, target: &Target) -> Response<Body> {
    let mut err = S3Error::with_message(
        S3ErrorCode::Custom("AccessForbidden".into()),
        "CORSResponse: This CORS request is not allowed. This is usually because the \
         evalution of Origin, request method / Access-Control-Request-Method or \
         Access-Control-Request-Headers are not whitelisted by the resource's CORS spec.",
    );
    err.set_status_code(StatusCode::FORBIDDEN);
    let resp = xml_error(err);
    let (mut parts, body) = resp.into_parts();
    let Some(xml) = body.bytes() else {
        return Response::from_parts(parts, body);
    };
    let text = String::from_utf8_lossy(&xml);
    let Some(end) = text.rfind("</Error>") else {
        return Response::from_parts(parts, Body::from(text.into_owned()));
    };
    let kind = if target.object { "OBJECT" } else { "BUCKET" };
    let method = method
        .replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;");
    let text = format!(
        "{}<Method>{method}</Method><ResourceType>{kind}</ResourceType>{}",
        &text[..end],
        &text[end..]
    );
    if let Ok(v) = HeaderValue::from_str(&text.len().to_string()) {
        parts.headers.insert(header::CONTENT_LENGTH, v);
    }
    Response::from_parts(parts, Body::from(text))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(methods: &[&str], origins: &[&str]) -> CorsRule {
        CorsRule {
            allowed_methods: methods.iter().map(|s| s.to_string()).collect(),
            allowed_origins: origins.iter().map(|s| s.to_string()).collect(),
            ..Default::default()
        }
    }

    #[test]
    fn origins_match_with_one_wildcard() {
        assert!(wildcard_match("*suffix", "foo.suffix"));
        assert!(!wildcard_match("*suffix", "foo.suffix.get"));
        assert!(wildcard_match("start*end", "startend"));
        assert!(wildcard_match("start*end", "start12end"));
        assert!(!wildcard_match("start*end", "0start12end"));
        assert!(!wildcard_match("ab*ba", "aba"));
        assert!(wildcard_match("prefix*", "prefix"));
        assert!(!wildcard_match("prefix*", "bla.prefix"));
        assert!(wildcard_match("*", "anything"));
        assert!(wildcard_match("http://a.com", "http://a.com"));
        assert!(!wildcard_match("http://a.com", "http://a.com.evil"));
    }

    #[test]
    fn the_first_rule_allowing_origin_and_method_answers() {
        let rules = [
            rule(&["GET"], &["*suffix"]),
            rule(&["PUT"], &["*.put", "*"]),
        ];
        assert!(rule_for(&rules, "foo.suffix", "GET").is_some_and(|r| r == &rules[0]));
        assert!(rule_for(&rules, "foo.suffix", "PUT").is_some_and(|r| r == &rules[1]));
        assert!(rule_for(&rules, "foo.suffix", "DELETE").is_none());
    }

    #[test]
    fn preflights_check_requested_headers() {
        let mut r = rule(&["PUT"], &["http://app"]);
        r.allowed_headers = vec!["Content-*".into(), "x-amz-meta-a".into()];
        r.expose_headers = vec!["ETag".into()];
        r.max_age_seconds = Some(60);
        let target = Target {
            bucket: "b".into(),
            object: true,
        };
        let req = |headers: &str| {
            let mut b = Request::builder()
                .method("OPTIONS")
                .uri("/b/k")
                .header("origin", "http://app")
                .header("access-control-request-method", "PUT");
            if !headers.is_empty() {
                b = b.header("access-control-request-headers", headers);
            }
            b.body(()).unwrap()
        };
        let ok = preflight(
            std::slice::from_ref(&r),
            &target,
            &req("content-type, X-Amz-Meta-A"),
        );
        assert_eq!(ok.status(), StatusCode::OK);
        let h = ok.headers();
        assert_eq!(h["access-control-allow-origin"], "http://app");
        assert_eq!(h["access-control-allow-methods"], "PUT");
        assert_eq!(h["access-control-expose-headers"], "ETag");
        assert_eq!(h["access-control-max-age"], "60");
        let refused = preflight(std::slice::from_ref(&r), &target, &req("x-amz-meta-b"));
        assert_eq!(refused.status(), StatusCode::FORBIDDEN);
        assert!(refused
            .headers()
            .get("access-control-allow-origin")
            .is_none());
    }
}
