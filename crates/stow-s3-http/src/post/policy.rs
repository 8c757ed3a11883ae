//! A POST form's policy document checked as S3 checks it: its shape and
//! expiration, then every condition against the form (the bucket against
//! the request's), then that every field is named by a condition. The
//! document is parsed by `s3s` (`PostPolicy`), which parses it again and
//! checks it after us, so we never accept what it refuses; its signature
//! is `s3s`'s to verify. `content-length-range` is checked against the
//! file's length by `s3s` as it reads the file (EntityTooLarge,
//! EntityTooSmall).

use s3s::post_policy::{PostPolicy, PostPolicyCondition};

use super::form::Form;
use super::PostError;

/// Fields no condition needs to name: the signature's, the file, and
/// those S3 ignores or takes unsigned (checksums of the file's bytes).
fn exempt(name: &str) -> bool {
    matches!(
        name,
        "policy" | "signature" | "x-amz-signature" | "awsaccesskeyid" | "file" | "submit"
    ) || name.starts_with("x-ignore-")
        || is_checksum_field(name)
}

/// A checksum of the file (`x-amz-checksum-<algorithm>`).
pub(crate) fn is_checksum_field(name: &str) -> bool {
    name.starts_with("x-amz-checksum-")
}

/// `YYYY-MM-DDTHH:MM:SS[.fraction]Z`, the one form S3 takes.
fn well_formed_expiration(s: &str) -> bool {
    let b = s.as_bytes();
    let digits =
        |r: std::ops::Range<usize>| b.get(r).is_some_and(|d| d.iter().all(u8::is_ascii_digit));
    let fixed = b.len() >= 20
        && digits(0..4)
        && b[4] == b'-'
        && digits(5..7)
        && b[7] == b'-'
        && digits(8..10)
        && b[10] == b'T'
        && digits(11..13)
        && b[13] == b':'
        && digits(14..16)
        && b[16] == b':'
        && digits(17..19);
    if !fixed || b.last() != Some(&b'Z') {
        return false;
    }
    let rest = &s[19..s.len() - 1];
    rest.is_empty()
        || rest
            .strip_prefix('.')
            .is_some_and(|f| (1..=9).contains(&f.len()) && f.bytes().all(|d| d.is_ascii_digit()))
}

/// Decodes and checks the shape of a policy document: base64 JSON with an
/// `expiration` in S3's form and a `conditions` list S3 understands.
pub(crate) fn parse(encoded: &str) -> Result<PostPolicy, PostError> {
    use base64::Engine as _;
    let raw = base64::engine::general_purpose::STANDARD
        .decode(encoded.trim())
        .map_err(|_| PostError::InvalidPolicy("the policy is not base64".into()))?;
    let doc: serde_json::Value = serde_json::from_slice(&raw)
        .map_err(|e| PostError::InvalidPolicy(format!("the policy is not JSON: {e}")))?;
    let expiration = doc
        .get("expiration")
        .ok_or_else(|| PostError::InvalidPolicy("Policy missing expiration".into()))?;
    if !expiration.as_str().is_some_and(well_formed_expiration) {
        return Err(PostError::InvalidPolicy(format!(
            "Invalid Policy: Invalid 'expiration' value: {expiration}"
        )));
    }
    if !doc.get("conditions").is_some_and(|c| c.is_array()) {
        return Err(PostError::InvalidPolicy(
            "Invalid Policy: Policy missing conditions".into(),
        ));
    }
    let text = String::from_utf8_lossy(&raw);
    PostPolicy::from_json(&text)
        .map_err(|e| PostError::InvalidPolicy(format!("Invalid Policy: {e}")))
}

/// How a condition reads in S3's refusal: `["eq", "$key", "value"]`.
fn describe(op: &str, field: &str, value: &str) -> String {
    serde_json::json!([op, format!("${field}"), value]).to_string()
}

/// Whether an `eq` or `starts-with` condition names the field (given in
/// lower case).
pub(crate) fn names(policy: &PostPolicy, name: &str) -> bool {
    policy.conditions.iter().any(|c| match c {
        PostPolicyCondition::Eq { field, .. } | PostPolicyCondition::StartsWith { field, .. } => {
            field == name
        }
        PostPolicyCondition::ContentLengthRange { .. } => false,
    })
}

