//! Conversions between `s3s` types and the store's, shared by every
//! operation family: ETags, times, checksums, conditions, tokens, ranges.

use std::collections::BTreeMap;
use std::time::{Duration, UNIX_EPOCH};

use s3s::dto::*;
use s3s::{s3_error, S3Error, S3ErrorCode, S3Result};
use stow_store as store;
use stow_store::{ByteRange, ChecksumAlgorithm as Alg};

/// The type of an object stored without one.
pub(super) const DEFAULT_CONTENT_TYPE: &str = "application/octet-stream";

pub(super) fn etag(stored: &str) -> ETag {
    ETag::Strong(stored.trim_matches('"').to_string())
}

pub(super) fn condition_text(c: &ETagCondition) -> String {
    match c {
        ETagCondition::Any => "*".into(),
        ETagCondition::ETag(t) => t.value().to_string(),
    }
}

pub(super) fn timestamp(ns: i64) -> Timestamp {
    Timestamp::from(UNIX_EPOCH + Duration::from_nanos(ns.max(0) as u64))
}

pub(super) fn unix_ns(t: &Timestamp) -> i64 {
    let odt: time::OffsetDateTime = t.clone().into();
    odt.unix_timestamp_nanos() as i64
}

pub(super) fn alg_of(a: &ChecksumAlgorithm) -> S3Result<Alg> {
    Alg::parse(a.as_str())
        .ok_or_else(|| s3_error!(InvalidArgument, "unsupported checksum algorithm"))
}

pub(super) fn dto_alg(a: Alg) -> ChecksumAlgorithm {
    ChecksumAlgorithm::from(a.as_str().to_string())
}

