#![no_main]
//! Fuzz target `archive_preview`: see `stow_workspace::fuzzing`.

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    stow_workspace::fuzzing::run("archive_preview", data);
});
