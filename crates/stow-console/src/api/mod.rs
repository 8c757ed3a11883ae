//! The console's JSON API under `/_stow/console/api/`.
//!
//! | route | method | S3 request it stands for |
//! | --- | --- | --- |
//! | `session` | `POST` sign in, `GET` who am I, `DELETE` log out | — |
//! | `buckets` | `GET` / `POST {"name"}` | ListBuckets / CreateBucket |
//! | `bucket?name=` | `DELETE` | DeleteBucket |
//! | `objects?bucket=&prefix=&token=` | `GET` | ListObjectsV2 (delimiter `/`) |
//! | `object?bucket=&key=&version=` | `PUT` body / `GET` / `DELETE` | PutObject / GetObject (as an attachment; `version` optional) / DeleteObject |
//! | `delete` | `POST {"bucket", "keys"}` | DeleteObjects |
//! | `details?bucket=&key=&version=` | `GET` | HeadObject, GetObjectTagging, GetBucketVersioning, ListObjectVersions |
//! | `preview?bucket=&key=` | `GET` | GetObject (the first 64 KiB, as text or an image's kind) |
//! | `image?bucket=&key=` | `GET` | GetObject (a PNG, JPEG, GIF or WebP only, typed by its bytes) |
//! | `share` | `POST {"bucket", "key", "expires"}` | HeadObject, then a presigned GetObject for the S3 port |
//! | `usage?bucket=` | `GET` | the store's usage and quotas; ListObjectsV2 over the bucket |
//! | `multipart` | `POST {"bucket", "key", "content_type"}` / `DELETE ?bucket=&key=&upload=` | CreateMultipartUpload / AbortMultipartUpload |
//! | `part?bucket=&key=&upload=&number=` | `PUT` body | UploadPart |
//! | `complete` | `POST {"bucket", "key", "upload", "parts"}` | CompleteMultipartUpload |
//!
//! With a workspace (`workspace serve`), `checkpoints`, `status`, `diff`,
//! `filediff` and `rewind` are the checkpoint pages' routes
//! ([`crate::workspace`]).
//!
//! Every API request is refused cross-origin; every one but sign-in needs
//! a live session, and every state-changing one the session's CSRF token.
//! The operation is then made through [`StowS3`] with the server's own
//! credentials, exactly as the S3 port would run the signed request.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{header, HeaderValue, Method, Request, Response, StatusCode};
use http_body_util::{BodyExt as _, Limited};
use hyper::body::Incoming;
use s3s::auth::{Credentials, SecretKey};
use s3s::dto::*;
use s3s::{S3Request, S3};
use stow_s3_http::StowS3;

use crate::error::ConsoleError;
use crate::session::{self, KeyPair, Sessions};
use crate::workspace::{RewindBody, WorkspacePages};
use crate::{json, Body, ConsoleConfig};

pub mod objects;
pub mod preview;
pub mod uploads;

/// Largest JSON request body (a delete of 1,000 long keys fits).
const JSON_LIMIT: usize = 1024 * 1024;
/// Keys per listing page.
const PAGE_KEYS: i32 = 1000;
/// How long a failed sign-in is held before it is answered.
const FAILED_SIGN_IN_DELAY: Duration = Duration::from_millis(300);

/// What the API handlers share.
pub struct State {
    pub(crate) s3: StowS3,
    keys: KeyPair,
    credentials: Credentials,
    sessions: Sessions,
    sign_ins: session::SignInLimiter,
    read_only: bool,
    pub(crate) max_upload_bytes: u64,
    workspace: Option<std::sync::Arc<WorkspacePages>>,
    /// The store, for its usage figures (a read; every object operation
    /// goes through `s3`).
    pub(crate) store: std::sync::Arc<dyn stow_store::ObjectBackend>,
    pub(crate) quota: crate::Quota,
    pub(crate) s3_endpoint: Option<String>,
    pub(crate) region: String,
    pub(crate) secret_key: String,
}

impl State {
    /// The handlers' state for `config`.
    pub fn new(config: ConsoleConfig) -> Self {
        State {
            s3: StowS3::new(
                config.store.clone(),
                config.read_only,
                config.region.clone(),
            ),
            keys: KeyPair::new(&config.access_key, &config.secret_key),
            credentials: Credentials {
                access_key: config.access_key,
                secret_key: SecretKey::from(config.secret_key.as_str()),
            },
            sessions: Sessions::new(session::session_ttl()),
            sign_ins: session::SignInLimiter::default(),
            read_only: config.read_only,
            max_upload_bytes: config.max_upload_bytes,
            workspace: config.workspace.map(std::sync::Arc::new),
            store: config.store,
            quota: config.quota,
            s3_endpoint: config.s3_endpoint,
            region: config.region,
            secret_key: config.secret_key,
        }
    }

