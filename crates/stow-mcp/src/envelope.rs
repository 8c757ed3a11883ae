//! The version-1 object result envelope ("Save and recovery
//! results"), its error codes, and the one place where store errors become
//! MCP codes and effect outcomes.

use std::collections::BTreeMap;

use serde::Serialize;
use stow_store::{ObjectMeta, StoreError};

/// The effect (or non-effect) outcome of an object tool call.
///
/// Saves and resolutions answer `committed`, `not_committed` or `unknown`;
/// reads, releases and capability checks answer `ok`, also when they fail
/// (the failure is carried by `error`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// A non-effect tool ran (successfully or not).
    Ok,
    /// The save is known to have published.
    Committed,
    /// The save is known not to have published.
    NotCommitted,
    /// Nothing is known about the save's effect.
    Unknown,
}

/// Whether a tool has an effect (saves, resolutions) or only inspects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Its outcome is an effect outcome; refusals answer `unknown`.
    Effect,
    /// Its outcome is always `ok`, also when it fails.
    Inspect,
}

impl Kind {
    /// The outcome of a refusal that proves nothing about an effect.
    pub fn refusal(self) -> Outcome {
        match self {
            Kind::Effect => Outcome::Unknown,
            Kind::Inspect => Outcome::Ok,
        }
    }
}

/// Stable machine codes of object tool errors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Code {
    /// Malformed input (key, request key, guard choice, base64).
    Invalid,
    /// A body, the arguments or the tool name exceed their bound.
    PayloadTooLarge,
    /// The encoded result exceeds 256 KiB (minimal envelope).
    ResponseTooLarge,
    /// The result could not be encoded (minimal envelope).
    ResponseEncoding,
    /// Eight tool calls are already admitted.
    Busy,
    /// The observation pool is full.
    ObservationFull,
    /// The token is unknown, released, or for another key or server.
    InvalidObservation,
    /// The token outlived its TTL.
    ExpiredObservation,
    /// The profile is read-only.
    Denied,
    /// The object changed since it was observed.
    Conflict,
    /// The request key was used for a different request.
    RequestConflict,
    /// No receipt is retained for the request key (proves nothing).
    NotFound,
    /// The receipt journal is full.
    RetentionFull,
    /// A store quota would be exceeded.
    QuotaExceeded,
    /// The server is closing.
    Closed,
    /// The call was cancelled.
    Canceled,
    /// Anything else: I/O, a missing bucket, an internal failure.
    Unavailable,
}

impl Code {
    /// The wire form of the code.
    pub fn as_str(self) -> &'static str {
        match self {
            Code::Invalid => "invalid",
            Code::PayloadTooLarge => "payload_too_large",
            Code::ResponseTooLarge => "response_too_large",
            Code::ResponseEncoding => "response_encoding",
            Code::Busy => "busy",
            Code::ObservationFull => "observation_full",
            Code::InvalidObservation => "invalid_observation",
            Code::ExpiredObservation => "expired_observation",
            Code::Denied => "denied",
            Code::Conflict => "conflict",
            Code::RequestConflict => "request_conflict",
            Code::NotFound => "not_found",
            Code::RetentionFull => "retention_full",
            Code::QuotaExceeded => "quota_exceeded",
            Code::Closed => "closed",
            Code::Canceled => "canceled",
            Code::Unavailable => "unavailable",
        }
    }
}

/// `{code, message}` of a failed call. Messages never carry host paths.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ErrorBody {
    pub code: &'static str,
    pub message: String,
}

/// Object metadata (and, on reads, the bytes) as the envelope shows them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ObjectView {
    pub key: String,
    pub size: u64,
    pub etag: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content_type: Option<String>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub metadata: BTreeMap<String, String>,
    /// RFC 3339, UTC, with nanoseconds.
    pub last_modified: String,
    /// Standard base64 of the bytes; reads only, omitted for an empty body.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub data_base64: Option<String>,
}

impl ObjectView {
    /// The view of an object's metadata, without bytes.
    pub fn of(meta: &ObjectMeta) -> ObjectView {
        ObjectView {
            key: meta.key.clone(),
            size: meta.size,
            etag: meta.etag.clone(),
            content_type: meta.props.content_type.clone().filter(|c| !c.is_empty()),
            metadata: meta.props.metadata.clone(),
            last_modified: rfc3339_ns(meta.last_modified_ns),
            data_base64: None,
        }
    }
}

