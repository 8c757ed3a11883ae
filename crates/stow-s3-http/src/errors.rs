//! The one place where store errors become S3 errors.

use s3s::{S3Error, S3ErrorCode};
use stow_store::StoreError;

/// Maps a store error to its S3 error code, status and message. Long
/// because it is the one mapping of every store error, an arm each, and
/// reads best whole.
pub fn to_s3(e: StoreError) -> S3Error {
    use StoreError as E;
    let code = match &e {
        E::NoSuchBucket { .. } => S3ErrorCode::NoSuchBucket,
        // No such key, and no delete marker either: ceph/s3-tests
        // (test_delete_marker_nonversioned, test_delete_marker_expiration)
        // read `x-amz-delete-marker: false` on that 404, as Ceph sends it.
        E::NoSuchKey { .. } => {
            return about_marker(S3ErrorCode::NoSuchKey, e.to_string(), false, None)
        }
        // The latest version is a delete marker: 404 NoSuchKey, saying so.
        E::KeyDeleted { version_id, .. } => {
            let message = e.to_string();
            return about_marker(S3ErrorCode::NoSuchKey, message, true, Some(version_id));
        }
        // A delete marker named by its ID has nothing to read: 405.
        E::DeleteMarkerVersion { version_id, .. } => {
            let message = "The specified method is not allowed against this resource.".into();
            return about_marker(
                S3ErrorCode::MethodNotAllowed,
                message,
                true,
                Some(version_id),
            );
        }
        E::NoSuchVersion { .. } => S3ErrorCode::NoSuchVersion,
        E::InvalidVersionId { .. } => {
            return S3Error::with_message(
                S3ErrorCode::InvalidArgument,
                "Invalid version id specified",
            )
        }
        E::NotImplemented { .. } => S3ErrorCode::NotImplemented,
        // Customer-provided keys (SSE-C): malformed headers are
        // InvalidArgument; a key missing for a sealed object, given for a
        // plain one, or not the object's own is 400 InvalidRequest, as
        // ceph/s3-tests' SSE-C tests (not marked as failing on AWS) expect
        // for a wrong key on GET and on UploadPart.
        E::InvalidEncryptionKey { .. } => S3ErrorCode::InvalidArgument,
        E::EncryptionKeyMissing | E::EncryptionNotApplicable | E::WrongEncryptionKey => {
            S3ErrorCode::InvalidRequest
        }
        E::BucketNotEmpty { .. } => S3ErrorCode::BucketNotEmpty,
        E::InvalidBucketName { .. } => S3ErrorCode::InvalidBucketName,
        E::KeyTooLong { .. } => S3ErrorCode::KeyTooLongError,
        E::MetadataTooLarge { .. } => S3ErrorCode::MetadataTooLarge,
        E::InvalidKey { .. }
        | E::InvalidMetadata { .. }
        | E::InvalidArgument { .. }
        | E::InvalidPartNumber(_) => S3ErrorCode::InvalidArgument,
        E::InvalidCors { .. } => S3ErrorCode::InvalidRequest,
        E::MalformedCors { .. }
        | E::MalformedLockConfiguration { .. }
        | E::MalformedLifecycle { .. } => S3ErrorCode::MalformedXML,
        E::InvalidLifecycle { .. } => S3ErrorCode::InvalidRequest,
        E::ObjectLockNotEnabled => S3ErrorCode::InvalidRequest,
        E::InvalidRetentionPeriod => {
            let status = http::StatusCode::BAD_REQUEST;
            return custom(
                S3ErrorCode::Custom("InvalidRetentionPeriod".into()),
                status,
                e.to_string(),
            );
        }
        E::InvalidBucketState { .. } => S3ErrorCode::InvalidBucketState,
        E::ObjectLocked { .. } => S3ErrorCode::AccessDenied,
        E::PreconditionFailed { .. } => S3ErrorCode::PreconditionFailed,
        E::Conflict => S3ErrorCode::ConditionalRequestConflict,
        E::InvalidRange { .. } => S3ErrorCode::InvalidRange,
        // A malformed Content-MD5 is InvalidDigest; an x-amz-checksum-*
        // value that cannot be the body's (malformed or not matching) is
        // BadDigest, as AWS answers both.
        E::InvalidDigest { .. } => S3ErrorCode::InvalidDigest,
        E::InvalidChecksum { .. } | E::BadDigest { .. } => S3ErrorCode::BadDigest,
        E::TooLarge { .. } => S3ErrorCode::EntityTooLarge,
        E::NoSuchUpload { .. } => S3ErrorCode::NoSuchUpload,
        E::InvalidPart { .. } => S3ErrorCode::InvalidPart,
        E::InvalidPartOrder => S3ErrorCode::InvalidPartOrder,
        E::EntityTooSmall { .. } => S3ErrorCode::EntityTooSmall,
        E::QuotaExceeded { .. } => {
            let status = http::StatusCode::INSUFFICIENT_STORAGE;
            return custom(
                S3ErrorCode::Custom("InsufficientStorage".into()),
                status,
                e.to_string(),
            );
        }
        _ if e.is_no_space() => {
            // The disk, not a quota of ours: nothing was stored, and the
            // same request succeeds once space is freed.
            tracing::warn!("refused a write: {e}");
            let status = http::StatusCode::INSUFFICIENT_STORAGE;
            let message = "the server's disk is full; nothing was stored";
            return custom(
                S3ErrorCode::Custom("InsufficientStorage".into()),
                status,
                message.into(),
            );
        }
        E::Io(io) if io.kind() == std::io::ErrorKind::InvalidData => {
            // Raised by the request body itself (a failed trailer or
            // signature check while streaming): the client's fault.
            return S3Error::with_message(S3ErrorCode::BadDigest, io.to_string());
        }
        E::StoreLocked { .. }
        | E::NoSuchStore { .. }
        | E::InvalidCondition { .. }
        | E::RequestConflict
        | E::RetentionFull { .. }
        | E::ReceiptNotFound
        | E::Corrupt(_)
        | E::Io(_)
        | E::Db(_) => {
            tracing::error!("internal error: {e}");
            return S3Error::with_message(
                S3ErrorCode::InternalError,
                "internal error; see the server log",
            );
        }
    };
    S3Error::with_message(code, e.to_string())
}

