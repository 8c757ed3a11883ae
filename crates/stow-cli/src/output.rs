//! What every verb's result goes through on its way to stdout: the one
//! JSON document, and the refusal for a watch service's mismatched reply.

use crate::CliError;

/// `v` as the JSON document the CLI prints.
pub(crate) fn json<T: serde::Serialize>(v: T) -> Result<serde_json::Value, CliError> {
    serde_json::to_value(v).map_err(|e| CliError::new("internal", format!("encode result: {e}")))
}

/// A watch service answered a request of one kind with a reply of another.
pub(crate) fn mismatched_reply() -> CliError {
    CliError::new(
        "internal",
        "the watch service answered with a reply of another kind",
    )
}
