//! The version-1 task manifest: strict decoding and every validation rule,
//! producing a [`Plan`] before anything is created on disk.

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::git;
use stow_checkpoint::fsutil::{absolute, clean};
use stow_checkpoint::paths::{
    check_team, clean_destination, is_sensitive, join_rel, segment_problem,
};
use stow_checkpoint::{Result, WsError};

/// Default workspace byte quota when the manifest gives 0 or nothing.
pub const DEFAULT_MAX_BYTES: u64 = 64 << 20;
/// Default workspace object quota when the manifest gives 0 or nothing.
pub const DEFAULT_MAX_OBJECTS: u64 = 10_000;
/// Largest manifest file read.
const MAX_MANIFEST_BYTES: u64 = 1 << 20;

/// A file or directory input.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InputSpec {
    /// Local file or directory, relative to the manifest's directory.
    pub source: String,
    /// Destination relative to the new root.
    #[serde(default)]
    pub destination: String,
}

/// A Git repository input with an explicit ref.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RepositorySpec {
    /// Local repository, relative to the manifest's directory.
    pub source: String,
    /// Destination directory relative to the new root.
    #[serde(default)]
    pub destination: String,
    /// The ref (or commit) to check out; required.
    #[serde(rename = "ref", default)]
    pub reference: String,
}

/// The version-1 task manifest, as written by users.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TaskManifest {
    pub version: i64,
    #[serde(default)]
    pub root: String,
    #[serde(default)]
    pub working_directory: String,
    #[serde(default)]
    pub inputs: Vec<InputSpec>,
    #[serde(default)]
    pub repositories: Vec<RepositorySpec>,
    #[serde(default)]
    pub max_bytes: i64,
    #[serde(default)]
    pub max_objects: i64,
    #[serde(default)]
    pub max_checkpoint_bytes: i64,
    #[serde(default)]
    pub max_checkpoints: i64,
    #[serde(default)]
    pub max_workspaces: i64,
    #[serde(default)]
    pub ttl_seconds: i64,
    #[serde(default)]
    pub registry_dir: String,
    #[serde(default)]
    pub team: String,
    #[serde(default)]
    pub bucket: String,
    #[serde(default)]
    pub include_sensitive_inputs: bool,
}

impl TaskManifest {
    /// Strictly decodes a manifest: exactly one JSON object, unknown fields
    /// refused, version 1 only.
    pub fn decode(bytes: &[u8]) -> Result<TaskManifest> {
        // Read the version first so a future version gets a version error
        // rather than a confusing unknown-field error.
        let value: serde_json::Value = serde_json::from_slice(bytes)
            .map_err(|e| WsError::InvalidManifest(format!("not a single JSON value: {e}")))?;
        let version = value.get("version").and_then(|v| v.as_i64());
        match version {
            Some(1) => {}
            Some(v) => {
                return Err(WsError::InvalidManifest(format!(
                    "unsupported task manifest version {v} (supported: 1)"
                )))
            }
            None => {
                return Err(WsError::InvalidManifest(
                    "version is required (supported: 1)".into(),
                ))
            }
        }
        // Decode the raw bytes (not the Value) so duplicate fields are refused.
        serde_json::from_slice(bytes).map_err(|e| WsError::InvalidManifest(e.to_string()))
    }

    /// Reads and decodes a manifest file.
    pub fn load(path: &Path) -> Result<TaskManifest> {
        let meta = fs::metadata(path).map_err(|e| WsError::io_at("read manifest", path, e))?;
        if !meta.is_file() || meta.len() > MAX_MANIFEST_BYTES {
            return Err(WsError::InvalidManifest(format!(
                "{} must be a regular file of at most 1 MiB",
                path.display()
            )));
        }
        let bytes = fs::read(path).map_err(|e| WsError::io_at("read manifest", path, e))?;
        Self::decode(&bytes)
    }
}

