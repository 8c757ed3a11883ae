//! The S3 operations, mapped onto a `stow_store::ObjectBackend`. No storage logic
//! lives here: each operation converts its input, calls the store on a
//! blocking thread, and converts the result.

use std::collections::BTreeMap;
use std::time::{Duration, UNIX_EPOCH};

use s3s::dto::*;
use s3s::{s3_error, S3Error, S3ErrorCode, S3Request, S3Response, S3Result, S3};
use std::sync::Arc;
use stow_store as store;

use stow_store::{ByteRange, ChecksumAlgorithm as Alg, ObjectBackend, ObjectMeta, StoreError};

use crate::body::{request_body, request_reader, response_body, RequestBody};
use crate::errors::to_s3;

/// The S3 service over one store.
#[derive(Clone)]
pub struct StowS3 {
    pub(crate) store: Arc<dyn ObjectBackend>,
    pub(crate) read_only: bool,
    pub(crate) region: String,
}

impl StowS3 {
    /// A service over `store`; `read_only` refuses every mutation.
    pub fn new(store: Arc<dyn ObjectBackend>, read_only: bool, region: impl Into<String>) -> Self {
        Self {
            store,
            read_only,
            region: region.into(),
        }
    }

    /// Runs a point read (a few database pages: one object's or bucket's
    /// record, an inline body). On a plain store it runs right here, on the
    /// runtime: handing it to another thread and back costs more than the
    /// read. Other backends may hash files in a read, so they go through
    /// [`reading`].
    async fn point_read<T: Send + 'static>(
        &self,
        f: impl FnOnce(&dyn ObjectBackend) -> Result<T, StoreError> + Send + 'static,
    ) -> S3Result<T> {
        if let Some(store) = self.store.as_store() {
            return f(store).map_err(to_s3);
        }
        let backend = self.store.clone();
        reading(move || f(backend.as_ref())).await
    }

    fn writable(&self) -> S3Result<()> {
        if self.read_only {
            return Err(s3_error!(
                AccessDenied,
                "writing is not permitted by this environment (read-only server)"
            ));
        }
        Ok(())
    }
}

/// Runs a store call on a blocking thread.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, StoreError> + Send + 'static,
) -> S3Result<T> {
    match tokio::task::spawn_blocking(f).await {
        Ok(r) => r.map_err(to_s3),
        Err(e) => Err(S3Error::internal_error(e)),
    }
}

/// Runs a store call that reads no request body (see [`off_runtime`]).
async fn reading<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, StoreError> + Send + 'static,
) -> S3Result<T> {
    off_runtime(f).await?.map_err(to_s3)
}

/// Runs blocking work (store calls wait on disk and on group commit) without
/// stalling the runtime.
///
/// While the server has few tasks (a handful of connections), the request's
/// own thread runs it (`block_in_place`; the runtime hands that worker's
/// other tasks to another thread): the request pays no handoff to a pool
/// thread and back, a large share of a small request's latency. Under many
/// connections that handing-over happens on every call and costs more than
/// it saves, so the work goes to the blocking pool, as it does on a
/// current-thread runtime (tests).
///
/// Never for work that reads a streaming request body: the connection's
/// task, which this blocks, is the one that delivers the body.
async fn off_runtime<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> S3Result<T> {
    use tokio::runtime::{Handle, RuntimeFlavor};
    let rt = Handle::current();
    let metrics = rt.metrics();
    if rt.runtime_flavor() == RuntimeFlavor::MultiThread
        && metrics.num_alive_tasks() <= metrics.num_workers()
    {
        return Ok(tokio::task::block_in_place(f));
    }
    tokio::task::spawn_blocking(f)
        .await
        .map_err(S3Error::internal_error)
}

/// The type of an object stored without one.
const DEFAULT_CONTENT_TYPE: &str = "application/octet-stream";

fn etag(stored: &str) -> ETag {
    ETag::Strong(stored.trim_matches('"').to_string())
}

fn condition_text(c: &ETagCondition) -> String {
    match c {
        ETagCondition::Any => "*".into(),
        ETagCondition::ETag(t) => t.value().to_string(),
    }
}

fn timestamp(ns: i64) -> Timestamp {
    Timestamp::from(UNIX_EPOCH + Duration::from_nanos(ns.max(0) as u64))
}

fn unix_ns(t: &Timestamp) -> i64 {
    let odt: time::OffsetDateTime = t.clone().into();
    odt.unix_timestamp_nanos() as i64
}

fn alg_of(a: &ChecksumAlgorithm) -> S3Result<Alg> {
    Alg::parse(a.as_str())
        .ok_or_else(|| s3_error!(InvalidArgument, "unsupported checksum algorithm"))
}

fn dto_alg(a: Alg) -> ChecksumAlgorithm {
    ChecksumAlgorithm::from(a.as_str().to_string())
}

fn dto_checksum_type(t: store::ChecksumType) -> ChecksumType {
    ChecksumType::from(
        match t {
            store::ChecksumType::FullObject => "FULL_OBJECT",
            store::ChecksumType::Composite => "COMPOSITE",
        }
        .to_string(),
    )
}

/// The `x-amz-checksum-*` values a caller supplied, from an input that
/// names them S3's way (put and upload part alike).
macro_rules! supplied_checksums {
    ($input:expr) => {
        [
            (Alg::Crc32, &$input.checksum_crc32),
            (Alg::Crc32c, &$input.checksum_crc32c),
            (Alg::Crc64nvme, &$input.checksum_crc64nvme),
            (Alg::Sha1, &$input.checksum_sha1),
            (Alg::Sha256, &$input.checksum_sha256),
        ]
        .into_iter()
        .filter_map(|(a, v): (Alg, &Option<String>)| v.clone().map(|v| (a, v)))
        .collect::<Vec<_>>()
    };
}

/// Output slots for a checksum, one per algorithm.
#[derive(Default)]
struct ChecksumFields {
    crc32: Option<String>,
    crc32c: Option<String>,
    crc64nvme: Option<String>,
    sha1: Option<String>,
    sha256: Option<String>,
    kind: Option<ChecksumType>,
}

impl ChecksumFields {
    fn of(c: Option<&store::Checksum>) -> Self {
        let mut f = ChecksumFields::default();
        if let Some(c) = c {
            let v = Some(c.value.clone());
            match c.algorithm {
                Alg::Crc32 => f.crc32 = v,
                Alg::Crc32c => f.crc32c = v,
                Alg::Crc64nvme => f.crc64nvme = v,
                Alg::Sha1 => f.sha1 = v,
                Alg::Sha256 => f.sha256 = v,
            }
            f.kind = Some(dto_checksum_type(c.kind));
        }
        f
    }
}

