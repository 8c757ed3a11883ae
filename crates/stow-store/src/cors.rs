//! A bucket's CORS rules (`buckets.cors`, JSON; NULL = none): validated
//! as S3's PutBucketCors validates them, stored and returned whole. Which
//! rule answers a browser's request is the protocol's business; the store
//! only keeps the rules.

use rusqlite::{params, OptionalExtension};
use serde::{Deserialize, Serialize};

use crate::error::{Result, StoreError};
use crate::store::Store;
use crate::validate;

/// The most rules one bucket holds (S3's limit).
pub const MAX_CORS_RULES: usize = 100;
/// The longest rule ID, in bytes (S3's limit).
pub const MAX_CORS_ID_BYTES: usize = 255;
/// The methods a rule may allow (S3 knows no others).
pub const CORS_METHODS: [&str; 5] = ["GET", "PUT", "POST", "DELETE", "HEAD"];

/// One CORS rule of a bucket, as S3's PutBucketCors takes it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct CorsRule {
    /// The rule's optional name (≤ [`MAX_CORS_ID_BYTES`] bytes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// Methods the rule allows: each one of [`CORS_METHODS`]; at least one.
    pub allowed_methods: Vec<String>,
    /// Origins the rule allows; each may hold one `*` wildcard; at least one.
    pub allowed_origins: Vec<String>,
    /// Request headers a preflight may ask for; each may hold one `*`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allowed_headers: Vec<String>,
    /// Response headers a browser script may read.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub expose_headers: Vec<String>,
    /// How long a browser may cache a preflight's answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_age_seconds: Option<i32>,
}

/// Checks a whole configuration as S3 does: 1 to [`MAX_CORS_RULES`] rules,
/// each with at least one origin and one method, only [`CORS_METHODS`],
/// at most one `*` in an origin or allowed header, an ID of at most
/// [`MAX_CORS_ID_BYTES`] bytes and a MaxAgeSeconds that is not negative.
pub fn validate_cors(rules: &[CorsRule]) -> Result<()> {
    if rules.is_empty() {
        return Err(StoreError::MalformedCors {
            reason: "a CORS configuration holds at least one CORSRule".into(),
        });
    }
    if rules.len() > MAX_CORS_RULES {
        return Err(StoreError::MalformedCors {
            reason: format!(
                "a CORS configuration holds at most {MAX_CORS_RULES} rules; this one has {}",
                rules.len()
            ),
        });
    }
    rules.iter().try_for_each(validate_rule)
}

fn validate_rule(rule: &CorsRule) -> Result<()> {
    let invalid = |reason: String| Err(StoreError::InvalidCors { reason });
    if rule.allowed_methods.is_empty() || rule.allowed_origins.is_empty() {
        return Err(StoreError::MalformedCors {
            reason: "each CORSRule needs at least one AllowedMethod and one AllowedOrigin".into(),
        });
    }
    if let Some(m) = rule
        .allowed_methods
        .iter()
        .find(|m| !CORS_METHODS.contains(&m.as_str()))
    {
        return invalid(format!(
            "Found unsupported HTTP method in CORS config. Unsupported method is {m}"
        ));
    }
    if let Some(o) = rule
        .allowed_origins
        .iter()
        .find(|o| o.matches('*').count() > 1)
    {
        return invalid(format!(
            "AllowedOrigin \"{o}\" can not have more than one wildcard."
        ));
    }
    if let Some(h) = rule
        .allowed_headers
        .iter()
        .find(|h| h.matches('*').count() > 1)
    {
        return invalid(format!(
            "AllowedHeader \"{h}\" can not have more than one wildcard."
        ));
    }
    if rule
        .id
        .as_ref()
        .is_some_and(|id| id.len() > MAX_CORS_ID_BYTES)
    {
        return invalid(format!(
            "a CORSRule ID is at most {MAX_CORS_ID_BYTES} characters"
        ));
    }
    if rule.max_age_seconds.is_some_and(|s| s < 0) {
        return invalid("MaxAgeSeconds cannot be negative".into());
    }
    Ok(())
}

