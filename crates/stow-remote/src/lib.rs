//! Remotes over a real S3 service: `stow_checkpoint::remote::RemoteStore`
//! implemented with `object_store` (SigV4, retries with exponential
//! backoff, create-only puts, multipart), TLS by rustls with the ring
//! provider. This crate holds no checkpoint logic: it moves bytes and
//! classifies failures; push and pull live in `stow-checkpoint`.

mod credentials;
mod errors;

use std::io::Read;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::StreamExt;
use object_store::aws::{AmazonS3, AmazonS3Builder, S3ConditionalPut};
use object_store::path::Path as StorePath;
use object_store::{
    Attribute, AttributeValue, Attributes, BackoffConfig, ClientOptions, GetOptions, ObjectStore,
    PutMode, PutMultipartOptions, PutOptions, RetryConfig, WriteMultipart,
};
use stow_checkpoint::remote::{
    parse_s3_url, Body, Connector, Created, RemoteError, RemoteFailure, RemoteObject, RemoteSpec,
    RemoteStore,
};

use errors::{classify, timed_out};

/// Default overall deadline of one command's remote traffic.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30 * 60);

/// Multipart part size for large blobs (S3's minimum is 5 MiB).
const PART_BYTES: usize = 8 << 20;
/// Parts of one blob in flight at once (blobs go up in parallel too).
const PARTS_IN_FLIGHT: usize = 2;

/// Opens S3 remotes, all sharing one overall deadline.
pub struct S3Connector {
    deadline: Instant,
}

impl S3Connector {
    /// Remote traffic must finish within `timeout` from now.
    pub fn new(timeout: Duration) -> S3Connector {
        S3Connector {
            deadline: Instant::now() + timeout,
        }
    }
}

impl Connector for S3Connector {
    fn connect(&self, spec: &RemoteSpec) -> Result<Box<dyn RemoteStore>, RemoteError> {
        Ok(Box::new(S3Remote::open(spec, self.deadline)?))
    }
}

/// One bucket prefix of an S3 service.
pub struct S3Remote {
    store: AmazonS3,
    runtime: Arc<tokio::runtime::Runtime>,
    bucket: String,
    prefix: String,
    deadline: Instant,
}

fn bad_spec(msg: impl Into<String>) -> RemoteError {
    RemoteError::new(RemoteFailure::Failed, msg)
}

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

impl S3Remote {
    /// Builds the client: the endpoint is the spec's, else
    /// `AWS_ENDPOINT_URL_S3`/`AWS_ENDPOINT_URL`, else AWS; the region the
    /// spec's, else `AWS_REGION`/`AWS_DEFAULT_REGION`, the profile's, or
    /// `us-east-1`; credentials from the standard chain (see
    /// `credentials`). Nothing is contacted yet.
    pub fn open(spec: &RemoteSpec, deadline: Instant) -> Result<S3Remote, RemoteError> {
        // reqwest is built without a default TLS provider: ring it is.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let (bucket, prefix) = parse_s3_url(&spec.url).map_err(bad_spec)?;
        let resolved = credentials::resolve(spec.profile.as_deref())
            .map_err(|e| RemoteError::new(RemoteFailure::Auth, e))?;
        let endpoint = spec
            .endpoint_url
            .clone()
            .or_else(|| env("AWS_ENDPOINT_URL_S3"))
            .or_else(|| env("AWS_ENDPOINT_URL"));
        let region = spec
            .region
            .clone()
            .or_else(|| env("AWS_REGION"))
            .or_else(|| env("AWS_DEFAULT_REGION"))
            .or(resolved.profile_region)
            .unwrap_or_else(|| "us-east-1".to_string());
        let remaining = deadline.saturating_duration_since(Instant::now());
        let retry = RetryConfig {
            backoff: BackoffConfig {
                init_backoff: Duration::from_millis(100),
                max_backoff: Duration::from_secs(5),
                base: 2.0,
            },
            max_retries: 4,
            retry_timeout: remaining.min(Duration::from_secs(180)),
        };
        let client = ClientOptions::new()
            .with_allow_http(
                endpoint
                    .as_deref()
                    .is_some_and(|e| e.starts_with("http://")),
            )
            .with_connect_timeout(Duration::from_secs(5))
            .with_timeout(Duration::from_secs(120));
        let mut builder = AmazonS3Builder::new()
            .with_bucket_name(&bucket)
            .with_region(&region)
            .with_conditional_put(S3ConditionalPut::ETagMatch)
            .with_retry(retry)
            .with_client_options(client);
        if let Some(e) = &endpoint {
            builder = builder.with_endpoint(e);
        }
        match resolved.keys {
            Some(k) => {
                builder = builder
                    .with_access_key_id(k.access_key_id)
                    .with_secret_access_key(k.secret_access_key);
                if let Some(t) = k.session_token {
                    builder = builder.with_token(t);
                }
                tracing::debug!(source = %resolved.source, "remote credentials");
            }
            // Another service than AWS has no instance metadata to ask.
            None if endpoint.is_some() => {
                return Err(RemoteError::new(
                    RemoteFailure::Auth,
                    "no credentials found: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, AWS_PROFILE, or the remote's --profile",
                ))
            }
            // On AWS, object_store's own chain (web identity, container,
            // instance metadata) takes over.
            None => {
                for (var, key) in [
                    ("AWS_WEB_IDENTITY_TOKEN_FILE", "aws_web_identity_token_file"),
                    ("AWS_ROLE_ARN", "aws_role_arn"),
                    ("AWS_ROLE_SESSION_NAME", "aws_role_session_name"),
                    (
                        "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
                        "aws_container_credentials_relative_uri",
                    ),
                ] {
                    if let (Some(v), Ok(k)) = (env(var), key.parse()) {
                        builder = builder.with_config(k, v);
                    }
                }
            }
        }
        let store = builder
            .build()
            .map_err(|e| bad_spec(format!("remote {}: {e}", spec.url)))?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("stow-remote")
            .enable_all()
            .build()
            .map_err(|e| bad_spec(format!("start the remote client: {e}")))?;
        Ok(S3Remote {
            store,
            runtime: Arc::new(runtime),
            bucket,
            prefix,
            deadline,
        })
    }

