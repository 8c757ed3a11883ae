//! Object-profile settings: what the host chose at launch, validated before
//! anything touches the disk.

use std::path::PathBuf;

/// Largest decoded object body a tool call carries (reads and saves).
pub const MAX_OBJECT_BYTES: u64 = 64 << 10;
/// Largest number of live observation tokens.
pub const MAX_OBSERVATIONS: u64 = 256;
/// Default store object-count quota.
pub const DEFAULT_MAX_OBJECTS: u64 = 10_000;
/// Default store byte quota.
pub const DEFAULT_MAX_BYTES: u64 = 1 << 30;

/// The object profile as the host launches it (`stow-s3 mcp --object-dir
/// … --bucket …`). Bounds are signed so that a negative value given on the
/// command line is refused here rather than wrapped; 0 means the default.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ObjectConfig {
    /// The owned object-store directory (made absolute).
    pub object_dir: PathBuf,
    /// The single bucket tools may touch.
    pub bucket: String,
    /// Consent to create the bucket (and the store) when missing.
    pub create_bucket: bool,
    /// Reads and resolution only; saves are `denied`.
    pub read_only: bool,
    /// Adds the bucket browser tools and resources.
    pub browser: bool,
    /// Store object-count quota (0 = 10,000).
    pub max_objects: i64,
    /// Store byte quota (0 = 1 GiB).
    pub max_bytes: i64,
    /// Narrows the 64 KiB body limit (0 = 65,536).
    pub max_object_bytes: i64,
    /// Narrows the 256-token observation pool (0 = 256).
    pub max_observations: i64,
}

/// A launch setting the profile refuses. Nothing has touched the disk.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// `--object-dir` is empty.
    #[error("--object-dir is required and must not be empty")]
    MissingDir,
    /// The directory cannot be made absolute.
    #[error("--object-dir {dir} cannot be made absolute: {reason}")]
    BadDir { dir: String, reason: String },
    /// The bucket name breaks the naming rules.
    #[error("--bucket: {0}")]
    BadBucket(String),
    /// `--read-only` and `--create-bucket` together.
    #[error(
        "--read-only cannot be combined with --create-bucket (a read-only profile creates nothing)"
    )]
    ReadOnlyCreate,
    /// A bound is negative or above its ceiling.
    #[error("--{flag} must be between 0 and {max} (0 means {max}); got {value}")]
    OutOfRange {
        flag: &'static str,
        value: i64,
        max: u64,
    },
    /// A quota is negative.
    #[error("--{flag} must not be negative; got {value}")]
    Negative { flag: &'static str, value: i64 },
}

/// Validated object-profile settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// Absolute object directory.
    pub dir: PathBuf,
    /// The configured bucket.
    pub bucket: String,
    /// Create the store and bucket when missing.
    pub create_bucket: bool,
    /// Saves are denied.
    pub read_only: bool,
    /// Browser tools and resources are served.
    pub browser: bool,
    /// Store object-count quota.
    pub max_objects: u64,
    /// Store byte quota.
    pub max_bytes: u64,
    /// Largest body a call carries.
    pub max_object_bytes: u64,
    /// Largest number of live observations.
    pub max_observations: u64,
}

fn bounded(flag: &'static str, value: i64, max: u64) -> Result<u64, ConfigError> {
    match u64::try_from(value) {
        Ok(0) => Ok(max),
        Ok(v) if v <= max => Ok(v),
        _ => Err(ConfigError::OutOfRange { flag, value, max }),
    }
}

fn quota(flag: &'static str, value: i64, default: u64) -> Result<u64, ConfigError> {
    match u64::try_from(value) {
        Ok(0) => Ok(default),
        Ok(v) => Ok(v),
        Err(_) => Err(ConfigError::Negative { flag, value }),
    }
}

impl ObjectConfig {
    /// Checks every setting without touching the disk.
    pub fn validate(&self) -> Result<Settings, ConfigError> {
        if self.object_dir.as_os_str().is_empty() {
            return Err(ConfigError::MissingDir);
        }
        stow_store::validate::bucket_name(&self.bucket)
            .map_err(|e| ConfigError::BadBucket(e.to_string()))?;
        if self.read_only && self.create_bucket {
            return Err(ConfigError::ReadOnlyCreate);
        }
        let max_object_bytes =
            bounded("max-object-bytes", self.max_object_bytes, MAX_OBJECT_BYTES)?;
        let max_observations =
            bounded("max-observations", self.max_observations, MAX_OBSERVATIONS)?;
        let max_objects = quota("max-objects", self.max_objects, DEFAULT_MAX_OBJECTS)?;
        let max_bytes = quota("max-bytes", self.max_bytes, DEFAULT_MAX_BYTES)?;
        let dir = std::path::absolute(&self.object_dir).map_err(|e| ConfigError::BadDir {
            dir: self.object_dir.display().to_string(),
            reason: e.to_string(),
        })?;
        Ok(Settings {
            dir,
            bucket: self.bucket.clone(),
            create_bucket: self.create_bucket,
            read_only: self.read_only,
            browser: self.browser,
            max_objects,
            max_bytes,
            max_object_bytes,
            max_observations,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn base() -> ObjectConfig {
        ObjectConfig {
            object_dir: "/tmp/x".into(),
            bucket: "files".into(),
            ..Default::default()
        }
    }

    #[test]
    fn defaults_apply_for_zero() {
        let s = base().validate().unwrap();
        assert_eq!(s.max_object_bytes, 65536);
        assert_eq!(s.max_observations, 256);
        assert_eq!(s.max_objects, 10_000);
        assert_eq!(s.max_bytes, 1 << 30);
        assert!(s.dir.is_absolute());
    }

    #[test]
    fn refusals() {
        let cases: Vec<(ObjectConfig, &str)> = vec![
            (
                ObjectConfig {
                    object_dir: "".into(),
                    ..base()
                },
                "object-dir",
            ),
            (
                ObjectConfig {
                    bucket: "A".into(),
                    ..base()
                },
                "bucket",
            ),
            (
                ObjectConfig {
                    read_only: true,
                    create_bucket: true,
                    ..base()
                },
                "read-only",
            ),
            (
                ObjectConfig {
                    max_object_bytes: 65537,
                    ..base()
                },
                "max-object-bytes",
            ),
            (
                ObjectConfig {
                    max_object_bytes: -1,
                    ..base()
                },
                "max-object-bytes",
            ),
            (
                ObjectConfig {
                    max_observations: 257,
                    ..base()
                },
                "max-observations",
            ),
            (
                ObjectConfig {
                    max_objects: -1,
                    ..base()
                },
                "max-objects",
            ),
            (
                ObjectConfig {
                    max_bytes: -5,
                    ..base()
                },
                "max-bytes",
            ),
        ];
        for (cfg, word) in cases {
            let err = cfg.validate().unwrap_err().to_string();
            assert!(err.contains(word), "{err} should mention {word}");
        }
    }

    #[test]
    fn relative_dirs_become_absolute() {
        let s = ObjectConfig {
            object_dir: "rel/objects".into(),
            ..base()
        }
        .validate()
        .unwrap();
        assert!(s.dir.is_absolute() && s.dir.ends_with("rel/objects"));
    }
}