/// One file to copy into the new root.
#[derive(Debug, Clone)]
pub struct PlannedFile {
    /// Absolute source path.
    pub source: PathBuf,
    /// Clean slash destination relative to the root.
    pub dest: String,
    /// Mode, already masked with 0755.
    pub mode: u32,
    /// Size at planning time.
    pub size: u64,
}

/// One repository to stage.
#[derive(Debug, Clone)]
pub struct PlannedRepo {
    /// Absolute top level of the source repository.
    pub toplevel: PathBuf,
    /// Clean destination relative to the root.
    pub dest: String,
    /// The ref as the manifest gave it.
    pub reference: String,
    /// The resolved commit.
    pub commit: String,
}

/// A fully validated preparation: everything checked that can be checked
/// without creating anything.
#[derive(Debug, Clone)]
pub struct Plan {
    pub root: PathBuf,
    pub working_directory: String,
    pub repos: Vec<PlannedRepo>,
    pub files: Vec<PlannedFile>,
    /// Directories to create (inputs that are empty directories included).
    pub dirs: Vec<String>,
    pub max_bytes: u64,
    pub max_objects: u64,
    pub max_checkpoint_bytes: u64,
    pub max_checkpoints: u64,
    pub max_workspaces: u64,
    pub ttl_seconds: u64,
    /// The registry root (before the team partition), absolute.
    pub registry_base: Option<PathBuf>,
    pub team: Option<String>,
    pub bucket: Option<String>,
    pub include_sensitive: bool,
    /// Bytes and files known before staging (inputs plus Git trees).
    pub planned_bytes: u64,
    pub planned_objects: u64,
}

fn resolve_from(base: &Path, p: &str) -> PathBuf {
    let p = Path::new(p);
    if p.is_absolute() {
        clean(p)
    } else {
        clean(&base.join(p))
    }
}

fn nonneg(v: i64) -> Result<u64> {
    u64::try_from(v).map_err(|_| {
        WsError::InvalidManifest("task manifest limits and TTL must not be negative".into())
    })
}

fn check_sensitive(path: &str, allowed: bool) -> Result<()> {
    if !allowed && is_sensitive(path) {
        return Err(WsError::SensitivePath {
            path: path.to_string(),
            opt_in: "include_sensitive_inputs: true",
        });
    }
    Ok(())
}

impl Plan {
    /// Validates `manifest` (read from `manifest_path`) into a plan. Reads
    /// sources and Git repositories; creates nothing.
    pub fn build(manifest: &TaskManifest, manifest_path: &Path) -> Result<Plan> {
        let manifest_path = absolute(manifest_path)?;
        let base = manifest_path
            .parent()
            .ok_or_else(|| WsError::InvalidManifest("manifest has no directory".into()))?
            .to_path_buf();
        let m = manifest;
        let or_default = |v: u64, default: u64| if v == 0 { default } else { v };
        let max_bytes = or_default(nonneg(m.max_bytes)?, DEFAULT_MAX_BYTES);
        let max_objects = or_default(nonneg(m.max_objects)?, DEFAULT_MAX_OBJECTS);
        let max_checkpoint_bytes = nonneg(m.max_checkpoint_bytes)?;
        let max_checkpoints = nonneg(m.max_checkpoints)?;
        let max_workspaces = nonneg(m.max_workspaces)?;
        let ttl_seconds = nonneg(m.ttl_seconds)?;
        if m.inputs.is_empty() && m.repositories.is_empty() {
            return Err(WsError::InvalidManifest(
                "prepare requires at least one input".into(),
            ));
        }
        let team = (!m.team.is_empty()).then(|| m.team.clone());
        if let Some(t) = &team {
            check_team(t)?;
        }
        let bucket = (!m.bucket.is_empty()).then(|| m.bucket.clone());
        if let Some(b) = &bucket {
            stow_bucket_name(b)?;
        }
        let registry_base =
            (!m.registry_dir.is_empty()).then(|| resolve_from(&base, &m.registry_dir));
        let root = new_root(&base, &m.root)?;
        let working_directory = clean_destination(&m.working_directory)?;

        let mut seeds = Seeds::new(m.include_sensitive_inputs);
        let mut repos: Vec<PlannedRepo> = Vec::new();
        for r in &m.repositories {
            let planned = seeds.add_repository(&base, r, &repos)?;
            repos.push(planned);
        }
        for input in &m.inputs {
            seeds.add_input(&base, input)?;
        }
        seeds.check_destinations(&working_directory)?;
        check_seeded(seeds.bytes, seeds.objects, max_bytes, max_objects)?;
        Ok(Plan {
            root,
            working_directory,
            repos,
            files: seeds.files,
            dirs: seeds.dirs,
            max_bytes,
            max_objects,
            max_checkpoint_bytes,
            max_checkpoints,
            max_workspaces,
            ttl_seconds,
            registry_base,
            team,
            bucket,
            include_sensitive: seeds.include_sensitive,
            planned_bytes: seeds.bytes,
            planned_objects: seeds.objects,
        })
    }
}

