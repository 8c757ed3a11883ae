//! Versioning against a model: random puts, deletes, version deletes and
//! state changes, with every read, the full version listing and usage
//! checked after each step, on both backends.

use std::collections::BTreeMap;
use std::io::Cursor;

use stow_store::*;

/// Large enough to live in a blob file.
const FILE_BODY: usize = 100 * 1024;

fn put(s: &Store, b: &str, k: &str, body: &[u8]) -> ObjectMeta {
    s.put_object(b, k, &mut Cursor::new(body), PutOptions::default())
        .unwrap()
}

fn read(s: &Store, b: &str, k: &str, v: Option<&str>) -> Result<Vec<u8>> {
    s.get_object_version(b, k, v, None, None)?.body.into_vec()
}

fn all_versions(s: &Store, b: &str) -> Vec<VersionEntry> {
    let q = VersionQuery {
        max_keys: 100_000,
        ..Default::default()
    };
    s.list_object_versions(b, &q).unwrap().versions
}

#[test]
fn random_operations_match_a_model_on_disk() {
    let dir = tempfile::tempdir().unwrap();
    let s = Store::open(dir.path(), StoreOptions::default()).unwrap();
    random_operations_match_a_model(&s);
    assert!(s.verify().unwrap().is_empty());
}

#[test]
fn random_operations_match_a_model_in_memory() {
    let s = Store::memory(StoreOptions::default()).unwrap();
    random_operations_match_a_model(&s);
    assert!(s.verify().unwrap().is_empty());
}

/// One version in the model: its ID, whether it is a marker, its bytes.
#[derive(Debug, Clone)]
struct Model {
    vid: String,
    marker: bool,
    body: Vec<u8>,
}

/// A small deterministic generator (xorshift), so failures replay.
struct Rng(u64);

impl Rng {
    fn next(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

fn random_operations_match_a_model(s: &Store) {
    s.create_bucket("vbk").unwrap();
    let mut state = Versioning::Unversioned;
    let mut model: BTreeMap<String, Vec<Model>> = BTreeMap::new();
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let keys = ["a", "a/b", "b", "c/d/e", "z"];
    for step in 0..400 {
        let key = keys[rng.next(keys.len() as u64) as usize].to_string();
        let versions = model.entry(key.clone()).or_default();
        match rng.next(10) {
            0 => {
                state = if rng.next(2) == 0 {
                    Versioning::Enabled
                } else {
                    Versioning::Suspended
                };
                s.set_bucket_versioning("vbk", state).unwrap();
            }
            1..=4 => {
                let size = if rng.next(4) == 0 {
                    FILE_BODY
                } else {
                    1 + rng.next(40) as usize
                };
                let body = vec![step as u8; size];
                let meta = put(s, "vbk", &key, &body);
                let vid = meta.version_id.unwrap_or_else(|| "null".into());
                match state {
                    Versioning::Unversioned => versions.clear(),
                    Versioning::Suspended => versions.retain(|v| v.vid != "null"),
                    Versioning::Enabled => {}
                }
                versions.push(Model {
                    vid,
                    marker: false,
                    body,
                });
            }
            5..=6 => {
                let d = s.delete_object_version("vbk", &key, None).unwrap();
                match state {
                    Versioning::Unversioned => versions.clear(),
                    _ => {
                        if state == Versioning::Suspended {
                            versions.retain(|v| v.vid != "null");
                        }
                        versions.push(Model {
                            vid: d.version_id.unwrap(),
                            marker: true,
                            body: Vec::new(),
                        });
                    }
                }
            }
            _ => {
                if versions.is_empty() {
                    continue;
                }
                let i = rng.next(versions.len() as u64) as usize;
                let gone = versions.remove(i);
                let d = s
                    .delete_object_version("vbk", &key, Some(&gone.vid))
                    .unwrap();
                assert!(d.existed, "step {step}: {gone:?}");
                assert_eq!(d.delete_marker, gone.marker);
            }
        }
        check(s, &model, step);
    }
}

/// The store agrees with the model: every read, the full version listing,
/// and usage.
fn check(s: &Store, model: &BTreeMap<String, Vec<Model>>, step: usize) {
    let mut expected = Vec::new();
    let mut usage = Usage::default();
    for (key, versions) in model {
        match versions.last() {
            None => assert_eq!(read(s, "vbk", key, None).unwrap_err().code(), "no_such_key"),
            Some(v) if v.marker => assert!(
                matches!(
                    read(s, "vbk", key, None),
                    Err(StoreError::KeyDeleted { .. })
                ),
                "step {step}: {key}"
            ),
            Some(v) => assert_eq!(
                read(s, "vbk", key, None).unwrap(),
                v.body,
                "step {step}: {key}"
            ),
        }
        for (i, v) in versions.iter().enumerate().rev() {
            if !v.marker {
                assert_eq!(
                    read(s, "vbk", key, Some(&v.vid)).unwrap(),
                    v.body,
                    "step {step}"
                );
                usage.bytes += v.body.len() as u64;
                usage.objects += 1;
            }
            expected.push((
                key.clone(),
                v.vid.clone(),
                v.marker,
                i + 1 == versions.len(),
            ));
        }
    }
    let got: Vec<(String, String, bool, bool)> = all_versions(s, "vbk")
        .into_iter()
        .map(|v| (v.key, v.version_id, v.delete_marker, v.is_latest))
        .collect();
    assert_eq!(got, expected, "step {step}");
    assert_eq!(s.usage().unwrap(), usage, "step {step}");
}
