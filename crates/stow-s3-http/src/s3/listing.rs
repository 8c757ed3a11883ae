//! Listings: ListObjects v1 and v2 (ListObjectVersions is in `versions`).

use s3s::dto::*;
use s3s::{S3Request, S3Response, S3Result};
use stow_store as store;

use super::convert::*;
use super::{reading, StowS3};

pub(super) async fn list_objects(
    svc: &StowS3,
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
    let store = svc.store.clone();
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
        // ListObjects (v1) url-encodes keys, common prefixes, the delimiter
        // and the markers, never the Prefix element: it is echoed as sent
        // (XML-escaped), as AWS does and as SDKs, which decode only the
        // others, expect.
        prefix: Some(input.prefix.unwrap_or_default()),
        marker: Some(enc(input.marker.unwrap_or_default())),
        max_keys: Some(max as i32),
        is_truncated: Some(page.is_truncated),
        next_marker,
        // An empty delimiter is no delimiter, and is not echoed.
        delimiter: input.delimiter.filter(|d| !d.is_empty()).map(enc),
        encoding_type: input.encoding_type,
        contents: Some(with_owner(contents(page.objects, url), true)),
        common_prefixes: Some(common_prefixes(page.common_prefixes, url)),
        ..Default::default()
    }))
}

/// Objects of a listing with their owner named: ListObjects (v1) always
/// names it, ListObjectsV2 only when asked (`fetch-owner=true`), as S3 does.
fn with_owner(mut objects: ObjectList, wanted: bool) -> ObjectList {
    if wanted {
        for o in &mut objects {
            o.owner = Some(super::acl::owner());
        }
    }
    objects
}

pub(super) async fn list_objects_v2(
    svc: &StowS3,
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
    let store = svc.store.clone();
    let bucket = input.bucket.clone();
    let page = reading(move || store.list_objects(&bucket, &query)).await?;
    let enc = |s: String| if url { url_encode(&s) } else { s };
    let key_count = (page.objects.len() + page.common_prefixes.len()) as i32;
    let fetch_owner = input.fetch_owner == Some(true);
    Ok(S3Response::new(ListObjectsV2Output {
        name: Some(input.bucket),
        prefix: Some(enc(input.prefix.unwrap_or_default())),
        max_keys: Some(max as i32),
        key_count: Some(key_count),
        continuation_token: input.continuation_token,
        next_continuation_token: page.next_marker.as_deref().map(encode_token),
        is_truncated: Some(page.is_truncated),
        start_after: input.start_after.map(enc),
        // An empty delimiter is no delimiter, and is not echoed.
        delimiter: input.delimiter.filter(|d| !d.is_empty()).map(enc),
        encoding_type: input.encoding_type,
        contents: Some(with_owner(contents(page.objects, url), fetch_owner)),
        common_prefixes: Some(common_prefixes(page.common_prefixes, url)),
        ..Default::default()
    }))
}
