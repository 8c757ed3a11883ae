//! The `s3s` access check: who may do what, from the bucket's policy and
//! its canned ACLs.
//!
//! - **Bucket policy** (`crate::policy`): a matching Deny statement
//!   refuses the request (403 AccessDenied) to everyone, the owner
//!   included, except the owner's own Get/Put/DeleteBucketPolicy (as AWS
//!   spares the account's root user, so a policy never locks its owner
//!   out). A matching Allow statement opens the request to unsigned
//!   callers, unless the policy is public and the bucket's public access
//!   block has RestrictPublicBuckets. A copy is also judged as a
//!   GetObject of its source, in the source bucket.
//! - **Canned ACLs**, where no statement decides for an unsigned request:
//!   a GET/HEAD of a `public-read`/`public-read-write` object (or of a
//!   missing key in such a bucket: 404, as S3 answers whoever may list
//!   the bucket), a ListObjects (v1, v2) of such a bucket, a PutObject or
//!   browser POST upload into a `public-read-write` bucket (AllUsers
//!   WRITE) — and nothing where the bucket's ACLs grant nothing (Object
//!   Ownership BucketOwnerEnforced, or IgnorePublicAcls or
//!   RestrictPublicBuckets; see `crate::s3::ownership`).
//! - Signed requests are otherwise the owner's (SigV4 already checked
//!   them; there is one key pair). An unsigned request to a bucket that
//!   does not exist goes on to its handler, which answers NoSuchBucket, as
//!   S3 does (CreateBucket stays refused). Every other unsigned request is
//!   403 AccessDenied.
//!
//! A browser POST upload and DeleteObjects name their keys in the body:
//! they are judged in their own hooks (`post_object`, `delete_objects`),
//! once `s3s` has read them; DeleteObjects is refused whole if any key is.
//! An unsigned POST upload is also judged as soon as its fields are read
//! ([`Access::judge_form`]), before `s3s` reads its file into memory.

use std::net::IpAddr;
use std::sync::Arc;

use http::HeaderMap;
use s3s::access::{S3Access, S3AccessContext};
use s3s::dto::{DeleteObjectsInput, PostObjectInput};
use s3s::{s3_error, S3Error, S3Request, S3Result};
use stow_store::{BucketAccess, CannedAcl, ObjectBackend, StoreError};

use crate::policy::{action, Ask, Decision, Peer, Policy, RequestKeys};
use crate::s3::acls_count;

/// The access check over one backend.
pub(crate) struct Access {
    pub(crate) store: Arc<dyn ObjectBackend>,
}

fn denied() -> S3Error {
    s3_error!(AccessDenied, "Access Denied")
}

fn denied_by_policy() -> S3Error {
    s3_error!(
        AccessDenied,
        "Access Denied: the bucket policy denies this request"
    )
}

/// A bucket's policy and (for unsigned requests) its ACL settings.
struct Loaded {
    policy: Option<Policy>,
    /// The bucket's settings; `None` for signed requests (not needed) or
    /// when they cannot be read (no bucket: an unsigned caller learns
    /// nothing about what exists).
    access: Option<BucketAccess>,
    /// The stored policy could not be read back: every request but the
    /// owner's policy calls is refused (fail closed).
    broken: bool,
    /// The bucket does not exist.
    gone: bool,
}

impl Loaded {
    /// Whether an Allow of this policy counts for an unsigned caller
    /// (not where RestrictPublicBuckets takes a public policy's grants).
    fn allow_counts(&self) -> bool {
        let restrict = self
            .access
            .and_then(|a| a.public_access_block)
            .is_some_and(|b| b.restrict_public_buckets);
        !(restrict && self.policy.as_ref().is_some_and(Policy::is_public))
    }
}