/// GetPublicAccessBlock of a bucket without one: 404
/// NoSuchPublicAccessBlockConfiguration (a code `s3s` does not name).
pub(crate) fn no_public_access_block() -> S3Error {
    let mut err = S3Error::with_message(
        S3ErrorCode::Custom("NoSuchPublicAccessBlockConfiguration".into()),
        "The public access block configuration was not found",
    );
    err.set_status_code(http::StatusCode::NOT_FOUND);
    err
}

/// Maps a refusal of a browser POST form (`post.rs`) to its S3 error: a
/// form that cannot be read is MalformedPOSTRequest, a missing field or
/// file InvalidArgument, a policy document S3 cannot read
/// InvalidPolicyDocument, and everything the policy forbids (expired, a
/// condition failed, a field no condition names) 403 AccessDenied.
pub(crate) fn post_refusal(e: crate::post::PostError) -> S3Error {
    use crate::post::PostError as P;
    let code = match &e {
        P::Malformed(_) | P::Body(_) => S3ErrorCode::MalformedPOSTRequest,
        P::NoFile | P::MissingField(_) | P::RepeatedField(_) => S3ErrorCode::InvalidArgument,
        P::InvalidPolicy(_) => S3ErrorCode::InvalidPolicyDocument,
        P::Expired | P::ConditionFailed(_) | P::ExtraField(_) => S3ErrorCode::AccessDenied,
    };
    S3Error::with_message(code, e.to_string())
}

