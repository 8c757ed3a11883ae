#![no_main]
//! Fuzz target `handoff_document`: see `stow_workspace::fuzzing`.

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    stow_workspace::fuzzing::run("handoff_document", data);
});
