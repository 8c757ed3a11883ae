#![no_main]
//! Fuzz target `post_form`: see `stow_s3_http::fuzzing::post_form`.

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    stow_s3_http::fuzzing::post_form(data);
});