pub(super) fn dto_checksum_type(t: store::ChecksumType) -> ChecksumType {
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
pub(super) use supplied_checksums;

/// Output slots for a checksum, one per algorithm.
#[derive(Default)]
pub(super) struct ChecksumFields {
    pub(super) crc32: Option<String>,
    pub(super) crc32c: Option<String>,
    pub(super) crc64nvme: Option<String>,
    pub(super) sha1: Option<String>,
    pub(super) sha256: Option<String>,
    pub(super) kind: Option<ChecksumType>,
}

impl ChecksumFields {
    pub(super) fn of(c: Option<&store::Checksum>) -> Self {
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
pub(super) fn trailer_alg(headers: &http::HeaderMap) -> Option<Alg> {
    let name = headers.get("x-amz-trailer")?.to_str().ok()?;
    Alg::parse(name.trim().strip_prefix("x-amz-checksum-")?)
}

/// Trailing checksums of an `aws-chunked` body, read once it has ended.
pub(super) fn trailing(
    req_trailers: Option<s3s::TrailingHeaders>,
) -> Option<store::TrailingChecksums> {
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
pub(super) fn stored_encoding(enc: Option<String>) -> Option<String> {
    let enc = enc?;
    let chunked = |t: &str| t.trim().eq_ignore_ascii_case("aws-chunked");
    if !enc.split(',').any(chunked) {
        // Byte for byte, as the client sent it.
        return Some(enc).filter(|e| !e.trim().is_empty());
    }
    // Only the transport-only token goes; the rest keeps its spelling.
    let kept: Vec<&str> = enc
        .split(',')
        .filter(|t| !chunked(t) && !t.trim().is_empty())
        .map(str::trim)
        .collect();
    (!kept.is_empty()).then(|| kept.join(", "))
}

/// User metadata as the request's `x-amz-meta-*` headers carry it: a
/// value's bytes read as UTF-8, or where they are not UTF-8, one character
/// per byte (ISO 8859-1, as Node and browsers send text). `s3s` would
/// decode RFC 2047 words too; those are kept as the text they are.
/// [`metadata_raw_headers`] writes them back so that clients read what
/// they wrote (botocore sends UTF-8 and reads ISO 8859-1).
pub(super) fn metadata_in(
    m: Option<Metadata>,
    headers: &http::HeaderMap,
) -> BTreeMap<String, String> {
    let sent = |name: &str| {
        let bytes = headers.get(format!("x-amz-meta-{name}"))?.as_bytes();
        Some(match std::str::from_utf8(bytes) {
            Ok(text) => text.to_string(),
            Err(_) => bytes.iter().map(|&b| char::from(b)).collect(),
        })
    };
    m.map(|m| {
        m.into_iter()
            .map(|(k, v)| {
                let value = sent(&k).unwrap_or(v);
                (k, value)
            })
            .collect()
    })
    .unwrap_or_default()
}

/// The ASCII-only user metadata, which `s3s` writes as headers unchanged.
/// Values holding other characters go out through [`metadata_raw_headers`]:
/// `s3s` would RFC 2047-encode them, where AWS answers the bytes it was
/// given.
pub(super) fn metadata_out(m: &BTreeMap<String, String>) -> Option<Metadata> {
    let ascii: Metadata = m
        .iter()
        .filter(|(_, v)| v.is_ascii())
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    (!ascii.is_empty()).then_some(ascii)
}

/// `x-amz-meta-*` headers for the metadata values that are not ASCII, for
/// a response's own headers: a value whose characters all fit in one byte
/// (up to U+00FF) as those bytes, which is how HTTP clients (botocore's
/// `http.client`, Node, browsers) read header bytes back into text; a value
/// with wider characters as its UTF-8 bytes. `s3s` would RFC 2047-encode
/// them instead, which no SDK decodes.
pub(super) fn metadata_raw_headers(m: &BTreeMap<String, String>) -> S3Result<http::HeaderMap> {
    let mut headers = http::HeaderMap::new();
    for (k, v) in m.iter().filter(|(_, v)| !v.is_ascii()) {
        let name = http::HeaderName::from_bytes(format!("x-amz-meta-{k}").as_bytes())
            .map_err(S3Error::internal_error)?;
        let bytes: Vec<u8> = match v.chars().map(|c| u8::try_from(c).ok()).collect() {
            Some(latin1) => latin1,
            None => v.as_bytes().to_vec(),
        };
        let value = http::HeaderValue::from_bytes(&bytes).map_err(S3Error::internal_error)?;
        headers.insert(name, value);
    }
    Ok(headers)
}

pub(super) fn format_http_date(t: &Timestamp) -> S3Result<String> {
    let mut buf = Vec::new();
    t.format(TimestampFormat::HttpDate, &mut buf)
        .map_err(S3Error::internal_error)?;
    String::from_utf8(buf).map_err(S3Error::internal_error)
}

pub(super) fn parse_http_date(s: &str) -> Option<Timestamp> {
    Timestamp::parse(TimestampFormat::HttpDate, s).ok()
}

/// Destination conditions of a copy, read from the raw headers (the DTO
/// has no fields for them).
pub(super) fn header_condition(headers: &http::HeaderMap) -> S3Result<store::WriteCondition> {
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

pub(super) fn write_condition(
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

pub(super) fn max_count(v: Option<i32>, name: &str) -> S3Result<usize> {
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
pub(super) fn url_encode(s: &str) -> String {
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

pub(super) fn encode_token(key: &str) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(key.as_bytes())
}

pub(super) fn decode_token(token: &str) -> S3Result<String> {
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

/// The version ID a write answers with (`x-amz-version-id` of PUT, copy
/// and completion): the new version's, none for the null version (a
/// suspended bucket), as AWS answers.
pub(super) fn written_version(meta: &store::ObjectMeta) -> Option<String> {
    meta.version_id.clone().filter(|v| v != "null")
}

/// The source of a copy: bucket, key, and the version named (`None`: the
/// latest).
pub(super) fn copy_source(src: &CopySource) -> S3Result<(String, String, Option<String>)> {
    match src {
        CopySource::Bucket {
            bucket,
            key,
            version_id,
        } => Ok((
            bucket.to_string(),
            key.to_string(),
            version_id.as_deref().map(String::from),
        )),
        _ => Err(s3_error!(
            NotImplemented,
            "access point copy sources are not supported"
        )),
    }
}

pub(super) fn source_conditions(
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

pub(super) fn object_entry(o: store::ObjectSummary, url: bool) -> Object {
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

pub(super) fn contents(objects: Vec<store::ObjectSummary>, url: bool) -> ObjectList {
    objects.into_iter().map(|o| object_entry(o, url)).collect()
}

pub(super) fn common_prefixes(prefixes: Vec<String>, url: bool) -> CommonPrefixList {
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
    ($input:expr, $headers:expr) => {
        store::ObjectProps {
            content_type: $input.content_type,
            metadata: metadata_in($input.metadata, $headers),
            content_encoding: stored_encoding($input.content_encoding),
            content_disposition: $input.content_disposition,
            content_language: $input.content_language,
            cache_control: $input.cache_control,
            expires: $input.expires.as_ref().map(format_http_date).transpose()?,
            tags: super::tagging::tags_of_header($input.tagging.as_deref())?,
            acl: super::acl::canned($input.acl.as_ref().map(|a| a.as_str()))?,
            // Set by the caller from the x-amz-object-lock-* headers.
            lock: Default::default(),
            // Set by the caller once SSE-C is ruled out beside it (sse.rs).
            sse_s3: false,
        }
    };
}
pub(super) use props_of;

pub(super) fn wants_url(e: &Option<EncodingType>) -> S3Result<bool> {
    match e {
        None => Ok(false),
        Some(e) if e.as_str().eq_ignore_ascii_case("url") => Ok(true),
        Some(_) => Err(s3_error!(
            InvalidArgument,
            "Invalid Encoding Method specified in Request"
        )),
    }
}

pub(super) fn range_of(r: Range) -> ByteRange {
    match r {
        Range::Int {
            first,
            last: Some(last),
        } => ByteRange::FromTo(first, last),
        Range::Int { first, last: None } => ByteRange::From(first),
        Range::Suffix { length } => ByteRange::Suffix(length),
    }
}

pub(super) fn invalid_range(size: u64) -> S3Error {
    let mut err = s3_error!(InvalidRange, "The requested range is not satisfiable");
    let mut headers = http::HeaderMap::new();
    if let Ok(v) = http::HeaderValue::from_str(&format!("bytes */{size}")) {
        headers.insert(http::header::CONTENT_RANGE, v);
    }
    err.set_headers(headers);
    err
}

pub(super) fn checksum_enabled(mode: &Option<ChecksumMode>) -> bool {
    mode.as_ref()
        .is_some_and(|m| m.as_str().eq_ignore_ascii_case("ENABLED"))
}

/// Maps a read-condition verdict to S3's answer (304 or 412).
/// A read's condition outcome; a 304 carries the object's `ETag` and
/// `Last-Modified`, as HTTP requires (caches and SDKs read them).
pub(super) fn read_condition(
    check: store::ConditionCheck,
    meta: &store::ObjectMeta,
) -> S3Result<()> {
    match check {
        store::ConditionCheck::Pass => Ok(()),
        store::ConditionCheck::NotModified => {
            let mut e = s3_error!(NotModified);
            let mut headers = http::HeaderMap::new();
            let etag = format!("\"{}\"", meta.etag.trim_matches('"'));
            if let Ok(v) = http::HeaderValue::from_str(&etag) {
                headers.insert(http::header::ETAG, v);
            }
            let modified = format_http_date(&timestamp(meta.last_modified_ns))?;
            if let Ok(v) = http::HeaderValue::from_str(&modified) {
                headers.insert(http::header::LAST_MODIFIED, v);
            }
            e.set_headers(headers);
            Err(e)
        }
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
            version_id: $meta.version_id.clone(),
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
pub(super) use object_output;

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
        assert_eq!(
            stored_encoding(Some("deflate, gzip".into())).as_deref(),
            Some("deflate, gzip")
        );
        assert_eq!(
            stored_encoding(Some("deflate,gzip".into())).as_deref(),
            Some("deflate,gzip")
        );
    }

    #[test]
    fn url_encoding_keeps_slashes() {
        assert_eq!(url_encode("a b/ü+"), "a%20b/%C3%BC%2B");
    }
}
