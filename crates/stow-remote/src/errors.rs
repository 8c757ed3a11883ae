//! The one mapping from `object_store` errors to the remote's stable codes.
//!
//! What `object_store` types is matched by type: the error variant (a 401
//! or 403 answer is `Unauthenticated`/`PermissionDenied`), and the
//! transport failure kind (`HttpError`) or the I/O error kind found in the
//! error's source chain. What it does not type is read, in
//! [`ResponseText::of`] alone, from the error's text; see there why.

use std::error::Error as StdError;
use std::io::ErrorKind;

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

/// The errors of the source chain, outermost first.
fn chain<'a>(
    e: &'a (dyn StdError + 'static),
) -> impl Iterator<Item = &'a (dyn StdError + 'static)> {
    std::iter::successors(Some(e), |&inner| inner.source())
}

/// The transport failure kind, when the request failed without an answer.
fn transport_kind(e: &(dyn StdError + 'static)) -> Option<HttpErrorKind> {
    chain(e).find_map(|inner| inner.downcast_ref::<HttpError>().map(HttpError::kind))
}

/// Whether an I/O error below says the endpoint could not be reached.
fn unreachable_io(e: &(dyn StdError + 'static)) -> bool {
    chain(e).any(|inner| {
        inner.downcast_ref::<std::io::Error>().is_some_and(|io| {
            matches!(
                io.kind(),
                ErrorKind::ConnectionRefused
                    | ErrorKind::HostUnreachable
                    | ErrorKind::NetworkUnreachable
                    | ErrorKind::AddrNotAvailable
            )
        })
    })
}

/// What only the text of an `object_store` error tells about the answer.
///
/// `object_store` 0.14 keeps the answer of a failed request (its
/// `RetryError`, with `status()` and `body()`) in a module it does not
/// export (`client::retry` is `pub(crate)`), so the type cannot be named
/// here and nothing can be downcast to it. It types only some statuses (404,
/// 409, 412, 401, 403, 304, and not for every request: a refused listing is
/// `Generic`); the rest, and the S3 error code of the body (which tells
/// `NoSuchBucket` from `NoSuchKey`, both 404), reach us only in the error's
/// text: `Server returned non-2xx status code: 503 Service Unavailable:
/// <Error><Code>SlowDown</Code>...`. This is the only place that reads it.
#[derive(Debug, Default, PartialEq, Eq)]
struct ResponseText {
    /// The HTTP status of the answer.
    status: Option<u16>,
    /// The `<Code>` of the S3 error body.
    s3_code: Option<String>,
}

impl ResponseText {
    fn of(e: &(dyn StdError + 'static)) -> ResponseText {
        let text = chain_text(e);
        let status = text
            .split_once("status code: ")
            .and_then(|(_, rest)| rest.get(..3))
            .and_then(|digits| digits.parse().ok());
        let s3_code = text
            .split_once("<Code>")
            .and_then(|(_, rest)| rest.split_once("</Code>"))
            .map(|(code, _)| code.trim().to_string());
        ResponseText { status, s3_code }
    }
}

/// S3 error codes of refused credentials or signatures.
const AUTH_CODES: &[&str] = &[
    "AccessDenied",
    "InvalidAccessKeyId",
    "SignatureDoesNotMatch",
    "ExpiredToken",
    "InvalidToken",
    "TokenRefreshRequired",
];

/// S3 error codes of a service asking the client to slow down.
const THROTTLE_CODES: &[&str] = &[
    "SlowDown",
    "Throttling",
    "ThrottlingException",
    "RequestLimitExceeded",
    "TooManyRequests",
];

/// Classifies a failure of `what` (an operation on a key, for the message).
pub(crate) fn classify(what: &str, e: &object_store::Error) -> RemoteError {
    let answer = ResponseText::of(e);
    let code = answer.s3_code.as_deref();
    let kind = if code == Some("NoSuchBucket") {
        RemoteFailure::NoSuchBucket
    } else if matches!(
        e,
        object_store::Error::PermissionDenied { .. } | object_store::Error::Unauthenticated { .. }
    ) || code.is_some_and(|c| AUTH_CODES.contains(&c))
        || matches!(answer.status, Some(401 | 403))
    {
        RemoteFailure::Auth
    } else if code.is_some_and(|c| THROTTLE_CODES.contains(&c))
        || matches!(answer.status, Some(429 | 503))
    {
        RemoteFailure::Throttled
    } else {
        match transport_kind(e) {
            Some(HttpErrorKind::Connect) => RemoteFailure::Unreachable,
            Some(HttpErrorKind::Timeout) => RemoteFailure::Timeout,
            _ if unreachable_io(e) => RemoteFailure::Unreachable,
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
