//! The object pages' API routes beyond browsing: delete many, the details
//! panel, previews (in [`crate::preview`]), share links and usage figures.
//!
//! Each is made as the S3 request it stands for, through
//! [`stow_s3_http::StowS3`] with the server's credentials (so the
//! read-only refusal and S3's error codes apply); a share link is signed
//! only after the HeadObject it stands on succeeded.

use std::collections::HashMap;
use std::time::{Duration, SystemTime};

use http::{Method, Request, Response, StatusCode};
use hyper::body::Incoming;
use s3s::dto::*;
use s3s::S3;

use super::preview;
use super::{param, read_json, timestamp, State};
use crate::error::ConsoleError;
use crate::presign::{self, PresignRequest};
use crate::{json, Body};

/// Most keys one `delete` may name (DeleteObjects' own limit).
pub const MAX_DELETE_KEYS: usize = 1000;
/// Most versions the details panel lists.
const MAX_VERSIONS: i32 = 100;
/// Most keys the bucket's usage walk counts (then the figures are a floor).
pub const USAGE_WALK_KEYS: usize = 100_000;

/// Answers an object-page route (signed in, CSRF checked).
pub async fn route(
    state: &State,
    req: Request<Incoming>,
    route: &str,
    query: HashMap<String, String>,
) -> Result<Response<Body>, ConsoleError> {
    let method = req.method().clone();
    let value = match (route, method) {
        ("delete", Method::POST) => delete_many(state, read_json(req).await?).await?,
        ("details", Method::GET) => details(state, &query).await?,
        ("preview", Method::GET) => preview::preview(state, &query).await?,
        ("image", Method::GET) => return preview::image(state, &query).await,
        ("share", Method::POST) => share(state, read_json(req).await?).await?,
        ("usage", Method::GET) => usage(state, &query).await?,
        _ => return Err(ConsoleError::Method),
    };
    Ok(json(StatusCode::OK, &value))
}

/// `POST delete {"bucket", "keys"}`: one DeleteObjects; the answer lists
/// what was deleted and each key's S3 error.
async fn delete_many(
    state: &State,
    body: serde_json::Value,
) -> Result<serde_json::Value, ConsoleError> {
    let bucket = string_field(&body, "bucket")?;
    let keys: Vec<String> = body
        .get("keys")
        .and_then(|k| k.as_array())
        .ok_or_else(|| ConsoleError::BadRequest("\"keys\" must be a list of keys".into()))?
        .iter()
        .map(|k| k.as_str().map(str::to_string))
        .collect::<Option<_>>()
        .ok_or_else(|| ConsoleError::BadRequest("every key must be a string".into()))?;
    if keys.is_empty() || keys.len() > MAX_DELETE_KEYS {
        return Err(ConsoleError::BadRequest(format!(
            "name 1 to {MAX_DELETE_KEYS} keys to delete"
        )));
    }
    let input = DeleteObjectsInput {
        bucket,
        delete: Delete {
            objects: keys
                .into_iter()
                .map(|key| ObjectIdentifier {
                    key,
                    ..Default::default()
                })
                .collect(),
            quiet: Some(false),
        },
        bypass_governance_retention: None,
        checksum_algorithm: None,
        expected_bucket_owner: None,
        mfa: None,
        request_payer: None,
    };
    let out = state
        .s3
        .delete_objects(state.request(Method::POST, input))
        .await?
        .output;
    let deleted: Vec<_> = out
        .deleted
        .unwrap_or_default()
        .into_iter()
        .filter_map(|d| d.key)
        .collect();
    let errors: Vec<_> = out
        .errors
        .unwrap_or_default()
        .into_iter()
        .map(|e| serde_json::json!({ "key": e.key, "code": e.code, "message": e.message }))
        .collect();
    Ok(serde_json::json!({ "deleted": deleted, "errors": errors }))
}

