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

/// The tags of an `x-amz-tagging` header (`k1=v1&k2=v2`, form-encoded).
pub(super) fn tags_of_header(header: Option<&str>) -> S3Result<BTreeMap<String, String>> {
    let mut tags = BTreeMap::new();
    for pair in header.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        if tags.insert(form_decode(k)?, form_decode(v)?).is_some() {
            return Err(s3_error!(InvalidTag, "a tag key appears twice"));
        }
    }
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

async fn set_tags(
    svc: &StowS3,
    bucket: String,
    key: String,
    version: Option<String>,
    tags: BTreeMap<String, String>,
) -> S3Result<()> {
    svc.writable()?;
    svc.current_version_only(&bucket, &key, version).await?;
    let store = svc.store.clone();
    blocking(move || store.set_object_tags(&bucket, &key, tags)).await?;
    Ok(())
}

pub(super) async fn put_object_tagging(
    svc: &StowS3,
    req: S3Request<PutObjectTaggingInput>,
) -> S3Result<S3Response<PutObjectTaggingOutput>> {
    let input = req.input;
    let mut tags = BTreeMap::new();
    for t in input.tagging.tag_set {
        let k = t.key.unwrap_or_default();
        if tags.insert(k, t.value.unwrap_or_default()).is_some() {
            return Err(s3_error!(InvalidTag, "a tag key appears twice"));
        }
    }
    set_tags(svc, input.bucket, input.key, input.version_id, tags).await?;
    Ok(S3Response::new(PutObjectTaggingOutput::default()))
}

pub(super) async fn delete_object_tagging(
    svc: &StowS3,
    req: S3Request<DeleteObjectTaggingInput>,
) -> S3Result<S3Response<DeleteObjectTaggingOutput>> {
    let input = req.input;
    set_tags(
        svc,
        input.bucket,
        input.key,
        input.version_id,
        BTreeMap::new(),
    )
    .await?;
    Ok(S3Response::new(DeleteObjectTaggingOutput::default()))
}

pub(super) async fn get_bucket_tagging(
    svc: &StowS3,
    req: S3Request<GetBucketTaggingInput>,
) -> S3Result<S3Response<GetBucketTaggingOutput>> {
    let bucket = req.input.bucket;
    svc.point_read(move |store| store.head_bucket(&bucket))
        .await?;
    // Buckets carry no tags here: what AWS answers an untagged bucket.
    Err(S3Error::with_message(
        S3ErrorCode::NoSuchTagSet,
        "The TagSet does not exist",
    ))
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
}
