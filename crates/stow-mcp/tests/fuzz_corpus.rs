//! The MCP fuzz corpora in regression mode (issue 28): every input kept
//! in `fuzz/corpus/<target>` goes through its entry point again on every
//! `make test`, without libFuzzer.

/// Runs `entry` over every input of corpus `target`.
fn replay(target: &str, entry: fn(&[u8])) {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/corpus")
        .join(target);
    let mut inputs: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    inputs.sort();
    assert!(!inputs.is_empty(), "an empty corpus");
    for input in inputs {
        eprintln!("{target}: {}", input.display());
        entry(&std::fs::read(&input).unwrap());
    }
}

#[test]
fn every_mcp_line_input_goes_through_the_transport() {
    replay("mcp_line", stow_mcp::fuzzing::transport_line);
}

#[test]
fn every_tool_arguments_input_goes_through_validation_and_the_call() {
    replay("mcp_tool_args", stow_mcp::fuzzing::tool_arguments);
}
