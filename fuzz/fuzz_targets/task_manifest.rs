#![no_main]
//! Fuzz target `task_manifest`: see `stow_workspace::fuzzing`.

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    stow_workspace::fuzzing::run("task_manifest", data);
});