/// Refuses a seeded tree of `bytes` in `objects` files beyond a
/// workspace's quotas: checked on the plan, and again on what prepare
/// actually copied (a source may have grown since).
pub(crate) fn check_seeded(
    bytes: u64,
    objects: u64,
    max_bytes: u64,
    max_objects: u64,
) -> Result<()> {
    if bytes > max_bytes {
        return Err(WsError::CapacityExceeded(format!(
            "seeded bytes {bytes} exceed workspace limit {max_bytes}"
        )));
    }
    if objects > max_objects {
        return Err(WsError::CapacityExceeded(format!(
            "seeded objects {objects} exceed workspace limit {max_objects}"
        )));
    }
    Ok(())
}

/// The root a manifest names: a new dedicated directory whose parent exists.
fn new_root(base: &Path, named: &str) -> Result<PathBuf> {
    if named.trim().is_empty() {
        return Err(WsError::InvalidManifest("root is required".into()));
    }
    let root = resolve_from(base, named);
    if root == base || root.parent().is_none() {
        return Err(WsError::InvalidRoot {
            root,
            reason: "root must name a new dedicated directory".into(),
        });
    }
    check_new_root(&root)?;
    Ok(root)
}

/// What a plan seeds the workspace with, gathered input by input: every
/// file destination claimed once (to refuse duplicates and file/directory
/// clashes), the files and directories to create, and their totals.
struct Seeds {
    include_sensitive: bool,
    claimed: BTreeMap<String, &'static str>,
    files: Vec<PlannedFile>,
    dirs: Vec<String>,
    bytes: u64,
    objects: u64,
}

impl Seeds {
    fn new(include_sensitive: bool) -> Seeds {
        Seeds {
            include_sensitive,
            claimed: BTreeMap::new(),
            files: Vec::new(),
            dirs: Vec::new(),
            bytes: 0,
            objects: 0,
        }
    }

    /// Claims destination `rel` for one file of `size` bytes.
    fn claim_file(&mut self, rel: &str, size: u64) -> Result<()> {
        check_sensitive(rel, self.include_sensitive)?;
        claim(&mut self.claimed, rel, "file")?;
        self.bytes += size;
        self.objects += 1;
        Ok(())
    }