    fn path(&self, key: &str) -> Result<StorePath, RemoteError> {
        let full = if self.prefix.is_empty() {
            key.to_string()
        } else {
            format!("{}/{key}", self.prefix)
        };
        StorePath::parse(&full).map_err(|e| bad_spec(format!("key {full:?}: {e}")))
    }

    /// Runs `fut` on the client's runtime within the deadline.
    fn run<T>(
        &self,
        what: &str,
        fut: impl std::future::Future<Output = object_store::Result<T>>,
    ) -> Result<object_store::Result<T>, RemoteError> {
        let deadline = tokio::time::Instant::from_std(self.deadline);
        self.runtime
            .block_on(async { tokio::time::timeout_at(deadline, fut).await })
            .map_err(|_| timed_out(what))
    }

    fn metadata(sha256: &str) -> Attributes {
        let mut attrs = Attributes::new();
        if !sha256.is_empty() {
            attrs.insert(
                Attribute::Metadata("sha256".into()),
                AttributeValue::from(sha256.to_string()),
            );
        }
        attrs
    }

    fn create_small(
        &self,
        path: &StorePath,
        bytes: Vec<u8>,
        sha256: &str,
    ) -> Result<Created, RemoteError> {
        let opts = PutOptions {
            mode: PutMode::Create,
            attributes: Self::metadata(sha256),
            ..PutOptions::default()
        };
        let what = format!("put {path}");
        match self.run(
            &what,
            self.store.put_opts(path, Bytes::from(bytes).into(), opts),
        )? {
            Ok(_) => Ok(Created::Created),
            Err(object_store::Error::AlreadyExists { .. }) => Ok(Created::AlreadyExists),
            Err(e) => Err(classify(&what, &e)),
        }
    }

