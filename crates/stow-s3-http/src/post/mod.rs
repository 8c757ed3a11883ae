//! Browser POST uploads (POST Object, `multipart/form-data` to a bucket),
//! completed around what `s3s` does. `s3s` verifies the signature (SigV4's
//! `x-amz-*` fields or the legacy `AWSAccessKeyId`/`signature`), parses the
//! policy, reads the file and calls PutObject; before it, this step reads
//! the form's fields (never the file) and:
//!
//! - substitutes `${filename}` in `key` with the file part's filename;
//! - refuses what S3 refuses: a malformed expiration, a policy without
//!   conditions (400 InvalidPolicyDocument), a policy without a signature
//!   or a form without a key (400 InvalidArgument), an expired policy, a
//!   failed condition, a wrong bucket and a field no condition names (403
//!   AccessDenied, "Invalid according to Policy: …");
//! - takes the checksum fields (`x-amz-checksum-*`, which S3 takes without
//!   a condition and `s3s` would refuse as unnamed) out of the form and
//!   hands them to PutObject in [`FormUpload`], so the file is checked
//!   against them (PutObject also names the ETag in a header for a form,
//!   which `s3s` leaves out of a POST's answer).
//!
//! The `tagging` field (a `<Tagging>` document) becomes the upload's tags
//! the same way. After `s3s`, [`mend`] quotes the ETag of the 201 answer's XML and of the
//! `success_action_redirect` location, as S3 writes them.

mod form;
pub(crate) mod fuzzing;
mod policy;

use bytes::Bytes;
use http::{header, HeaderValue, Request, Response, StatusCode};
use http_body_util::{BodyExt, BodyStream, StreamBody};
use hyper::body::{Frame, Incoming};
use s3s::dto::{ChecksumAlgorithm, ObjectCannedACL, PutObjectInput, Tagging};
use s3s::post_policy::PostPolicy;
use s3s::{s3_error, S3Result};

use crate::respond::Body;

/// The most bytes the fields before the file may take.
const MAX_FIELDS_BYTES: usize = 1 << 20;

