#![no_main]
//! Fuzz target `manifest_document`: see `stow_workspace::fuzzing`.

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    stow_workspace::fuzzing::run("manifest_document", data);
});