/// `GET details?bucket=&key=&version=`: HeadObject (with checksums), the
/// tags, and where the bucket has versioning on, the key's versions.
async fn details(
    state: &State,
    query: &HashMap<String, String>,
) -> Result<serde_json::Value, ConsoleError> {
    let (bucket, key) = (param(query, "bucket")?, param(query, "key")?);
    let version_id = query.get("version").filter(|v| !v.is_empty()).cloned();
    let input = HeadObjectInput {
        bucket: bucket.clone(),
        key: key.clone(),
        version_id: version_id.clone(),
        checksum_mode: Some(ChecksumMode::from_static(ChecksumMode::ENABLED)),
        ..Default::default()
    };
    let head = state
        .s3
        .head_object(state.request(Method::HEAD, input))
        .await?
        .output;
    let tags = tags(state, &bucket, &key, version_id).await?;
    let versioning = state
        .s3
        .get_bucket_versioning(state.request(
            Method::GET,
            GetBucketVersioningInput {
                bucket: bucket.clone(),
                ..Default::default()
            },
        ))
        .await?
        .output
        .status
        .map(|s| s.as_str().to_string());
    let versions = match versioning {
        Some(_) => Some(versions(state, &bucket, &key).await?),
        None => None,
    };
    let checksums: serde_json::Map<String, serde_json::Value> = [
        ("CRC32", head.checksum_crc32),
        ("CRC32C", head.checksum_crc32c),
        ("CRC64NVME", head.checksum_crc64nvme),
        ("SHA1", head.checksum_sha1),
        ("SHA256", head.checksum_sha256),
    ]
    .into_iter()
    .filter_map(|(name, v)| v.map(|v| (name.to_string(), serde_json::Value::String(v))))
    .collect();
    Ok(serde_json::json!({
        "bucket": bucket,
        "key": key,
        "size": head.content_length,
        "etag": head.e_tag.as_ref().map(|e| e.value().to_string()),
        "content_type": head.content_type,
        "last_modified": head.last_modified.as_ref().and_then(timestamp),
        "metadata": head.metadata.unwrap_or_default(),
        "tags": tags,
        "version_id": head.version_id,
        "versioning": versioning,
        "versions": versions,
        "checksums": checksums,
        "checksum_type": head.checksum_type.map(|t| t.as_str().to_string()),
    }))
}

/// The object's tags as `[{key, value}]` (GetObjectTagging).
async fn tags(
    state: &State,
    bucket: &str,
    key: &str,
    version_id: Option<String>,
) -> Result<Vec<serde_json::Value>, ConsoleError> {
    let input = GetObjectTaggingInput {
        bucket: bucket.to_string(),
        key: key.to_string(),
        version_id,
        ..Default::default()
    };
    let out = state
        .s3
        .get_object_tagging(state.request(Method::GET, input))
        .await?
        .output;
    Ok(out
        .tag_set
        .into_iter()
        .map(|t| serde_json::json!({ "key": t.key, "value": t.value }))
        .collect())
}

/// The key's versions and delete markers, newest first (ListObjectVersions
/// with the key as prefix, other keys dropped), at most [`MAX_VERSIONS`].
async fn versions(
    state: &State,
    bucket: &str,
    key: &str,
) -> Result<Vec<serde_json::Value>, ConsoleError> {
    let input = ListObjectVersionsInput {
        bucket: bucket.to_string(),
        prefix: Some(key.to_string()),
        max_keys: Some(MAX_VERSIONS),
        ..Default::default()
    };
    let out = state
        .s3
        .list_object_versions(state.request(Method::GET, input))
        .await?
        .output;
    let mut rows: Vec<(Option<String>, serde_json::Value)> = Vec::new();
    for v in out.versions.unwrap_or_default() {
        if v.key.as_deref() == Some(key) {
            let modified = v.last_modified.as_ref().and_then(timestamp);
            rows.push((
                modified.clone(),
                serde_json::json!({
                    "version_id": v.version_id,
                    "latest": v.is_latest.unwrap_or(false),
                    "size": v.size,
                    "etag": v.e_tag.as_ref().map(|e| e.value().to_string()),
                    "last_modified": modified,
                    "delete_marker": false,
                }),
            ));
        }
    }
    for m in out.delete_markers.unwrap_or_default() {
        if m.key.as_deref() == Some(key) {
            let modified = m.last_modified.as_ref().and_then(timestamp);
            rows.push((
                modified.clone(),
                serde_json::json!({
                    "version_id": m.version_id,
                    "latest": m.is_latest.unwrap_or(false),
                    "last_modified": modified,
                    "delete_marker": true,
                }),
            ));
        }
    }
    // Newest first; ISO-8601 UTC stamps sort as text.
    rows.sort_by(|a, b| b.0.cmp(&a.0));
    Ok(rows.into_iter().map(|(_, v)| v).collect())
}

