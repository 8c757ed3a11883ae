//! Object tagging (Get/Put/DeleteObjectTagging, the `x-amz-tagging` header
//! of uploads) and the untagged bucket's answer (NoSuchTagSet).

use std::collections::BTreeMap;

use s3s::dto::*;
use s3s::{s3_error, S3Error, S3ErrorCode, S3Request, S3Response, S3Result};

use super::{blocking, StowS3};

/// Decodes `%XX` and `+` of a form-encoded component.
fn form_decode(s: &str) -> S3Result<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' => {
                // Two hex digits exactly (`from_str_radix` alone would
                // also take a sign, as in `%+1`).
                let hex = s
                    .get(i + 1..i + 3)
                    .filter(|h| h.bytes().all(|b| b.is_ascii_hexdigit()))
                    .and_then(|h| u8::from_str_radix(h, 16).ok())
                    .ok_or_else(|| s3_error!(InvalidArgument, "malformed x-amz-tagging"))?;
                out.push(hex);
                i += 2;
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8(out).map_err(|_| s3_error!(InvalidArgument, "x-amz-tagging is not UTF-8"))
}

/// Most tags an object carries (S3's limit).
pub(super) const MAX_OBJECT_TAGS: usize = 10;
/// Most tags a bucket carries (S3's limit).
pub(super) const MAX_BUCKET_TAGS: usize = 50;
/// Longest tag key, in Unicode characters.
const MAX_KEY_CHARS: usize = 128;
/// Longest tag value, in Unicode characters.
const MAX_VALUE_CHARS: usize = 256;

fn invalid_tag(message: String) -> S3Error {
    S3Error::with_message(S3ErrorCode::InvalidTag, message)
}

/// Whether `c` may appear in a tag key or value: letters, digits, spaces
/// (Unicode ones too) and `_ . : / = + - @`, as AWS documents.
fn tag_char(c: char) -> bool {
    c.is_alphanumeric() || (c.is_whitespace() && !c.is_control()) || "_.:/=+-@".contains(c)
}

/// Checks tags as AWS does (InvalidTag): at most `max`; keys of 1 to 128
/// and values of at most 256 Unicode characters, of the allowed
/// characters; no key starting with `aws:` (AWS's own prefix).
pub(super) fn check_tags(tags: &BTreeMap<String, String>, max: usize) -> S3Result<()> {
    if tags.len() > max {
        return Err(invalid_tag(format!(
            "a tag set holds at most {max} tags; this one has {}",
            tags.len()
        )));
    }
    for (k, v) in tags {
        if k.is_empty() || k.chars().count() > MAX_KEY_CHARS {
            return Err(invalid_tag(format!(
                "The TagKey you have provided is invalid: {k:?} (1 to {MAX_KEY_CHARS} characters)"
            )));
        }
        if v.chars().count() > MAX_VALUE_CHARS {
            return Err(invalid_tag(format!(
                "The TagValue you have provided is too long, max {MAX_VALUE_CHARS} (key {k:?})"
            )));
        }
        if k.starts_with("aws:") {
            return Err(invalid_tag(format!(
                "Your TagKey cannot be prefixed with aws: ({k:?})"
            )));
        }
        if !k.chars().all(tag_char) {
            return Err(invalid_tag(format!(
                "The TagKey you have provided is invalid: {k:?} (letters, digits, spaces and _ . : / = + - @ only)"
            )));
        }
        if !v.chars().all(tag_char) {
            return Err(invalid_tag(format!(
                "The TagValue you have provided is invalid: {v:?} (letters, digits, spaces and _ . : / = + - @ only)"
            )));
        }
    }
    Ok(())
}

