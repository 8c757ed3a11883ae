//! The one place where store errors become S3 errors.

use s3s::{S3Error, S3ErrorCode};
use stow_store::StoreError;

/// Maps a store error to its S3 error code, status and message.
pub fn to_s3(e: StoreError) -> S3Error {
    use StoreError as E;
    let code = match &e {
        E::NoSuchBucket { .. } => S3ErrorCode::NoSuchBucket,
        E::NoSuchKey { .. } => S3ErrorCode::NoSuchKey,
        E::BucketNotEmpty { .. } => S3ErrorCode::BucketNotEmpty,
        E::InvalidBucketName { .. } => S3ErrorCode::InvalidBucketName,
        E::InvalidKey { reason } if reason.contains("1024") => S3ErrorCode::KeyTooLongError,
        E::InvalidMetadata { reason } if reason.contains("limit is") => {
            S3ErrorCode::MetadataTooLarge
        }
        E::InvalidKey { .. }
        | E::InvalidMetadata { .. }
        | E::InvalidArgument { .. }
        | E::InvalidPartNumber(_) => S3ErrorCode::InvalidArgument,
        E::PreconditionFailed { .. } => S3ErrorCode::PreconditionFailed,
        E::Conflict => S3ErrorCode::ConditionalRequestConflict,
        E::InvalidRange { .. } => S3ErrorCode::InvalidRange,
        E::InvalidDigest { .. } => S3ErrorCode::InvalidDigest,
        E::BadDigest { .. } => S3ErrorCode::BadDigest,
        E::TooLarge { .. } => S3ErrorCode::EntityTooLarge,
        E::NoSuchUpload { .. } => S3ErrorCode::NoSuchUpload,
        E::InvalidPart { .. } => S3ErrorCode::InvalidPart,
        E::EntityTooSmall { .. } => S3ErrorCode::EntityTooSmall,
        E::QuotaExceeded { .. } => {
            let mut err = S3Error::with_message(
                S3ErrorCode::Custom("InsufficientStorage".into()),
                e.to_string(),
            );
            err.set_status_code(http::StatusCode::INSUFFICIENT_STORAGE);
            return err;
        }
        _ if e.is_no_space() => {
            // The disk, not a quota of ours: nothing was stored, and the
            // same request succeeds once space is freed.
            tracing::warn!("refused a write: {e}");
            let mut err = S3Error::with_message(
                S3ErrorCode::Custom("InsufficientStorage".into()),
                "the server's disk is full; nothing was stored",
            );
            err.set_status_code(http::StatusCode::INSUFFICIENT_STORAGE);
            return err;
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
