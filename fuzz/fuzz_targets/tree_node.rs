#![no_main]
//! Fuzz target `tree_node`: see `stow_workspace::fuzzing`.

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    stow_workspace::fuzzing::run("tree_node", data);
});