    /// A large body in parts. The completion itself cannot be made
    /// conditional through `object_store`, so the key is checked just
    /// before; a concurrent writer of the same key writes the same bytes
    /// (keys are content digests), never different ones.
    fn create_multipart(
        &self,
        path: &StorePath,
        mut reader: Box<dyn Read + Send>,
        size: u64,
        sha256: &str,
    ) -> Result<Created, RemoteError> {
        let what = format!("multipart upload {path}");
        let opts = PutMultipartOptions {
            attributes: Self::metadata(sha256),
            ..PutMultipartOptions::default()
        };
        let upload = self
            .run(&what, self.store.put_multipart_opts(path, opts))?
            .map_err(|e| classify(&what, &e))?;
        let _enter = self.runtime.enter();
        let mut writer = WriteMultipart::new_with_chunk_size(upload, PART_BYTES);
        let mut buf = vec![0u8; PART_BYTES];
        let mut sent = 0u64;
        let outcome: Result<(), RemoteError> = (|| loop {
            let n = match reader.read(&mut buf) {
                Ok(0) => break Ok(()),
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => break Err(bad_spec(format!("{what}: reading the local blob: {e}"))),
            };
            self.run(&what, writer.wait_for_capacity(PARTS_IN_FLIGHT))?
                .map_err(|e| classify(&what, &e))?;
            writer.write(buf.get(..n).unwrap_or_default());
            sent += n as u64;
        })();
        let outcome = outcome.and_then(|()| {
            if sent == size {
                Ok(())
            } else {
                Err(bad_spec(format!(
                    "{what}: the local blob held {sent} bytes, not {size}"
                )))
            }
        });
        if let Err(e) = outcome {
            let _ = self.run(&what, writer.abort());
            return Err(e);
        }
        // The check just before completing (see above).
        if self.head_path(path)?.is_some() {
            let _ = self.run(&what, writer.abort());
            return Ok(Created::AlreadyExists);
        }
        self.run(&what, writer.finish())?
            .map_err(|e| classify(&what, &e))?;
        Ok(Created::Created)
    }

    fn head_path(&self, path: &StorePath) -> Result<Option<RemoteObject>, RemoteError> {
        let what = format!("head {path}");
        let opts = GetOptions {
            head: true,
            ..GetOptions::default()
        };
        match self.run(&what, self.store.get_opts(path, opts))? {
            Ok(r) => Ok(Some(RemoteObject {
                size: r.meta.size,
                sha256: r
                    .attributes
                    .get(&Attribute::Metadata("sha256".into()))
                    .map(|v| v.to_string()),
            })),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(classify(&what, &e)),
        }
    }
}

impl RemoteStore for S3Remote {
    fn url(&self) -> String {
        if self.prefix.is_empty() {
            format!("s3://{}", self.bucket)
        } else {
            format!("s3://{}/{}", self.bucket, self.prefix)
        }
    }

    fn head(&self, key: &str) -> Result<Option<RemoteObject>, RemoteError> {
        self.head_path(&self.path(key)?)
    }

    fn get(&self, key: &str) -> Result<Option<Box<dyn Read + Send>>, RemoteError> {
        let path = self.path(key)?;
        let what = format!("get {path}");
        match self.run(&what, self.store.get_opts(&path, GetOptions::default()))? {
            Ok(r) => Ok(Some(Box::new(StreamReader {
                stream: r.into_stream(),
                chunk: Bytes::new(),
                runtime: Arc::clone(&self.runtime),
                deadline: self.deadline,
                what,
            }))),
            Err(e @ object_store::Error::NotFound { .. }) => {
                // A missing bucket is a 404 too; its body says which.
                let err = classify(&what, &e);
                if err.kind == RemoteFailure::NoSuchBucket {
                    Err(err)
                } else {
                    Ok(None)
                }
            }
            Err(e) => Err(classify(&what, &e)),
        }
    }

    fn create(&self, key: &str, body: Body, sha256: &str) -> Result<Created, RemoteError> {
        let path = self.path(key)?;
        match body {
            Body::Bytes(bytes) => self.create_small(&path, bytes, sha256),
            Body::Reader { reader, size } => self.create_multipart(&path, reader, size, sha256),
        }
    }

    fn list_at_most(
        &self,
        prefix: &str,
        most: usize,
    ) -> Result<Option<Vec<(String, u64)>>, RemoteError> {
        let path = self.path(prefix.trim_end_matches('/'))?;
        let what = format!("list {path}/");
        let strip = if self.prefix.is_empty() {
            String::new()
        } else {
            format!("{}/", self.prefix)
        };
        let listing = self.run(&what, async {
            let mut out = Vec::new();
            let mut stream = self.store.list(Some(&path));
            while let Some(meta) = stream.next().await {
                let meta = meta?;
                let full = meta.location.to_string();
                if let Some(rel) = full.strip_prefix(&strip) {
                    if out.len() == most {
                        return Ok(None);
                    }
                    out.push((rel.to_string(), meta.size));
                }
            }
            Ok(Some(out))
        })?;
        let mut out = listing.map_err(|e| classify(&what, &e))?;
        if let Some(out) = &mut out {
            out.sort();
        }
        Ok(out)
    }
}