/// The algorithm named by `x-amz-trailer: x-amz-checksum-<alg>`, if any.
fn trailer_alg(headers: &http::HeaderMap) -> Option<Alg> {
    let name = headers.get("x-amz-trailer")?.to_str().ok()?;
    Alg::parse(name.trim().strip_prefix("x-amz-checksum-")?)
}

/// Trailing checksums of an `aws-chunked` body, read once it has ended.
fn trailing(req_trailers: Option<s3s::TrailingHeaders>) -> Option<store::TrailingChecksums> {
    let trailers = req_trailers?;
    Some(store::TrailingChecksums(Box::new(move || {
        let Some(map) = trailers.take() else {
            return Vec::new();
        };
        Alg::ALL
            .into_iter()
            .filter_map(|a| {
                let name = format!("x-amz-checksum-{}", a.as_str().to_ascii_lowercase());
                let v = map.get(name.as_str())?.to_str().ok()?.trim().to_string();
                Some((a, v))
            })
            .collect()
    })))
}

/// Content-Encoding without the transport-only `aws-chunked`.
fn stored_encoding(enc: Option<String>) -> Option<String> {
    let enc = enc?;
    let kept: Vec<&str> = enc
        .split(',')
        .map(str::trim)
        .filter(|e| !e.is_empty() && !e.eq_ignore_ascii_case("aws-chunked"))
        .collect();
    (!kept.is_empty()).then(|| kept.join(","))
}

fn metadata_in(m: Option<Metadata>) -> BTreeMap<String, String> {
    m.map(|m| m.into_iter().collect()).unwrap_or_default()
}

fn metadata_out(m: &BTreeMap<String, String>) -> Option<Metadata> {
    (!m.is_empty()).then(|| m.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
}

fn format_http_date(t: &Timestamp) -> S3Result<String> {
    let mut buf = Vec::new();
    t.format(TimestampFormat::HttpDate, &mut buf)
        .map_err(S3Error::internal_error)?;
    String::from_utf8(buf).map_err(S3Error::internal_error)
}

fn parse_http_date(s: &str) -> Option<Timestamp> {
    Timestamp::parse(TimestampFormat::HttpDate, s).ok()
}

/// Destination conditions of a copy, read from the raw headers (the DTO
/// has no fields for them).
fn header_condition(headers: &http::HeaderMap) -> S3Result<store::WriteCondition> {
    let get = |n: &str| headers.get(n).and_then(|v| v.to_str().ok()).map(str::trim);
    match (get("if-none-match"), get("if-match")) {
        (Some(_), Some(_)) => Err(s3_error!(
            NotImplemented,
            "If-Match and If-None-Match together are not supported"
        )),
        (Some("*"), None) => Ok(store::WriteCondition::IfAbsent),
        (Some(_), None) => Err(s3_error!(NotImplemented, "If-None-Match supports only *")),
        (None, Some(tag)) => Ok(store::WriteCondition::IfMatch(tag.to_string())),
        (None, None) => Ok(store::WriteCondition::Always),
    }
}

fn write_condition(
    if_match: Option<IfMatch>,
    if_none_match: Option<IfNoneMatch>,
) -> S3Result<store::WriteCondition> {
    match (if_none_match, if_match) {
        (Some(_), Some(_)) => Err(s3_error!(
            NotImplemented,
            "If-Match and If-None-Match together are not supported"
        )),
        (Some(ETagCondition::Any), None) => Ok(store::WriteCondition::IfAbsent),
        (Some(_), None) => Err(s3_error!(NotImplemented, "If-None-Match supports only *")),
        (None, Some(m)) => Ok(store::WriteCondition::IfMatch(condition_text(&m))),
        (None, None) => Ok(store::WriteCondition::Always),
    }
}

fn check_version(version_id: &Option<String>) -> S3Result<()> {
    match version_id.as_deref() {
        None | Some("null") => Ok(()),
        Some(_) => Err(s3_error!(
            InvalidArgument,
            "versioning is not enabled: the only version id is null"
        )),
    }
}

fn max_count(v: Option<i32>, name: &str) -> S3Result<usize> {
    match v {
        None => Ok(1000),
        Some(n) if n < 0 => Err(S3Error::with_message(
            S3ErrorCode::InvalidArgument,
            format!("{name} must be a non-negative integer"),
        )),
        Some(n) => Ok((n as usize).min(1000)),
    }
}

/// Percent-encodes a key for `encoding-type=url` listings.
fn url_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~/".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn encode_token(key: &str) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(key.as_bytes())
}

fn decode_token(token: &str) -> S3Result<String> {
    use base64::Engine as _;
    let bad = || {
        s3_error!(
            InvalidArgument,
            "The continuation token provided is incorrect"
        )
    };
    if token.len() > 2048 {
        return Err(bad());
    }
    let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(token)
        .map_err(|_| bad())?;
    let key = String::from_utf8(raw).map_err(|_| bad())?;
    if key.contains('\0') {
        return Err(bad());
    }
    Ok(key)
}

fn copy_source(src: &CopySource) -> S3Result<(String, String)> {
    match src {
        CopySource::Bucket {
            bucket,
            key,
            version_id,
        } => {
            check_version(&version_id.as_deref().map(String::from))?;
            Ok((bucket.to_string(), key.to_string()))
        }
        _ => Err(s3_error!(
            NotImplemented,
            "access point copy sources are not supported"
        )),
    }
}

fn source_conditions(
    if_match: Option<IfMatch>,
    if_none_match: Option<IfNoneMatch>,
    if_modified_since: Option<Timestamp>,
    if_unmodified_since: Option<Timestamp>,
) -> store::ReadConditions {
    store::ReadConditions {
        if_match: if_match.as_ref().map(condition_text),
        if_none_match: if_none_match.as_ref().map(condition_text),
        if_modified_since_ns: if_modified_since.as_ref().map(unix_ns),
        if_unmodified_since_ns: if_unmodified_since.as_ref().map(unix_ns),
    }
}

fn object_entry(o: store::ObjectSummary, url: bool) -> Object {
    Object {
        key: Some(if url { url_encode(&o.key) } else { o.key }),
        size: Some(o.size as i64),
        e_tag: Some(etag(&o.etag)),
        last_modified: Some(timestamp(o.last_modified_ns)),
        storage_class: Some(ObjectStorageClass::from_static(
            ObjectStorageClass::STANDARD,
        )),
        ..Default::default()
    }
}

