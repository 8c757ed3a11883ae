//! Differences between two checkpoints: files, and for portable ones
//! buckets and objects.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use super::format::{load_manifest, FileEntry, ObjectEntry};
use crate::error::Result;
use crate::registry::Registry;

/// One difference between two checkpoints.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Change {
    pub path: String,
    pub kind: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub from: Option<FileEntry>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub to: Option<FileEntry>,
}

/// The result of `diff`.
#[derive(Debug, Clone, Serialize)]
pub struct DiffResult {
    pub version: u32,
    pub changes: Vec<Change>,
    /// Portable (v2) comparisons only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub buckets: Option<Vec<BucketChange>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub objects: Option<Vec<ObjectChange>>,
}

/// Differences between two checkpoints, sorted by path: `added`, `deleted`,
/// `changed` (content or mode).
pub fn diff(registry: &Registry, from: &str, to: &str) -> Result<DiffResult> {
    let a = load_manifest(registry, from)?;
    let b = load_manifest(registry, to)?;
    let portable = a.version == 2 || b.version == 2;
    Ok(DiffResult {
        version: 1,
        changes: diff_files(&a.files, &b.files),
        buckets: portable.then(|| diff_buckets(&a.buckets, &b.buckets)),
        objects: portable.then(|| diff_objects(&a.objects, &b.objects)),
    })
}

/// Sorted differences of two file lists.
pub fn diff_files(a: &[FileEntry], b: &[FileEntry]) -> Vec<Change> {
    diff_files_by(a, b, |f, t| {
        f.sha256 == t.sha256 && f.mode == t.mode && f.size == t.size
    })
}

/// Sorted differences of two file lists in any field, S3 properties
/// included (what a delta must carry to reproduce its target exactly).
pub(crate) fn diff_files_exact(a: &[FileEntry], b: &[FileEntry]) -> Vec<Change> {
    diff_files_by(a, b, |f, t| f == t)
}

fn diff_files_by(
    a: &[FileEntry],
    b: &[FileEntry],
    same: impl Fn(&FileEntry, &FileEntry) -> bool,
) -> Vec<Change> {
    let am: BTreeMap<&str, &FileEntry> = a.iter().map(|f| (f.path.as_str(), f)).collect();
    let bm: BTreeMap<&str, &FileEntry> = b.iter().map(|f| (f.path.as_str(), f)).collect();
    let paths: BTreeSet<&str> = am.keys().chain(bm.keys()).copied().collect();
    let mut out = Vec::new();
    for p in paths {
        let (kind, from, to) = match (am.get(p), bm.get(p)) {
            (None, Some(t)) => ("added", None, Some((*t).clone())),
            (Some(f), None) => ("deleted", Some((*f).clone()), None),
            (Some(f), Some(t)) if !same(f, t) => {
                ("changed", Some((*f).clone()), Some((*t).clone()))
            }
            _ => continue,
        };
        out.push(Change {
            path: p.to_string(),
            kind,
            from,
            to,
        });
    }
    out
}

/// One bucket difference of a portable diff.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct BucketChange {
    pub bucket: String,
    pub kind: &'static str,
}

/// One object difference of a portable diff.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ObjectChange {
    pub bucket: String,
    pub key: String,
    pub kind: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub from: Option<ObjectEntry>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub to: Option<ObjectEntry>,
}

pub(crate) fn diff_buckets(a: &[String], b: &[String]) -> Vec<BucketChange> {
    let a: BTreeSet<&String> = a.iter().collect();
    let b: BTreeSet<&String> = b.iter().collect();
    let mut out: Vec<BucketChange> = b
        .difference(&a)
        .map(|n| BucketChange {
            bucket: (*n).clone(),
            kind: "added",
        })
        .chain(a.difference(&b).map(|n| BucketChange {
            bucket: (*n).clone(),
            kind: "deleted",
        }))
        .collect();
    out.sort_by(|x, y| x.bucket.cmp(&y.bucket));
    out
}

pub(crate) fn diff_objects(a: &[ObjectEntry], b: &[ObjectEntry]) -> Vec<ObjectChange> {
    let key = |o: &ObjectEntry| (o.bucket.clone(), o.key.clone());
    let am: BTreeMap<(String, String), &ObjectEntry> = a.iter().map(|o| (key(o), o)).collect();
    let bm: BTreeMap<(String, String), &ObjectEntry> = b.iter().map(|o| (key(o), o)).collect();
    let keys: BTreeSet<&(String, String)> = am.keys().chain(bm.keys()).collect();
    let mut out = Vec::new();
    for k in keys {
        let (kind, from, to) = match (am.get(k), bm.get(k)) {
            (None, Some(t)) => ("added", None, Some((*t).clone())),
            (Some(f), None) => ("deleted", Some((*f).clone()), None),
            (Some(f), Some(t)) if f != t => ("changed", Some((*f).clone()), Some((*t).clone())),
            _ => continue,
        };
        out.push(ObjectChange {
            bucket: k.0.clone(),
            key: k.1.clone(),
            kind,
            from,
            to,
        });
    }
    out
}
