//! Multipart uploads from the page: each route is the S3 multipart
//! operation it stands for, made through [`stow_s3_http::StowS3`] with the
//! server's credentials (so quotas, the read-only refusal, part rules and
//! S3's error codes are the S3 port's). The page splits a large file into
//! parts, sends them here one request each (each bounded like an S3
//! request body), completes with the parts' ETags, and aborts on cancel.

use std::collections::HashMap;

use http::{Method, Request, Response, StatusCode};
use hyper::body::Incoming;
use s3s::dto::*;
use s3s::S3;

use super::objects::string_field;
use super::{body_length, param, read_json, State};
use crate::error::ConsoleError;
use crate::{json, Body};

/// S3's part-number limit.
pub const MAX_PARTS: u64 = 10_000;

/// Answers a multipart route (signed in, CSRF checked).
pub async fn route(
    state: &State,
    req: Request<Incoming>,
    route: &str,
    query: HashMap<String, String>,
) -> Result<Response<Body>, ConsoleError> {
    let method = req.method().clone();
    let value = match (route, method) {
        ("multipart", Method::POST) => create(state, read_json(req).await?).await?,
        ("multipart", Method::DELETE) => abort(state, &query).await?,
        ("part", Method::PUT) => part(state, req, &query).await?,
        ("complete", Method::POST) => complete(state, read_json(req).await?).await?,
        _ => return Err(ConsoleError::Method),
    };
    Ok(json(StatusCode::OK, &value))
}

/// `POST multipart {"bucket", "key", "content_type"}`:
/// CreateMultipartUpload.
async fn create(state: &State, body: serde_json::Value) -> Result<serde_json::Value, ConsoleError> {
    let bucket = string_field(&body, "bucket")?;
    let key = string_field(&body, "key")?;
    let content_type = body
        .get("content_type")
        .and_then(|v| v.as_str())
        .filter(|v| !v.is_empty())
        .map(str::to_string);
    let input = CreateMultipartUploadInput {
        bucket,
        key: key.clone(),
        content_type,
        ..Default::default()
    };
    let out = state
        .s3
        .create_multipart_upload(state.request(Method::POST, input))
        .await?
        .output;
    let upload = out
        .upload_id
        .ok_or_else(|| ConsoleError::Internal("no upload ID in the answer".into()))?;
    Ok(serde_json::json!({
        "key": key,
        "upload": upload,
        "max_part_bytes": state.max_upload_bytes,
    }))
}

/// `PUT part?bucket=&key=&upload=&number=` with the part's bytes:
/// UploadPart.
async fn part(
    state: &State,
    req: Request<Incoming>,
    query: &HashMap<String, String>,
) -> Result<serde_json::Value, ConsoleError> {
    let (bucket, key) = (param(query, "bucket")?, param(query, "key")?);
    let upload = param(query, "upload")?;
    let number = part_number(&param(query, "number")?)?;
    let length = body_length(state, &req)?;
    let input = UploadPartInput {
        bucket,
        key,
        upload_id: upload,
        part_number: number,
        body: Some(StreamingBlob::from(Body::from(req.into_body()))),
        content_length: Some(length),
        ..Default::default()
    };
    let out = state
        .s3
        .upload_part(state.request(Method::PUT, input))
        .await?
        .output;
    Ok(serde_json::json!({
        "number": number,
        "etag": out.e_tag.as_ref().map(|e| e.value().to_string()),
    }))
}

/// `POST complete {"bucket", "key", "upload", "parts": [{"number",
/// "etag"}]}`: CompleteMultipartUpload.
async fn complete(
    state: &State,
    body: serde_json::Value,
) -> Result<serde_json::Value, ConsoleError> {
    let bucket = string_field(&body, "bucket")?;
    let key = string_field(&body, "key")?;
    let upload = string_field(&body, "upload")?;
    let parts = body
        .get("parts")
        .and_then(|p| p.as_array())
        .ok_or_else(|| ConsoleError::BadRequest("\"parts\" must be a list".into()))?
        .iter()
        .map(|p| {
            let number = p.get("number").and_then(|n| n.as_u64());
            let etag = p.get("etag").and_then(|e| e.as_str());
            match (number, etag) {
                (Some(n), Some(e)) => Ok(CompletedPart {
                    part_number: Some(part_number(&n.to_string())?),
                    e_tag: Some(ETag::Strong(e.trim_matches('"').to_string())),
                    ..Default::default()
                }),
                _ => Err(ConsoleError::BadRequest(
                    "each part needs a \"number\" and an \"etag\"".into(),
                )),
            }
        })
        .collect::<Result<Vec<_>, _>>()?;
    let input = CompleteMultipartUploadInput {
        bucket,
        key: key.clone(),
        upload_id: upload,
        multipart_upload: Some(CompletedMultipartUpload { parts: Some(parts) }),
        ..Default::default()
    };
    let out = state
        .s3
        .complete_multipart_upload(state.request(Method::POST, input))
        .await?
        .output;
    Ok(serde_json::json!({
        "key": key,
        "etag": out.e_tag.as_ref().map(|e| e.value().to_string()),
    }))
}

/// `DELETE multipart?bucket=&key=&upload=`: AbortMultipartUpload (the
/// page's Cancel).
async fn abort(
    state: &State,
    query: &HashMap<String, String>,
) -> Result<serde_json::Value, ConsoleError> {
    let input = AbortMultipartUploadInput {
        bucket: param(query, "bucket")?,
        key: param(query, "key")?,
        upload_id: param(query, "upload")?,
        ..Default::default()
    };
    state
        .s3
        .abort_multipart_upload(state.request(Method::DELETE, input))
        .await?;
    Ok(serde_json::json!({ "aborted": true }))
}

/// A part number, 1 to [`MAX_PARTS`].
fn part_number(s: &str) -> Result<i32, ConsoleError> {
    s.parse::<u64>()
        .ok()
        .filter(|n| (1..=MAX_PARTS).contains(n))
        .and_then(|n| i32::try_from(n).ok())
        .ok_or_else(|| {
            ConsoleError::BadRequest(format!("a part number is 1 to {MAX_PARTS}, not {s:?}"))
        })
}

#[cfg(test)]
mod tests {
    use super::part_number;

    #[test]
    fn part_numbers_are_bounded() {
        assert_eq!(part_number("1").ok(), Some(1));
        assert_eq!(part_number("10000").ok(), Some(10_000));
        for bad in ["0", "10001", "-1", "x", ""] {
            assert!(part_number(bad).is_err(), "{bad:?}");
        }
    }
}
