//! ACLs as a single-owner server answers them: every bucket
//! and object belongs to the one owner with FULL_CONTROL, and may carry one
//! of the canned ACLs `private`, `public-read`, `public-read-write`,
//! `authenticated-read` (kept by the store, answered by Get*Acl as AWS
//! writes them out, honoured for anonymous reads in `crate::access`);
//! other grants are NotImplemented.

use s3s::dto::*;
use s3s::{s3_error, S3Request, S3Response, S3Result};
use stow_store::CannedAcl;

use super::{blocking, StowS3};

/// The one owner's ID and display name.
pub(crate) const OWNER: &str = "stow";
/// S3's group of everyone, anonymous requests included.
const ALL_USERS: &str = "http://acs.amazonaws.com/groups/global/AllUsers";
/// S3's group of every signed-in AWS account.
const AUTHENTICATED_USERS: &str = "http://acs.amazonaws.com/groups/global/AuthenticatedUsers";

/// The one owner of every bucket and object.
pub(super) fn owner() -> Owner {
    Owner {
        display_name: Some(OWNER.into()),
        id: Some(OWNER.into()),
    }
}

fn grant(grantee: Grantee, permission: &'static str) -> Grant {
    Grant {
        grantee: Some(grantee),
        permission: Some(Permission::from_static(permission)),
    }
}

fn group(uri: &str) -> Grantee {
    Grantee {
        display_name: None,
        email_address: None,
        id: None,
        type_: Type::from_static(Type::GROUP),
        uri: Some(uri.into()),
    }
}

/// The grants a canned ACL stands for, in the order AWS lists them (and
/// ceph/s3-tests expects): the group's, then the owner's FULL_CONTROL.
pub(super) fn grants_of(acl: CannedAcl) -> Grants {
    let mut grants = group_grants(acl);
    grants.push(grant(
        Grantee {
            display_name: Some(OWNER.into()),
            email_address: None,
            id: Some(OWNER.into()),
            type_: Type::from_static(Type::CANONICAL_USER),
            uri: None,
        },
        Permission::FULL_CONTROL,
    ));
    grants
}

/// The grants a canned ACL adds to the owner's.
fn group_grants(acl: CannedAcl) -> Grants {
    match acl {
        CannedAcl::Private => vec![],
        CannedAcl::PublicRead => vec![grant(group(ALL_USERS), Permission::READ)],
        CannedAcl::PublicReadWrite => vec![
            grant(group(ALL_USERS), Permission::READ),
            grant(group(ALL_USERS), Permission::WRITE),
        ],
        CannedAcl::AuthenticatedRead => {
            vec![grant(group(AUTHENTICATED_USERS), Permission::READ)]
        }
    }
}

