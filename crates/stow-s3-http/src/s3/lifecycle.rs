//! Put/Get/DeleteBucketLifecycleConfiguration: a bucket's lifecycle rules,
//! converted to and from the store's [`LifecycleConfig`] (which validates
//! them as S3 does and does the expiring), and the `x-amz-expiration`
//! header of the answers about a current version.

use s3s::dto::*;
use s3s::{s3_error, S3Request, S3Response, S3Result};
use stow_store::{
    Expiration, FilterAnd, FilterTag, LifecycleConfig, LifecycleFilter, NoncurrentExpiration,
    ObjectBackend, ObjectExpiration, ObjectMeta, RuleStatus, StoreError,
};

use super::convert::{timestamp, unix_ns};
use super::{blocking, StowS3};
use crate::errors::to_s3;

fn tag_to_store(tag: Tag) -> FilterTag {
    FilterTag {
        key: tag.key.unwrap_or_default(),
        value: tag.value.unwrap_or_default(),
    }
}

fn tag_from_store(tag: FilterTag) -> Tag {
    Tag {
        key: Some(tag.key),
        value: Some(tag.value),
    }
}

fn filter_to_store(f: LifecycleRuleFilter) -> LifecycleFilter {
    LifecycleFilter {
        prefix: f.prefix,
        tag: f.tag.map(tag_to_store),
        size_greater_than: f.object_size_greater_than,
        size_less_than: f.object_size_less_than,
        and: f.and.map(|a| FilterAnd {
            prefix: a.prefix,
            tags: a
                .tags
                .unwrap_or_default()
                .into_iter()
                .map(tag_to_store)
                .collect(),
            size_greater_than: a.object_size_greater_than,
            size_less_than: a.object_size_less_than,
        }),
    }
}

fn filter_from_store(f: LifecycleFilter) -> LifecycleRuleFilter {
    LifecycleRuleFilter {
        prefix: f.prefix,
        tag: f.tag.map(tag_from_store),
        object_size_greater_than: f.size_greater_than,
        object_size_less_than: f.size_less_than,
        and: f.and.map(|a| LifecycleRuleAndOperator {
            prefix: a.prefix,
            tags: (!a.tags.is_empty()).then(|| a.tags.into_iter().map(tag_from_store).collect()),
            object_size_greater_than: a.size_greater_than,
            object_size_less_than: a.size_less_than,
        }),
    }
}

fn class(c: Option<TransitionStorageClass>) -> String {
    c.map(|c| c.as_str().to_string()).unwrap_or_default()
}

fn rule_to_store(rule: LifecycleRule) -> Result<stow_store::LifecycleRule, StoreError> {
    Ok(stow_store::LifecycleRule {
        id: rule.id,
        status: RuleStatus::parse(rule.status.as_str())?,
        prefix: rule.prefix,
        filter: rule.filter.map(filter_to_store),
        expiration: rule.expiration.map(|e| Expiration {
            days: e.days.map(i64::from),
            date_ns: e.date.as_ref().map(unix_ns),
            expired_object_delete_marker: e.expired_object_delete_marker,
        }),
        noncurrent_expiration: rule
            .noncurrent_version_expiration
            .map(|n| NoncurrentExpiration {
                noncurrent_days: n.noncurrent_days.map(i64::from),
                newer_noncurrent_versions: n.newer_noncurrent_versions.map(i64::from),
            }),
        abort_upload_days: rule
            .abort_incomplete_multipart_upload
            .map(|a| a.days_after_initiation.map_or(0, i64::from)),
        transitions: rule
            .transitions
            .unwrap_or_default()
            .into_iter()
            .map(|t| stow_store::Transition {
                days: t.days.map(i64::from),
                date_ns: t.date.as_ref().map(unix_ns),
                newer_noncurrent_versions: None,
                storage_class: class(t.storage_class),
            })
            .collect(),
        noncurrent_transitions: rule
            .noncurrent_version_transitions
            .unwrap_or_default()
            .into_iter()
            .map(|t| stow_store::Transition {
                days: t.noncurrent_days.map(i64::from),
                date_ns: None,
                newer_noncurrent_versions: t.newer_noncurrent_versions.map(i64::from),
                storage_class: class(t.storage_class),
            })
            .collect(),
    })
}

/// A stored count back in S3's `i32` (validation kept them in range).
fn int(v: i64) -> i32 {
    i32::try_from(v).unwrap_or(i32::MAX)
}

fn list<T>(v: Vec<T>) -> Option<Vec<T>> {
    (!v.is_empty()).then_some(v)
}

fn rule_from_store(rule: stow_store::LifecycleRule) -> LifecycleRule {
    LifecycleRule {
        id: rule.id,
        status: ExpirationStatus::from(rule.status.as_str().to_string()),
        prefix: rule.prefix,
        filter: rule.filter.map(filter_from_store),
        expiration: rule.expiration.map(|e| LifecycleExpiration {
            days: e.days.map(int),
            date: e.date_ns.map(timestamp),
            expired_object_delete_marker: e.expired_object_delete_marker,
        }),
        noncurrent_version_expiration: rule.noncurrent_expiration.map(|n| {
            NoncurrentVersionExpiration {
                noncurrent_days: n.noncurrent_days.map(int),
                newer_noncurrent_versions: n.newer_noncurrent_versions.map(int),
            }
        }),
        abort_incomplete_multipart_upload: rule.abort_upload_days.map(|d| {
            AbortIncompleteMultipartUpload {
                days_after_initiation: Some(int(d)),
            }
        }),
        transitions: list(
            rule.transitions
                .into_iter()
                .map(|t| s3s::dto::Transition {
                    days: t.days.map(int),
                    date: t.date_ns.map(timestamp),
                    storage_class: Some(TransitionStorageClass::from(t.storage_class)),
                })
                .collect(),
        ),
        noncurrent_version_transitions: list(
            rule.noncurrent_transitions
                .into_iter()
                .map(|t| NoncurrentVersionTransition {
                    noncurrent_days: t.days.map(int),
                    newer_noncurrent_versions: t.newer_noncurrent_versions.map(int),
                    storage_class: Some(TransitionStorageClass::from(t.storage_class)),
                })
                .collect(),
        ),
    }
}

