//! The fuzz corpus in regression mode (issue 28): every input kept in
//! `fuzz/corpus/<target>` — seeds from our own writers and anything a
//! fuzzing run found — goes through its target again on every `make test`,
//! without libFuzzer, so a fixed crash stays fixed.

use std::path::Path;

use stow_workspace::fuzzing::{run, TARGETS};

#[test]
fn every_corpus_input_goes_through_its_target() {
    let corpus = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus");
    for target in TARGETS {
        let dir = corpus.join(target);
        let mut inputs: Vec<_> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .map(|e| e.unwrap().path())
            .collect();
        inputs.sort();
        assert!(!inputs.is_empty(), "{target}: an empty corpus");
        for input in inputs {
            let bytes = std::fs::read(&input).unwrap();
            // A panic here names the input: keep it, fix the reader.
            eprintln!("{target}: {}", input.display());
            run(target, &bytes);
        }
    }
}