/// The tags of an `x-amz-tagging` header (`k1=v1&k2=v2`, form-encoded),
/// checked as an object's ([`check_tags`]).
pub(super) fn tags_of_header(header: Option<&str>) -> S3Result<BTreeMap<String, String>> {
    let mut tags = BTreeMap::new();
    for pair in header.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        if tags.insert(form_decode(k)?, form_decode(v)?).is_some() {
            return Err(invalid_tag(
                "Cannot provide multiple Tags with the same key".into(),
            ));
        }
    }
    check_tags(&tags, MAX_OBJECT_TAGS)?;
    Ok(tags)
}

/// The tags of a request's TagSet, checked ([`check_tags`]) with at most
/// `max` of them.
fn tags_of_set(set: TagSet, max: usize) -> S3Result<BTreeMap<String, String>> {
    let mut tags = BTreeMap::new();
    for t in set {
        let k = t.key.unwrap_or_default();
        if tags.insert(k, t.value.unwrap_or_default()).is_some() {
            return Err(invalid_tag(
                "Cannot provide multiple Tags with the same key".into(),
            ));
        }
    }
    check_tags(&tags, max)?;
    Ok(tags)
}

fn tag_set(tags: &BTreeMap<String, String>) -> TagSet {
    tags.iter()
        .map(|(k, v)| Tag {
            key: Some(k.clone()),
            value: Some(v.clone()),
        })
        .collect()
}

pub(super) async fn get_object_tagging(
    svc: &StowS3,
    req: S3Request<GetObjectTaggingInput>,
) -> S3Result<S3Response<GetObjectTaggingOutput>> {
    let (bucket, key, version) = (req.input.bucket, req.input.key, req.input.version_id);
    let meta = svc
        .point_read(move |store| store.head_object_version(&bucket, &key, version.as_deref()))
        .await?;
    Ok(S3Response::new(GetObjectTaggingOutput {
        tag_set: tag_set(&meta.props.tags),
        version_id: meta.version_id,
    }))
}

/// Replaces the tags of the version named (the latest when none is).
async fn set_tags(
    svc: &StowS3,
    bucket: String,
    key: String,
    version: Option<String>,
    tags: BTreeMap<String, String>,
) -> S3Result<Option<String>> {
    svc.writable()?;
    let store = svc.store.clone();
    let meta =
        blocking(move || store.set_version_tags(&bucket, &key, version.as_deref(), tags)).await?;
    Ok(meta.version_id)
}

pub(super) async fn put_object_tagging(
    svc: &StowS3,
    req: S3Request<PutObjectTaggingInput>,
) -> S3Result<S3Response<PutObjectTaggingOutput>> {
    let input = req.input;
    let tags = tags_of_set(input.tagging.tag_set, MAX_OBJECT_TAGS)?;
    let version_id = set_tags(svc, input.bucket, input.key, input.version_id, tags).await?;
    Ok(S3Response::new(PutObjectTaggingOutput { version_id }))
}

pub(super) async fn delete_object_tagging(
    svc: &StowS3,
    req: S3Request<DeleteObjectTaggingInput>,
) -> S3Result<S3Response<DeleteObjectTaggingOutput>> {
    let input = req.input;
    let version_id = set_tags(
        svc,
        input.bucket,
        input.key,
        input.version_id,
        BTreeMap::new(),
    )
    .await?;
    Ok(S3Response::new(DeleteObjectTaggingOutput { version_id }))
}

pub(super) async fn get_bucket_tagging(
    svc: &StowS3,
    req: S3Request<GetBucketTaggingInput>,
) -> S3Result<S3Response<GetBucketTaggingOutput>> {
    let bucket = req.input.bucket;
    let tags = svc
        .point_read(move |store| store.bucket_tags(&bucket))
        .await?;
    match tags {
        Some(tags) => Ok(S3Response::new(GetBucketTaggingOutput {
            tag_set: tag_set(&tags),
        })),
        // What AWS answers a bucket without tags.
        None => Err(S3Error::with_message(
            S3ErrorCode::NoSuchTagSet,
            "The TagSet does not exist",
        )),
    }
}