/// Formats nanoseconds since the epoch as RFC 3339 UTC with nanoseconds.
pub fn rfc3339_ns(ns: i64) -> String {
    let t = std::time::UNIX_EPOCH + std::time::Duration::from_nanos(ns.max(0) as u64);
    humantime::format_rfc3339_nanos(t).to_string()
}

/// The profile's fixed and configured bounds, as `stow_object_capabilities`
/// reports them. No host paths.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Capabilities {
    pub backend: &'static str,
    pub persistent: bool,
    pub guarded_saves: bool,
    pub durable_save_requests: bool,
    pub read_only: bool,
    pub max_object_bytes: u64,
    pub max_observations: u64,
    pub observation_ttl_seconds: u64,
    pub max_response_bytes: u64,
    pub max_tool_arguments_bytes: u64,
    pub max_concurrent_calls: u64,
}

/// The version-1 result envelope of every object tool.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Envelope {
    pub version: u8,
    pub outcome: Outcome,
    pub available: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub object: Option<ObjectView>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub observation_token: Option<String>,
    pub absent: bool,
    pub replayed: bool,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub released: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub capabilities: Option<Capabilities>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorBody>,
}

impl Envelope {
    /// An envelope with `outcome` and nothing else.
    pub fn new(outcome: Outcome) -> Envelope {
        Envelope {
            version: 1,
            outcome,
            available: false,
            object: None,
            observation_token: None,
            absent: false,
            replayed: false,
            released: false,
            capabilities: None,
            error: None,
        }
    }

    /// A refusal by the adapter itself (before the store was asked):
    /// `object request <code>: <detail>`.
    pub fn refused(kind: Kind, code: Code, detail: &str) -> Envelope {
        Envelope::refused_with(kind.refusal(), code, detail)
    }

    /// A refusal with an explicit outcome.
    pub fn refused_with(outcome: Outcome, code: Code, detail: &str) -> Envelope {
        let mut env = Envelope::new(outcome);
        env.error = Some(ErrorBody {
            code: code.as_str(),
            message: format!("object request {}: {detail}", code.as_str()),
        });
        env
    }

    /// A failure reported by the store, mapped in [`map_store_error`].
    pub fn store_failure(kind: Kind, e: &StoreError) -> Envelope {
        let mapped = map_store_error(e);
        let outcome = match kind {
            Kind::Inspect => Outcome::Ok,
            Kind::Effect => mapped.save_outcome,
        };
        let mut env = Envelope::new(outcome);
        env.error = Some(ErrorBody {
            code: mapped.code.as_str(),
            message: format!(
                "object operation {}: {}",
                mapped.code.as_str(),
                mapped.detail
            ),
        });
        env
    }

    /// The minimal envelope that replaces a result that cannot be encoded
    /// or is too large: it keeps the outcome and `replayed`, and drops
    /// everything else.
    pub fn minimal(outcome: Outcome, replayed: bool, code: Code) -> Envelope {
        let detail = match code {
            Code::ResponseTooLarge => "the encoded result exceeds the response limit",
            _ => "the result could not be encoded",
        };
        let mut env = Envelope::refused_with(outcome, code, detail);
        env.replayed = replayed;
        env
    }
}

/// What a store error means to an object tool caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MappedError {
    pub code: Code,
    /// The effect outcome of a save or resolution that failed this way.
    pub save_outcome: Outcome,
    /// A human explanation without host paths.
    pub detail: String,
}