/// A GET's body as a blocking reader (each chunk awaited on the client's
/// runtime, within the deadline).
struct StreamReader {
    stream: futures_util::stream::BoxStream<'static, object_store::Result<Bytes>>,
    chunk: Bytes,
    runtime: Arc<tokio::runtime::Runtime>,
    deadline: Instant,
    what: String,
}

impl Read for StreamReader {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        while self.chunk.is_empty() {
            let deadline = tokio::time::Instant::from_std(self.deadline);
            let next = self
                .runtime
                .block_on(async { tokio::time::timeout_at(deadline, self.stream.next()).await })
                .map_err(|_| std::io::Error::other(timed_out(&self.what)))?;
            match next {
                None => return Ok(0),
                Some(Ok(b)) => self.chunk = b,
                Some(Err(e)) => return Err(std::io::Error::other(classify(&self.what, &e))),
            }
        }
        let n = buf.len().min(self.chunk.len());
        buf[..n].copy_from_slice(&self.chunk.split_to(n));
        Ok(n)
    }
}

/// The error mapping, end to end through `object_store`'s real S3 client:
/// its HTTP service is replaced by one that answers every request with a
/// canned response or transport failure, so nothing touches the network.
#[cfg(test)]
mod tests {
    use super::*;
    use object_store::client::{
        HttpClient, HttpConnector, HttpError, HttpErrorKind, HttpRequest, HttpResponse,
        HttpResponseBody, HttpService,
    };

    /// What the fake service answers.
    #[derive(Debug, Clone)]
    enum Answer {
        /// An HTTP response: status and XML body.
        Status(u16, &'static str),
        /// A transport failure of this kind, caused by this I/O error.
        Fail(HttpErrorKind, std::io::ErrorKind),
        /// No answer, ever.
        Hang,
    }

    #[derive(Debug)]
    struct Canned(Answer);

    #[async_trait::async_trait]
    impl HttpService for Canned {
        async fn call(&self, _req: HttpRequest) -> Result<HttpResponse, HttpError> {
            match &self.0 {
                Answer::Status(status, body) => Ok(http::Response::builder()
                    .status(*status)
                    .header("content-type", "application/xml")
                    .body(HttpResponseBody::from(body.to_string()))
                    .expect("a valid response")),
                Answer::Fail(kind, io) => Err(HttpError::new(*kind, std::io::Error::from(*io))),
                Answer::Hang => std::future::pending().await,
            }
        }
    }

    #[derive(Debug)]
    struct CannedConnector(Answer);

    impl HttpConnector for CannedConnector {
        fn connect(&self, _: &ClientOptions) -> object_store::Result<HttpClient> {
            Ok(HttpClient::new(Canned(self.0.clone())))
        }
    }

    fn remote(answer: Answer) -> S3Remote {
        let store = AmazonS3Builder::new()
            .with_bucket_name("bkt")
            .with_region("us-east-1")
            .with_endpoint("http://remote.invalid")
            .with_allow_http(true)
            .with_access_key_id("AK")
            .with_secret_access_key("SK")
            .with_conditional_put(S3ConditionalPut::ETagMatch)
            .with_retry(RetryConfig {
                backoff: BackoffConfig::default(),
                max_retries: 0,
                retry_timeout: Duration::from_secs(5),
            })
            .with_http_connector(CannedConnector(answer))
            .build()
            .unwrap();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        S3Remote {
            store,
            runtime: Arc::new(runtime),
            bucket: "bkt".into(),
            prefix: "pre".into(),
            deadline: Instant::now() + Duration::from_secs(60),
        }
    }

    fn s3_error(code: &str) -> String {
        format!("<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>{code}</Code><Message>m</Message></Error>")
    }

    fn leak(s: String) -> &'static str {
        Box::leak(s.into_boxed_str())
    }

    fn status(code: u16, s3_code: &str) -> Answer {
        Answer::Status(code, leak(s3_error(s3_code)))
    }

    fn small() -> Body {
        Body::Bytes(b"x".to_vec())
    }

    #[test]
    fn a_missing_key_is_absent_and_a_missing_bucket_is_an_error() {
        let r = remote(status(404, "NoSuchKey"));
        assert!(r.head("k").unwrap().is_none());
        assert!(r.get("k").unwrap().is_none());

        let r = remote(status(404, "NoSuchBucket"));
        let err = r.get("k").err().expect("refused");
        assert_eq!(err.code(), "remote_no_bucket");
        assert!(err.message.contains("bucket does not exist"), "{err}");
        assert_eq!(r.list("x/").unwrap_err().code(), "remote_no_bucket");
    }