/// An error of a code `s3s` does not name, with its status.
fn custom(code: S3ErrorCode, status: http::StatusCode, message: String) -> S3Error {
    let mut err = S3Error::with_message(code, message);
    err.set_status_code(status);
    err
}

/// An error answering about a key, with [`marker_headers`].
fn about_marker(
    code: S3ErrorCode,
    message: String,
    is_marker: bool,
    version_id: Option<&str>,
) -> S3Error {
    let mut err = S3Error::with_message(code, message);
    err.set_headers(marker_headers(is_marker, version_id));
    err
}

/// The headers of an answer about a key: `x-amz-delete-marker` (whether a
/// delete marker is what was found) and the marker's version ID (`s3s`
/// replaces an error's headers with these, so the XML content type is
/// among them).
fn marker_headers(is_marker: bool, version_id: Option<&str>) -> http::HeaderMap {
    let mut headers = http::HeaderMap::new();
    headers.insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/xml"),
    );
    headers.insert(
        "x-amz-delete-marker",
        http::HeaderValue::from_static(if is_marker { "true" } else { "false" }),
    );
    if let Some(Ok(v)) = version_id.map(http::HeaderValue::from_str) {
        headers.insert("x-amz-version-id", v);
    }
    headers
}

/// Maps a refused bucket policy document to its S3 error: 400
/// MalformedPolicy for what AWS refuses, 501 NotImplemented for what AWS
/// takes and this server does not evaluate.
pub(crate) fn policy_refusal(e: crate::policy::PolicyError) -> S3Error {
    use crate::policy::PolicyError as P;
    match &e {
        P::Malformed(_) => S3Error::with_message(S3ErrorCode::MalformedPolicy, e.to_string()),
        P::Unsupported(_) => S3Error::with_message(S3ErrorCode::NotImplemented, e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::StatusCode;
    use std::io;

    fn db_full() -> StoreError {
        StoreError::Db(rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_FULL),
            None,
        ))
    }

    /// Every arm of [`to_s3`]: the wire code and the HTTP status a client
    /// sees for each store error.
    #[test]
    fn every_store_error_has_its_wire_code_and_status() {
        use S3ErrorCode as C;
        use StoreError as E;
        let storage = || C::Custom("InsufficientStorage".into());
        let table: Vec<(StoreError, S3ErrorCode, StatusCode)> = vec![
            (
                E::NoSuchBucket { bucket: "b".into() },
                C::NoSuchBucket,
                StatusCode::NOT_FOUND,
            ),
            (
                E::NoSuchKey {
                    bucket: "b".into(),
                    key: "k".into(),
                },
                C::NoSuchKey,
                StatusCode::NOT_FOUND,
            ),
            (
                E::KeyDeleted {
                    bucket: "b".into(),
                    key: "k".into(),
                    version_id: "v".into(),
                },
                C::NoSuchKey,
                StatusCode::NOT_FOUND,
            ),
            (
                E::NoSuchVersion {
                    bucket: "b".into(),
                    key: "k".into(),
                    version_id: "v".into(),
                },
                C::NoSuchVersion,
                StatusCode::NOT_FOUND,
            ),
            (
                E::DeleteMarkerVersion {
                    bucket: "b".into(),
                    key: "k".into(),
                    version_id: "v".into(),
                },
                C::MethodNotAllowed,
                StatusCode::METHOD_NOT_ALLOWED,
            ),
            (
                E::InvalidVersionId {
                    version_id: "x".into(),
                },
                C::InvalidArgument,
                StatusCode::BAD_REQUEST,
            ),
            (
                E::NotImplemented { reason: "r".into() },
                C::NotImplemented,
                StatusCode::NOT_IMPLEMENTED,
            ),
            (
                E::BucketNotEmpty { bucket: "b".into() },
                C::BucketNotEmpty,
                StatusCode::CONFLICT,
            ),
            (
                E::InvalidBucketName {
                    name: "B".into(),
                    reason: "r",
                },
                C::InvalidBucketName,
                StatusCode::BAD_REQUEST,
            ),
            (
                E::KeyTooLong {
                    len: 1025,
                    limit: 1024,
                },
                C::KeyTooLongError,
                StatusCode::BAD_REQUEST,
            ),
            (
                E::MetadataTooLarge {
                    size: 2049,
                    limit: 2048,
                },
                C::MetadataTooLarge,
                StatusCode::BAD_REQUEST,
            ),
            // A key that merely mentions the limit's number is no longer
            // mistaken for a key that is too long.
            (
                E::InvalidKey {
                    reason: "key must not contain NUL (limit is 1024 bytes)",
                },
                C::InvalidArgument,
                StatusCode::BAD_REQUEST,
            ),
            (
                E::InvalidMetadata {
                    reason: "content type is longer than 1024 bytes; the limit is 1024".into(),
                },
                C::InvalidArgument,
                StatusCode::BAD_REQUEST,
            ),
            (
                E::InvalidArgument { reason: "r".into() },
                C::InvalidArgument,
                StatusCode::BAD_REQUEST,
            ),
            (
                E::InvalidPartNumber(0),
                C::InvalidArgument,
                StatusCode::BAD_REQUEST,
            ),
            (
                E::MalformedLockConfiguration { reason: "r".into() },
                C::MalformedXML,
                StatusCode::BAD_REQUEST,
            ),
            (
                E::InvalidRetentionPeriod,
                C::Custom("InvalidRetentionPeriod".into()),
                StatusCode::BAD_REQUEST,
            ),
            (
                E::ObjectLockNotEnabled,
                C::InvalidRequest,
                StatusCode::BAD_REQUEST,
            ),
            (
                E::InvalidBucketState { reason: "r".into() },
                C::InvalidBucketState,
                StatusCode::CONFLICT,
            ),
            (
                E::ObjectLocked { reason: "r".into() },
                C::AccessDenied,
                StatusCode::FORBIDDEN,
            ),
            (
                E::PreconditionFailed { reason: "r" },
                C::PreconditionFailed,
                StatusCode::PRECONDITION_FAILED,
            ),
            (
                E::Conflict,
                C::ConditionalRequestConflict,
                StatusCode::CONFLICT,
            ),
            (
                E::InvalidRange { size: 3 },
                C::InvalidRange,
                StatusCode::RANGE_NOT_SATISFIABLE,
            ),
            (
                E::InvalidDigest { reason: "r".into() },
                C::InvalidDigest,
                StatusCode::BAD_REQUEST,
            ),
            (
                E::InvalidChecksum { reason: "r".into() },
                C::BadDigest,
                StatusCode::BAD_REQUEST,
            ),
            (
                E::BadDigest { reason: "r".into() },
                C::BadDigest,
                StatusCode::BAD_REQUEST,
            ),
            (
                E::TooLarge { size: 2, limit: 1 },
                C::EntityTooLarge,
                StatusCode::BAD_REQUEST,
            ),
            (
                E::NoSuchUpload {
                    upload_id: "u".into(),
                },
                C::NoSuchUpload,
                StatusCode::NOT_FOUND,
            ),
            (
                E::InvalidPart { reason: "r".into() },
                C::InvalidPart,
                StatusCode::BAD_REQUEST,
            ),
            (
                E::EntityTooSmall {
                    part_number: 1,
                    size: 1,
                },
                C::EntityTooSmall,
                StatusCode::BAD_REQUEST,
            ),
            (
                E::QuotaExceeded { reason: "r".into() },
                storage(),
                StatusCode::INSUFFICIENT_STORAGE,
            ),
            (
                E::Io(io::Error::from_raw_os_error(28)), // ENOSPC
                storage(),
                StatusCode::INSUFFICIENT_STORAGE,
            ),
            (db_full(), storage(), StatusCode::INSUFFICIENT_STORAGE),
            (
                E::Io(io::Error::new(io::ErrorKind::InvalidData, "bad trailer")),
                C::BadDigest,
                StatusCode::BAD_REQUEST,
            ),
            (
                E::StoreLocked {
                    dir: "/secret/dir".into(),
                },
                C::InternalError,
                StatusCode::INTERNAL_SERVER_ERROR,
            ),
            (
                E::NoSuchStore {
                    dir: "/secret/dir".into(),
                },
                C::InternalError,
                StatusCode::INTERNAL_SERVER_ERROR,
            ),
            (
                E::InvalidCondition { reason: "r" },
                C::InternalError,
                StatusCode::INTERNAL_SERVER_ERROR,
            ),
            (
                E::RequestConflict,
                C::InternalError,
                StatusCode::INTERNAL_SERVER_ERROR,
            ),
            (
                E::RetentionFull { reason: "r".into() },
                C::InternalError,
                StatusCode::INTERNAL_SERVER_ERROR,
            ),
            (
                E::ReceiptNotFound,
                C::InternalError,
                StatusCode::INTERNAL_SERVER_ERROR,
            ),
            (
                E::Corrupt("/secret/dir".into()),
                C::InternalError,
                StatusCode::INTERNAL_SERVER_ERROR,
            ),
            (
                E::Io(io::Error::other("/secret/dir")),
                C::InternalError,
                StatusCode::INTERNAL_SERVER_ERROR,
            ),
            (
                E::Db(rusqlite::Error::InvalidQuery),
                C::InternalError,
                StatusCode::INTERNAL_SERVER_ERROR,
            ),
        ];
        for (store_error, code, status) in table {
            let shown = format!("{store_error:?}");
            let s3 = to_s3(store_error);
            assert_eq!(s3.code(), &code, "{shown}");
            assert_eq!(s3.status_code(), Some(status), "{shown}");
            let message = s3.message().unwrap_or_default();
            assert!(!message.is_empty(), "{shown}");
            assert!(!message.contains("/secret"), "{shown}: {message}");
        }
    }

    /// A delete marker answers with `x-amz-delete-marker: true` and its ID,
    /// a missing key with `false`; both keep the XML content type.
    #[test]
    fn delete_markers_say_so_in_headers() {
        for e in [
            StoreError::KeyDeleted {
                bucket: "b".into(),
                key: "k".into(),
                version_id: "0123".into(),
            },
            StoreError::DeleteMarkerVersion {
                bucket: "b".into(),
                key: "k".into(),
                version_id: "0123".into(),
            },
        ] {
            let s3 = to_s3(e);
            let h = s3.headers().expect("headers");
            assert_eq!(h["x-amz-delete-marker"], "true");
            assert_eq!(h["x-amz-version-id"], "0123");
            assert_eq!(h[http::header::CONTENT_TYPE], "application/xml");
        }
        let missing = to_s3(StoreError::NoSuchKey {
            bucket: "b".into(),
            key: "k".into(),
        });
        let h = missing.headers().expect("headers");
        assert_eq!(h["x-amz-delete-marker"], "false");
        assert!(h.get("x-amz-version-id").is_none());
        assert_eq!(h[http::header::CONTENT_TYPE], "application/xml");
    }

    #[test]
    fn size_limits_say_the_size_and_the_limit() {
        let s3 = to_s3(StoreError::KeyTooLong {
            len: 1025,
            limit: 1024,
        });
        assert_eq!(
            s3.message(),
            Some("invalid object key: key is 1025 bytes; the limit is 1024")
        );
        let s3 = to_s3(StoreError::MetadataTooLarge {
            size: 2100,
            limit: 2048,
        });
        assert_eq!(
            s3.message(),
            Some("invalid metadata: user metadata is 2100 bytes; the limit is 2048")
        );
    }
}