impl Store {
    /// A bucket's CORS rules (`None`: it has none), or `no_such_bucket`.
    pub fn bucket_cors(&self, bucket: &str) -> Result<Option<Vec<CorsRule>>> {
        validate::bucket_name(bucket)?;
        let value: Option<Option<String>> = self.inner.db.read(|conn| {
            Ok(conn
                .prepare_cached("SELECT cors FROM buckets WHERE name = ?1")?
                .query_row([bucket], |r| r.get(0))
                .optional()?)
        })?;
        let Some(value) = value else {
            return Err(StoreError::NoSuchBucket {
                bucket: bucket.to_string(),
            });
        };
        value
            .map(|json| {
                serde_json::from_str(&json).map_err(|e| {
                    StoreError::Corrupt(format!("bucket {bucket} has unreadable CORS rules: {e}"))
                })
            })
            .transpose()
    }

    /// Replaces a bucket's CORS rules (validated by [`validate_cors`]), or
    /// removes them (`None`), in one transaction.
    pub fn set_bucket_cors(&self, bucket: &str, rules: Option<Vec<CorsRule>>) -> Result<()> {
        validate::bucket_name(bucket)?;
        let json = match &rules {
            Some(rules) => {
                validate_cors(rules)?;
                Some(
                    serde_json::to_string(rules).map_err(|e| StoreError::InvalidArgument {
                        reason: format!("CORS rules cannot be stored: {e}"),
                    })?,
                )
            }
            None => None,
        };
        let bucket = bucket.to_string();
        self.inner.db.write(move |conn, _| {
            let n = conn.execute(
                "UPDATE buckets SET cors = ?2 WHERE name = ?1",
                params![bucket, json],
            )?;
            if n == 0 {
                return Err(StoreError::NoSuchBucket { bucket });
            }
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(methods: &[&str], origins: &[&str]) -> CorsRule {
        CorsRule {
            allowed_methods: methods.iter().map(|s| s.to_string()).collect(),
            allowed_origins: origins.iter().map(|s| s.to_string()).collect(),
            ..Default::default()
        }
    }

    #[test]
    fn validation_follows_s3() {
        assert!(validate_cors(&[rule(&["GET", "PUT"], &["*", "http://*.example.com"])]).is_ok());
        let code = |rules: &[CorsRule]| validate_cors(rules).unwrap_err().code();
        assert_eq!(code(&[]), "malformed_cors");
        assert_eq!(code(&vec![rule(&["GET"], &["*"]); 101]), "malformed_cors");
        assert!(validate_cors(&vec![rule(&["GET"], &["*"]); 100]).is_ok());
        assert_eq!(code(&[rule(&[], &["*"])]), "malformed_cors");
        assert_eq!(code(&[rule(&["PATCH"], &["*"])]), "invalid_cors");
        assert_eq!(code(&[rule(&["get"], &["*"])]), "invalid_cors");
        assert_eq!(code(&[rule(&["GET"], &["http://*.*.com"])]), "invalid_cors");
        let mut r = rule(&["GET"], &["*"]);
        r.allowed_headers = vec!["x-*-*".into()];
        assert_eq!(code(&[r.clone()]), "invalid_cors");
        r.allowed_headers = vec!["x-amz-*".into(), "*".into()];
        assert!(validate_cors(&[r.clone()]).is_ok());
        r.id = Some("i".repeat(256));
        assert_eq!(code(&[r.clone()]), "invalid_cors");
        r.id = Some("i".repeat(255));
        r.max_age_seconds = Some(-1);
        assert_eq!(code(&[r.clone()]), "invalid_cors");
        r.max_age_seconds = Some(3000);
        assert!(validate_cors(&[r]).is_ok());
    }
}
