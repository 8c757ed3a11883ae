//! Entry points for the fuzzer (`fuzz/`, issue 28) and the regression run
//! of its corpus (`tests/fuzz_corpus.rs`): hostile bytes in, never a
//! panic, hang or unbounded allocation. Not an API.

/// One line of the stdio transport: parsed as a JSON-RPC message, and its
/// request ID sought in its first bytes (what an over-long line is
/// answered with).
pub fn transport_line(bytes: &[u8]) {
    let _ = crate::transport::parse(bytes);
    let _ = crate::transport::request_id_prefix(bytes);
}