    /// The server's access key.
    pub(crate) fn access_key(&self) -> &str {
        self.keys.access_key()
    }

    /// The S3 request for `input`, made with the server's credentials.
    pub(crate) fn request<T>(&self, method: Method, input: T) -> S3Request<T> {
        S3Request {
            input,
            method,
            uri: http::Uri::from_static("/"),
            headers: http::HeaderMap::new(),
            extensions: http::Extensions::new(),
            credentials: Some(self.credentials.clone()),
            region: None,
            service: Some("s3".to_string()),
            trailing_headers: None,
        }
    }
}

/// Answers one API request (`route` is the path after `api/`).
pub async fn handle(
    state: &State,
    req: Request<Incoming>,
    route: &str,
) -> Result<Response<Body>, ConsoleError> {
    session::check_same_origin(req.headers())?;
    let method = req.method().clone();
    if route == "session" {
        return match method {
            Method::POST => sign_in(state, req).await,
            Method::GET => {
                let (_, s) = signed_in(state, &req)?;
                Ok(json(StatusCode::OK, &who(state, &s)))
            }
            Method::DELETE => {
                let (id, s) = signed_in(state, &req)?;
                session::check_csrf(req.headers(), &s)?;
                state.sessions.remove(&id);
                let mut resp = json(StatusCode::OK, &serde_json::json!({ "signed_out": true }));
                set_cookie(&mut resp, &session::clearing_cookie());
                Ok(resp)
            }
            _ => Err(ConsoleError::Method),
        };
    }
    let pages = matches!(
        route,
        "checkpoints" | "status" | "diff" | "filediff" | "rewind"
    );
    let object_pages = matches!(
        route,
        "delete" | "details" | "preview" | "image" | "share" | "usage"
    );
    let upload_pages = matches!(route, "multipart" | "part" | "complete");
    if !pages
        && !object_pages
        && !upload_pages
        && !matches!(route, "buckets" | "bucket" | "objects" | "object")
    {
        return Err(ConsoleError::NotFound);
    }
    let (_, s) = signed_in(state, &req)?;
    if !(method == Method::GET || method == Method::HEAD) {
        session::check_csrf(req.headers(), &s)?;
    }
    let query = query_of(&req);
    if pages {
        return workspace_route(state, req, route, query).await;
    }
    if object_pages {
        return objects::route(state, req, route, query).await;
    }
    if upload_pages {
        return uploads::route(state, req, route, query).await;
    }
    match (route, method) {
        ("buckets", Method::GET) => list_buckets(state).await,
        ("buckets", Method::POST) => {
            let body: serde_json::Value = read_json(req).await?;
            let name = body
                .get("name")
                .and_then(|n| n.as_str())
                .ok_or_else(|| ConsoleError::BadRequest("\"name\" is required".into()))?;
            create_bucket(state, name.to_string()).await
        }
        ("bucket", Method::DELETE) => delete_bucket(state, param(&query, "name")?).await,
        ("objects", Method::GET) => list_objects(state, &query).await,
        ("object", Method::PUT) => {
            let (bucket, key) = (param(&query, "bucket")?, param(&query, "key")?);
            upload(state, req, bucket, key).await
        }
        ("object", Method::GET) => {
            let version = query.get("version").filter(|v| !v.is_empty()).cloned();
            download(
                state,
                param(&query, "bucket")?,
                param(&query, "key")?,
                version,
            )
            .await
        }
        ("object", Method::DELETE) => {
            delete_object(state, param(&query, "bucket")?, param(&query, "key")?).await
        }
        _ => Err(ConsoleError::Method),
    }
}