/// One request (or one key of a DeleteObjects) as the check sees it.
struct Facts<'a> {
    anonymous: bool,
    op: &'a str,
    /// A write that also sets the new object's ACL (an `x-amz-acl` or
    /// `x-amz-grant-*` header, a POST form's `acl` field): S3 judges it as
    /// `s3:PutObjectAcl` too.
    sets_acl: bool,
    bucket: &'a str,
    key: Option<&'a str>,
    version: Option<String>,
    headers: &'a HeaderMap,
    query: Option<&'a str>,
    peer: Option<IpAddr>,
}

/// The `versionId` of a query string, if any: its name decoded as the
/// operation decodes it (`version%49d=` names a version too).
fn version_of(query: Option<&str>) -> Option<String> {
    query?.split('&').find_map(|pair| {
        let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
        (action::percent_decode_with(name, true) == "versionId")
            .then(|| action::percent_decode_with(value, true))
    })
}

/// A browser POST upload as [`Access::judge_form`] judges it.
pub(crate) struct FormRequest<'a> {
    pub(crate) anonymous: bool,
    pub(crate) bucket: &'a str,
    /// The key it uploads to (`${filename}` substituted).
    pub(crate) key: &'a str,
    /// The form sets the object's ACL (its `acl` field).
    pub(crate) sets_acl: bool,
    pub(crate) headers: &'a HeaderMap,
    pub(crate) query: Option<&'a str>,
    pub(crate) peer: Option<IpAddr>,
}

/// Whether a write's headers set the new object's ACL.
fn acl_headers(op: &str, headers: &HeaderMap) -> bool {
    matches!(op, "PutObject" | "CopyObject" | "CreateMultipartUpload")
        && headers
            .keys()
            .any(|h| h.as_str() == "x-amz-acl" || h.as_str().starts_with("x-amz-grant-"))
}