    /// Resolves repository `r` (its ref, its tree) and claims its files;
    /// its destination must not overlap those of `earlier` repositories.
    fn add_repository(
        &mut self,
        base: &Path,
        r: &RepositorySpec,
        earlier: &[PlannedRepo],
    ) -> Result<PlannedRepo> {
        if r.source.trim().is_empty() {
            return Err(WsError::InvalidManifest(
                "repository source is required".into(),
            ));
        }
        let source = resolve_from(base, &r.source);
        if r.reference.trim().is_empty() {
            return Err(WsError::Git {
                source_repo: source,
                reason: "an explicit ref is required".into(),
            });
        }
        let dest = clean_destination(&r.destination)?;
        if dest.is_empty() {
            return Err(WsError::InvalidPath {
                path: r.destination.clone(),
                reason: "a repository destination must name a subdirectory".into(),
            });
        }
        let overlaps = |other: &str| {
            other == dest
                || other.starts_with(&format!("{dest}/"))
                || dest.starts_with(&format!("{other}/"))
        };
        if earlier.iter().any(|o| overlaps(&o.dest)) {
            return Err(WsError::InvalidPath {
                path: dest.clone(),
                reason: "repository destinations overlap".into(),
            });
        }
        let (toplevel, commit) = git::resolve(&source, &r.reference)?;
        for entry in git::ls_tree(&toplevel, &commit)? {
            match entry.mode.as_str() {
                // Submodules are not included (no recursion).
                "160000" => continue,
                "120000" => {
                    return Err(WsError::InvalidInput {
                        path: toplevel.join(&entry.path),
                        reason: "symbolic links are refused in repository checkouts".into(),
                    })
                }
                _ => {}
            }
            self.claim_file(&join_rel(&dest, &entry.path), entry.size)?;
        }
        Ok(PlannedRepo {
            toplevel,
            dest,
            reference: r.reference.clone(),
            commit,
        })
    }

    /// Claims input `input`: one file, or a directory's whole tree.
    fn add_input(&mut self, base: &Path, input: &InputSpec) -> Result<()> {
        if input.source.trim().is_empty() {
            return Err(WsError::InvalidManifest("input source is required".into()));
        }
        let source = resolve_from(base, &input.source);
        let dest = clean_destination(&input.destination)?;
        let meta =
            fs::symlink_metadata(&source).map_err(|e| WsError::io_at("read input", &source, e))?;
        let ft = meta.file_type();
        if ft.is_symlink() {
            Err(WsError::InvalidInput {
                path: source,
                reason: "symbolic links are refused".into(),
            })
        } else if ft.is_file() {
            if dest.is_empty() {
                return Err(WsError::InvalidPath {
                    path: input.destination.clone(),
                    reason: "a file input needs a destination file name".into(),
                });
            }
            let name = source
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            check_sensitive(&name, self.include_sensitive)?;
            self.add_file(source, dest, &meta)
        } else if ft.is_dir() {
            if !dest.is_empty() {
                self.dirs.push(dest.clone());
            }
            self.walk_input(&source, &source, &dest)
        } else {
            Err(WsError::InvalidInput {
                path: source,
                reason: "not a regular file or directory".into(),
            })
        }
    }

    fn add_file(&mut self, source: PathBuf, dest: String, meta: &fs::Metadata) -> Result<()> {
        self.claim_file(&dest, meta.len())?;
        self.files.push(PlannedFile {
            source,
            dest,
            mode: meta.permissions().mode() & 0o755,
            size: meta.len(),
        });
        Ok(())
    }

    /// Claims every entry below `dir` (inside input directory `top`) at
    /// destination `dest`, in name order.
    fn walk_input(&mut self, top: &Path, dir: &Path, dest: &str) -> Result<()> {
        let mut entries: Vec<_> = fs::read_dir(dir)
            .map_err(|e| WsError::io_at("read input directory", dir, e))?
            .collect::<std::io::Result<_>>()
            .map_err(|e| WsError::io_at("read input directory", dir, e))?;
        entries.sort_by_key(|e| e.file_name());
        for entry in entries {
            let path = entry.path();
            let name = entry.file_name().to_string_lossy().into_owned();
            let within = path
                .strip_prefix(top)
                .map(|p| p.to_string_lossy().into_owned())
                .unwrap_or_else(|_| name.clone());
            if let Some(reason) = segment_problem(&name) {
                return Err(WsError::InvalidPath {
                    path: within,
                    reason: reason.into(),
                });
            }
            if dest.is_empty() && name.eq_ignore_ascii_case(".stow") {
                return Err(WsError::InvalidPath {
                    path: within,
                    reason: ".stow is reserved".into(),
                });
            }
            let rel = join_rel(dest, &name);
            let meta =
                fs::symlink_metadata(&path).map_err(|e| WsError::io_at("read input", &path, e))?;
            let ft = meta.file_type();
            if ft.is_symlink() {
                return Err(WsError::InvalidInput {
                    path,
                    reason: "symbolic links are refused".into(),
                });
            } else if ft.is_dir() {
                check_sensitive(&format!("{rel}/"), self.include_sensitive)?;
                self.dirs.push(rel.clone());
                self.walk_input(top, &path, &rel)?;
            } else if ft.is_file() {
                self.add_file(path, rel, &meta)?;
            } else {
                return Err(WsError::InvalidInput {
                    path,
                    reason: "not a regular file or directory".into(),
                });
            }
        }
        Ok(())
    }

