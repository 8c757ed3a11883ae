//! The `mcp_line` fuzz corpus in regression mode (issue 28): every input
//! kept in `fuzz/corpus/mcp_line` goes through the transport's line
//! parser again on every `make test`, without libFuzzer.

#[test]
fn every_mcp_line_input_goes_through_the_transport() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/mcp_line");
    let mut inputs: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    inputs.sort();
    assert!(!inputs.is_empty(), "an empty corpus");
    for input in inputs {
        eprintln!("mcp_line: {}", input.display());
        stow_mcp::fuzzing::transport_line(&std::fs::read(&input).unwrap());
    }
}
