//! Input validation: bucket names, object keys, properties. Pure functions,
//! run before anything touches storage.

use crate::error::{Result, StoreError};
use crate::model::ObjectProps;

/// Largest object key, in bytes.
pub const MAX_KEY_BYTES: usize = 1024;
/// Largest total of user-metadata keys and values, in bytes (S3's limit).
pub const MAX_METADATA_BYTES: usize = 2048;
/// Largest value of a single system property (content type and friends).
const MAX_PROPERTY_BYTES: usize = 1024;

/// Checks a bucket name against S3's general-purpose bucket naming rules.
pub fn bucket_name(name: &str) -> Result<()> {
    let refuse = |reason| {
        Err(StoreError::InvalidBucketName {
            name: name.chars().take(80).collect(),
            reason,
        })
    };
    let bytes = name.as_bytes();
    if !(3..=63).contains(&bytes.len()) {
        return refuse("must be 3 to 63 characters long");
    }
    if !bytes
        .iter()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'.' || *b == b'-')
    {
        return refuse("may contain only lowercase letters, digits, dots and hyphens");
    }
    let alnum = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    if !alnum(bytes[0]) || !alnum(bytes[bytes.len() - 1]) {
        return refuse("must begin and end with a letter or digit");
    }
    if name.contains("..") || name.contains(".-") || name.contains("-.") {
        return refuse("must not contain adjacent dots or a dot next to a hyphen");
    }
    if name.split('.').count() == 4 && name.split('.').all(|p| p.parse::<u8>().is_ok()) {
        return refuse("must not be formatted as an IP address");
    }
    for prefix in ["xn--", "sthree-", "amzn-s3-demo-"] {
        if name.starts_with(prefix) {
            return refuse("uses a reserved prefix");
        }
    }
    for suffix in ["-s3alias", "--ol-s3", ".mrap", "--x-s3", "--table-s3"] {
        if name.ends_with(suffix) {
            return refuse("uses a reserved suffix");
        }
    }
    Ok(())
}

/// Checks an object key: 1–1024 bytes of UTF-8 without NUL. Keys are opaque
/// otherwise (`a/../b` is a key, not a path).
pub fn object_key(key: &str) -> Result<()> {
    if key.is_empty() {
        return Err(StoreError::InvalidKey {
            reason: "key must not be empty",
        });
    }
    if key.len() > MAX_KEY_BYTES {
        return Err(StoreError::KeyTooLong {
            len: key.len(),
            limit: MAX_KEY_BYTES,
        });
    }
    if key.contains('\0') {
        return Err(StoreError::InvalidKey {
            reason: "key must not contain NUL",
        });
    }
    Ok(())
}

fn is_token_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

fn property_value(name: &str, value: &str, limit: usize) -> Result<()> {
    if value.len() > limit {
        return Err(StoreError::InvalidMetadata {
            reason: format!("{name} is longer than {limit} bytes"),
        });
    }
    if value.chars().any(|c| c.is_control() && c != '\t') {
        return Err(StoreError::InvalidMetadata {
            reason: format!("{name} contains a control character"),
        });
    }
    Ok(())
}

/// Most tags an object carries (S3's limit).
pub const MAX_TAGS: usize = 10;

/// Checks object tags as S3 bounds them: at most 10; keys of 1 to 128
/// characters, values of at most 256, no control characters.
pub fn check_tags(tags: &std::collections::BTreeMap<String, String>) -> Result<()> {
    let bad = |reason: String| Err(StoreError::InvalidArgument { reason });
    if tags.len() > MAX_TAGS {
        return bad(format!(
            "{} tags; an object carries at most {MAX_TAGS}",
            tags.len()
        ));
    }
    for (k, v) in tags {
        if k.is_empty() || k.chars().count() > 128 || k.chars().any(char::is_control) {
            return bad(format!(
                "tag key {k:?} must be 1 to 128 characters, no control characters"
            ));
        }
        if v.chars().count() > 256 || v.chars().any(char::is_control) {
            return bad(format!(
                "the value of tag {k:?} must be at most 256 characters, no control characters"
            ));
        }
    }
    Ok(())
}

/// Normalises and checks object properties: user-metadata keys are
/// lower-cased HTTP tokens; the keys and values together fit in 2 KiB; no
/// value carries control characters (they could not travel as headers).
pub fn normalize_props(mut props: ObjectProps) -> Result<ObjectProps> {
    let total: usize = props.metadata.iter().map(|(k, v)| k.len() + v.len()).sum();
    if total > MAX_METADATA_BYTES {
        return Err(StoreError::MetadataTooLarge {
            size: total,
            limit: MAX_METADATA_BYTES,
        });
    }
    let mut metadata = std::collections::BTreeMap::new();
    for (k, v) in std::mem::take(&mut props.metadata) {
        if k.is_empty() || !k.bytes().all(is_token_byte) {
            return Err(StoreError::InvalidMetadata {
                reason: format!("metadata key {k:?} is not a valid header token"),
            });
        }
        property_value("metadata value", &v, MAX_METADATA_BYTES)?;
        if metadata.insert(k.to_ascii_lowercase(), v).is_some() {
            return Err(StoreError::InvalidMetadata {
                reason: format!("metadata key {k:?} appears twice (keys are case-insensitive)"),
            });
        }
    }
    props.metadata = metadata;
    check_tags(&props.tags)?;
    for (name, value) in [
        ("content type", &props.content_type),
        ("content encoding", &props.content_encoding),
        ("content disposition", &props.content_disposition),
        ("content language", &props.content_language),
        ("cache control", &props.cache_control),
        ("expires", &props.expires),
    ] {
        if let Some(v) = value {
            property_value(name, v, MAX_PROPERTY_BYTES)?;
        }
    }
    Ok(props)
}

