//! Anonymous access as canned ACLs grant it: an unsigned GET/HEAD of an
//! object whose ACL is `public-read` or `public-read-write`, and an
//! unsigned ListObjects (v1, v2) of a bucket whose ACL is one of those,
//! are served; so is a GET/HEAD of a missing key in such a bucket (404, as
//! S3 answers whoever may list the bucket), and a PutObject or browser
//! POST upload into a `public-read-write` bucket (AllUsers WRITE). Every
//! other unsigned request is 403 AccessDenied, and so is every unsigned
//! request to a bucket whose ACLs grant nothing (Object Ownership
//! BucketOwnerEnforced, or a public access block with IgnorePublicAcls or
//! RestrictPublicBuckets; see `crate::s3::ownership`). An unsigned request
//! to a bucket that does not exist goes on to its handler, which answers
//! NoSuchBucket, as S3 does. Signed requests are not looked at here (SigV4
//! already checked them).

use std::sync::Arc;

use s3s::access::{S3Access, S3AccessContext};
use s3s::path::S3Path;
use s3s::{s3_error, S3Result};
use stow_store::{CannedAcl, ObjectBackend, StoreError};

use crate::s3::acls_count;

/// The `s3s` access check: signed requests pass, unsigned ones only where
/// an ACL makes the resource public.
pub(crate) struct PublicReads {
    pub(crate) store: Arc<dyn ObjectBackend>,
}

/// What an unsigned request asks to read, if it is a read an ACL can open.
enum Wanted {
    Object { bucket: String, key: String },
    Listing { bucket: String },
    Write { bucket: String },
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
        ("PutObject", S3Path::Object { bucket, .. })
        | ("PostObject", S3Path::Bucket { bucket }) => Some(Wanted::Write {
            bucket: bucket.to_string(),
        }),
        _ => None,
    }
}

/// Whether the request names a bucket that does not exist (and nothing
/// else failed while finding out).
async fn bucket_is_gone(store: &Arc<dyn ObjectBackend>, path: &S3Path) -> bool {
    let bucket = match path {
        S3Path::Bucket { bucket } | S3Path::Object { bucket, .. } => bucket.to_string(),
        S3Path::Root => return false,
    };
    let store = Arc::clone(store);
    tokio::task::spawn_blocking(move || {
        matches!(
            store.head_bucket(&bucket),
            Err(StoreError::NoSuchBucket { .. })
        )
    })
    .await
    .unwrap_or(false)
}

#[async_trait::async_trait]
impl S3Access for PublicReads {
    async fn check(&self, cx: &mut S3AccessContext<'_>) -> S3Result<()> {
        if cx.credentials().is_some() {
            return Ok(());
        }
        let denied = || s3_error!(AccessDenied, "Access Denied");
        let op = cx.s3_op().name();
        if op != "CreateBucket" && bucket_is_gone(&self.store, cx.s3_path()).await {
            // S3 answers NoSuchBucket (404) to anyone, signed or not, for a
            // bucket that does not exist; the operation's handler says so
            // (CreateBucket, the one operation that makes it exist, stays
            // refused).
            return Ok(());
        }
        let Some(want) = wanted(op, cx.s3_path()) else {
            return Err(denied());
        };
        let store = Arc::clone(&self.store);
        // Any failure is a refusal.
        let public = tokio::task::spawn_blocking(move || {
            let bucket = match &want {
                Wanted::Object { bucket, .. }
                | Wanted::Listing { bucket }
                | Wanted::Write { bucket } => bucket,
            };
            // ACLs grant nothing where the bucket's Object Ownership or
            // public access block says so (crate::s3::ownership).
            let Ok(access) = store.bucket_access(bucket) else {
                return false;
            };
            if !acls_count(&access) {
                return false;
            }
            match want {
                Wanted::Object { bucket, key } => match store.head_object(&bucket, &key) {
                    Ok(m) => m.props.acl.public_read(),
                    Err(StoreError::NoSuchKey { .. } | StoreError::KeyDeleted { .. }) => {
                        access.acl.public_read()
                    }
                    Err(_) => false,
                },
                Wanted::Listing { .. } => access.acl.public_read(),
                Wanted::Write { .. } => access.acl == CannedAcl::PublicReadWrite,
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