pub(super) async fn put_bucket_lifecycle_configuration(
    svc: &StowS3,
    req: S3Request<PutBucketLifecycleConfigurationInput>,
) -> S3Result<S3Response<PutBucketLifecycleConfigurationOutput>> {
    svc.writable()?;
    let input = req.input;
    let Some(document) = input.lifecycle_configuration else {
        return Err(s3_error!(
            MalformedXML,
            "a lifecycle configuration needs a LifecycleConfiguration document"
        ));
    };
    let rules = document
        .rules
        .into_iter()
        .map(rule_to_store)
        .collect::<Result<Vec<_>, _>>()
        .map_err(to_s3)?;
    let config = LifecycleConfig {
        rules,
        transition_minimum_size: input
            .transition_default_minimum_object_size
            .map(|s| s.as_str().to_string()),
    };
    let store = svc.store.clone();
    let bucket = input.bucket;
    let stored = blocking(move || store.set_bucket_lifecycle(&bucket, Some(config))).await?;
    Ok(S3Response::new(PutBucketLifecycleConfigurationOutput {
        transition_default_minimum_object_size: stored
            .and_then(|c| c.transition_minimum_size)
            .map(TransitionDefaultMinimumObjectSize::from),
    }))
}

pub(super) async fn get_bucket_lifecycle_configuration(
    svc: &StowS3,
    req: S3Request<GetBucketLifecycleConfigurationInput>,
) -> S3Result<S3Response<GetBucketLifecycleConfigurationOutput>> {
    let bucket = req.input.bucket;
    let config = svc
        .point_read(move |store| store.bucket_lifecycle(&bucket))
        .await?;
    let Some(config) = config else {
        return Err(s3_error!(
            NoSuchLifecycleConfiguration,
            "The lifecycle configuration does not exist"
        ));
    };
    Ok(S3Response::new(GetBucketLifecycleConfigurationOutput {
        rules: Some(config.rules.into_iter().map(rule_from_store).collect()),
        // S3 names its default when none was set.
        transition_default_minimum_object_size: Some(TransitionDefaultMinimumObjectSize::from(
            config
                .transition_minimum_size
                .unwrap_or_else(|| "all_storage_classes_128K".into()),
        )),
    }))
}

pub(super) async fn delete_bucket_lifecycle(
    svc: &StowS3,
    req: S3Request<DeleteBucketLifecycleInput>,
) -> S3Result<S3Response<DeleteBucketLifecycleOutput>> {
    svc.writable()?;
    let store = svc.store.clone();
    let bucket = req.input.bucket;
    blocking(move || store.set_bucket_lifecycle(&bucket, None)).await?;
    Ok(S3Response::new(DeleteBucketLifecycleOutput {}))
}

/// S3's `x-amz-expiration` value: `expiry-date="<HTTP date>",
/// rule-id="<ID, URL-encoded>"`.
pub(super) fn expiration_header(e: &ObjectExpiration) -> Option<String> {
    let mut date = Vec::new();
    timestamp(e.at_ns)
        .format(TimestampFormat::HttpDate, &mut date)
        .ok()?;
    let date = String::from_utf8(date).ok()?;
    let mut id = String::with_capacity(e.rule_id.len());
    for b in e.rule_id.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            id.push(b as char);
        } else {
            id.push_str(&format!("%{b:02X}"));
        }
    }
    Some(format!("expiry-date=\"{date}\", rule-id=\"{id}\""))
}

/// The `x-amz-expiration` of an answer about `meta` as the current
/// version of its key (a failure to work it out only leaves it out).
pub(super) fn expiration_of(store: &dyn ObjectBackend, meta: &ObjectMeta) -> Option<String> {
    match store.object_expiration(meta) {
        Ok(e) => e.as_ref().and_then(expiration_header),
        Err(e) => {
            tracing::warn!(error = %e, "cannot work out x-amz-expiration");
            None
        }
    }
}

/// S3's `x-amz-abort-date` and `x-amz-abort-rule-id` of a new upload
/// (a failure to work them out only leaves them out).
pub(super) fn abort_of(
    store: &dyn ObjectBackend,
    bucket: &str,
    key: &str,
    initiated_ns: i64,
) -> (Option<Timestamp>, Option<String>) {
    match store.upload_abort(bucket, key, initiated_ns) {
        Ok(Some(e)) => (Some(timestamp(e.at_ns)), Some(e.rule_id)),
        Ok(None) => (None, None),
        Err(e) => {
            tracing::warn!(error = %e, "cannot work out x-amz-abort-date");
            (None, None)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_header_is_s3s() {
        let e = ObjectExpiration {
            at_ns: 1_356_048_000 * 1_000_000_000,
            rule_id: "picture deletion/1".into(),
        };
        assert_eq!(
            expiration_header(&e).unwrap(),
            "expiry-date=\"Fri, 21 Dec 2012 00:00:00 GMT\", rule-id=\"picture%20deletion%2F1\""
        );
    }
}