/// Checks a request key of a keyed save: 1–256 bytes, no surrounding
/// whitespace, no control characters.
pub fn request_key(key: &str) -> Result<()> {
    if key.is_empty() || key.len() > 256 {
        return Err(StoreError::InvalidArgument {
            reason: "request key must be 1 to 256 bytes".into(),
        });
    }
    if key.trim() != key || key.chars().any(char::is_control) {
        return Err(StoreError::InvalidArgument {
            reason: "request key must not have surrounding whitespace or control characters".into(),
        });
    }
    Ok(())
}

/// Checks a multipart part number (1..=10000).
pub fn part_number(n: i64) -> Result<u32> {
    if (1..=10_000).contains(&n) {
        Ok(n as u32)
    } else {
        Err(StoreError::InvalidPartNumber(n))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bucket_names() {
        for ok in ["abc", "my-bucket.data", "a1b2", &"a".repeat(63)] {
            assert!(bucket_name(ok).is_ok(), "{ok}");
        }
        for bad in [
            "ab",
            &"a".repeat(64),
            "Abc",
            "a_b",
            "-ab",
            "ab-",
            "a..b",
            "a.-b",
            "192.168.1.1",
            "xn--abc",
            "abc-s3alias",
            "ab c",
        ] {
            assert_eq!(
                bucket_name(bad).unwrap_err().code(),
                "invalid_bucket_name",
                "{bad}"
            );
        }
    }

    #[test]
    fn keys() {
        assert!(object_key("a/../b").is_ok());
        assert!(object_key(&"k".repeat(1024)).is_ok());
        assert_eq!(object_key("").unwrap_err().code(), "invalid_key");
        assert!(matches!(
            object_key(&"k".repeat(1025)).unwrap_err(),
            StoreError::KeyTooLong {
                len: 1025,
                limit: 1024
            }
        ));
        assert_eq!(object_key("a\0b").unwrap_err().code(), "invalid_key");
    }

    #[test]
    fn metadata_is_lowercased_and_bounded() {
        let mut p = ObjectProps::default();
        p.metadata.insert("Project".into(), "x".into());
        let p = normalize_props(p).unwrap();
        assert_eq!(p.metadata.get("project").map(String::as_str), Some("x"));

        let mut full = ObjectProps::default();
        full.metadata.insert("k".into(), "v".repeat(2047));
        assert!(normalize_props(full).is_ok());

        let mut big = ObjectProps::default();
        big.metadata.insert("k".into(), "v".repeat(2048));
        assert!(matches!(
            normalize_props(big).unwrap_err(),
            StoreError::MetadataTooLarge {
                size: 2049,
                limit: 2048
            }
        ));
        // Many small entries count together.
        let mut many = ObjectProps::default();
        for i in 0..30 {
            many.metadata.insert(format!("key-{i:02}"), "v".repeat(64));
        }
        assert_eq!(
            normalize_props(many).unwrap_err().code(),
            "metadata_too_large"
        );

        let mut dup = ObjectProps::default();
        dup.metadata.insert("A".into(), "1".into());
        dup.metadata.insert("a".into(), "2".into());
        assert_eq!(normalize_props(dup).unwrap_err().code(), "invalid_metadata");

        let mut bad = ObjectProps::default();
        bad.metadata.insert("a b".into(), "1".into());
        assert_eq!(normalize_props(bad).unwrap_err().code(), "invalid_metadata");

        let ctl = ObjectProps {
            content_type: Some("text/plain\r\nx: y".into()),
            ..Default::default()
        };
        assert_eq!(normalize_props(ctl).unwrap_err().code(), "invalid_metadata");
    }

    #[test]
    fn request_keys_and_parts() {
        assert!(request_key("req-1").is_ok());
        assert!(request_key("").is_err());
        assert!(request_key(" x").is_err());
        assert!(request_key(&"r".repeat(257)).is_err());
        assert_eq!(part_number(1).unwrap(), 1);
        assert_eq!(part_number(10_000).unwrap(), 10_000);
        assert_eq!(part_number(0).unwrap_err().code(), "invalid_part_number");
        assert_eq!(
            part_number(10_001).unwrap_err().code(),
            "invalid_part_number"
        );
    }
}