    /// Refuses a file destination that is also the parent of another one,
    /// or the working directory.
    fn check_destinations(&self, working_directory: &str) -> Result<()> {
        for path in self.claimed.keys() {
            let mut prefix = path.as_str();
            while let Some((parent, _)) = prefix.rsplit_once('/') {
                if self.claimed.contains_key(parent) {
                    return Err(WsError::InvalidPath {
                        path: path.clone(),
                        reason: format!("its parent {parent:?} is also a file destination"),
                    });
                }
                prefix = parent;
            }
        }
        if self.claimed.contains_key(working_directory) {
            return Err(WsError::InvalidPath {
                path: working_directory.to_string(),
                reason: "the working directory is a file destination".into(),
            });
        }
        Ok(())
    }
}

/// Refuses a root that exists (even as a dangling symlink) or whose parent
/// is not an existing directory.
pub fn check_new_root(root: &Path) -> Result<()> {
    if fs::symlink_metadata(root).is_ok() {
        return Err(WsError::InvalidRoot {
            root: root.to_path_buf(),
            reason: "root already exists; name a new directory".into(),
        });
    }
    let parent_ok = root
        .parent()
        .and_then(|p| fs::metadata(p).ok())
        .is_some_and(|m| m.is_dir());
    if !parent_ok {
        return Err(WsError::InvalidRoot {
            root: root.to_path_buf(),
            reason: "the root's parent directory must exist".into(),
        });
    }
    Ok(())
}

fn claim(
    claimed: &mut BTreeMap<String, &'static str>,
    rel: &str,
    kind: &'static str,
) -> Result<()> {
    if claimed.insert(rel.to_string(), kind).is_some() {
        return Err(WsError::InvalidPath {
            path: rel.to_string(),
            reason: "duplicate file destination".into(),
        });
    }
    Ok(())
}

