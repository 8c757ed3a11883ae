//! Differences between two checkpoints: files, and for portable ones
//! buckets and objects; and the change types the engine reports them in
//! (a status's [`StatusChange`] too, which tells `changed` apart).

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::error::Result;
use crate::format::{FileEntry, LinkEntry, ObjectEntry};
use crate::registry::Registry;
use crate::stored::load_manifest;

/// One difference between two checkpoints (also a delta document's file
/// change, so unknown fields are refused when read).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Change {
    pub path: String,
    pub kind: Kind,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<FileEntry>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to: Option<FileEntry>,
}

/// What happened to a path, an object or a bucket.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    Added,
    Deleted,
    Changed,
}

/// One link change: added (`to`), deleted (`from`) or retargeted (both).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LinkChange {
    pub path: String,
    pub kind: Kind,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to: Option<String>,
}

/// What happened to a file's path since the checkpoint: `diff`'s
/// `changed` told apart by what changed, as `git status` does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StatusKind {
    Added,
    Deleted,
    /// The bytes differ (and maybe the mode).
    Modified,
    /// Only the permission bits differ.
    ModeChanged,
    /// A file where the checkpoint has a symbolic link, or the other way
    /// round (the link's side is in `links`).
    TypeChanged,
}

/// One file change of a status: a `diff` change whose kind says what
/// changed.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StatusChange {
    pub path: String,
    pub kind: StatusKind,
    /// The checkpoint's file at the path (absent: the tree added it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<FileEntry>,
    /// The tree's file at the path (absent: the tree deleted it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to: Option<FileEntry>,
}

impl StatusChange {
    /// `diff`'s kind of this change: added, deleted (a type change counts
    /// by its file's side) or changed.
    pub fn diff_kind(&self) -> Kind {
        match (&self.from, &self.to) {
            (None, _) => Kind::Added,
            (_, None) => Kind::Deleted,
            _ => Kind::Changed,
        }
    }

    /// The change as `diff` reports it (the MCP profile's entries).
    pub fn to_diff(&self) -> Change {
        Change {
            path: self.path.clone(),
            kind: self.diff_kind(),
            from: self.from.clone(),
            to: self.to.clone(),
        }
    }
}

/// Sorted link differences: added, deleted, retargeted (`changed`).
pub fn diff_links(a: &[LinkEntry], b: &[LinkEntry]) -> Vec<LinkChange> {
    let am: BTreeMap<&str, &str> = a
        .iter()
        .map(|l| (l.path.as_str(), l.target.as_str()))
        .collect();
    let bm: BTreeMap<&str, &str> = b
        .iter()
        .map(|l| (l.path.as_str(), l.target.as_str()))
        .collect();
    let paths: BTreeSet<&str> = am.keys().chain(bm.keys()).copied().collect();
    paths
        .into_iter()
        .filter_map(|p| {
            let (from, to) = (am.get(p).copied(), bm.get(p).copied());
            let kind = match (from, to) {
                (None, Some(_)) => Kind::Added,
                (Some(_), None) => Kind::Deleted,
                (Some(x), Some(y)) if x != y => Kind::Changed,
                _ => return None,
            };
            Some(LinkChange {
                path: p.to_string(),
                kind,
                from: from.map(str::to_string),
                to: to.map(str::to_string),
            })
        })
        .collect()
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
    /// Symbolic links added, removed or retargeted (present when either
    /// checkpoint has links).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub links: Option<Vec<LinkChange>>,
    /// The `from` checkpoint's message.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub from_message: Option<String>,
    /// The `to` checkpoint's message.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub to_message: Option<String>,
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
        links: (!a.links.is_empty() || !b.links.is_empty()).then(|| diff_links(&a.links, &b.links)),
        from_message: a.message,
        to_message: b.message,
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
            (None, Some(t)) => (Kind::Added, None, Some((*t).clone())),
            (Some(f), None) => (Kind::Deleted, Some((*f).clone()), None),
            (Some(f), Some(t)) if !same(f, t) => {
                (Kind::Changed, Some((*f).clone()), Some((*t).clone()))
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

/// One bucket difference of a portable diff or delta: `added` or `deleted`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BucketChange {
    pub bucket: String,
    pub kind: Kind,
}

/// One object difference of a portable diff or delta.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ObjectChange {
    pub bucket: String,
    pub key: String,
    pub kind: Kind,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<ObjectEntry>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to: Option<ObjectEntry>,
}

pub(crate) fn diff_buckets(a: &[String], b: &[String]) -> Vec<BucketChange> {
    let a: BTreeSet<&String> = a.iter().collect();
    let b: BTreeSet<&String> = b.iter().collect();
    let mut out: Vec<BucketChange> = b
        .difference(&a)
        .map(|n| BucketChange {
            bucket: (*n).clone(),
            kind: Kind::Added,
        })
        .chain(a.difference(&b).map(|n| BucketChange {
            bucket: (*n).clone(),
            kind: Kind::Deleted,
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
            (None, Some(t)) => (Kind::Added, None, Some((*t).clone())),
            (Some(f), None) => (Kind::Deleted, Some((*f).clone()), None),
            (Some(f), Some(t)) if f != t => (Kind::Changed, Some((*f).clone()), Some((*t).clone())),
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
