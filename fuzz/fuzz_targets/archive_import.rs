#![no_main]
//! Fuzz target `archive_import`: see `stow_workspace::fuzzing`.

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    stow_workspace::fuzzing::run("archive_import", data);
});