/// A workspace page's route (signed in, CSRF checked): the engine's work
/// runs on the blocking pool.
async fn workspace_route(
    state: &State,
    req: Request<Incoming>,
    route: &str,
    query: HashMap<String, String>,
) -> Result<Response<Body>, ConsoleError> {
    let pages = state.workspace.clone().ok_or(ConsoleError::NotFound)?;
    let method = req.method().clone();
    let run = |f| on_pool(std::sync::Arc::clone(&pages), f);
    let value = match (route, method) {
        ("checkpoints", Method::GET) => {
            run(Box::new(move |p: &WorkspacePages| p.checkpoints(&query))).await?
        }
        ("status", Method::GET) => {
            run(Box::new(move |p: &WorkspacePages| p.status(&query))).await?
        }
        ("diff", Method::GET) => run(Box::new(move |p: &WorkspacePages| p.diff(&query))).await?,
        ("filediff", Method::GET) => {
            run(Box::new(move |p: &WorkspacePages| p.file_diff(&query))).await?
        }
        ("rewind", Method::POST) => {
            let body = RewindBody::parse(read_json(req).await?)?;
            if state.read_only && !body.dry_run {
                return Err(ConsoleError::S3 {
                    code: "AccessDenied".into(),
                    status: StatusCode::FORBIDDEN,
                    message: "this server is read-only".into(),
                });
            }
            run(Box::new(move |p: &WorkspacePages| p.rewind(body))).await?
        }
        _ => return Err(ConsoleError::Method),
    };
    Ok(json(StatusCode::OK, &value))
}

/// A workspace page's work: the engine blocks, so it runs on the pool.
type PagesWork = Box<dyn FnOnce(&WorkspacePages) -> Result<serde_json::Value, ConsoleError> + Send>;

async fn on_pool(
    pages: std::sync::Arc<WorkspacePages>,
    work: PagesWork,
) -> Result<serde_json::Value, ConsoleError> {
    tokio::task::spawn_blocking(move || work(&pages))
        .await
        .map_err(|e| ConsoleError::Internal(format!("the workspace task failed: {e}")))?
}

/// `POST session {"access_key", "secret_key"}`: the server's pair starts a
/// session; anything else is held a moment, then refused.
async fn sign_in(state: &State, req: Request<Incoming>) -> Result<Response<Body>, ConsoleError> {
    let body: serde_json::Value = read_json(req).await?;
    if let Err(wait) = state.sign_ins.check(Instant::now()) {
        return Err(ConsoleError::TooManySignIns {
            retry_after: wait.as_secs().max(1),
        });
    }
    let field = |name: &str| body.get(name).and_then(|v| v.as_str()).unwrap_or("");
    if !state.keys.matches(field("access_key"), field("secret_key")) {
        state.sign_ins.failed(Instant::now());
        tokio::time::sleep(FAILED_SIGN_IN_DELAY).await;
        return Err(ConsoleError::BadCredentials);
    }
    state.sign_ins.succeeded();
    let (id, s) = state.sessions.create(Instant::now())?;
    let mut resp = json(StatusCode::OK, &who(state, &s));
    set_cookie(
        &mut resp,
        &session::session_cookie(&id, state.sessions.ttl()),
    );
    Ok(resp)
}

/// What a signed-in page needs to know.
fn who(state: &State, s: &session::Session) -> serde_json::Value {
    let remaining = s.expires.saturating_duration_since(Instant::now());
    serde_json::json!({
        "access_key": state.keys.access_key(),
        "csrf": s.csrf,
        "read_only": state.read_only,
        "expires_in": remaining.as_secs(),
        "max_upload_bytes": state.max_upload_bytes,
        "workspace": state.workspace.as_ref().map(|w| w.workspace_id.clone()),
    })
}

/// The live session among the request's cookies, with its id (the first
/// live one: another cookie of the same name may be stale or planted).
fn signed_in(
    state: &State,
    req: &Request<Incoming>,
) -> Result<(String, session::Session), ConsoleError> {
    let now = Instant::now();
    session::cookie_sessions(req.headers())
        .find_map(|id| Some((id.to_string(), state.sessions.lookup(id, now)?)))
        .ok_or(ConsoleError::Unauthenticated)
}

async fn list_buckets(state: &State) -> Result<Response<Body>, ConsoleError> {
    let out = state
        .s3
        .list_buckets(state.request(Method::GET, ListBucketsInput::default()))
        .await?
        .output;
    let buckets: Vec<_> = out
        .buckets
        .unwrap_or_default()
        .into_iter()
        .map(|b| {
            serde_json::json!({
                "name": b.name,
                "created": b.creation_date.as_ref().and_then(timestamp),
            })
        })
        .collect();
    Ok(json(
        StatusCode::OK,
        &serde_json::json!({ "buckets": buckets }),
    ))
}