fn contents(objects: Vec<store::ObjectSummary>, url: bool) -> ObjectList {
    objects.into_iter().map(|o| object_entry(o, url)).collect()
}

fn common_prefixes(prefixes: Vec<String>, url: bool) -> CommonPrefixList {
    prefixes
        .into_iter()
        .map(|p| CommonPrefix {
            prefix: Some(if url { url_encode(&p) } else { p }),
        })
        .collect()
}

/// Object properties from an input carrying S3's standard header fields
/// (put, copy with REPLACE, multipart create all name them alike).
macro_rules! props_of {
    ($input:expr) => {
        store::ObjectProps {
            content_type: $input.content_type,
            metadata: metadata_in($input.metadata),
            content_encoding: stored_encoding($input.content_encoding),
            content_disposition: $input.content_disposition,
            content_language: $input.content_language,
            cache_control: $input.cache_control,
            expires: $input.expires.as_ref().map(format_http_date).transpose()?,
        }
    };
}

fn wants_url(e: &Option<EncodingType>) -> S3Result<bool> {
    match e {
        None => Ok(false),
        Some(e) if e.as_str().eq_ignore_ascii_case("url") => Ok(true),
        Some(_) => Err(s3_error!(
            InvalidArgument,
            "Invalid Encoding Method specified in Request"
        )),
    }
}

fn range_of(r: Range) -> ByteRange {
    match r {
        Range::Int {
            first,
            last: Some(last),
        } => ByteRange::FromTo(first, last),
        Range::Int { first, last: None } => ByteRange::From(first),
        Range::Suffix { length } => ByteRange::Suffix(length),
    }
}

fn invalid_range(size: u64) -> S3Error {
    let mut err = s3_error!(InvalidRange, "The requested range is not satisfiable");
    let mut headers = http::HeaderMap::new();
    if let Ok(v) = http::HeaderValue::from_str(&format!("bytes */{size}")) {
        headers.insert(http::header::CONTENT_RANGE, v);
    }
    err.set_headers(headers);
    err
}

fn checksum_enabled(mode: &Option<ChecksumMode>) -> bool {
    mode.as_ref()
        .is_some_and(|m| m.as_str().eq_ignore_ascii_case("ENABLED"))
}

/// Maps a read-condition verdict to S3's answer (304 or 412).
fn read_condition(check: store::ConditionCheck) -> S3Result<()> {
    match check {
        store::ConditionCheck::Pass => Ok(()),
        store::ConditionCheck::NotModified => Err(s3_error!(NotModified)),
        store::ConditionCheck::PreconditionFailed => Err(s3_error!(
            PreconditionFailed,
            "At least one of the pre-conditions you specified did not hold"
        )),
    }
}

/// The object headers GetObject and HeadObject share (their output types
/// name the fields alike), as a struct-update base.
macro_rules! object_output {
    ($ty:ident, $meta:expr, $c:expr) => {
        $ty {
            e_tag: Some(etag(&$meta.etag)),
            last_modified: Some(timestamp($meta.last_modified_ns)),
            // S3 reports the default type of objects stored without one.
            content_type: Some(
                $meta
                    .props
                    .content_type
                    .clone()
                    .unwrap_or_else(|| DEFAULT_CONTENT_TYPE.to_string()),
            ),
            content_encoding: $meta.props.content_encoding.clone(),
            content_disposition: $meta.props.content_disposition.clone(),
            content_language: $meta.props.content_language.clone(),
            cache_control: $meta.props.cache_control.clone(),
            expires: $meta.props.expires.as_deref().and_then(parse_http_date),
            metadata: metadata_out(&$meta.props.metadata),
            checksum_crc32: $c.crc32,
            checksum_crc32c: $c.crc32c,
            checksum_crc64nvme: $c.crc64nvme,
            checksum_sha1: $c.sha1,
            checksum_sha256: $c.sha256,
            checksum_type: $c.kind,
            ..Default::default()
        }
    };
}

#[async_trait::async_trait]
impl S3 for StowS3 {
    async fn create_bucket(
        &self,
        req: S3Request<CreateBucketInput>,
    ) -> S3Result<S3Response<CreateBucketOutput>> {
        self.writable()?;
        let store = self.store.clone();
        let bucket = req.input.bucket.clone();
        blocking(move || store.create_bucket(&bucket)).await?;
        Ok(S3Response::new(CreateBucketOutput {
            location: Some(format!("/{}", req.input.bucket)),
        }))
    }

    async fn head_bucket(
        &self,
        req: S3Request<HeadBucketInput>,
    ) -> S3Result<S3Response<HeadBucketOutput>> {
        let bucket = req.input.bucket;
        self.point_read(move |store| store.head_bucket(&bucket))
            .await?;
        Ok(S3Response::new(HeadBucketOutput {
            bucket_region: Some(self.region.clone()),
            ..Default::default()
        }))
    }

    async fn get_bucket_location(
        &self,
        req: S3Request<GetBucketLocationInput>,
    ) -> S3Result<S3Response<GetBucketLocationOutput>> {
        let bucket = req.input.bucket;
        self.point_read(move |store| store.head_bucket(&bucket))
            .await?;
        let location = (self.region != "us-east-1")
            .then(|| BucketLocationConstraint::from(self.region.clone()));
        Ok(S3Response::new(GetBucketLocationOutput {
            location_constraint: location,
        }))
    }

    async fn list_buckets(
        &self,
        _req: S3Request<ListBucketsInput>,
    ) -> S3Result<S3Response<ListBucketsOutput>> {
        let store = self.store.clone();
        let buckets = blocking(move || store.list_buckets()).await?;
        Ok(S3Response::new(ListBucketsOutput {
            buckets: Some(
                buckets
                    .into_iter()
                    .map(|b| Bucket {
                        name: Some(b.name),
                        creation_date: Some(timestamp(b.created_ns)),
                        bucket_region: Some(self.region.clone()),
                    })
                    .collect(),
            ),
            owner: Some(Owner {
                display_name: Some("stow".into()),
                id: Some("stow".into()),
            }),
            ..Default::default()
        }))
    }

    async fn delete_bucket(
        &self,
        req: S3Request<DeleteBucketInput>,
    ) -> S3Result<S3Response<DeleteBucketOutput>> {
        self.writable()?;
        let store = self.store.clone();
        blocking(move || store.delete_bucket(&req.input.bucket)).await?;
        Ok(S3Response::new(DeleteBucketOutput {}))
    }