fn stow_bucket_name(name: &str) -> Result<()> {
    let ok = (3..=63).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
        && name.as_bytes()[0].is_ascii_alphanumeric()
        && name.as_bytes()[name.len() - 1].is_ascii_alphanumeric()
        && !name.contains("..");
    if ok {
        Ok(())
    } else {
        Err(WsError::InvalidManifest(format!(
            "invalid bucket name {name:?}"
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A manifest in `dir` (with `a.txt`, `src/x.rs`, `src/y/z.rs`) whose
    /// JSON fields are `extra` plus a root and the version.
    fn plan(dir: &Path, extra: serde_json::Value) -> Result<Plan> {
        let mut doc = serde_json::json!({"version": 1, "root": "task"});
        if let (Some(doc), Some(extra)) = (doc.as_object_mut(), extra.as_object()) {
            doc.extend(extra.clone());
        }
        let manifest: TaskManifest = serde_json::from_value(doc).unwrap();
        Plan::build(&manifest, &dir.join("manifest.json"))
    }

    fn sources() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("a.txt"), "aaaa").unwrap();
        fs::create_dir_all(dir.path().join("src/y")).unwrap();
        fs::write(dir.path().join("src/x.rs"), "x").unwrap();
        fs::write(dir.path().join("src/y/z.rs"), "zz").unwrap();
        dir
    }

    fn refusal(r: Result<Plan>) -> String {
        match r {
            Ok(p) => panic!("planned {:?}", p.files),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn a_plan_lists_files_and_directories_with_their_totals() {
        let dir = sources();
        let p = plan(
            dir.path(),
            serde_json::json!({"inputs": [
                {"source": "a.txt", "destination": "docs/a.txt"},
                {"source": "src", "destination": "code"}
            ], "working_directory": "code"}),
        )
        .unwrap();
        let dests: Vec<&str> = p.files.iter().map(|f| f.dest.as_str()).collect();
        assert_eq!(dests, ["docs/a.txt", "code/x.rs", "code/y/z.rs"]);
        assert_eq!(p.dirs, ["code", "code/y"]);
        assert_eq!((p.planned_bytes, p.planned_objects), (7, 3));
        assert_eq!(p.root, dir.path().join("task"));
        assert_eq!(
            (p.max_bytes, p.max_objects),
            (DEFAULT_MAX_BYTES, DEFAULT_MAX_OBJECTS)
        );
    }

    #[test]
    fn clashing_destinations_are_refused() {
        let dir = sources();
        let twice = plan(
            dir.path(),
            serde_json::json!({"inputs": [
                {"source": "a.txt", "destination": "same"},
                {"source": "src/x.rs", "destination": "same"}
            ]}),
        );
        assert!(refusal(twice).contains("duplicate file destination"));
        let parent = plan(
            dir.path(),
            serde_json::json!({"inputs": [
                {"source": "a.txt", "destination": "code"},
                {"source": "src", "destination": "code"}
            ]}),
        );
        assert!(refusal(parent).contains("also a file destination"));
        let wd = plan(
            dir.path(),
            serde_json::json!({"inputs": [{"source": "a.txt", "destination": "a.txt"}],
                               "working_directory": "a.txt"}),
        );
        assert!(refusal(wd).contains("working directory is a file destination"));
    }

    #[test]
    fn quotas_bound_the_seeded_tree() {
        let dir = sources();
        let inputs = serde_json::json!([{"source": "src", "destination": "code"}]);
        let bytes = plan(
            dir.path(),
            serde_json::json!({"inputs": inputs, "max_bytes": 2}),
        );
        assert!(refusal(bytes).contains("seeded bytes 3 exceed workspace limit 2"));
        let objects = plan(
            dir.path(),
            serde_json::json!({"inputs": inputs, "max_objects": 1}),
        );
        assert!(refusal(objects).contains("seeded objects 2 exceed workspace limit 1"));
        let negative = plan(
            dir.path(),
            serde_json::json!({"inputs": inputs, "ttl_seconds": -1}),
        );
        assert!(refusal(negative).contains("must not be negative"));
    }

    #[test]
    fn inputs_and_roots_are_checked() {
        let dir = sources();
        let none = plan(dir.path(), serde_json::json!({}));
        assert!(refusal(none).contains("at least one input"));
        let unnamed = plan(
            dir.path(),
            serde_json::json!({"inputs": [{"source": "a.txt"}]}),
        );
        assert!(refusal(unnamed).contains("needs a destination file name"));
        std::os::unix::fs::symlink("a.txt", dir.path().join("src/link")).unwrap();
        let link = plan(
            dir.path(),
            serde_json::json!({"inputs": [{"source": "src", "destination": "c"}]}),
        );
        assert!(refusal(link).contains("symbolic links are refused"));
        fs::create_dir(dir.path().join("task")).unwrap();
        let exists = plan(
            dir.path(),
            serde_json::json!({"inputs": [{"source": "a.txt", "destination": "a"}]}),
        );
        assert!(refusal(exists).contains("root already exists"));
        let secret = tempfile::tempdir().unwrap();
        fs::write(secret.path().join(".env"), "K=V").unwrap();
        let sensitive = plan(
            secret.path(),
            serde_json::json!({"inputs": [{"source": ".env", "destination": "e"}]}),
        );
        assert!(refusal(sensitive).contains("include_sensitive_inputs"));
    }
}