async fn create_bucket(state: &State, name: String) -> Result<Response<Body>, ConsoleError> {
    let input = CreateBucketInput {
        bucket: name.clone(),
        ..Default::default()
    };
    state
        .s3
        .create_bucket(state.request(Method::PUT, input))
        .await?;
    Ok(json(
        StatusCode::CREATED,
        &serde_json::json!({ "name": name }),
    ))
}

async fn delete_bucket(state: &State, name: String) -> Result<Response<Body>, ConsoleError> {
    let input = DeleteBucketInput {
        bucket: name.clone(),
        ..Default::default()
    };
    state
        .s3
        .delete_bucket(state.request(Method::DELETE, input))
        .await?;
    Ok(json(
        StatusCode::OK,
        &serde_json::json!({ "deleted": name }),
    ))
}

/// One page of a bucket at a prefix: folders (common prefixes) and objects.
async fn list_objects(
    state: &State,
    query: &HashMap<String, String>,
) -> Result<Response<Body>, ConsoleError> {
    let bucket = param(query, "bucket")?;
    let prefix = query.get("prefix").filter(|p| !p.is_empty()).cloned();
    let input = ListObjectsV2Input {
        bucket: bucket.clone(),
        prefix: prefix.clone(),
        delimiter: Some("/".to_string()),
        continuation_token: query.get("token").filter(|t| !t.is_empty()).cloned(),
        max_keys: Some(PAGE_KEYS),
        ..Default::default()
    };
    let out = state
        .s3
        .list_objects_v2(state.request(Method::GET, input))
        .await?
        .output;
    let folders: Vec<_> = out
        .common_prefixes
        .unwrap_or_default()
        .into_iter()
        .filter_map(|p| p.prefix)
        .collect();
    let objects: Vec<_> = out
        .contents
        .unwrap_or_default()
        .into_iter()
        .map(|o| {
            serde_json::json!({
                "key": o.key,
                "size": o.size,
                "etag": o.e_tag.as_ref().map(|e| e.value().to_string()),
                "last_modified": o.last_modified.as_ref().and_then(timestamp),
            })
        })
        .collect();
    let next = if out.is_truncated == Some(true) {
        out.next_continuation_token
    } else {
        None
    };
    Ok(json(
        StatusCode::OK,
        &serde_json::json!({
            "bucket": bucket,
            "prefix": prefix.unwrap_or_default(),
            "folders": folders,
            "objects": objects,
            "next": next,
        }),
    ))
}

/// `PUT object` with the file's bytes as the body (one PutObject; the
/// Content-Length is required and bounded like the S3 port's).
async fn upload(
    state: &State,
    req: Request<Incoming>,
    bucket: String,
    key: String,
) -> Result<Response<Body>, ConsoleError> {
    let length = body_length(state, &req)?;
    let content_type = req
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .filter(|v| !v.is_empty())
        .map(str::to_string);
    let input = PutObjectInput {
        bucket,
        key: key.clone(),
        body: Some(StreamingBlob::from(Body::from(req.into_body()))),
        content_length: Some(length),
        content_type,
        ..Default::default()
    };
    let out = state
        .s3
        .put_object(state.request(Method::PUT, input))
        .await?
        .output;
    Ok(json(
        StatusCode::OK,
        &serde_json::json!({
            "key": key,
            "etag": out.e_tag.as_ref().map(|e| e.value().to_string()),
        }),
    ))
}

/// The request body's declared length: required, and bounded like the
/// S3 port's request bodies.
pub(crate) fn body_length(state: &State, req: &Request<Incoming>) -> Result<i64, ConsoleError> {
    let length = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())
        .ok_or(ConsoleError::LengthRequired)?;
    if length > state.max_upload_bytes {
        return Err(ConsoleError::TooLarge);
    }
    i64::try_from(length).map_err(|_| ConsoleError::TooLarge)
}