    async fn put_object(
        &self,
        req: S3Request<PutObjectInput>,
    ) -> S3Result<S3Response<PutObjectOutput>> {
        self.writable()?;
        let trailer = trailer_alg(&req.headers);
        let trailing_checksums = trailing(req.trailing_headers.clone());
        let input = req.input;
        let supplied = supplied_checksums!(input);
        let declared = input.checksum_algorithm.as_ref().map(alg_of).transpose()?;
        let opts = store::PutOptions {
            props: props_of!(input),
            checksum_algorithm: declared.or(trailer),
            expected_checksums: supplied,
            content_md5: input.content_md5,
            trailing_checksums: trailer.and(trailing_checksums),
            condition: write_condition(input.if_match, input.if_none_match)?,
        };
        let body = request_body(input.body, input.content_length).await;
        let (bucket, key) = (input.bucket, input.key);
        let meta = match (body, self.store.as_store()) {
            // A small body of a plain store commits without a blocking
            // thread: the request waits for the store's commit thread.
            (RequestBody::Complete(bytes), Some(store)) if bytes.len() <= store::SMALL_BODY_MAX => {
                let (tx, rx) = tokio::sync::oneshot::channel();
                store.put_object_detached(&bucket, &key, bytes, opts, move |r| {
                    let _ = tx.send(r);
                });
                rx.await.map_err(S3Error::internal_error)?.map_err(to_s3)?
            }
            (body, _) => {
                let mut reader = body.into_reader();
                let store = self.store.clone();
                blocking(move || store.put_object(&bucket, &key, &mut reader, opts)).await?
            }
        };
        let c = ChecksumFields::of(meta.checksum.as_ref());
        Ok(S3Response::new(PutObjectOutput {
            e_tag: Some(etag(&meta.etag)),
            checksum_crc32: c.crc32,
            checksum_crc32c: c.crc32c,
            checksum_crc64nvme: c.crc64nvme,
            checksum_sha1: c.sha1,
            checksum_sha256: c.sha256,
            checksum_type: c.kind,
            ..Default::default()
        }))
    }

    async fn get_object(
        &self,
        req: S3Request<GetObjectInput>,
    ) -> S3Result<S3Response<GetObjectOutput>> {
        let input = req.input;
        check_version(&input.version_id)?;
        let conditions = source_conditions(
            input.if_match,
            input.if_none_match,
            input.if_modified_since,
            input.if_unmodified_since,
        );
        let range = input.range.map(range_of);
        let part = input
            .part_number
            .map(|n| {
                u32::try_from(n).map_err(|_| s3_error!(InvalidArgument, "invalid part number"))
            })
            .transpose()?;
        if range.is_some() && part.is_some() {
            return Err(s3_error!(
                InvalidRequest,
                "Cannot specify both Range header and partNumber query parameter"
            ));
        }
        let (bucket, key) = (input.bucket, input.key);
        let open = move |store: &dyn ObjectBackend| match part {
            Some(n) => store.get_object_part(&bucket, &key, n),
            None => store.get_object(&bucket, &key, range),
        };
        let checked = move |read: Result<store::ObjectRead, StoreError>| {
            let read = match read {
                Err(StoreError::InvalidRange { size }) => return Err(invalid_range(size)),
                r => r.map_err(to_s3)?,
            };
            read_condition(conditions.check(&read.meta))?;
            Ok(read)
        };
        let read = match self.store.as_store() {
            // On a plain store the lookup is a point read, and a body kept
            // inline is in memory: only a body in files needs a thread.
            Some(store) => {
                let read = checked(open(store))?;
                let len = read.body.len();
                if read.body.in_memory() {
                    let body = response_body(read.body).map_err(S3Error::internal_error)?;
                    (read.meta, read.range, len, body)
                } else {
                    off_runtime(move || {
                        let body = response_body(read.body)?;
                        Ok::<_, std::io::Error>((read.meta, read.range, len, body))
                    })
                    .await?
                    .map_err(S3Error::internal_error)?
                }
            }
            None => {
                let backend = self.store.clone();
                off_runtime(move || {
                    let read = checked(open(backend.as_ref()))?;
                    let len = read.body.len();
                    let body = response_body(read.body).map_err(S3Error::internal_error)?;
                    Ok::<_, S3Error>((read.meta, read.range, len, body))
                })
                .await??
            }
        };
        let (meta, range, len, body) = read;
        let c = if checksum_enabled(&input.checksum_mode) && range.is_none() {
            ChecksumFields::of(meta.checksum.as_ref())
        } else {
            ChecksumFields::default()
        };
        let parts_count = (!meta.parts.is_empty()).then_some(meta.parts.len() as i32);
        let content_range = range.map(|(off, n)| {
            if n == 0 {
                format!("bytes */{}", meta.size)
            } else {
                format!("bytes {}-{}/{}", off, off + n - 1, meta.size)
            }
        });
        let mut resp = S3Response::new(GetObjectOutput {
            body: Some(body),
            accept_ranges: Some("bytes".into()),
            content_length: Some(len as i64),
            content_range: content_range.clone(),
            parts_count: part.and(parts_count),
            ..object_output!(GetObjectOutput, meta, c)
        });
        if content_range.is_some() {
            resp.status = Some(http::StatusCode::PARTIAL_CONTENT);
        }
        Ok(resp)
    }

    async fn head_object(
        &self,
        req: S3Request<HeadObjectInput>,
    ) -> S3Result<S3Response<HeadObjectOutput>> {
        let input = req.input;
        check_version(&input.version_id)?;
        let conditions = source_conditions(
            input.if_match,
            input.if_none_match,
            input.if_modified_since,
            input.if_unmodified_since,
        );
        let (bucket, key) = (input.bucket, input.key);
        let meta = self
            .point_read(move |store| store.head_object(&bucket, &key))
            .await?;
        read_condition(conditions.check(&meta))?;
        let (length, content_range, parts_count) = match input.part_number {
            Some(n) if n >= 1 && (n as usize) <= meta.parts.len().max(1) => {
                let sizes: Vec<u64> = if meta.parts.is_empty() {
                    vec![meta.size]
                } else {
                    meta.parts.iter().map(|p| p.size).collect()
                };
                let start: u64 = sizes[..n as usize - 1].iter().sum();
                let len = sizes[n as usize - 1];
                let range = format!(
                    "bytes {}-{}/{}",
                    start,
                    (start + len).saturating_sub(1),
                    meta.size
                );
                (len, Some(range), Some(sizes.len() as i32))
            }
            Some(_) => return Err(invalid_range(meta.size)),
            None => (meta.size, None, None),
        };
        let c = if checksum_enabled(&input.checksum_mode) {
            ChecksumFields::of(meta.checksum.as_ref())
        } else {
            ChecksumFields::default()
        };
        let mut resp = S3Response::new(HeadObjectOutput {
            accept_ranges: Some("bytes".into()),
            content_length: Some(length as i64),
            content_range: content_range.clone(),
            parts_count,
            ..object_output!(HeadObjectOutput, meta, c)
        });
        if content_range.is_some() {
            resp.status = Some(http::StatusCode::PARTIAL_CONTENT);
        }
        Ok(resp)
    }