/// `POST share {"bucket", "key", "expires"}`: a presigned GET on the S3
/// port, valid `expires` seconds (1 to 7 days), for an object HeadObject
/// finds.
async fn share(state: &State, body: serde_json::Value) -> Result<serde_json::Value, ConsoleError> {
    let bucket = string_field(&body, "bucket")?;
    let key = string_field(&body, "key")?;
    if !presign::survives_browsers(&key) {
        return Err(ConsoleError::BadRequest(
            "a key with a \".\" or \"..\" path segment cannot be shared as a link: \
             browsers rewrite such paths before they send them"
                .into(),
        ));
    }
    let expires = body
        .get("expires")
        .and_then(|e| e.as_u64())
        .filter(|e| (1..=presign::MAX_EXPIRY.as_secs()).contains(e))
        .ok_or_else(|| {
            ConsoleError::BadRequest(format!(
                "\"expires\" must be 1 to {} seconds",
                presign::MAX_EXPIRY.as_secs()
            ))
        })?;
    let endpoint = state
        .s3_endpoint
        .as_deref()
        .ok_or(ConsoleError::NotAvailable(
            "this console does not know the S3 port's address",
        ))?;
    let input = HeadObjectInput {
        bucket: bucket.clone(),
        key: key.clone(),
        ..Default::default()
    };
    state
        .s3
        .head_object(state.request(Method::HEAD, input))
        .await?;
    let now = SystemTime::now();
    let url = presign::presigned_get(&PresignRequest {
        endpoint,
        region: &state.region,
        access_key: state.access_key(),
        secret_key: &state.secret_key,
        bucket: &bucket,
        key: &key,
        expires: Duration::from_secs(expires),
        now,
    });
    let until = (now + Duration::from_secs(expires))
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    Ok(serde_json::json!({ "url": url, "expires": expires, "expires_at": until }))
}

/// `GET usage?bucket=`: the store's figures and quotas (the backend's
/// usage, a read) and the bucket's, counted by ListObjectsV2 up to
/// [`USAGE_WALK_KEYS`] keys (`complete: false` beyond).
async fn usage(
    state: &State,
    query: &HashMap<String, String>,
) -> Result<serde_json::Value, ConsoleError> {
    let bucket = param(query, "bucket")?;
    let store = std::sync::Arc::clone(&state.store);
    let total = tokio::task::spawn_blocking(move || store.usage())
        .await
        .map_err(|e| ConsoleError::Internal(format!("the usage task failed: {e}")))??;
    let (mut objects, mut bytes, mut token) = (0u64, 0u64, None);
    let complete = loop {
        let input = ListObjectsV2Input {
            bucket: bucket.clone(),
            continuation_token: token.take(),
            max_keys: Some(1000),
            ..Default::default()
        };
        let out = state
            .s3
            .list_objects_v2(state.request(Method::GET, input))
            .await?
            .output;
        for o in out.contents.unwrap_or_default() {
            objects += 1;
            bytes += o.size.and_then(|s| u64::try_from(s).ok()).unwrap_or(0);
        }
        match out.next_continuation_token {
            Some(next) if out.is_truncated == Some(true) => {
                if objects >= USAGE_WALK_KEYS as u64 {
                    break false;
                }
                token = Some(next);
            }
            _ => break true,
        }
    };
    Ok(serde_json::json!({
        "bucket": { "name": bucket, "objects": objects, "bytes": bytes, "complete": complete },
        "store": {
            "objects": total.objects,
            "bytes": total.bytes,
            "max_objects": state.quota.max_objects,
            "max_bytes": state.quota.max_bytes,
        },
    }))
}

/// A required string field of a JSON body.
pub(crate) fn string_field(body: &serde_json::Value, name: &str) -> Result<String, ConsoleError> {
    body.get(name)
        .and_then(|v| v.as_str())
        .filter(|v| !v.is_empty())
        .map(str::to_string)
        .ok_or_else(|| ConsoleError::BadRequest(format!("\"{name}\" is required")))
}