/// `GET object`: the bytes as an attachment, typed as opaque octets and
/// sandboxed, so nothing an object holds is ever rendered in this origin.
async fn download(
    state: &State,
    bucket: String,
    key: String,
    version_id: Option<String>,
) -> Result<Response<Body>, ConsoleError> {
    let input = GetObjectInput {
        bucket,
        key: key.clone(),
        version_id,
        ..Default::default()
    };
    let out = state
        .s3
        .get_object(state.request(Method::GET, input))
        .await?
        .output;
    let body = out.body.map_or_else(Body::empty, Body::from);
    let mut resp = Response::new(body);
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/octet-stream"),
    );
    if let Some(len) = out.content_length {
        h.insert(header::CONTENT_LENGTH, HeaderValue::from(len));
    }
    if let Some(etag) = out
        .e_tag
        .as_ref()
        .and_then(|e| HeaderValue::from_str(&format!("\"{}\"", e.value())).ok())
    {
        h.insert(header::ETAG, etag);
    }
    let disposition = attachment(&key);
    let disposition = HeaderValue::from_str(&disposition)
        .map_err(|e| ConsoleError::Internal(format!("content-disposition: {e}")))?;
    h.insert(header::CONTENT_DISPOSITION, disposition);
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static("default-src 'none'; sandbox; frame-ancestors 'none'"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    Ok(resp)
}

async fn delete_object(
    state: &State,
    bucket: String,
    key: String,
) -> Result<Response<Body>, ConsoleError> {
    let input = DeleteObjectInput {
        bucket,
        key: key.clone(),
        ..Default::default()
    };
    state
        .s3
        .delete_object(state.request(Method::DELETE, input))
        .await?;
    Ok(json(StatusCode::OK, &serde_json::json!({ "deleted": key })))
}

/// `Content-Disposition: attachment` naming the key's last segment: an
/// ASCII fallback with anything unsafe replaced, and the exact name
/// percent-encoded as UTF-8 (RFC 6266).
pub fn attachment(key: &str) -> String {
    let name = key
        .rsplit('/')
        .find(|s| !s.is_empty())
        .unwrap_or("download");
    let fallback: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_' | ' ') {
                c
            } else {
                '_'
            }
        })
        .collect();
    let exact = percent_encoding::utf8_percent_encode(name, percent_encoding::NON_ALPHANUMERIC);
    format!("attachment; filename=\"{fallback}\"; filename*=UTF-8''{exact}")
}

fn set_cookie(resp: &mut Response<Body>, cookie: &str) {
    if let Ok(v) = HeaderValue::from_str(cookie) {
        resp.headers_mut().append(header::SET_COOKIE, v);
    }
}

fn query_of(req: &Request<Incoming>) -> HashMap<String, String> {
    form_urlencoded::parse(req.uri().query().unwrap_or("").as_bytes())
        .into_owned()
        .collect()
}

pub(crate) fn param(query: &HashMap<String, String>, name: &str) -> Result<String, ConsoleError> {
    query
        .get(name)
        .filter(|v| !v.is_empty())
        .cloned()
        .ok_or_else(|| ConsoleError::BadRequest(format!("query parameter \"{name}\" is required")))
}

pub(crate) async fn read_json(req: Request<Incoming>) -> Result<serde_json::Value, ConsoleError> {
    let bytes: Bytes = Limited::new(req.into_body(), JSON_LIMIT)
        .collect()
        .await
        .map_err(|e| {
            if e.is::<http_body_util::LengthLimitError>() {
                ConsoleError::TooLarge
            } else {
                ConsoleError::BadRequest(format!("cannot read the request body: {e}"))
            }
        })?
        .to_bytes();
    serde_json::from_slice(&bytes)
        .map_err(|e| ConsoleError::BadRequest(format!("the body is not JSON: {e}")))
}

pub(crate) fn timestamp(t: &Timestamp) -> Option<String> {
    let mut out = Vec::new();
    t.format(TimestampFormat::DateTime, &mut out).ok()?;
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::attachment;

    #[test]
    fn attachments_never_carry_raw_names() {
        assert_eq!(
            attachment("dir/a b.txt"),
            "attachment; filename=\"a b.txt\"; filename*=UTF-8''a%20b%2Etxt"
        );
        let hostile = attachment("<img src=x onerror=alert(1)>");
        assert!(hostile.starts_with("attachment; filename=\"_img src_x onerror_alert_1__\""));
        assert!(!hostile[hostile.find("filename*").unwrap()..].contains('<'));
        let quoted = attachment("x\"; filename=evil.html");
        assert!(quoted.starts_with("attachment; filename=\"x__ filename_evil.html\";"));
        assert!(attachment("dir/").contains("filename=\"dir\""));
        assert!(attachment("").contains("filename=\"download\""));
        assert!(http::HeaderValue::from_str(&attachment("é\n.txt")).is_ok());
    }
}
