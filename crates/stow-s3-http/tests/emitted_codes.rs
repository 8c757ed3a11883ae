//! Every S3 error code this crate can emit is asserted by at least one
//! end-to-end test (`tests/e2e/*.py`, real clients against the binary):
//! the codes are read from the crate's sources (`s3_error!(Code, …)`,
//! `S3ErrorCode::Code`, `S3ErrorCode::Custom("Code")`), so a new refusal
//! without a test fails here by name.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The identifier starting at `text`'s beginning.
fn ident(text: &str) -> &str {
    let end = text
        .find(|c: char| !c.is_ascii_alphanumeric() && c != '_')
        .unwrap_or(text.len());
    &text[..end]
}

fn emitted_codes(src: &Path) -> BTreeSet<String> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let mut codes = BTreeSet::new();
    for file in files {
        let text = fs::read_to_string(&file).unwrap();
        // Unit tests name codes they check, not codes the server emits.
        let text = text.split("#[cfg(test)]").next().unwrap_or("");
        for (marker, quoted) in [
            ("s3_error!(", false),
            ("S3ErrorCode::Custom(\"", true),
            ("C::Custom(\"", true),
            ("S3ErrorCode::", false),
        ] {
            for (at, _) in text.match_indices(marker) {
                let rest = text[at + marker.len()..].trim_start();
                let code = ident(rest);
                if code.is_empty()
                    || code == "Custom"
                    || (!quoted && code.starts_with(char::is_lowercase))
                {
                    continue;
                }
                codes.insert(code.to_string());
            }
        }
    }
    codes
}

/// Codes whose response has no body, so a client sees only the status:
/// the tests assert that status instead.
const BODYLESS: &[(&str, &str)] = &[("NotModified", "== 304")];

#[test]
fn every_emitted_s3_error_code_is_asserted_end_to_end() {
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let codes = emitted_codes(&crate_dir.join("src"));
    assert!(
        codes.contains("NoSuchKey") && codes.contains("InsufficientStorage"),
        "the scan found {codes:?}"
    );
    let e2e = crate_dir.join("../../tests/e2e");
    let mut tests = String::new();
    for entry in fs::read_dir(&e2e).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "py") {
            tests.push_str(&fs::read_to_string(&path).unwrap());
        }
    }
    let untested: Vec<&String> = codes
        .iter()
        .filter(|c| !tests.contains(&format!("\"{c}\"")) && !tests.contains(&format!("'{c}'")))
        .filter(|c| {
            !BODYLESS
                .iter()
                .any(|(code, status)| code == c && tests.contains(status))
        })
        .collect();
    assert!(
        untested.is_empty(),
        "S3 error codes emitted by stow-s3-http but asserted by no test in tests/e2e: {untested:?}"
    );
}
