//! The store's behaviour contract, run against both backends.

use std::collections::BTreeMap;
use std::io::Cursor;
use std::sync::{Arc, Barrier};

use md5::Digest as _;
use stow_store::*;

#[path = "../common/mod.rs"]
mod common;
use common::*;

mod bucket_listing;
mod conditional;
mod cors;
mod encryption;
mod lifecycle;
mod lock;
mod objects;
mod policy;
mod saves;
mod settings;
mod uploads;
mod usage;
use bucket_listing::*;
use conditional::*;
use cors::*;
use encryption::*;
use lifecycle::*;
use lock::*;
use objects::*;
use policy::*;
use saves::*;
use settings::*;
use uploads::*;
use usage::*;

on_both_backends!(
    bucket_settings,
    bucket_policies,
    version_tags_and_acls,
    retried_completion_same_version,
    buckets,
    put_get_roundtrip,
    keys_are_opaque_and_validated,
    ranges,
    deletes,
    copies_share_bytes,
    listing,
    listing_pages_cover_everything,
    conditional_writes,
    create_only_race,
    checksums,
    guarded_saves,
    keyed_save_receipts,
    receipt_retention,
    multipart,
    multipart_refusals,
    multipart_checksums,
    quotas,
    outside_usage_counts_against_quotas,
    detached_puts,
    upload_cap,
    read_conditions,
    cors_rules,
    lock_buckets,
    lock_retention_rules,
    lock_refuses_deletes,
    lifecycle_rules,
    lifecycle_expires_current_versions,
    lifecycle_expires_versions,
    lifecycle_aborts_uploads,
    lifecycle_never_removes_locked_versions,
    lifecycle_expires_in_batches,
    sealed_objects,
    sealed_copies,
    copies_take_their_own_sse_s3,
    sealed_multipart,
    a_multipart_read_outlives_a_delete,
);

fn put(s: &Store, b: &str, k: &str, body: &[u8]) -> ObjectMeta {
    s.put_object(b, k, &mut Cursor::new(body), PutOptions::default())
        .unwrap()
}

fn get(s: &Store, b: &str, k: &str) -> Vec<u8> {
    s.get_object(b, k, None).unwrap().body.into_vec().unwrap()
}

fn body(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

fn md5_etag(data: &[u8]) -> String {
    let d = md5::Md5::digest(data);
    format!(
        "\"{}\"",
        d.iter().map(|b| format!("{b:02x}")).collect::<String>()
    )
}

fn keys(s: &Store, b: &str) -> Vec<String> {
    let q = ListQuery {
        max_keys: 100_000,
        ..Default::default()
    };
    s.list_objects(b, &q)
        .unwrap()
        .objects
        .into_iter()
        .map(|o| o.key)
        .collect()
}

/// A whole small object is checked against its ETag as it is read: bytes
/// damaged on disk end the body with an error instead of being served;
/// larger ones and ranges are left to `check` (`verify_contents`).
#[test]
fn a_damaged_small_blob_reads_as_an_error_not_as_wrong_bytes() {
    let f = disk(StoreOptions::default());
    let s = &f.store;
    s.create_bucket("bkt").unwrap();
    let small = body(100 * 1024, 3);
    let large = body(VERIFIED_READ_LIMIT as usize + 4096, 4);
    put(s, "bkt", "small", &small);
    put(s, "bkt", "large", &large);
    assert_eq!(get(s, "bkt", "small"), small);
    // Flip one byte in each blob file (the only two files under blobs/).
    let mut files = Vec::new();
    let mut dirs = vec![f.dir.as_ref().unwrap().path().join("data/blobs")];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(d).unwrap().flatten() {
            if e.file_type().unwrap().is_dir() {
                dirs.push(e.path());
            } else {
                files.push(e.path());
            }
        }
    }
    assert_eq!(files.len(), 2);
    for p in &files {
        let mut perms = std::fs::metadata(p).unwrap().permissions();
        #[allow(clippy::permissions_set_readonly_false)]
        perms.set_readonly(false);
        std::fs::set_permissions(p, perms).unwrap();
        let mut bytes = std::fs::read(p).unwrap();
        bytes[1000] ^= 1;
        std::fs::write(p, bytes).unwrap();
    }
    let err = s
        .get_object("bkt", "small", None)
        .unwrap()
        .body
        .into_vec()
        .unwrap_err();
    assert!(err.to_string().contains("ETag"), "{err}");
    // A range is served as stored, and the large body is not checked on
    // read: verify_contents names both.
    let r = s
        .get_object("bkt", "small", Some(ByteRange::FromTo(0, 9)))
        .unwrap()
        .body
        .into_vec()
        .unwrap();
    assert_eq!(r, small[..10]);
    assert_ne!(get(s, "bkt", "large"), large);
    let damaged = s.verify_contents().unwrap();
    assert_eq!(damaged.len(), 2, "{damaged:?}");
    // Put back, so the fixture's own check passes.
    for p in &files {
        let mut bytes = std::fs::read(p).unwrap();
        bytes[1000] ^= 1;
        std::fs::write(p, bytes).unwrap();
    }
    assert_eq!(get(s, "bkt", "small"), small);
}