/// Checks an unexpired policy's conditions against the form and the
/// bucket the request addresses, then that each field is named by one.
pub(crate) fn check(policy: &PostPolicy, form: &Form, bucket: &str) -> Result<(), PostError> {
    let now = time::OffsetDateTime::now_utc();
    let expiration: time::OffsetDateTime = policy.expiration.clone().into();
    if now >= expiration {
        return Err(PostError::Expired);
    }
    // The form's `bucket`, when sent, must be the one posted to.
    if form.get("bucket").is_some_and(|b| b != bucket) {
        return Err(PostError::ConditionFailed(describe("eq", "bucket", bucket)));
    }
    let value = |field: &str| {
        if field == "bucket" {
            Some(bucket)
        } else {
            form.get(field)
        }
    };
    let mut names_bucket = false;
    for condition in &policy.conditions {
        match condition {
            PostPolicyCondition::Eq { field, value: want } => {
                names_bucket |= field == "bucket";
                if value(field) != Some(want.as_str()) {
                    return Err(PostError::ConditionFailed(describe("eq", field, want)));
                }
            }
            PostPolicyCondition::StartsWith { field, prefix } => {
                names_bucket |= field == "bucket";
                if !value(field).unwrap_or("").starts_with(prefix.as_str()) {
                    return Err(PostError::ConditionFailed(describe(
                        "starts-with",
                        field,
                        prefix,
                    )));
                }
            }
            PostPolicyCondition::ContentLengthRange { .. } => {}
        }
    }
    if !names_bucket {
        return Err(PostError::ConditionFailed(describe("eq", "bucket", bucket)));
    }
    for (name, _) in &form.fields {
        let name = name.to_ascii_lowercase();
        if !exempt(&name) && name != "bucket" && !names(policy, &name) {
            return Err(PostError::ExtraField(name));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::Engine as _;

    fn encode(doc: serde_json::Value) -> String {
        base64::engine::general_purpose::STANDARD.encode(doc.to_string())
    }

    fn form(fields: &[(&str, &str)]) -> Form {
        Form {
            fields: fields
                .iter()
                .map(|(n, v)| (n.to_string(), v.to_string()))
                .collect(),
            ..Default::default()
        }
    }

    const LATER: &str = "2099-01-01T00:00:00.000Z";

    #[test]
    fn expirations_in_s3s_form_only() {
        assert!(well_formed_expiration("2026-12-03T11:00:00Z"));
        assert!(well_formed_expiration("2026-12-03T11:00:00.123Z"));
        assert!(!well_formed_expiration("2026-12-03 11:00:00+00:00"));
        assert!(!well_formed_expiration("2026-12-03T11:00:00"));
        assert!(!well_formed_expiration("2026-12-03T11:00:00.Z"));
        assert!(!well_formed_expiration("tomorrow"));
        let bad = |doc| matches!(parse(&encode(doc)), Err(PostError::InvalidPolicy(_)));
        assert!(bad(
            serde_json::json!({"expiration": "2026-12-03 11:00:00", "conditions": []})
        ));
        assert!(bad(serde_json::json!({"conditions": []})));
        assert!(bad(serde_json::json!({"expiration": LATER})));
        assert!(bad(
            serde_json::json!({"expiration": LATER, "CONDITIONS": []})
        ));
        assert!(bad(
            serde_json::json!({"expiration": LATER, "conditions": [{}]})
        ));
        assert!(bad(
            serde_json::json!({"expiration": LATER, "conditions": [["content-length-range", -1, 0]]})
        ));
        assert!(bad(
            serde_json::json!({"expiration": LATER, "conditions": [["content-length-range", 0]]})
        ));
        assert!(matches!(parse("%%%"), Err(PostError::InvalidPolicy(_))));
    }

    #[test]
    fn conditions_fields_and_the_bucket() {
        let policy = parse(&encode(serde_json::json!({
            "expiration": LATER,
            "conditions": [
                {"bUcKeT": "up"},
                ["StArTs-WiTh", "$KeY", "foo"],
                ["eq", "$x-amz-meta-a", "1"],
                ["content-length-range", 0, 10],
            ]
        })))
        .unwrap();
        let ok = form(&[
            ("Key", "foo.txt"),
            ("X-Amz-Meta-A", "1"),
            ("x-ignore-me", "z"),
            ("x-amz-checksum-sha256", "c"),
        ]);
        check(&policy, &ok, "up").unwrap();
        let failed = |f: &Form, bucket: &str| match check(&policy, f, bucket) {
            Err(PostError::ConditionFailed(c)) => c,
            other => panic!("{other:?}"),
        };
        assert_eq!(failed(&ok, "other"), r#"["eq","$bucket","up"]"#);
        let wrong_bucket_field =
            form(&[("key", "foo"), ("x-amz-meta-a", "1"), ("bucket", "other")]);
        assert_eq!(
            failed(&wrong_bucket_field, "up"),
            r#"["eq","$bucket","up"]"#
        );
        assert_eq!(
            failed(&form(&[("key", "bar"), ("x-amz-meta-a", "1")]), "up"),
            r#"["starts-with","$key","foo"]"#
        );
        assert_eq!(
            failed(&form(&[("key", "foo"), ("x-amz-meta-a", "2")]), "up"),
            r#"["eq","$x-amz-meta-a","1"]"#
        );
        assert_eq!(
            failed(&form(&[("key", "foo")]), "up"),
            r#"["eq","$x-amz-meta-a","1"]"#
        );
        match check(
            &policy,
            &form(&[("key", "foo"), ("x-amz-meta-a", "1"), ("acl", "private")]),
            "up",
        ) {
            Err(PostError::ExtraField(f)) => assert_eq!(f, "acl"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn expired_policies_and_policies_without_a_bucket() {
        let expired = parse(&encode(serde_json::json!({
            "expiration": "2020-01-01T00:00:00Z", "conditions": [{"bucket": "up"}]
        })))
        .unwrap();
        assert!(matches!(
            check(&expired, &form(&[]), "up"),
            Err(PostError::Expired)
        ));
        let unbound = parse(&encode(serde_json::json!({
            "expiration": LATER, "conditions": [["starts-with", "$key", ""]]
        })))
        .unwrap();
        assert!(matches!(
            check(&unbound, &form(&[("key", "k")]), "up"),
            Err(PostError::ConditionFailed(_))
        ));
    }
}