impl Access {
    /// Runs a read of the backend: right here where point reads are cheap
    /// (a plain store), else on a blocking thread.
    async fn read<T: Send + 'static>(
        &self,
        f: impl FnOnce(&dyn ObjectBackend) -> T + Send + 'static,
    ) -> Option<T> {
        if self.store.point_reads_are_cheap() {
            return Some(f(self.store.as_ref()));
        }
        let store = Arc::clone(&self.store);
        tokio::task::spawn_blocking(move || f(store.as_ref()))
            .await
            .ok()
    }

    async fn load(&self, bucket: &str, anonymous: bool) -> Loaded {
        let b = bucket.to_string();
        let read = self
            .read(move |store| {
                let policy = store.bucket_policy(&b);
                let access = anonymous.then(|| store.bucket_access(&b).ok()).flatten();
                (policy, access)
            })
            .await;
        let Some((policy, access)) = read else {
            return Loaded {
                policy: None,
                access: None,
                broken: true,
                gone: false,
            };
        };
        let gone = matches!(policy, Err(StoreError::NoSuchBucket { .. }));
        // No bucket (or no reading it): the operation itself answers.
        let text = policy.ok().flatten();
        let parsed = text.as_deref().map(|t| Policy::parse(t, bucket));
        let broken = matches!(parsed, Some(Err(_)));
        if broken {
            tracing::error!("bucket {bucket} has a stored policy that cannot be read");
        }
        Loaded {
            policy: parsed.and_then(Result::ok),
            access,
            broken,
            gone,
        }
    }

    /// What the bucket's policy says about `f` (reading the object's tags
    /// first where a condition needs them).
    async fn decide(&self, loaded: &Loaded, f: &Facts<'_>) -> Decision {
        let Some(policy) = &loaded.policy else {
            return if loaded.broken {
                Decision::Deny
            } else {
                Decision::Silent
            };
        };
        let tags = match f.key {
            Some(key) if policy.reads_object_tags() => {
                let (b, k, v) = (f.bucket.to_string(), key.to_string(), f.version.clone());
                self.read(move |store| {
                    store
                        .head_object_version(&b, &k, v.as_deref())
                        .map(|m| m.props.tags)
                        .ok()
                })
                .await
                .flatten()
            }
            _ => None,
        };
        let keys = RequestKeys {
            headers: f.headers,
            query: f.query,
            peer: f.peer,
            anonymous: f.anonymous,
            object_tags: tags.as_ref(),
        };
        let action = action::action(f.op, f.version.is_some());
        let resource = action::arn(f.bucket, f.key);
        policy.decide(&Ask {
            anonymous: f.anonymous,
            action: &action,
            resource: &resource,
            context: &keys,
        })
    }

    /// Judges one request: `Ok` when it may go on.
    async fn judge(&self, f: &Facts<'_>) -> S3Result<()> {
        let loaded = self.load(f.bucket, f.anonymous).await;
        self.judge_loaded(&loaded, f).await
    }

    async fn judge_loaded(&self, loaded: &Loaded, f: &Facts<'_>) -> S3Result<()> {
        // No bucket: the handler answers NoSuchBucket, to anyone (S3 does).
        if loaded.gone || (!f.anonymous && action::owner_always_may(f.op)) {
            return Ok(());
        }
        if f.anonymous && action::owner_always_may(f.op) {
            return Err(denied());
        }
        let decision = self.decide(loaded, f).await;
        if decision == Decision::Deny {
            return Err(denied_by_policy());
        }
        // Setting the new object's ACL is judged as s3:PutObjectAcl too:
        // a Deny of it refuses the write, and an unsigned write needs the
        // policy to allow it as well.
        let acl_decision = if f.sets_acl {
            let acl = Facts {
                op: "PutObjectAcl",
                sets_acl: false,
                version: None,
                ..*f
            };
            self.decide(loaded, &acl).await
        } else {
            Decision::Allow
        };
        if acl_decision == Decision::Deny {
            return Err(denied_by_policy());
        }
        let allowed = decision == Decision::Allow && acl_decision == Decision::Allow;
        if !f.anonymous || (allowed && loaded.allow_counts()) {
            return Ok(());
        }
        if self.acl_opens(loaded.access, f).await {
            Ok(())
        } else {
            Err(denied())
        }
    }

    /// Whether a canned ACL opens this unsigned request (see the module
    /// documentation).
    async fn acl_opens(&self, access: Option<BucketAccess>, f: &Facts<'_>) -> bool {
        let Some(access) = access.filter(acls_count) else {
            return false;
        };
        match (f.op, f.key) {
            ("GetObject" | "HeadObject", Some(key)) => {
                // The version read is the one whose ACL counts.
                let (b, k, v) = (f.bucket.to_string(), key.to_string(), f.version.clone());
                let read = self
                    .read(move |store| store.head_object_version(&b, &k, v.as_deref()))
                    .await;
                match read {
                    Some(Ok(m)) => m.props.acl.public_read(),
                    Some(Err(StoreError::NoSuchKey { .. } | StoreError::KeyDeleted { .. })) => {
                        access.acl.public_read()
                    }
                    _ => false,
                }
            }
            ("ListObjects" | "ListObjectsV2", None) => access.acl.public_read(),
            ("PutObject", Some(_)) | ("PostObject", _) => access.acl == CannedAcl::PublicReadWrite,
            _ => false,
        }
    }

    /// Judges a browser POST upload of `key`. Besides `s3s`'s hook, the
    /// server calls it for an unsigned form as soon as its fields are read:
    /// `s3s` reads the whole file into memory before its own check, and a
    /// caller no policy or ACL lets in must not get that far.
    pub(crate) async fn judge_form(&self, form: &FormRequest<'_>) -> S3Result<()> {
        let loaded = self.load(form.bucket, form.anonymous).await;
        if loaded.gone && form.anonymous {
            // Answered now, as the upload would be, not after the file.
            return Err(crate::errors::to_s3(StoreError::NoSuchBucket {
                bucket: form.bucket.to_string(),
            }));
        }
        self.judge_loaded(
            &loaded,
            &Facts {
                anonymous: form.anonymous,
                op: "PostObject",
                sets_acl: form.sets_acl,
                bucket: form.bucket,
                key: Some(form.key),
                version: None,
                headers: form.headers,
                query: form.query,
                peer: form.peer,
            },
        )
        .await
    }

    /// A copy's source, judged as a GetObject of it in its own bucket.
    async fn judge_copy_source(&self, f: &Facts<'_>) -> S3Result<()> {
        let Some(header) = f.headers.get("x-amz-copy-source") else {
            return Ok(());
        };
        let Ok(header) = header.to_str() else {
            // The operation refuses what it cannot read.
            return Ok(());
        };
        let Some((source, version)) = action::copy_source(header) else {
            return Ok(());
        };
        let Some((bucket, key)) = source.split_once('/') else {
            return Ok(());
        };
        self.judge(&Facts {
            op: "GetObject",
            sets_acl: false,
            bucket,
            key: Some(key),
            version,
            ..*f
        })
        .await
    }
}

