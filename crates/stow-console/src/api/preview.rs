//! Previews: the first 64 KiB of an object as text, or an image.
//!
//! Object bytes are never served as a document of the console's origin:
//! text goes to the page inside JSON (and is shown with `textContent`),
//! and an image is served only when its own first bytes say PNG, JPEG,
//! GIF or WebP, with that type (never the stored Content-Type, never SVG
//! or HTML), `nosniff` and a sandboxing CSP. Each read is the GetObject it
//! stands for, through [`stow_s3_http::StowS3`].

use std::collections::HashMap;

use bytes::Bytes;
use http::{header, HeaderValue, Method, Response};
use http_body_util::{BodyExt as _, Limited};
use s3s::dto::*;
use s3s::S3;

use super::{param, State};
use crate::error::ConsoleError;
use crate::Body;

/// How much of an object a text preview shows.
pub const PREVIEW_BYTES: u64 = 64 * 1024;
/// The largest image shown.
pub const IMAGE_MAX_BYTES: u64 = 16 * 1024 * 1024;

/// `GET preview?bucket=&key=`: `{"kind": "text", "text", "truncated"}`,
/// `{"kind": "image", "type"}` (then the page loads `image`), or
/// `{"kind": "none", "reason"}`.
pub async fn preview(
    state: &State,
    query: &HashMap<String, String>,
) -> Result<serde_json::Value, ConsoleError> {
    let (bucket, key) = (param(query, "bucket")?, param(query, "key")?);
    let size = object_size(state, &bucket, &key).await?;
    let shown = size.min(PREVIEW_BYTES);
    let head = if shown == 0 {
        Bytes::new()
    } else {
        let range = Range::Int {
            first: 0,
            last: Some(shown - 1),
        };
        read(state, &bucket, &key, Some(range), shown).await?
    };
    if let Some(kind) = image_type(&head) {
        if size > IMAGE_MAX_BYTES {
            return Ok(none(format!(
                "an image larger than {} MiB is not previewed",
                IMAGE_MAX_BYTES >> 20
            )));
        }
        return Ok(serde_json::json!({ "kind": "image", "type": kind, "size": size }));
    }
    match text_of(&head, size > shown) {
        Some(text) => Ok(serde_json::json!({
            "kind": "text",
            "text": text,
            "truncated": size > shown,
            "size": size,
        })),
        None => Ok(none("not text or a PNG, JPEG, GIF or WebP image".into())),
    }
}

fn none(reason: String) -> serde_json::Value {
    serde_json::json!({ "kind": "none", "reason": reason })
}

/// `GET image?bucket=&key=`: the object's bytes typed by their own
/// signature, when that is PNG, JPEG, GIF or WebP; anything else is
/// refused (`no_preview`).
pub async fn image(
    state: &State,
    query: &HashMap<String, String>,
) -> Result<Response<Body>, ConsoleError> {
    let (bucket, key) = (param(query, "bucket")?, param(query, "key")?);
    let size = object_size(state, &bucket, &key).await?;
    if size > IMAGE_MAX_BYTES {
        return Err(ConsoleError::NoPreview(format!(
            "an image larger than {} MiB is not previewed",
            IMAGE_MAX_BYTES >> 20
        )));
    }
    let bytes = read(state, &bucket, &key, None, IMAGE_MAX_BYTES).await?;
    let kind = image_type(&bytes)
        .ok_or_else(|| ConsoleError::NoPreview("not a PNG, JPEG, GIF or WebP image".into()))?;
    let length = bytes.len();
    let mut resp = Response::new(Body::from(bytes));
    let h = resp.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(kind));
    h.insert(header::CONTENT_LENGTH, HeaderValue::from(length));
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static("default-src 'none'; sandbox; frame-ancestors 'none'"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    Ok(resp)
}