/// Why a POST form is refused before `s3s` sees it.
#[derive(Debug, thiserror::Error)]
pub(crate) enum PostError {
    #[error("The body of your POST request is not well-formed multipart/form-data: {0}")]
    Malformed(&'static str),
    #[error("POST requires exactly one file upload per request.")]
    NoFile,
    #[error("Bucket POST must contain a field named '{0}'. If it is specified, please check the order of the fields.")]
    MissingField(&'static str),
    #[error("The POST form names its '{0}' field more than once.")]
    RepeatedField(&'static str),
    #[error("{0}")]
    InvalidPolicy(String),
    #[error("Invalid according to Policy: Policy expired.")]
    Expired,
    #[error("Invalid according to Policy: Policy Condition failed: {0}")]
    ConditionFailed(String),
    #[error("Invalid according to Policy: Extra input fields: {0}")]
    ExtraField(String),
    #[error("reading the request body failed: {0}")]
    Body(String),
}

/// Marks a PutObject as a POST form's upload and holds the form's
/// checksum fields, for PutObject to check the file against (see the
/// module's header). A request extension set by [`prepare`].
#[derive(Debug, Clone, Default)]
pub(crate) struct FormUpload {
    /// `(name in lower case, value)` of each checksum field.
    checksums: Vec<(String, String)>,
    /// The `tagging` field: a `<Tagging>` document, as S3's POST takes tags.
    tagging: Option<String>,
    /// The key of an unsigned form (`${filename}` substituted), for the
    /// access check to judge before the file is read; `None` when signed.
    unsigned_key: Option<String>,
    /// The `acl` field: the new object's canned ACL (`s3s` reads only an
    /// `x-amz-acl` field, which S3's forms do not use).
    acl: Option<String>,
    /// The form sets the ACL, by an `acl` or an `x-amz-acl` field.
    sets_acl: bool,
}

/// `%XX`-encodes all but RFC 3986's unreserved characters.
fn form_encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

impl FormUpload {
    /// The key an unsigned form uploads to; `None` for a signed form.
    pub(crate) fn unsigned_key(&self) -> Option<&str> {
        self.unsigned_key.as_deref()
    }

    /// Whether the form sets the new object's ACL.
    pub(crate) fn sets_acl(&self) -> bool {
        self.sets_acl
    }

    /// Sets the input's checksums, tags and ACL from the form's fields; a
    /// `tagging` document that is not S3's `<Tagging>` is MalformedXML.
    pub(crate) fn apply(&self, input: &mut PutObjectInput) -> S3Result<()> {
        if let (Some(acl), None) = (&self.acl, &input.acl) {
            input.acl = Some(ObjectCannedACL::from(acl.clone()));
        }
        if let (Some(xml), None) = (&self.tagging, &input.tagging) {
            let mut d = s3s::xml::Deserializer::new(xml.as_bytes());
            let tagging =
                <Tagging as s3s::xml::Deserialize>::deserialize(&mut d).map_err(|_| {
                    s3_error!(MalformedXML, "the tagging field is not a Tagging document")
                })?;
            let pairs: Vec<String> = tagging
                .tag_set
                .iter()
                .map(|t| {
                    let k = t.key.as_deref().unwrap_or("");
                    let v = t.value.as_deref().unwrap_or("");
                    format!("{}={}", form_encode(k), form_encode(v))
                })
                .collect();
            input.tagging = Some(pairs.join("&"));
        }
        for (name, value) in &self.checksums {
            let value = Some(value.clone());
            match name.as_str() {
                "x-amz-checksum-crc32" => input.checksum_crc32 = value,
                "x-amz-checksum-crc32c" => input.checksum_crc32c = value,
                "x-amz-checksum-crc64nvme" => input.checksum_crc64nvme = value,
                "x-amz-checksum-sha1" => input.checksum_sha1 = value,
                "x-amz-checksum-sha256" => input.checksum_sha256 = value,
                "x-amz-checksum-algorithm" => {
                    input.checksum_algorithm = value.map(ChecksumAlgorithm::from);
                }
                // No checksum S3 knows: nothing to check the file against.
                _ => {}
            }
        }
        Ok(())
    }
}

/// The boundary of a POST form (`multipart/form-data`), if the request is one.
pub(crate) fn boundary<B>(req: &Request<B>) -> Option<String> {
    if req.method() != http::Method::POST {
        return None;
    }
    let ct = req.headers().get(header::CONTENT_TYPE)?.to_str().ok()?;
    let mut parts = ct.split(';').map(str::trim);
    if !parts.next()?.eq_ignore_ascii_case("multipart/form-data") {
        return None;
    }
    parts.find_map(|p| {
        let (k, v) = p.split_once('=')?;
        k.trim()
            .eq_ignore_ascii_case("boundary")
            .then(|| v.trim().trim_matches('"').to_string())
    })
}

/// Reads and checks a POST form's fields (see the module's header) and
/// gives back the request for `s3s`, its body the same form with the key
/// substituted and the checksum fields taken out; a refusal is a
/// [`PostError`], which `errors::post_refusal` answers on the wire.
pub(crate) async fn prepare(
    req: Request<Incoming>,
    bucket: &str,
    boundary: &str,
) -> Result<Request<Body>, PostError> {
    let (mut parts, mut incoming) = req.into_parts();
    let mut buf = Vec::new();
    let mut reader = form::FormReader::new(boundary);
    let mut form = loop {
        if let Some(form) = reader.read(&buf)? {
            break form;
        }
        if buf.len() > MAX_FIELDS_BYTES {
            return Err(PostError::Malformed(
                "the fields before the file are larger than 1 MiB",
            ));
        }
        match incoming.frame().await {
            None => return Err(PostError::NoFile),
            Some(Err(e)) => return Err(PostError::Body(e.to_string())),
            Some(Ok(frame)) => {
                if let Ok(data) = frame.into_data() {
                    buf.extend_from_slice(&data);
                }
            }
        }
    };
    let policy = check(&mut form, bucket)?;
    let sums = form
        .fields
        .iter()
        .map(|(n, v)| (n.to_ascii_lowercase(), v.clone()))
        .filter(|(n, _)| policy::is_checksum_field(n))
        .collect();
    // A checksum field no condition names stays out of what `s3s` sees
    // (it would refuse it as unnamed); a named one stays for its check.
    let fields: Vec<_> = form
        .fields
        .iter()
        .filter(|(n, _)| {
            let n = n.to_ascii_lowercase();
            !policy::is_checksum_field(&n) || policy.as_ref().is_some_and(|p| policy::names(p, &n))
        })
        .cloned()
        .collect();
    let tagging = form.get("tagging").map(str::to_string);
    let acl = form.get("acl").map(str::to_string);
    // `s3s` reads an `x-amz-acl` field as the ACL: it counts as setting one.
    let sets_acl = acl.is_some() || form.get("x-amz-acl").is_some();
    let unsigned_key = match policy {
        Some(_) => None,
        None => form.get("key").map(str::to_string),
    };
    parts.extensions.insert(FormUpload {
        checksums: sums,
        tagging,
        unsigned_key,
        acl,
        sets_acl,
    });

    let mut head = form::rebuild(&fields, boundary, &form.file_headers);
    head.extend_from_slice(&buf[form.consumed..]);
    if let Some(len) = parts
        .headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<usize>().ok())
    {
        let len = len - buf.len().min(len) + head.len();
        parts
            .headers
            .insert(header::CONTENT_LENGTH, HeaderValue::from(len));
    }
    let first = futures::stream::once(async move { Ok(Frame::data(Bytes::from(head))) });
    let rest = BodyStream::new(incoming);
    let body = StreamBody::new(futures::StreamExt::chain(first, rest));
    Ok(Request::from_parts(parts, Body::http_body(body)))
}

/// The checks before `s3s` (see the module's header), `${filename}`
/// substituted in the key first; the policy of a signed form.
fn check(form: &mut form::Form, bucket: &str) -> Result<Option<PostPolicy>, PostError> {
    let filename = form.filename.clone().unwrap_or_default();
    // One key: the access check and `s3s` (which takes the last) must
    // judge and store the same one.
    let keys = form
        .fields
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case("key"))
        .count();
    if keys > 1 {
        return Err(PostError::RepeatedField("key"));
    }
    let key = form
        .fields
        .iter_mut()
        .find(|(n, _)| n.eq_ignore_ascii_case("key"))
        .ok_or(PostError::MissingField("key"))?;
    key.1 = key.1.replace("${filename}", &filename);
    let signed = form.get("x-amz-signature").is_some() || form.get("signature").is_some();
    match (form.get("policy"), signed) {
        (Some(encoded), true) => {
            let parsed = policy::parse(encoded)?;
            policy::check(&parsed, form, bucket)?;
            Ok(Some(parsed))
        }
        (Some(_), false) => Err(PostError::MissingField("signature")),
        (None, true) => Err(PostError::MissingField("policy")),
        // Unsigned: anonymous, for the access check to judge.
        (None, false) => Ok(None),
    }
}

/// Quotes the ETag where `s3s` leaves it bare: the 201 answer's XML and
/// the `etag` parameter of a `success_action_redirect` location.
pub(crate) fn mend(resp: Response<Body>) -> Response<Body> {
    let (mut parts, body) = resp.into_parts();
    match parts.status {
        StatusCode::CREATED => {
            let Some(xml) = body.bytes() else {
                return Response::from_parts(parts, body);
            };
            let text = String::from_utf8_lossy(&xml);
            let text = match (text.find("<ETag>"), text.find("</ETag>")) {
                (Some(a), Some(b)) if a + 6 <= b && !text[a + 6..b].starts_with('"') => format!(
                    "{}<ETag>\"{}\"</ETag>{}",
                    &text[..a],
                    &text[a + 6..b],
                    &text[b + 7..]
                ),
                _ => text.into_owned(),
            };
            parts
                .headers
                .insert(header::CONTENT_LENGTH, HeaderValue::from(text.len()));
            Response::from_parts(parts, Body::from(text))
        }
        StatusCode::SEE_OTHER => {
            let location = parts
                .headers
                .get(header::LOCATION)
                .and_then(|v| v.to_str().ok())
                .and_then(quote_etag_param)
                .and_then(|l| HeaderValue::from_str(&l).ok());
            if let Some(l) = location {
                parts.headers.insert(header::LOCATION, l);
            }
            Response::from_parts(parts, body)
        }
        _ => Response::from_parts(parts, body),
    }
}

/// `…&etag=abc` → `…&etag=%22abc%22` (the last `etag` parameter, which
/// `s3s` appends).
fn quote_etag_param(location: &str) -> Option<String> {
    let at = location.rfind("etag=")? + "etag=".len();
    let end = location[at..].find('&').map_or(location.len(), |e| at + e);
    let value = &location[at..end];
    if value.is_empty() || value.starts_with("%22") {
        return None;
    }
    Some(format!(
        "{}%22{value}%22{}",
        &location[..at],
        &location[end..]
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redirect_etags_are_quoted() {
        assert_eq!(
            quote_etag_param("http://a/done?x=1&bucket=b&key=k&etag=abc").as_deref(),
            Some("http://a/done?x=1&bucket=b&key=k&etag=%22abc%22")
        );
        assert_eq!(quote_etag_param("http://a/?etag=%22abc%22"), None);
    }

    #[test]
    fn boundaries() {
        let req = |ct: &str| {
            Request::builder()
                .method("POST")
                .uri("/b")
                .header("content-type", ct)
                .body(())
                .unwrap()
        };
        assert_eq!(
            boundary(&req("multipart/form-data; boundary=XyZ")).as_deref(),
            Some("XyZ")
        );
        assert_eq!(
            boundary(&req("Multipart/Form-Data; boundary=\"a b\"")).as_deref(),
            Some("a b")
        );
        assert_eq!(boundary(&req("application/xml")), None);
    }

    #[test]
    fn filename_substitution_and_signature_fields() {
        let mut f = form::Form {
            fields: vec![("Key".into(), "up/${filename}".into())],
            filename: Some("a.txt".into()),
            ..Default::default()
        };
        assert!(check(&mut f, "b").unwrap().is_none());
        assert_eq!(f.get("key"), Some("up/a.txt"));
        let mut f = form::Form {
            fields: vec![("key".into(), "k".into()), ("policy".into(), "e30=".into())],
            ..Default::default()
        };
        assert!(matches!(
            check(&mut f, "b"),
            Err(PostError::MissingField("signature"))
        ));
        let mut f = form::Form::default();
        assert!(matches!(
            check(&mut f, "b"),
            Err(PostError::MissingField("key"))
        ));
        let mut f = form::Form {
            fields: vec![
                ("key".into(), "in/x".into()),
                ("KEY".into(), "out/y".into()),
            ],
            ..Default::default()
        };
        assert!(matches!(
            check(&mut f, "b"),
            Err(PostError::RepeatedField("key"))
        ));
    }
}