    #[test]
    fn a_refused_create_only_put_means_the_key_exists() {
        for answer in [
            status(412, "PreconditionFailed"),
            status(409, "ConditionalRequestConflict"),
            Answer::Status(304, ""),
        ] {
            let r = remote(answer.clone());
            assert_eq!(
                r.create("k", small(), "").unwrap(),
                Created::AlreadyExists,
                "{answer:?}"
            );
        }
    }

    #[test]
    fn refused_credentials_are_auth_failures() {
        for (code, s3_code) in [
            (403, "AccessDenied"),
            (403, "InvalidAccessKeyId"),
            (403, "SignatureDoesNotMatch"),
            (401, "Unauthorized"),
            (400, "ExpiredToken"),
        ] {
            let r = remote(status(code, s3_code));
            let err = r.create("k", small(), "").unwrap_err();
            assert_eq!(err.code(), "remote_auth", "{code} {s3_code}: {err}");
            assert!(err.message.contains("check the credentials"), "{err}");
            // A refused listing is `Generic` in object_store: its status
            // and body still say what happened.
            assert_eq!(r.list("x/").unwrap_err().code(), "remote_auth", "{s3_code}");
        }
    }

    #[test]
    fn slow_down_is_throttling() {
        for answer in [
            status(503, "SlowDown"),
            Answer::Status(503, ""),
            status(400, "ThrottlingException"),
            Answer::Status(429, ""),
        ] {
            let r = remote(answer.clone());
            let err = r.create("k", small(), "").unwrap_err();
            assert_eq!(err.code(), "remote_throttled", "{answer:?}: {err}");
            assert_eq!(r.list("x/").unwrap_err().code(), "remote_throttled");
        }
    }

    #[test]
    fn transport_failures_are_unreachable_or_timeout() {
        use std::io::ErrorKind as Io;
        for (answer, code) in [
            (
                Answer::Fail(HttpErrorKind::Connect, Io::ConnectionRefused),
                "remote_unreachable",
            ),
            // A refusal below a failure object_store did not classify.
            (
                Answer::Fail(HttpErrorKind::Unknown, Io::ConnectionRefused),
                "remote_unreachable",
            ),
            (
                Answer::Fail(HttpErrorKind::Timeout, Io::TimedOut),
                "remote_timeout",
            ),
            (
                Answer::Fail(HttpErrorKind::Interrupted, Io::ConnectionReset),
                "remote_failed",
            ),
        ] {
            let r = remote(answer.clone());
            assert_eq!(r.head("k").unwrap_err().code(), code, "{answer:?}");
            assert_eq!(r.list("x/").unwrap_err().code(), code, "{answer:?}");
        }
    }

    #[test]
    fn other_answers_are_plain_failures() {
        for answer in [
            status(500, "InternalError"),
            status(400, "InvalidArgument"),
            // A key that merely mentions a code is not that code.
            status(404, "NoSuchKey"),
        ] {
            let r = remote(answer.clone());
            let err = r.create("NoSuchBucket-SlowDown", small(), "").unwrap_err();
            assert_eq!(err.code(), "remote_failed", "{answer:?}: {err}");
        }
    }

    #[test]
    fn the_overall_deadline_is_a_timeout() {
        let mut r = remote(Answer::Hang);
        r.deadline = Instant::now() + Duration::from_millis(50);
        let err = r.head("k").unwrap_err();
        assert_eq!(err.code(), "remote_timeout");
        assert!(err.message.contains("--timeout"), "{err}");
    }

    #[test]
    fn opening_a_remote_of_another_service_needs_credentials() {
        let env = credentials::test_env::Env::clean();
        let dir = tempfile::tempdir().unwrap();
        env.set("HOME", dir.path());
        let spec = RemoteSpec {
            url: "s3://bkt/pre".into(),
            endpoint_url: Some("http://127.0.0.1:9".into()),
            region: None,
            profile: None,
        };
        let err = S3Remote::open(&spec, Instant::now() + Duration::from_secs(5))
            .err()
            .expect("refused");
        assert_eq!(err.code(), "remote_auth");
        assert!(err.message.contains("no credentials found"), "{err}");
        // With keys in the environment it opens (nothing is contacted).
        env.set("AWS_ACCESS_KEY_ID", "AK");
        env.set("AWS_SECRET_ACCESS_KEY", "SK");
        assert!(S3Remote::open(&spec, Instant::now() + Duration::from_secs(5)).is_ok());
    }
}
