#![no_main]
//! Fuzz target `stat_cache`: see `stow_workspace::fuzzing`.

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    stow_workspace::fuzzing::run("stat_cache", data);
});
