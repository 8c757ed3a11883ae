//! ACLs and versioning as a single-owner server answers them: every bucket
//! and object belongs to the one owner with FULL_CONTROL; the canned
//! `private` ACL (what that already is) is accepted, any other grant is
//! NotImplemented; versioning was never enabled. Tools such as s3cmd
//! `info`/`setacl` and SDK uploads sending `ACL=private` work.

use s3s::dto::*;
use s3s::{s3_error, S3Request, S3Response, S3Result};

use super::StowS3;

fn owner() -> Owner {
    Owner {
        display_name: Some("stow".into()),
        id: Some("stow".into()),
    }
}

fn owner_full_control() -> Grants {
    vec![Grant {
        grantee: Some(Grantee {
            display_name: Some("stow".into()),
            email_address: None,
            id: Some("stow".into()),
            type_: Type::from_static(Type::CANONICAL_USER),
            uri: None,
        }),
        permission: Some(Permission::from_static(Permission::FULL_CONTROL)),
    }]
}

/// Refuses a canned ACL other than `private` (None means none was sent).
pub(super) fn check_canned(acl: Option<&str>) -> S3Result<()> {
    match acl {
        // On a one-owner server the bucket-owner ACLs are what private is.
        None | Some("private" | "bucket-owner-full-control" | "bucket-owner-read") => Ok(()),
        Some(other) => Err(s3_error!(
            NotImplemented,
            "only the canned ACL \"private\" is supported (got {other:?}): this server has one owner"
        )),
    }
}

/// Whether a Put*Acl input names any grant header (both inputs name them
/// alike).
macro_rules! grant_headers {
    ($input:expr) => {
        $input.grant_full_control.is_some()
            || $input.grant_read.is_some()
            || $input.grant_read_acp.is_some()
            || $input.grant_write.is_some()
            || $input.grant_write_acp.is_some()
    };
}

/// Refuses explicit grants and policies (only the owner's FULL_CONTROL,
/// which every object has, is accepted).
fn check_grants(any_grant_header: bool, policy: Option<&AccessControlPolicy>) -> S3Result<()> {
    let only_owner = policy.is_none_or(|p| {
        p.grants.as_ref().is_none_or(|g| {
            g.iter().all(|grant| {
                grant.permission.as_ref().map(|p| p.as_str()) == Some(Permission::FULL_CONTROL)
                    && grant
                        .grantee
                        .as_ref()
                        .and_then(|g| g.id.as_deref())
                        .is_some_and(|id| id == "stow")
            })
        })
    });
    if any_grant_header || !only_owner {
        return Err(s3_error!(
            NotImplemented,
            "grants are not supported: this server has one owner with FULL_CONTROL"
        ));
    }
    Ok(())
}

pub(super) async fn get_bucket_acl(
    svc: &StowS3,
    req: S3Request<GetBucketAclInput>,
) -> S3Result<S3Response<GetBucketAclOutput>> {
    let bucket = req.input.bucket;
    svc.point_read(move |store| store.head_bucket(&bucket))
        .await?;
    Ok(S3Response::new(GetBucketAclOutput {
        grants: Some(owner_full_control()),
        owner: Some(owner()),
    }))
}

pub(super) async fn get_object_acl(
    svc: &StowS3,
    req: S3Request<GetObjectAclInput>,
) -> S3Result<S3Response<GetObjectAclOutput>> {
    let (bucket, key) = (req.input.bucket, req.input.key);
    svc.point_read(move |store| store.head_object(&bucket, &key))
        .await?;
    Ok(S3Response::new(GetObjectAclOutput {
        grants: Some(owner_full_control()),
        owner: Some(owner()),
        ..Default::default()
    }))
}

pub(super) async fn put_bucket_acl(
    svc: &StowS3,
    req: S3Request<PutBucketAclInput>,
) -> S3Result<S3Response<PutBucketAclOutput>> {
    svc.writable()?;
    let input = req.input;
    check_canned(input.acl.as_ref().map(|a| a.as_str()))?;
    check_grants(grant_headers!(input), input.access_control_policy.as_ref())?;
    let bucket = input.bucket;
    svc.point_read(move |store| store.head_bucket(&bucket))
        .await?;
    Ok(S3Response::new(PutBucketAclOutput {}))
}

pub(super) async fn put_object_acl(
    svc: &StowS3,
    req: S3Request<PutObjectAclInput>,
) -> S3Result<S3Response<PutObjectAclOutput>> {
    svc.writable()?;
    let input = req.input;
    check_canned(input.acl.as_ref().map(|a| a.as_str()))?;
    check_grants(grant_headers!(input), input.access_control_policy.as_ref())?;
    let (bucket, key) = (input.bucket, input.key);
    svc.point_read(move |store| store.head_object(&bucket, &key))
        .await?;
    Ok(S3Response::new(PutObjectAclOutput::default()))
}

pub(super) async fn get_bucket_versioning(
    svc: &StowS3,
    req: S3Request<GetBucketVersioningInput>,
) -> S3Result<S3Response<GetBucketVersioningOutput>> {
    let bucket = req.input.bucket;
    svc.point_read(move |store| store.head_bucket(&bucket))
        .await?;
    // Never enabled: no Status element at all, as on AWS.
    Ok(S3Response::new(GetBucketVersioningOutput::default()))
}