/// The canned ACL a request names (None: none was sent, private).
pub(super) fn canned(acl: Option<&str>) -> S3Result<CannedAcl> {
    match acl {
        // On a one-owner server the bucket-owner ACLs are what private is.
        None | Some("bucket-owner-full-control" | "bucket-owner-read") => Ok(CannedAcl::Private),
        Some(name) => CannedAcl::parse(name).ok_or_else(|| {
            s3_error!(
                NotImplemented,
                "the canned ACL {name:?} is not supported; use private, public-read, public-read-write or authenticated-read"
            )
        }),
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

/// The canned ACL a Put*Acl request sets: its `x-amz-acl`, or an
/// AccessControlPolicy whose grants are exactly a canned ACL's (the
/// owner's FULL_CONTROL, which is always there, may be listed or not).
/// Grant headers and any other grant are NotImplemented.
fn requested_acl(
    header: Option<&str>,
    any_grant_header: bool,
    policy: Option<&AccessControlPolicy>,
) -> S3Result<CannedAcl> {
    if any_grant_header {
        return Err(s3_error!(
            NotImplemented,
            "grant headers are not supported; use a canned ACL (x-amz-acl)"
        ));
    }
    let Some(policy) = policy else {
        return canned(header);
    };
    let mut wanted: Vec<(Option<&str>, &str)> = Vec::new();
    for g in policy.grants.iter().flatten() {
        let permission = g.permission.as_ref().map_or("", |p| p.as_str());
        let grantee = g.grantee.as_ref();
        // A grantee that names nobody this server knows: refused as AWS
        // refuses an unknown account (there is one owner here).
        if let Some(id) = grantee
            .and_then(|g| g.id.as_deref())
            .filter(|id| *id != OWNER)
        {
            return Err(s3_error!(InvalidArgument, "Invalid id: {id:?}"));
        }
        if let Some(email) = grantee.and_then(|g| g.email_address.as_deref()) {
            return Err(s3_error!(
                UnresolvableGrantByEmailAddress,
                "The e-mail address you provided does not match any account on record: {email:?}"
            ));
        }
        let is_owner = grantee.and_then(|g| g.id.as_deref()) == Some(OWNER);
        if is_owner && permission == Permission::FULL_CONTROL {
            continue;
        }
        wanted.push((grantee.and_then(|g| g.uri.as_deref()), permission));
    }
    wanted.sort_unstable();
    wanted.dedup();
    CannedAcl::ALL
        .into_iter()
        .find(|acl| {
            let grants = group_grants(*acl);
            let mut have: Vec<(Option<&str>, &str)> = grants
                .iter()
                .map(|g| {
                    (
                        g.grantee.as_ref().and_then(|g| g.uri.as_deref()),
                        g.permission.as_ref().map_or("", |p| p.as_str()),
                    )
                })
                .collect();
            have.sort_unstable();
            have == wanted
        })
        .ok_or_else(|| {
            s3_error!(
                NotImplemented,
                "only grants that a canned ACL stands for are supported: this server has one owner"
            )
        })
}

pub(super) async fn get_bucket_acl(
    svc: &StowS3,
    req: S3Request<GetBucketAclInput>,
) -> S3Result<S3Response<GetBucketAclOutput>> {
    let bucket = req.input.bucket;
    let acl = svc
        .point_read(move |store| store.bucket_acl(&bucket))
        .await?;
    Ok(S3Response::new(GetBucketAclOutput {
        grants: Some(grants_of(acl)),
        owner: Some(owner()),
    }))
}

pub(super) async fn get_object_acl(
    svc: &StowS3,
    req: S3Request<GetObjectAclInput>,
) -> S3Result<S3Response<GetObjectAclOutput>> {
    let (bucket, key, version) = (req.input.bucket, req.input.key, req.input.version_id);
    let meta = svc
        .point_read(move |store| store.head_object_version(&bucket, &key, version.as_deref()))
        .await?;
    Ok(S3Response::new(GetObjectAclOutput {
        grants: Some(grants_of(meta.props.acl)),
        owner: Some(owner()),
        ..Default::default()
    }))
}

/// The canned ACL a Put*Acl request sets on `bucket` (or an object in
/// it), as its Object Ownership and public access block allow: with ACLs
/// disabled (BucketOwnerEnforced) anything but `bucket-owner-full-control`
/// or a policy granting the owner alone is AccessControlListNotSupported,
/// a named `private` and grant headers included; a public ACL
/// under BlockPublicAcls is AccessDenied.
async fn allowed_acl(
    svc: &StowS3,
    bucket: &str,
    header: Option<&str>,
    any_grant_header: bool,
    policy: Option<&AccessControlPolicy>,
) -> S3Result<CannedAcl> {
    let requested = requested_acl(header, any_grant_header, policy);
    let b = bucket.to_string();
    let access = svc.point_read(move |store| store.bucket_access(&b)).await?;
    let disabled = access
        .ownership
        .is_some_and(stow_store::ObjectOwnership::acls_disabled);
    if disabled
        && (any_grant_header
            || super::ownership::named_beyond_owner(header)
            || !requested.as_ref().is_ok_and(|a| a.is_private()))
    {
        return Err(super::ownership::acls_disabled());
    }
    let acl = requested?;
    super::ownership::acl_refusal(&access, acl).map_or(Ok(acl), Err)
}

pub(super) async fn put_bucket_acl(
    svc: &StowS3,
    req: S3Request<PutBucketAclInput>,
) -> S3Result<S3Response<PutBucketAclOutput>> {
    svc.writable()?;
    let input = req.input;
    let acl = allowed_acl(
        svc,
        &input.bucket,
        input.acl.as_ref().map(|a| a.as_str()),
        grant_headers!(input),
        input.access_control_policy.as_ref(),
    )
    .await?;
    let store = svc.store.clone();
    let bucket = input.bucket;
    blocking(move || store.set_bucket_acl(&bucket, acl)).await?;
    Ok(S3Response::new(PutBucketAclOutput {}))
}

pub(super) async fn put_object_acl(
    svc: &StowS3,
    req: S3Request<PutObjectAclInput>,
) -> S3Result<S3Response<PutObjectAclOutput>> {
    svc.writable()?;
    let input = req.input;
    let acl = allowed_acl(
        svc,
        &input.bucket,
        input.acl.as_ref().map(|a| a.as_str()),
        grant_headers!(input),
        input.access_control_policy.as_ref(),
    )
    .await?;
    let (bucket, key, version) = (input.bucket, input.key, input.version_id);
    let store = svc.store.clone();
    blocking(move || store.set_version_acl(&bucket, &key, version.as_deref(), acl)).await?;
    Ok(S3Response::new(PutObjectAclOutput::default()))
}