    async fn delete_object(
        &self,
        req: S3Request<DeleteObjectInput>,
    ) -> S3Result<S3Response<DeleteObjectOutput>> {
        self.writable()?;
        check_version(&req.input.version_id)?;
        let store = self.store.clone();
        let (bucket, key) = (req.input.bucket, req.input.key);
        blocking(move || store.delete_object(&bucket, &key)).await?;
        Ok(S3Response::with_status(
            DeleteObjectOutput::default(),
            http::StatusCode::NO_CONTENT,
        ))
    }

    async fn delete_objects(
        &self,
        req: S3Request<DeleteObjectsInput>,
    ) -> S3Result<S3Response<DeleteObjectsOutput>> {
        self.writable()?;
        let input = req.input;
        let quiet = input.delete.quiet.unwrap_or(false);
        if input.delete.objects.len() > 1000 {
            return Err(s3_error!(
                MalformedXML,
                "at most 1000 keys may be deleted at once"
            ));
        }
        let store = self.store.clone();
        let bucket = input.bucket;
        let objects = input.delete.objects;
        let (deleted, errors) = blocking(move || {
            store.head_bucket(&bucket)?;
            let mut deleted = Vec::new();
            let mut errors = Vec::new();
            for o in objects {
                if !matches!(o.version_id.as_deref(), None | Some("null")) {
                    errors.push(Error {
                        code: Some("NoSuchVersion".into()),
                        key: Some(o.key),
                        message: Some(
                            "versioning is not enabled: the only version id is null".into(),
                        ),
                        version_id: o.version_id,
                    });
                    continue;
                }
                match store.delete_object(&bucket, &o.key) {
                    Ok(_) => deleted.push(DeletedObject {
                        key: Some(o.key),
                        version_id: o.version_id,
                        ..Default::default()
                    }),
                    Err(e) => {
                        let s3 = to_s3(e);
                        errors.push(Error {
                            code: Some(s3.code().as_str().to_string()),
                            key: Some(o.key),
                            message: s3.message().map(String::from),
                            version_id: o.version_id,
                        })
                    }
                }
            }
            Ok((deleted, errors))
        })
        .await?;
        Ok(S3Response::new(DeleteObjectsOutput {
            deleted: (!quiet).then_some(deleted),
            errors: Some(errors),
            ..Default::default()
        }))
    }

    async fn copy_object(
        &self,
        req: S3Request<CopyObjectInput>,
    ) -> S3Result<S3Response<CopyObjectOutput>> {
        self.writable()?;
        let condition = header_condition(&req.headers)?;
        let input = req.input;
        let (src_bucket, src_key) = copy_source(&input.copy_source)?;
        let replace = match input
            .metadata_directive
            .as_ref()
            .map(|d| d.as_str().to_ascii_uppercase())
        {
            None => false,
            Some(d) if d == "COPY" => false,
            Some(d) if d == "REPLACE" => true,
            Some(_) => return Err(s3_error!(InvalidArgument, "Unknown metadata directive")),
        };
        if !replace && src_bucket == input.bucket && src_key == input.key {
            return Err(s3_error!(
                InvalidRequest,
                "This copy request is illegal because it is trying to copy an object to itself without changing the object's metadata, storage class, website redirect location or encryption attributes."
            ));
        }
        let replace_props = if replace {
            Some(props_of!(input))
        } else {
            None
        };
        let opts = store::CopyOptions {
            replace_props,
            condition,
            source: source_conditions(
                input.copy_source_if_match,
                input.copy_source_if_none_match,
                input.copy_source_if_modified_since,
                input.copy_source_if_unmodified_since,
            ),
        };
        let store = self.store.clone();
        let (bucket, key) = (input.bucket, input.key);
        let meta =
            blocking(move || store.copy_object(&src_bucket, &src_key, &bucket, &key, opts)).await?;
        let c = ChecksumFields::of(meta.checksum.as_ref());
        Ok(S3Response::new(CopyObjectOutput {
            copy_object_result: Some(CopyObjectResult {
                e_tag: Some(etag(&meta.etag)),
                last_modified: Some(timestamp(meta.last_modified_ns)),
                checksum_crc32: c.crc32,
                checksum_crc32c: c.crc32c,
                checksum_crc64nvme: c.crc64nvme,
                checksum_sha1: c.sha1,
                checksum_sha256: c.sha256,
                checksum_type: c.kind,
            }),
            ..Default::default()
        }))
    }

    async fn list_objects(
        &self,
        req: S3Request<ListObjectsInput>,
    ) -> S3Result<S3Response<ListObjectsOutput>> {
        let input = req.input;
        let url = wants_url(&input.encoding_type)?;
        let max = max_count(input.max_keys, "max-keys")?;
        let query = store::ListQuery {
            prefix: input.prefix.clone().unwrap_or_default(),
            delimiter: input.delimiter.clone().filter(|d| !d.is_empty()),
            start_after: input.marker.clone().filter(|m| !m.is_empty()),
            max_keys: max,
        };
        let store = self.store.clone();
        let bucket = input.bucket.clone();
        let page = reading(move || store.list_objects(&bucket, &query)).await?;
        let enc = |s: String| if url { url_encode(&s) } else { s };
        let next_marker = page
            .next_marker
            .clone()
            .filter(|_| input.delimiter.as_deref().is_some_and(|d| !d.is_empty()))
            .map(enc);
        Ok(S3Response::new(ListObjectsOutput {
            name: Some(input.bucket),
            prefix: Some(enc(input.prefix.unwrap_or_default())),
            marker: Some(enc(input.marker.unwrap_or_default())),
            max_keys: Some(max as i32),
            is_truncated: Some(page.is_truncated),
            next_marker,
            delimiter: input.delimiter.map(enc),
            encoding_type: input.encoding_type,
            contents: Some(contents(page.objects, url)),
            common_prefixes: Some(common_prefixes(page.common_prefixes, url)),
            ..Default::default()
        }))
    }

