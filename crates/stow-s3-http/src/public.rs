//! Anonymous access as canned ACLs grant it: an unsigned GET/HEAD of an
//! object whose ACL is `public-read` or `public-read-write`, and an
//! unsigned ListObjects (v1, v2) of a bucket whose ACL is one of those,
//! are served; every other unsigned request is 403 AccessDenied, as before.
//! Signed requests are not looked at here (SigV4 already checked them).

use std::sync::Arc;

use s3s::access::{S3Access, S3AccessContext};
use s3s::path::S3Path;
use s3s::{s3_error, S3Result};
use stow_store::ObjectBackend;

/// The `s3s` access check: signed requests pass, unsigned ones only where
/// an ACL makes the resource public.
pub(crate) struct PublicReads {
    pub(crate) store: Arc<dyn ObjectBackend>,
}

/// What an unsigned request asks to read, if it is a read an ACL can open.
enum Wanted {
    Object { bucket: String, key: String },
    Listing { bucket: String },
}

fn wanted(op: &str, path: &S3Path) -> Option<Wanted> {
    match (op, path) {
        ("GetObject" | "HeadObject", S3Path::Object { bucket, key }) => Some(Wanted::Object {
            bucket: bucket.to_string(),
            key: key.to_string(),
        }),
        ("ListObjects" | "ListObjectsV2", S3Path::Bucket { bucket }) => Some(Wanted::Listing {
            bucket: bucket.to_string(),
        }),
        _ => None,
    }
}

#[async_trait::async_trait]
impl S3Access for PublicReads {
    async fn check(&self, cx: &mut S3AccessContext<'_>) -> S3Result<()> {
        if cx.credentials().is_some() {
            return Ok(());
        }
        let denied = || s3_error!(AccessDenied, "Access Denied");
        let Some(want) = wanted(cx.s3_op().name(), cx.s3_path()) else {
            return Err(denied());
        };
        let store = Arc::clone(&self.store);
        // A missing bucket or object, or any failure, is a refusal: an
        // anonymous caller learns nothing about what exists.
        let public = tokio::task::spawn_blocking(move || match want {
            Wanted::Object { bucket, key } => store
                .head_object(&bucket, &key)
                .is_ok_and(|m| m.props.acl.public_read()),
            Wanted::Listing { bucket } => {
                store.bucket_acl(&bucket).is_ok_and(|acl| acl.public_read())
            }
        })
        .await
        .unwrap_or(false);
        if public {
            Ok(())
        } else {
            Err(denied())
        }
    }
}