/// The one mapping from store errors to MCP codes and effect outcomes.
///
/// A store save validates, checks the receipt journal, checks the guard,
/// charges quotas and writes the receipt in one transaction, so a refusal
/// reported from inside it (conflict, quota, retention, missing bucket)
/// proves nothing was published: `not_committed`. Refusals of the input
/// itself and request-key conflicts prove nothing about an earlier request
/// with the same key, and I/O or commit failures leave the effect
/// uncertain: `unknown`.
pub fn map_store_error(e: &StoreError) -> MappedError {
    use StoreError as E;
    let (code, save_outcome) = match e {
        E::InvalidKey { .. }
        | E::KeyTooLong { .. }
        | E::InvalidMetadata { .. }
        | E::MetadataTooLarge { .. }
        | E::InvalidArgument { .. }
        | E::InvalidCondition { .. }
        | E::InvalidBucketName { .. }
        | E::InvalidDigest { .. }
        | E::InvalidChecksum { .. } => (Code::Invalid, Outcome::Unknown),
        E::TooLarge { .. } => (Code::PayloadTooLarge, Outcome::Unknown),
        E::Conflict | E::PreconditionFailed { .. } => (Code::Conflict, Outcome::NotCommitted),
        E::RequestConflict => (Code::RequestConflict, Outcome::Unknown),
        E::ReceiptNotFound => (Code::NotFound, Outcome::Unknown),
        E::RetentionFull { .. } => (Code::RetentionFull, Outcome::NotCommitted),
        E::QuotaExceeded { .. } => (Code::QuotaExceeded, Outcome::NotCommitted),
        E::NoSuchBucket { .. } => (Code::Unavailable, Outcome::NotCommitted),
        // A full disk refuses before or inside the commit, never after it.
        _ if e.is_no_space() => (Code::Unavailable, Outcome::NotCommitted),
        _ => (Code::Unavailable, Outcome::Unknown),
    };
    // Messages of these variants carry no host paths; the rest are logged
    // (stderr) and answered generically.
    let detail = match e {
        E::InvalidKey { .. }
        | E::KeyTooLong { .. }
        | E::InvalidMetadata { .. }
        | E::MetadataTooLarge { .. }
        | E::InvalidArgument { .. }
        | E::InvalidCondition { .. }
        | E::InvalidBucketName { .. }
        | E::TooLarge { .. }
        | E::Conflict
        | E::RequestConflict
        | E::ReceiptNotFound
        | E::RetentionFull { .. }
        | E::QuotaExceeded { .. } => e.to_string(),
        E::NoSuchBucket { .. } => "the configured bucket does not exist".to_string(),
        _ if e.is_no_space() => "the disk is full; nothing was saved".to_string(),
        other => {
            tracing::warn!(code = other.code(), "object store failure: {other}");
            "the object store could not complete the operation".to_string()
        }
    };
    MappedError {
        code,
        save_outcome,
        detail,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn envelope_omits_what_does_not_apply() {
        let env = Envelope::new(Outcome::Ok);
        let v = serde_json::to_value(&env).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"version": 1, "outcome": "ok", "available": false,
                               "absent": false, "replayed": false})
        );
        let mut released = Envelope::new(Outcome::Ok);
        released.released = true;
        assert_eq!(serde_json::to_value(&released).unwrap()["released"], true);
    }

    #[test]
    fn store_errors_map_to_codes_and_outcomes() {
        let m = map_store_error(&StoreError::Conflict);
        assert_eq!(
            (m.code, m.save_outcome),
            (Code::Conflict, Outcome::NotCommitted)
        );
        let m = map_store_error(&StoreError::RequestConflict);
        assert_eq!(
            (m.code, m.save_outcome),
            (Code::RequestConflict, Outcome::Unknown)
        );
        let m = map_store_error(&StoreError::ReceiptNotFound);
        assert_eq!((m.code, m.save_outcome), (Code::NotFound, Outcome::Unknown));
        let m = map_store_error(&StoreError::QuotaExceeded { reason: "x".into() });
        assert_eq!(m.code, Code::QuotaExceeded);
        let m = map_store_error(&StoreError::Io(std::io::Error::other("/secret/path")));
        assert_eq!(
            (m.code, m.save_outcome),
            (Code::Unavailable, Outcome::Unknown)
        );
        assert!(!m.detail.contains("/secret"));
        let m = map_store_error(&StoreError::NoSuchBucket { bucket: "b".into() });
        assert_eq!(m.code, Code::Unavailable);
        // The size limits are refusals of the input, explained to the caller.
        for e in [
            StoreError::KeyTooLong {
                len: 1025,
                limit: 1024,
            },
            StoreError::MetadataTooLarge {
                size: 2049,
                limit: 2048,
            },
        ] {
            let m = map_store_error(&e);
            assert_eq!((m.code, m.save_outcome), (Code::Invalid, Outcome::Unknown));
            assert_eq!(m.detail, e.to_string());
        }
    }

    #[test]
    fn non_effect_failures_keep_ok() {
        let env = Envelope::store_failure(Kind::Inspect, &StoreError::Conflict);
        assert_eq!(env.outcome, Outcome::Ok);
        let env = Envelope::store_failure(Kind::Effect, &StoreError::Conflict);
        assert_eq!(env.outcome, Outcome::NotCommitted);
    }

    #[test]
    fn timestamps_are_rfc3339_with_nanoseconds() {
        assert_eq!(
            rfc3339_ns(1_500_000_000_123_456_789),
            "2017-07-14T02:40:00.123456789Z"
        );
    }
}