    async fn list_objects_v2(
        &self,
        req: S3Request<ListObjectsV2Input>,
    ) -> S3Result<S3Response<ListObjectsV2Output>> {
        let input = req.input;
        let url = wants_url(&input.encoding_type)?;
        let max = max_count(input.max_keys, "max-keys")?;
        let after = match &input.continuation_token {
            Some(t) => Some(decode_token(t)?),
            None => input.start_after.clone().filter(|s| !s.is_empty()),
        };
        let query = store::ListQuery {
            prefix: input.prefix.clone().unwrap_or_default(),
            delimiter: input.delimiter.clone().filter(|d| !d.is_empty()),
            start_after: after,
            max_keys: max,
        };
        let store = self.store.clone();
        let bucket = input.bucket.clone();
        let page = reading(move || store.list_objects(&bucket, &query)).await?;
        let enc = |s: String| if url { url_encode(&s) } else { s };
        let key_count = (page.objects.len() + page.common_prefixes.len()) as i32;
        Ok(S3Response::new(ListObjectsV2Output {
            name: Some(input.bucket),
            prefix: Some(enc(input.prefix.unwrap_or_default())),
            max_keys: Some(max as i32),
            key_count: Some(key_count),
            continuation_token: input.continuation_token,
            next_continuation_token: page.next_marker.as_deref().map(encode_token),
            is_truncated: Some(page.is_truncated),
            start_after: input.start_after.map(enc),
            delimiter: input.delimiter.map(enc),
            encoding_type: input.encoding_type,
            contents: Some(contents(page.objects, url)),
            common_prefixes: Some(common_prefixes(page.common_prefixes, url)),
            ..Default::default()
        }))
    }

    async fn list_object_versions(
        &self,
        req: S3Request<ListObjectVersionsInput>,
    ) -> S3Result<S3Response<ListObjectVersionsOutput>> {
        let input = req.input;
        let url = wants_url(&input.encoding_type)?;
        let max = max_count(input.max_keys, "max-keys")?;
        if input.version_id_marker.is_some() && input.key_marker.is_none() {
            return Err(s3_error!(
                InvalidArgument,
                "A version-id marker cannot be specified without a key marker."
            ));
        }
        check_version(&input.version_id_marker.clone().filter(|v| !v.is_empty()))?;
        let query = store::ListQuery {
            prefix: input.prefix.clone().unwrap_or_default(),
            delimiter: input.delimiter.clone().filter(|d| !d.is_empty()),
            start_after: input.key_marker.clone().filter(|m| !m.is_empty()),
            max_keys: max,
        };
        let store = self.store.clone();
        let bucket = input.bucket.clone();
        let page = reading(move || store.list_objects(&bucket, &query)).await?;
        let enc = |s: String| if url { url_encode(&s) } else { s };
        let truncated = page.is_truncated;
        Ok(S3Response::new(ListObjectVersionsOutput {
            name: Some(input.bucket),
            prefix: Some(enc(input.prefix.unwrap_or_default())),
            key_marker: Some(enc(input.key_marker.unwrap_or_default())),
            version_id_marker: Some(input.version_id_marker.unwrap_or_default()),
            max_keys: Some(max as i32),
            is_truncated: Some(truncated),
            next_key_marker: page.next_marker.clone().filter(|_| truncated).map(enc),
            next_version_id_marker: truncated.then(|| "null".to_string()),
            delimiter: input.delimiter.map(enc),
            encoding_type: input.encoding_type,
            versions: Some(
                page.objects
                    .into_iter()
                    .map(|o| ObjectVersion {
                        key: Some(enc(o.key)),
                        size: Some(o.size as i64),
                        e_tag: Some(etag(&o.etag)),
                        last_modified: Some(timestamp(o.last_modified_ns)),
                        is_latest: Some(true),
                        version_id: Some("null".into()),
                        storage_class: Some(ObjectVersionStorageClass::from_static(
                            ObjectVersionStorageClass::STANDARD,
                        )),
                        ..Default::default()
                    })
                    .collect(),
            ),
            common_prefixes: Some(common_prefixes(page.common_prefixes, url)),
            ..Default::default()
        }))
    }

    async fn create_multipart_upload(
        &self,
        req: S3Request<CreateMultipartUploadInput>,
    ) -> S3Result<S3Response<CreateMultipartUploadOutput>> {
        self.writable()?;
        let input = req.input;
        let alg = input.checksum_algorithm.as_ref().map(alg_of).transpose()?;
        let kind = match input
            .checksum_type
            .as_ref()
            .map(|t| t.as_str().to_ascii_uppercase())
        {
            None => None,
            Some(t) if t == "COMPOSITE" => Some(store::ChecksumType::Composite),
            Some(t) if t == "FULL_OBJECT" => Some(store::ChecksumType::FullObject),
            Some(_) => return Err(s3_error!(InvalidArgument, "unknown checksum type")),
        };
        if kind == Some(store::ChecksumType::Composite) && alg == Some(Alg::Crc64nvme) {
            return Err(s3_error!(
                InvalidRequest,
                "CRC64NVME supports only the FULL_OBJECT checksum type"
            ));
        }
        let kind = kind.or(match alg {
            Some(Alg::Crc64nvme) => Some(store::ChecksumType::FullObject),
            _ => None,
        });
        let opts = store::CreateUploadOptions {
            props: props_of!(input),
            checksum_algorithm: alg,
            checksum_type: kind,
        };
        let store = self.store.clone();
        let (bucket, key) = (input.bucket.clone(), input.key.clone());
        let info = blocking(move || store.create_upload(&bucket, &key, opts)).await?;
        Ok(S3Response::new(CreateMultipartUploadOutput {
            bucket: Some(input.bucket),
            key: Some(input.key),
            upload_id: Some(info.upload_id),
            checksum_algorithm: alg.map(dto_alg),
            checksum_type: alg
                .map(|_| dto_checksum_type(kind.unwrap_or(store::ChecksumType::Composite))),
            ..Default::default()
        }))
    }

