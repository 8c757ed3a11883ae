//! The `s3_headers` fuzz corpus in regression mode (issue 28): every input
//! kept in `fuzz/corpus/s3_headers` goes through the request parsers
//! again on every `make test`, without libFuzzer.

#[test]
fn every_s3_headers_input_goes_through_the_parsers() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/s3_headers");
    let mut inputs: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    inputs.sort();
    assert!(!inputs.is_empty(), "an empty corpus");
    for input in inputs {
        eprintln!("s3_headers: {}", input.display());
        stow_s3_http::fuzzing::request_headers(&std::fs::read(&input).unwrap());
    }
}
