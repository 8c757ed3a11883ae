//! Refusals decided from the request line and headers alone, before a
//! concurrency slot or any SigV4 work: SigV2, IAM/STS calls, malformed or
//! unknown checksum headers, presigned URLs that claim too long a life,
//! an expected bucket owner other than the one owner, and bodies over the
//! size cap.

use http::{Request, Response};
use hyper::body::Incoming;
use s3s::s3_error;

use crate::respond::{header_str, xml_error, Body};

/// Refusals that need no SigV4 work: SigV2, IAM/STS calls, oversized bodies.
pub(crate) fn refuse_early(
    req: &Request<Incoming>,
    max_request_bytes: u64,
) -> Option<Response<Body>> {
    let query = req.uri().query().unwrap_or("");
    let has_param = |name: &str| query.split('&').any(|p| p.split('=').next() == Some(name));
    let sigv2 = header_str(req, "authorization").is_some_and(|a| a.starts_with("AWS "))
        || (has_param("AWSAccessKeyId") && has_param("Signature"));
    if sigv2 {
        return Some(xml_error(s3_error!(
            AccessDenied,
            "Signature Version 2 is not supported; sign requests with AWS Signature Version 4"
        )));
    }
    // An empty Content-MD5 is a malformed digest, not an absent one.
    if req
        .headers()
        .get("content-md5")
        .is_some_and(|v| v.as_bytes().iter().all(u8::is_ascii_whitespace))
    {
        return Some(xml_error(s3_error!(
            InvalidDigest,
            "The Content-MD5 you specified is not valid"
        )));
    }
    if let Some(refusal) = presigned_expiry_refusal(query) {
        return Some(xml_error(refusal));
    }
    // Every bucket has the one owner: a caller expecting another (for the
    // bucket, or a copy's source bucket) is refused, as S3 refuses a
    // mismatched account (403), before anything is read or written.
    let expects_another = [
        "x-amz-expected-bucket-owner",
        "x-amz-source-expected-bucket-owner",
    ]
    .iter()
    .filter_map(|h| req.headers().get(*h))
    .any(|owner| owner.as_bytes().trim_ascii() != crate::s3::OWNER.as_bytes());
    if expects_another {
        return Some(xml_error(s3_error!(
            AccessDenied,
            "The bucket is owned by another account than the expected bucket owner"
        )));
    }
    if has_param("Action") {
        return Some(xml_error(s3_error!(
            NotImplemented,
            "IAM and STS actions are not served by this S3 endpoint"
        )));
    }
    // Checksum headers of algorithms S3 does not define must not be
    // silently ignored: the caller expects them verified.
    let unknown_checksum = req.headers().keys().any(|name| {
        name.as_str()
            .strip_prefix("x-amz-checksum-")
            .is_some_and(|alg| {
                !matches!(
                    alg,
                    "crc32"
                        | "crc32c"
                        | "crc64nvme"
                        | "sha1"
                        | "sha256"
                        | "mode"
                        | "type"
                        | "algorithm"
                )
            })
    });
    if unknown_checksum {
        return Some(xml_error(s3_error!(
            InvalidRequest,
            "Unsupported checksum header; use CRC32, CRC32C, CRC64NVME, SHA1 or SHA256"
        )));
    }
    let declared = ["x-amz-decoded-content-length", "content-length"]
        .iter()
        .filter_map(|h| header_str(req, h)?.trim().parse::<u64>().ok())
        .max();
    if declared.is_some_and(|n| n > max_request_bytes) {
        return Some(xml_error(s3_error!(
            EntityTooLarge,
            "Your proposed upload exceeds the maximum allowed size"
        )));
    }
    None
}

/// The longest validity a presigned URL may claim (SigV4: one week).
const MAX_PRESIGNED_EXPIRES: i64 = 604_800;

/// Refuses a presigned URL whose `X-Amz-Expires` is not a whole number of
/// seconds between 1 and a week, before anything else looks at it: a URL
/// that claims to live longer must not be served (AWS refuses it with 400
/// AuthorizationQueryParametersError); one of zero seconds or less has
/// expired (403 AccessDenied, as AWS answers).
fn presigned_expiry_refusal(query: &str) -> Option<s3s::S3Error> {
    let value = query.split('&').find_map(|p| {
        let (k, v) = p.split_once('=').unwrap_or((p, ""));
        (k == "X-Amz-Expires").then_some(v)
    })?;
    // AWS's code and messages (400 AuthorizationQueryParametersError).
    let refuse = |msg: &str| {
        Some(s3s::S3Error::with_message(
            s3s::S3ErrorCode::AuthorizationQueryParametersError,
            msg.to_string(),
        ))
    };
    match value.parse::<i64>() {
        Ok(n) if (1..=MAX_PRESIGNED_EXPIRES).contains(&n) => None,
        Ok(n) if n > MAX_PRESIGNED_EXPIRES => {
            refuse("X-Amz-Expires must be less than a week (in seconds) that is 604800")
        }
        // A URL valid for no time (or less) expired when it was signed:
        // AWS answers 403 AccessDenied, as for any expired URL.
        Ok(_) => Some(s3s::S3Error::with_message(
            s3s::S3ErrorCode::AccessDenied,
            "Request has expired".to_string(),
        )),
        _ => refuse("X-Amz-Expires should be a number from 1 to 604800"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presigned_urls_live_at_most_a_week() {
        let q = |e: &str| {
            format!("X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Expires={e}&X-Amz-Signature=x")
        };
        assert!(presigned_expiry_refusal(&q("1")).is_none());
        assert!(presigned_expiry_refusal(&q("604800")).is_none());
        for bad in [
            "604801",
            "609901",
            "0",
            "-5",
            "1e3",
            "",
            "99999999999999999999",
        ] {
            assert!(presigned_expiry_refusal(&q(bad)).is_some(), "{bad}");
        }
        assert!(presigned_expiry_refusal("list-type=2").is_none());
        // A lifetime of zero or less has expired: 403 AccessDenied, not 400.
        for expired in ["0", "-5", "-1000"] {
            let refusal = presigned_expiry_refusal(&q(expired));
            let code = refusal.as_ref().map(|e| e.code().clone());
            assert_eq!(code, Some(s3s::S3ErrorCode::AccessDenied), "{expired}");
        }
        let code = presigned_expiry_refusal(&q("604801")).map(|e| e.code().clone());
        assert_eq!(
            code,
            Some(s3s::S3ErrorCode::AuthorizationQueryParametersError)
        );
    }
}