    async fn upload_part(
        &self,
        req: S3Request<UploadPartInput>,
    ) -> S3Result<S3Response<UploadPartOutput>> {
        self.writable()?;
        let trailer = trailer_alg(&req.headers);
        let trailing_checksums = trailing(req.trailing_headers.clone());
        let input = req.input;
        let supplied = supplied_checksums!(input);
        let declared = input.checksum_algorithm.as_ref().map(alg_of).transpose()?;
        let opts = store::PartOptions {
            content_md5: input.content_md5,
            expected_checksums: supplied,
            checksum_algorithm: declared.or(trailer),
            trailing_checksums: trailer.and(trailing_checksums),
        };
        let mut reader = request_reader(input.body, input.content_length).await;
        let store = self.store.clone();
        let (bucket, key, upload) = (input.bucket, input.key, input.upload_id);
        let number = i64::from(input.part_number);
        let info =
            blocking(move || store.upload_part(&bucket, &key, &upload, number, &mut reader, opts))
                .await?;
        let c = ChecksumFields::of(info.checksum.as_ref());
        Ok(S3Response::new(UploadPartOutput {
            e_tag: Some(etag(&info.etag)),
            checksum_crc32: c.crc32,
            checksum_crc32c: c.crc32c,
            checksum_crc64nvme: c.crc64nvme,
            checksum_sha1: c.sha1,
            checksum_sha256: c.sha256,
            ..Default::default()
        }))
    }

    async fn upload_part_copy(
        &self,
        req: S3Request<UploadPartCopyInput>,
    ) -> S3Result<S3Response<UploadPartCopyOutput>> {
        self.writable()?;
        let input = req.input;
        let (src_bucket, src_key) = copy_source(&input.copy_source)?;
        let range = match input.copy_source_range.as_deref() {
            None => None,
            Some(r) => {
                let parsed = Range::parse(r).map_err(|_| {
                    s3_error!(
                        InvalidArgument,
                        "The x-amz-copy-source-range value must be of the form bytes=first-last"
                    )
                })?;
                match parsed {
                    Range::Int {
                        first,
                        last: Some(last),
                    } => Some(ByteRange::FromTo(first, last)),
                    _ => {
                        return Err(s3_error!(
                        InvalidArgument,
                        "The x-amz-copy-source-range value must be of the form bytes=first-last"
                    ))
                    }
                }
            }
        };
        let conditions = source_conditions(
            input.copy_source_if_match,
            input.copy_source_if_none_match,
            input.copy_source_if_modified_since,
            input.copy_source_if_unmodified_since,
        );
        let store = self.store.clone();
        let (bucket, key, upload) = (input.bucket, input.key, input.upload_id);
        let number = i64::from(input.part_number);
        let info = tokio::task::spawn_blocking(move || {
            let read = match store.get_object(&src_bucket, &src_key, range) {
                Err(StoreError::InvalidRange { size }) => return Err(invalid_range(size)),
                r => r.map_err(to_s3)?,
            };
            if conditions.check(&read.meta) != store::ConditionCheck::Pass {
                return Err(s3_error!(PreconditionFailed));
            }
            let mut body = read.body;
            store
                .upload_part(
                    &bucket,
                    &key,
                    &upload,
                    number,
                    &mut body,
                    store::PartOptions::default(),
                )
                .map_err(to_s3)
        })
        .await
        .map_err(S3Error::internal_error)??;
        Ok(S3Response::new(UploadPartCopyOutput {
            copy_part_result: Some(CopyPartResult {
                e_tag: Some(etag(&info.etag)),
                last_modified: Some(timestamp(info.last_modified_ns)),
                ..Default::default()
            }),
            ..Default::default()
        }))
    }

    async fn complete_multipart_upload(
        &self,
        req: S3Request<CompleteMultipartUploadInput>,
    ) -> S3Result<S3Response<CompleteMultipartUploadOutput>> {
        self.writable()?;
        let input = req.input;
        let condition = write_condition(input.if_match, input.if_none_match)?;
        let parts = input
            .multipart_upload
            .and_then(|m| m.parts)
            .unwrap_or_default()
            .into_iter()
            .map(|p| {
                let number = p
                    .part_number
                    .ok_or_else(|| s3_error!(MalformedXML, "a part has no PartNumber"))?;
                let tag = p
                    .e_tag
                    .ok_or_else(|| s3_error!(MalformedXML, "a part has no ETag"))?;
                Ok(store::CompletedPart {
                    part_number: u32::try_from(number)
                        .map_err(|_| s3_error!(InvalidPart, "invalid part number"))?,
                    etag: tag.value().to_string(),
                })
            })
            .collect::<S3Result<Vec<_>>>()?;
        let store = self.store.clone();
        let (bucket, key, upload) = (input.bucket.clone(), input.key.clone(), input.upload_id);
        let meta: ObjectMeta =
            blocking(move || store.complete_upload(&bucket, &key, &upload, &parts, condition))
                .await?;
        let c = ChecksumFields::of(meta.checksum.as_ref());
        Ok(S3Response::new(CompleteMultipartUploadOutput {
            bucket: Some(input.bucket.clone()),
            key: Some(input.key.clone()),
            location: Some(format!("/{}/{}", input.bucket, input.key)),
            e_tag: Some(etag(&meta.etag)),
            checksum_crc32: c.crc32,
            checksum_crc32c: c.crc32c,
            checksum_crc64nvme: c.crc64nvme,
            checksum_sha1: c.sha1,
            checksum_sha256: c.sha256,
            checksum_type: c.kind,
            ..Default::default()
        }))
    }

    async fn abort_multipart_upload(
        &self,
        req: S3Request<AbortMultipartUploadInput>,
    ) -> S3Result<S3Response<AbortMultipartUploadOutput>> {
        self.writable()?;
        let store = self.store.clone();
        let i = req.input;
        blocking(move || store.abort_upload(&i.bucket, &i.key, &i.upload_id)).await?;
        Ok(S3Response::with_status(
            AbortMultipartUploadOutput::default(),
            http::StatusCode::NO_CONTENT,
        ))
    }

    async fn list_parts(
        &self,
        req: S3Request<ListPartsInput>,
    ) -> S3Result<S3Response<ListPartsOutput>> {
        let input = req.input;
        let max = match input.max_parts {
            None => 1000,
            Some(n) if n >= 0 => (n as usize).min(1000),
            Some(_) => {
                return Err(s3_error!(
                    InvalidArgument,
                    "max-parts must be a non-negative integer"
                ))
            }
        };
        let marker = match input.part_number_marker {
            None => 0,
            Some(n) if (0..=10_000).contains(&n) => n as u32,
            Some(_) => {
                return Err(s3_error!(
                    InvalidArgument,
                    "part-number-marker must be 0 to 10000"
                ))
            }
        };
        let store = self.store.clone();
        let (bucket, key, upload) = (
            input.bucket.clone(),
            input.key.clone(),
            input.upload_id.clone(),
        );
        let page = blocking(move || store.list_parts(&bucket, &key, &upload, marker, max)).await?;
        Ok(S3Response::new(ListPartsOutput {
            bucket: Some(input.bucket),
            key: Some(input.key),
            upload_id: Some(input.upload_id),
            part_number_marker: Some(marker as i32),
            next_part_number_marker: page.next_part_number_marker.map(|n| n as i32),
            max_parts: Some(max as i32),
            is_truncated: Some(page.is_truncated),
            parts: Some(
                page.parts
                    .into_iter()
                    .map(|p| {
                        let c = ChecksumFields::of(p.checksum.as_ref());
                        Part {
                            part_number: Some(p.part_number as i32),
                            size: Some(p.size as i64),
                            e_tag: Some(etag(&p.etag)),
                            last_modified: Some(timestamp(p.last_modified_ns)),
                            checksum_crc32: c.crc32,
                            checksum_crc32c: c.crc32c,
                            checksum_crc64nvme: c.crc64nvme,
                            checksum_sha1: c.sha1,
                            checksum_sha256: c.sha256,
                        }
                    })
                    .collect(),
            ),
            ..Default::default()
        }))
    }

