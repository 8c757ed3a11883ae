//! The one mapping from `object_store` errors to the remote's stable
//! codes. `object_store` keeps its HTTP status type private, so the S3
//! error code and status are read from the error's text (which carries the
//! response body); transport failures are found by their `HttpError` kind.

use std::error::Error as StdError;

use object_store::client::{HttpError, HttpErrorKind};
use stow_checkpoint::remote::{RemoteError, RemoteFailure};

/// Every message in the error's source chain, joined.
fn chain_text(e: &(dyn StdError + 'static)) -> String {
    let mut text = e.to_string();
    let mut next = e.source();
    while let Some(inner) = next {
        text.push_str(": ");
        text.push_str(&inner.to_string());
        next = inner.source();
    }
    text
}

fn transport_kind(e: &(dyn StdError + 'static)) -> Option<HttpErrorKind> {
    let mut next: Option<&(dyn StdError + 'static)> = Some(e);
    while let Some(inner) = next {
        if let Some(h) = inner.downcast_ref::<HttpError>() {
            return Some(h.kind());
        }
        next = inner.source();
    }
    None
}

/// Classifies a failure of `what` (an operation on a key, for the message).
pub(crate) fn classify(what: &str, e: &object_store::Error) -> RemoteError {
    let text = chain_text(e);
    let has = |needle: &str| text.contains(needle);
    let kind = if has("NoSuchBucket") {
        RemoteFailure::NoSuchBucket
    } else if matches!(
        e,
        object_store::Error::PermissionDenied { .. } | object_store::Error::Unauthenticated { .. }
    ) || has("InvalidAccessKeyId")
        || has("SignatureDoesNotMatch")
        || has("AccessDenied")
        || has("ExpiredToken")
    {
        RemoteFailure::Auth
    } else if has("SlowDown") || has("503 Service Unavailable") || has("Throttl") {
        RemoteFailure::Throttled
    } else {
        match transport_kind(e) {
            Some(HttpErrorKind::Connect) => RemoteFailure::Unreachable,
            Some(HttpErrorKind::Timeout) => RemoteFailure::Timeout,
            _ if has("error trying to connect") || has("Connection refused") => {
                RemoteFailure::Unreachable
            }
            _ => RemoteFailure::Failed,
        }
    };
    let hint = match kind {
        RemoteFailure::Auth => " (check the credentials: AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, AWS_PROFILE or the remote's --profile)",
        RemoteFailure::NoSuchBucket => " (the remote's bucket does not exist)",
        RemoteFailure::Unreachable => " (is the endpoint right and the service up?)",
        RemoteFailure::Throttled => " (the service kept answering 503 SlowDown; try again later)",
        _ => "",
    };
    // The outermost message already carries the response; the chain below
    // it repeats it.
    RemoteError::new(
        kind,
        format!("{what}: {}{hint}", first_line(&e.to_string())),
    )
}

/// Error texts can carry a whole XML body; one bounded line is enough.
fn first_line(text: &str) -> String {
    let flat: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    match flat.char_indices().nth(400) {
        Some((i, _)) => format!("{}…", &flat[..i]),
        None => flat,
    }
}

/// The deadline passed.
pub(crate) fn timed_out(what: &str) -> RemoteError {
    RemoteError::new(
        RemoteFailure::Timeout,
        format!("{what}: the overall deadline (--timeout) passed"),
    )
}
