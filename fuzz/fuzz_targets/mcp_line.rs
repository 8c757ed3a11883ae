#![no_main]
//! Fuzz target `mcp_line`: see `stow_mcp::fuzzing`.

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    stow_mcp::fuzzing::transport_line(data);
});