#[async_trait::async_trait]
impl S3Access for Access {
    async fn check(&self, cx: &mut S3AccessContext<'_>) -> S3Result<()> {
        let anonymous = cx.credentials().is_none();
        let peer = cx.extensions_mut().get::<Peer>().map(|p| p.0);
        let op = cx.s3_op().name();
        let Some((bucket, key)) = action::target(cx.s3_path()) else {
            // ListBuckets and other service-wide calls: the owner's.
            return if anonymous { Err(denied()) } else { Ok(()) };
        };
        if op == "CreateBucket" {
            return if anonymous { Err(denied()) } else { Ok(()) };
        }
        let query = cx.uri().query();
        let f = Facts {
            anonymous,
            op,
            sets_acl: acl_headers(op, cx.headers()),
            bucket,
            key,
            version: version_of(query),
            headers: cx.headers(),
            query,
            peer,
        };
        if matches!(op, "CopyObject" | "UploadPartCopy") {
            self.judge_copy_source(&f).await?;
        }
        let loaded = self.load(bucket, anonymous).await;
        if loaded.gone || (!anonymous && loaded.policy.is_none() && !loaded.broken) {
            // No bucket: its handler answers NoSuchBucket (S3 tells anyone,
            // signed or not). Or the owner, and no policy to deny anything.
            return Ok(());
        }
        if matches!(op, "PostObject" | "DeleteObjects") {
            // Judged by key in their hooks, once the body is read; an
            // unsigned one goes on only where a policy or an ACL may
            // open it.
            let may = !anonymous
                || loaded.policy.is_some()
                || (op == "PostObject"
                    && loaded
                        .access
                        .is_some_and(|a| acls_count(&a) && a.acl == CannedAcl::PublicReadWrite));
            return if may { Ok(()) } else { Err(denied()) };
        }
        self.judge_loaded(&loaded, &f).await
    }

    async fn post_object(&self, req: &mut S3Request<PostObjectInput>) -> S3Result<()> {
        let peer = req.extensions.get::<Peer>().map(|p| p.0);
        let acl_field = req
            .extensions
            .get::<crate::post::FormUpload>()
            .is_some_and(crate::post::FormUpload::sets_acl);
        self.judge_form(&FormRequest {
            anonymous: req.credentials.is_none(),
            bucket: &req.input.bucket,
            key: &req.input.key,
            sets_acl: acl_field || req.input.acl.is_some(),
            headers: &req.headers,
            query: req.uri.query(),
            peer,
        })
        .await
    }

    async fn delete_objects(&self, req: &mut S3Request<DeleteObjectsInput>) -> S3Result<()> {
        let anonymous = req.credentials.is_none();
        let loaded = self.load(&req.input.bucket, anonymous).await;
        if !anonymous && loaded.policy.is_none() && !loaded.broken {
            return Ok(());
        }
        let peer = req.extensions.get::<Peer>().map(|p| p.0);
        for object in &req.input.delete.objects {
            let f = Facts {
                anonymous,
                op: "DeleteObject",
                sets_acl: false,
                bucket: &req.input.bucket,
                key: Some(object.key.as_str()),
                version: object.version_id.clone(),
                headers: &req.headers,
                query: None,
                peer,
            };
            self.judge_loaded(&loaded, &f).await?;
        }
        Ok(())
    }
}
