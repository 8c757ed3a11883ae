//! The one place where a request becomes what a policy names: its S3
//! action (`s3:GetObject`, …) and its resource ARN.

use s3s::path::S3Path;

/// The S3 action an operation (`s3s`'s name for it) stands for;
/// `versioned` when the request names a version (`versionId`), which
/// several actions have a `…Version…` form for.
pub(crate) fn action(op: &str, versioned: bool) -> String {
    let v = |plain: &str, version: &str| (if versioned { version } else { plain }).to_string();
    let name = match op {
        "GetObject" | "HeadObject" => return v("s3:GetObject", "s3:GetObjectVersion"),
        "GetObjectAttributes" => {
            return v("s3:GetObjectAttributes", "s3:GetObjectVersionAttributes")
        }
        "DeleteObject" | "DeleteObjects" => return v("s3:DeleteObject", "s3:DeleteObjectVersion"),
        "GetObjectTagging" => return v("s3:GetObjectTagging", "s3:GetObjectVersionTagging"),
        "PutObjectTagging" => return v("s3:PutObjectTagging", "s3:PutObjectVersionTagging"),
        "DeleteObjectTagging" => {
            return v("s3:DeleteObjectTagging", "s3:DeleteObjectVersionTagging")
        }
        "GetObjectAcl" => return v("s3:GetObjectAcl", "s3:GetObjectVersionAcl"),
        "PutObjectAcl" => return v("s3:PutObjectAcl", "s3:PutObjectVersionAcl"),
        "PutObject"
        | "PostObject"
        | "CopyObject"
        | "CreateMultipartUpload"
        | "UploadPart"
        | "UploadPartCopy"
        | "CompleteMultipartUpload" => "PutObject",
        "ListParts" => "ListMultipartUploadParts",
        "ListMultipartUploads" => "ListBucketMultipartUploads",
        "ListObjects" | "ListObjectsV2" | "HeadBucket" => "ListBucket",
        "ListObjectVersions" => "ListBucketVersions",
        "ListBuckets" => "ListAllMyBuckets",
        "GetBucketCors" => "GetBucketCORS",
        "PutBucketCors" | "DeleteBucketCors" => "PutBucketCORS",
        "GetBucketLifecycleConfiguration" => "GetLifecycleConfiguration",
        "PutBucketLifecycleConfiguration" | "DeleteBucketLifecycle" => "PutLifecycleConfiguration",
        "DeleteBucketTagging" => "PutBucketTagging",
        "GetPublicAccessBlock" => "GetBucketPublicAccessBlock",
        "PutPublicAccessBlock" | "DeletePublicAccessBlock" => "PutBucketPublicAccessBlock",
        "DeleteBucketOwnershipControls" => "PutBucketOwnershipControls",
        "GetObjectLockConfiguration" => "GetBucketObjectLockConfiguration",
        "PutObjectLockConfiguration" => "PutBucketObjectLockConfiguration",
        "GetBucketEncryption" => "GetEncryptionConfiguration",
        "PutBucketEncryption" | "DeleteBucketEncryption" => "PutEncryptionConfiguration",
        // The rest are named as their operation: GetBucketAcl,
        // PutBucketVersioning, GetBucketPolicy, AbortMultipartUpload,
        // GetObjectRetention, …
        other => other,
    };
    format!("s3:{name}")
}

/// The operations only the bucket's owner may call: AWS lets the owner's
/// root user get, put and delete the policy even where the policy denies
/// it, so a policy can never lock its owner out, and lets nobody else,
/// whatever the policy allows (an unsigned caller could otherwise lift a
/// Deny that an `Allow "*" s3:*` sits beside).
pub(crate) fn owner_always_may(op: &str) -> bool {
    matches!(
        op,
        "GetBucketPolicy" | "PutBucketPolicy" | "DeleteBucketPolicy"
    )
}

/// The ARN of a bucket, or of an object in it.
pub(crate) fn arn(bucket: &str, key: Option<&str>) -> String {
    match key {
        Some(k) => format!("arn:aws:s3:::{bucket}/{k}"),
        None => format!("arn:aws:s3:::{bucket}"),
    }
}

/// The bucket and key a request path names (`None`: the service itself).
pub(crate) fn target(path: &S3Path) -> Option<(&str, Option<&str>)> {
    match path {
        S3Path::Root => None,
        S3Path::Bucket { bucket } => Some((bucket.as_ref(), None)),
        S3Path::Object { bucket, key } => Some((bucket.as_ref(), Some(key.as_ref()))),
    }
}

/// The source of a copy from its `x-amz-copy-source` header, read by the
/// parser the operation itself uses (s3s's: only `?versionId=` ends the
/// key, so a key holding `?` is judged as the very key copied):
/// `"bucket/key"` decoded, and the version named. `None` when the
/// operation refuses the header (or names an access point).
pub(crate) fn copy_source(header: &str) -> Option<(String, Option<String>)> {
    match s3s::dto::CopySource::parse(header).ok()? {
        s3s::dto::CopySource::Bucket {
            bucket,
            key,
            version_id,
        } => Some((format!("{bucket}/{key}"), version_id.map(String::from))),
        _ => None,
    }
}

/// Decodes `%XX` (and, with `form`, `+` as a space); a malformed escape is
/// kept as it is (the operation itself refuses what it cannot read).
pub(crate) fn percent_decode_with(s: &str, form: bool) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = (bytes[i] == b'%')
            .then(|| s.get(i + 1..i + 3))
            .flatten()
            .filter(|h| h.bytes().all(|b| b.is_ascii_hexdigit()))
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (_, Some(b)) => {
                out.push(b);
                i += 3;
            }
            (b'+', None) if form => {
                out.push(b' ');
                i += 1;
            }
            (b, None) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn actions_by_operation() {
        assert_eq!(action("HeadObject", false), "s3:GetObject");
        assert_eq!(action("GetObject", true), "s3:GetObjectVersion");
        assert_eq!(action("UploadPartCopy", false), "s3:PutObject");
        assert_eq!(action("ListObjectsV2", false), "s3:ListBucket");
        assert_eq!(
            action("DeletePublicAccessBlock", false),
            "s3:PutBucketPublicAccessBlock"
        );
        assert_eq!(action("GetBucketAcl", false), "s3:GetBucketAcl");
        assert_eq!(
            action("DeleteBucketEncryption", false),
            "s3:PutEncryptionConfiguration"
        );
        assert_eq!(
            action("PutBucketEncryption", false),
            "s3:PutEncryptionConfiguration"
        );
        assert_eq!(
            action("GetBucketEncryption", false),
            "s3:GetEncryptionConfiguration"
        );
        assert_eq!(
            action("PutObjectTagging", true),
            "s3:PutObjectVersionTagging"
        );
    }

    #[test]
    fn copy_sources() {
        assert_eq!(
            copy_source("bkt/k%20x"),
            Some(("bkt/k x".to_string(), None))
        );
        assert_eq!(
            copy_source("/bkt/a%2Fb?versionId=v1"),
            Some(("bkt/a/b".to_string(), Some("v1".to_string())))
        );
        // Only `?versionId=` ends the key: `x?y` is the key copied, so it
        // is the key judged (not `x`).
        assert_eq!(copy_source("src/x?y"), Some(("src/x?y".to_string(), None)));
        // What the operation refuses is not judged here (a bucket name
        // too short).
        assert_eq!(copy_source("b/k"), None);
        assert_eq!(percent_decode_with("a+b%3D%zz", true), "a b=%zz");
    }
}