pub(super) async fn put_bucket_tagging(
    svc: &StowS3,
    req: S3Request<PutBucketTaggingInput>,
) -> S3Result<S3Response<PutBucketTaggingOutput>> {
    svc.writable()?;
    let input = req.input;
    let tags = tags_of_set(input.tagging.tag_set, MAX_BUCKET_TAGS)?;
    // An empty TagSet leaves the bucket without tags (GetBucketTagging
    // then answers NoSuchTagSet), as AWS does.
    let tags = (!tags.is_empty()).then_some(tags);
    let store = svc.store.clone();
    let bucket = input.bucket;
    blocking(move || store.set_bucket_tags(&bucket, tags)).await?;
    Ok(S3Response::new(PutBucketTaggingOutput {}))
}

pub(super) async fn delete_bucket_tagging(
    svc: &StowS3,
    req: S3Request<DeleteBucketTaggingInput>,
) -> S3Result<S3Response<DeleteBucketTaggingOutput>> {
    svc.writable()?;
    let store = svc.store.clone();
    let bucket = req.input.bucket;
    blocking(move || store.set_bucket_tags(&bucket, None)).await?;
    Ok(S3Response::new(DeleteBucketTaggingOutput {}))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tagging_headers_decode() {
        let t = tags_of_header(Some("a=1&b%20c=x+y&e=")).unwrap();
        assert_eq!(t["a"], "1");
        assert_eq!(t["b c"], "x y");
        assert_eq!(t["e"], "");
        assert!(tags_of_header(None).unwrap().is_empty());
        assert!(tags_of_header(Some("a=%zz")).is_err());
        assert!(tags_of_header(Some("a=1&a=2")).is_err());
    }

    fn code(r: S3Result<BTreeMap<String, String>>) -> String {
        r.unwrap_err().code().as_str().to_string()
    }

    #[test]
    fn tags_follow_aws_rules() {
        let many = (0..11)
            .map(|i| format!("k{i}=v"))
            .collect::<Vec<_>>()
            .join("&");
        assert_eq!(code(tags_of_header(Some(&many))), "InvalidTag");
        let ten = (0..10)
            .map(|i| format!("k{i}=v"))
            .collect::<Vec<_>>()
            .join("&");
        assert_eq!(tags_of_header(Some(&ten)).unwrap().len(), 10);
        // Lengths are counted in characters, not bytes.
        let key = "é".repeat(128);
        assert!(tags_of_header(Some(&format!("{key}=v"))).is_ok());
        assert_eq!(
            code(tags_of_header(Some(&format!("{key}e=v")))),
            "InvalidTag"
        );
        let value = "ü".repeat(256);
        assert!(tags_of_header(Some(&format!("k={value}"))).is_ok());
        assert_eq!(
            code(tags_of_header(Some(&format!("k={value}x")))),
            "InvalidTag"
        );
        assert_eq!(code(tags_of_header(Some("aws:k=v"))), "InvalidTag");
        assert_eq!(code(tags_of_header(Some("=v"))), "InvalidTag");
        assert_eq!(code(tags_of_header(Some("k%21=v"))), "InvalidTag");
        assert_eq!(code(tags_of_header(Some("k=v%3C"))), "InvalidTag");
        assert!(tags_of_header(Some("a+b_c.d:e/f=g%3Dh%2Bi-j%40k")).is_ok());
        let set = |n: usize| -> TagSet {
            (0..n)
                .map(|i| Tag {
                    key: Some(format!("k{i}")),
                    value: Some("v".into()),
                })
                .collect()
        };
        assert!(tags_of_set(set(50), MAX_BUCKET_TAGS).is_ok());
        assert_eq!(code(tags_of_set(set(51), MAX_BUCKET_TAGS)), "InvalidTag");
        let mut dup = set(2);
        dup[1].key = Some("k0".into());
        assert_eq!(code(tags_of_set(dup, MAX_BUCKET_TAGS)), "InvalidTag");
    }
}
