//! The `stow-s3` binary as a user runs it.

use std::io::Cursor;
use std::path::Path;
use std::process::{Command, Output};

use stow_store::{ObjectProps, SaveGuard, SaveRequest, Store, StoreOptions};

fn stow(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_stow-s3"))
        .args(args)
        .output()
        .expect("the binary runs")
}

fn ok(out: &Output) {
    assert!(
        out.status.success(),
        "exit {:?}\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn json(out: &Output) -> serde_json::Value {
    let text = String::from_utf8(out.stdout.clone()).unwrap();
    let mut docs = serde_json::Deserializer::from_str(&text).into_iter::<serde_json::Value>();
    let doc = docs.next().expect("a JSON document").unwrap();
    assert!(docs.next().is_none(), "exactly one JSON document: {text:?}");
    assert!(text.ends_with("}\n"), "pretty JSON ends with a newline");
    doc
}

fn seed_receipts(dir: &Path, n: usize) {
    let store = Store::open(dir, StoreOptions::default()).unwrap();
    store.create_bucket("files").unwrap();
    for i in 0..n {
        let req = SaveRequest {
            bucket: "files".into(),
            key: format!("k{i}"),
            props: ObjectProps::default(),
            checksum_algorithm: None,
            guard: SaveGuard::Replace,
            request_key: Some(format!("req-{i:02}")),
        };
        store.save(req, &mut Cursor::new(b"body")).unwrap();
    }
}

#[test]
fn version_and_help() {
    let out = stow(&["--version"]);
    ok(&out);
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("stow-s3 "));
    let out = stow(&["--help"]);
    ok(&out);
    assert!(String::from_utf8_lossy(&out.stdout).contains("receipts"));
}

#[test]
fn usage_errors_exit_2() {
    for args in [
        &["no-such-command"][..],
        &["receipts", "retire", "--data-dir", "/x"][..],
        &[][..],
    ] {
        let out = stow(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(
            out.stdout.is_empty(),
            "usage errors print nothing on stdout"
        );
    }
}

#[test]
fn receipts_list_and_retire() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("objects");
    seed_receipts(&dir, 5);
    let d = dir.to_str().unwrap();

    let out = stow(&["receipts", "list", "--data-dir", d, "--limit", "2"]);
    ok(&out);
    let v = json(&out);
    assert_eq!(v["retained"], 5);
    assert_eq!(v["truncated"], true);
    let keys: Vec<_> = v["receipts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["request_key"].clone())
        .collect();
    assert_eq!(keys, ["req-00", "req-01"]);
    assert_eq!(v["receipts"][0]["key"], "k0");
    assert_eq!(
        v["receipts"][0]["etag"],
        "\"841a2d689ad86bd1611447453c22c6fc\""
    );
    let out = stow(&["receipts", "list", "--data-dir", d, "--after", "req-03"]);
    let v = json(&out);
    assert_eq!(v["receipts"].as_array().unwrap().len(), 1);
    assert_eq!(v["truncated"], false);

    let out = stow(&[
        "receipts",
        "retire",
        "--data-dir",
        d,
        "--request-key",
        "req-01",
        "--request-key",
        "nope",
    ]);
    ok(&out);
    let v = json(&out);
    assert_eq!(
        (v["retired"].as_u64(), v["retained"].as_u64()),
        (Some(1), Some(4))
    );

    let out = stow(&["receipts", "retire", "--data-dir", d, "--all"]);
    assert_eq!(json(&out)["retained"], 0);
    let store = Store::open(&dir, StoreOptions::default()).unwrap();
    assert_eq!(
        store
            .resolve_save("files", "k0", "req-00")
            .unwrap_err()
            .code(),
        "not_found"
    );
    assert_eq!(
        store.usage().unwrap().objects,
        5,
        "retiring receipts keeps objects"
    );
}

#[test]
fn refusals_print_a_coded_error_and_create_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let missing = tmp.path().join("missing");
    let out = stow(&["receipts", "list", "--data-dir", missing.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(json(&out)["error"]["code"], "no_such_store");
    assert!(!missing.exists(), "a refused command creates nothing");

    // A store held by another process is refused by name.
    let dir = tmp.path().join("held");
    let _held = Store::open(&dir, StoreOptions::default()).unwrap();
    let out = stow(&["check", "--data-dir", dir.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    let v = json(&out);
    assert_eq!(v["error"]["code"], "store_locked");
    assert!(v["error"]["message"].as_str().unwrap().contains("held"));
}

#[test]
fn check_reports_a_consistent_store() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("objects");
    seed_receipts(&dir, 3);
    let out = stow(&["check", "--data-dir", dir.to_str().unwrap()]);
    ok(&out);
    let v = json(&out);
    assert_eq!(v["consistent"], true);
    assert_eq!(v["usage"]["objects"], 3);
}