    async fn list_multipart_uploads(
        &self,
        req: S3Request<ListMultipartUploadsInput>,
    ) -> S3Result<S3Response<ListMultipartUploadsOutput>> {
        let input = req.input;
        let max = max_count(input.max_uploads, "max-uploads")?;
        let store = self.store.clone();
        let bucket = input.bucket.clone();
        let prefix = input.prefix.clone().unwrap_or_default();
        let (km, um) = (input.key_marker.clone(), input.upload_id_marker.clone());
        let page = blocking(move || {
            store.list_uploads(
                &bucket,
                &prefix,
                km.as_deref().filter(|s| !s.is_empty()),
                um.as_deref(),
                max,
            )
        })
        .await?;
        Ok(S3Response::new(ListMultipartUploadsOutput {
            bucket: Some(input.bucket),
            prefix: input.prefix,
            delimiter: input.delimiter,
            key_marker: input.key_marker,
            upload_id_marker: input.upload_id_marker,
            max_uploads: Some(max as i32),
            is_truncated: Some(page.is_truncated),
            next_key_marker: page.next_key_marker,
            next_upload_id_marker: page.next_upload_id_marker,
            uploads: Some(
                page.uploads
                    .into_iter()
                    .map(|u| MultipartUpload {
                        key: Some(u.key),
                        upload_id: Some(u.upload_id),
                        initiated: Some(timestamp(u.initiated_ns)),
                        storage_class: Some(StorageClass::from_static(StorageClass::STANDARD)),
                        ..Default::default()
                    })
                    .collect(),
            ),
            ..Default::default()
        }))
    }

    async fn get_object_attributes(
        &self,
        req: S3Request<GetObjectAttributesInput>,
    ) -> S3Result<S3Response<GetObjectAttributesOutput>> {
        let input = req.input;
        check_version(&input.version_id)?;
        let wanted: Vec<String> = input
            .object_attributes
            .iter()
            .flat_map(|a| {
                a.as_str()
                    .split(',')
                    .map(|p| p.trim().to_ascii_lowercase())
                    .collect::<Vec<_>>()
            })
            .collect();
        let want = |name: &str| wanted.iter().any(|w| w == name);
        let (bucket, key) = (input.bucket, input.key);
        let meta = self
            .point_read(move |store| store.head_object(&bucket, &key))
            .await?;
        let c = ChecksumFields::of(meta.checksum.as_ref());
        let checksum = (want("checksum") && meta.checksum.is_some()).then_some(Checksum {
            checksum_crc32: c.crc32,
            checksum_crc32c: c.crc32c,
            checksum_crc64nvme: c.crc64nvme,
            checksum_sha1: c.sha1,
            checksum_sha256: c.sha256,
            checksum_type: c.kind,
        });
        let object_parts = (want("objectparts") && !meta.parts.is_empty()).then(|| {
            let marker = input.part_number_marker.unwrap_or(0).max(0) as usize;
            let max = input.max_parts.unwrap_or(1000).clamp(0, 1000) as usize;
            let alg = meta.checksum.as_ref().map(|c| c.algorithm);
            let listed: Vec<ObjectPart> = meta
                .parts
                .iter()
                .enumerate()
                .skip(marker)
                .take(max)
                .map(|(i, p)| {
                    let mut part = ObjectPart {
                        part_number: Some(i as i32 + 1),
                        size: Some(p.size as i64),
                        ..Default::default()
                    };
                    match alg {
                        Some(Alg::Crc32) => part.checksum_crc32 = p.checksum.clone(),
                        Some(Alg::Crc32c) => part.checksum_crc32c = p.checksum.clone(),
                        Some(Alg::Crc64nvme) => part.checksum_crc64nvme = p.checksum.clone(),
                        Some(Alg::Sha1) => part.checksum_sha1 = p.checksum.clone(),
                        Some(Alg::Sha256) => part.checksum_sha256 = p.checksum.clone(),
                        None => {}
                    }
                    part
                })
                .collect();
            let last = listed.last().and_then(|p| p.part_number);
            GetObjectAttributesParts {
                total_parts_count: Some(meta.parts.len() as i32),
                part_number_marker: Some(marker as i32),
                next_part_number_marker: last,
                max_parts: Some(max as i32),
                is_truncated: Some(marker + listed.len() < meta.parts.len()),
                parts: Some(listed),
            }
        });
        Ok(S3Response::new(GetObjectAttributesOutput {
            e_tag: want("etag").then(|| etag(&meta.etag)),
            object_size: want("objectsize").then_some(meta.size as i64),
            storage_class: want("storageclass")
                .then(|| StorageClass::from_static(StorageClass::STANDARD)),
            last_modified: Some(timestamp(meta.last_modified_ns)),
            checksum,
            object_parts,
            ..Default::default()
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_round_trip_and_refuse_garbage() {
        for key in ["a", "dir/ü", &"k".repeat(1024)] {
            assert_eq!(decode_token(&encode_token(key)).unwrap(), key);
        }
        assert!(decode_token("!!!").is_err());
        assert!(decode_token(&encode_token("a\0b")).is_err());
        assert!(decode_token(&"A".repeat(3000)).is_err());
    }

    #[test]
    fn aws_chunked_is_not_stored() {
        assert_eq!(stored_encoding(Some("aws-chunked".into())), None);
        assert_eq!(
            stored_encoding(Some("gzip, aws-chunked".into())).as_deref(),
            Some("gzip")
        );
        assert_eq!(
            stored_encoding(Some("gzip".into())).as_deref(),
            Some("gzip")
        );
    }

    #[test]
    fn url_encoding_keeps_slashes() {
        assert_eq!(url_encode("a b/ü+"), "a%20b/%C3%BC%2B");
    }
}
