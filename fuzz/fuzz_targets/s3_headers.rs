#![no_main]
//! Fuzz target `s3_headers`: see `stow_s3_http::fuzzing::request_headers`.

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    stow_s3_http::fuzzing::request_headers(data);
});
