#![no_main]
//! Fuzz target `mcp_tool_args`: see `stow_mcp::fuzzing::tool_arguments`.

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    stow_mcp::fuzzing::tool_arguments(data);
});