/// The object's size (HeadObject).
async fn object_size(state: &State, bucket: &str, key: &str) -> Result<u64, ConsoleError> {
    let input = HeadObjectInput {
        bucket: bucket.to_string(),
        key: key.to_string(),
        ..Default::default()
    };
    let head = state
        .s3
        .head_object(state.request(Method::HEAD, input))
        .await?
        .output;
    Ok(head
        .content_length
        .and_then(|n| u64::try_from(n).ok())
        .unwrap_or(0))
}

/// GetObject's bytes (of `range`), at most `limit` of them.
async fn read(
    state: &State,
    bucket: &str,
    key: &str,
    range: Option<Range>,
    limit: u64,
) -> Result<Bytes, ConsoleError> {
    let input = GetObjectInput {
        bucket: bucket.to_string(),
        key: key.to_string(),
        range,
        ..Default::default()
    };
    let out = state
        .s3
        .get_object(state.request(Method::GET, input))
        .await?
        .output;
    let Some(blob) = out.body else {
        return Ok(Bytes::new());
    };
    let limit = usize::try_from(limit).unwrap_or(usize::MAX);
    Ok(Limited::new(Body::from(blob), limit)
        .collect()
        .await
        .map_err(|e| {
            if e.is::<http_body_util::LengthLimitError>() {
                ConsoleError::NoPreview("the object is larger than it claimed".into())
            } else {
                ConsoleError::Internal(format!("cannot read the object: {e}"))
            }
        })?
        .to_bytes())
}

/// The image type the bytes' own signature names, among the four shown.
pub fn image_type(bytes: &[u8]) -> Option<&'static str> {
    if bytes.starts_with(b"\x89PNG\r\n\x1a\n") {
        Some("image/png")
    } else if bytes.starts_with(&[0xff, 0xd8, 0xff]) {
        Some("image/jpeg")
    } else if bytes.starts_with(b"GIF87a") || bytes.starts_with(b"GIF89a") {
        Some("image/gif")
    } else if bytes.len() >= 12 && bytes.starts_with(b"RIFF") && &bytes[8..12] == b"WEBP" {
        Some("image/webp")
    } else {
        None
    }
}

/// The bytes as text: UTF-8 without NUL bytes. When `truncated`, a
/// character cut by the end of the preview is dropped.
pub fn text_of(bytes: &[u8], truncated: bool) -> Option<String> {
    let text = match std::str::from_utf8(bytes) {
        Ok(t) => t,
        Err(e) if truncated && e.error_len().is_none() => {
            std::str::from_utf8(&bytes[..e.valid_up_to()]).ok()?
        }
        Err(_) => return None,
    };
    (!text.contains('\0')).then(|| text.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn images_are_known_by_their_bytes_only() {
        assert_eq!(image_type(b"\x89PNG\r\n\x1a\nrest"), Some("image/png"));
        assert_eq!(image_type(&[0xff, 0xd8, 0xff, 0xe0]), Some("image/jpeg"));
        assert_eq!(image_type(b"GIF89a..."), Some("image/gif"));
        assert_eq!(image_type(b"RIFF\0\0\0\0WEBPVP8 "), Some("image/webp"));
        assert_eq!(image_type(b"RIFF\0\0\0\0WAVE"), None);
        assert_eq!(
            image_type(b"<svg xmlns='http://www.w3.org/2000/svg'/>"),
            None
        );
        assert_eq!(image_type(b"<html><script>alert(1)</script>"), None);
        assert_eq!(image_type(b""), None);
    }

    #[test]
    fn text_is_utf8_without_nul() {
        assert_eq!(text_of(b"hello\n", false).as_deref(), Some("hello\n"));
        assert_eq!(text_of(b"", false).as_deref(), Some(""));
        assert_eq!(text_of(b"a\0b", false), None);
        assert_eq!(text_of(&[0xff, 0xfe], false), None);
        // "é" is C3 A9: cut after C3 at the preview's end.
        assert_eq!(text_of(b"caf\xc3", true).as_deref(), Some("caf"));
        assert_eq!(text_of(b"caf\xc3", false), None);
        assert_eq!(text_of(b"caf\xc3x", true), None);
    }
}
