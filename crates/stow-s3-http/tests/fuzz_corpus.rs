//! The fuzz corpora of this crate's parsers in regression mode (issue 28):
//! every input kept in `fuzz/corpus/s3_headers` and `fuzz/corpus/post_form`
//! goes through its target again on every `make test`, without libFuzzer.

fn replay(target: &str, run: fn(&[u8])) {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/corpus")
        .join(target);
    let mut inputs: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    inputs.sort();
    assert!(!inputs.is_empty(), "{target}: an empty corpus");
    for input in inputs {
        eprintln!("{target}: {}", input.display());
        run(&std::fs::read(&input).unwrap());
    }
}

#[test]
fn every_s3_headers_input_goes_through_the_parsers() {
    replay("s3_headers", stow_s3_http::fuzzing::request_headers);
}

#[test]
fn every_post_form_input_goes_through_the_form_and_policy_readers() {
    replay("post_form", stow_s3_http::fuzzing::post_form);
}
