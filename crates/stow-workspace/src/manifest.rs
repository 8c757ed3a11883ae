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
        let max_bytes = nonneg(m.max_bytes)?;
        let max_objects = nonneg(m.max_objects)?;
        let max_checkpoint_bytes = nonneg(m.max_checkpoint_bytes)?;
        let max_checkpoints = nonneg(m.max_checkpoints)?;
        let max_workspaces = nonneg(m.max_workspaces)?;
        let ttl_seconds = nonneg(m.ttl_seconds)?;
        let max_bytes = if max_bytes == 0 {
            DEFAULT_MAX_BYTES
        } else {
            max_bytes
        };
        let max_objects = if max_objects == 0 {
            DEFAULT_MAX_OBJECTS
        } else {
            max_objects
        };
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

        // Root: a new dedicated directory whose parent exists.
        if m.root.trim().is_empty() {
            return Err(WsError::InvalidManifest("root is required".into()));
        }
        let root = resolve_from(&base, &m.root);
        if root == base || root.parent().is_none() {
            return Err(WsError::InvalidRoot {
                root,
                reason: "root must name a new dedicated directory".into(),
            });
        }
        check_new_root(&root)?;

        let working_directory = clean_destination(&m.working_directory)?;
        let include_sensitive = m.include_sensitive_inputs;

        // Every file destination, to refuse duplicates and file/dir clashes.
        let mut claimed: BTreeMap<String, &'static str> = BTreeMap::new();
        let mut planned_bytes = 0u64;
        let mut planned_objects = 0u64;

        let mut repos = Vec::new();
        let mut repo_dests: Vec<String> = Vec::new();
        for r in &m.repositories {
            if r.source.trim().is_empty() {
                return Err(WsError::InvalidManifest(
                    "repository source is required".into(),
                ));
            }
            let source = resolve_from(&base, &r.source);
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
            for other in &repo_dests {
                if *other == dest
                    || other.starts_with(&format!("{dest}/"))
                    || dest.starts_with(&format!("{other}/"))
                {
                    return Err(WsError::InvalidPath {
                        path: dest.clone(),
                        reason: "repository destinations overlap".into(),
                    });
                }
            }
            repo_dests.push(dest.clone());
            let (toplevel, commit) = git::resolve(&source, &r.reference)?;
            for entry in git::ls_tree(&toplevel, &commit)? {
                let rel = join_rel(&dest, &entry.path);
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
                check_sensitive(&rel, include_sensitive)?;
                claim(&mut claimed, &rel, "file")?;
                planned_bytes += entry.size;
                planned_objects += 1;
            }
            repos.push(PlannedRepo {
                toplevel,
                dest,
                reference: r.reference.clone(),
                commit,
            });
        }

        let mut files = Vec::new();
        let mut dirs = Vec::new();
        for input in &m.inputs {
            if input.source.trim().is_empty() {
                return Err(WsError::InvalidManifest("input source is required".into()));
            }
            let source = resolve_from(&base, &input.source);
            let dest = clean_destination(&input.destination)?;
            let meta = fs::symlink_metadata(&source)
                .map_err(|e| WsError::io_at("read input", &source, e))?;
            let ft = meta.file_type();
            if ft.is_symlink() {
                return Err(WsError::InvalidInput {
                    path: source,
                    reason: "symbolic links are refused".into(),
                });
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
                check_sensitive(&name, include_sensitive)?;
                check_sensitive(&dest, include_sensitive)?;
                claim(&mut claimed, &dest, "file")?;
                planned_bytes += meta.len();
                planned_objects += 1;
                files.push(PlannedFile {
                    source,
                    dest,
                    mode: meta.permissions().mode() & 0o755,
                    size: meta.len(),
                });
            } else if ft.is_dir() {
                if !dest.is_empty() {
                    dirs.push(dest.clone());
                }
                walk_input(
                    &source,
                    &source,
                    &dest,
                    include_sensitive,
                    &mut claimed,
                    &mut files,
                    &mut dirs,
                    &mut planned_bytes,
                    &mut planned_objects,
                )?;
            } else {
                return Err(WsError::InvalidInput {
                    path: source,
                    reason: "not a regular file or directory".into(),
                });
            }
        }
        // A file destination may not also be the parent of another one.
        for path in claimed.keys() {
            let mut prefix = path.as_str();
            while let Some((parent, _)) = prefix.rsplit_once('/') {
                if claimed.contains_key(parent) {
                    return Err(WsError::InvalidPath {
                        path: path.clone(),
                        reason: format!("its parent {parent:?} is also a file destination"),
                    });
                }
                prefix = parent;
            }
        }
        if claimed.contains_key(&working_directory) {
            return Err(WsError::InvalidPath {
                path: working_directory,
                reason: "the working directory is a file destination".into(),
            });
        }
        if planned_bytes > max_bytes {
            return Err(WsError::CapacityExceeded(format!(
                "seeded bytes {planned_bytes} exceed workspace limit {max_bytes}"
            )));
        }
        if planned_objects > max_objects {
            return Err(WsError::CapacityExceeded(format!(
                "seeded objects {planned_objects} exceed workspace limit {max_objects}"
            )));
        }
        Ok(Plan {
            root,
            working_directory,
            repos,
            files,
            dirs,
            max_bytes,
            max_objects,
            max_checkpoint_bytes,
            max_checkpoints,
            max_workspaces,
            ttl_seconds,
            registry_base,
            team,
            bucket,
            include_sensitive,
            planned_bytes,
            planned_objects,
        })
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

#[allow(clippy::too_many_arguments)]
fn walk_input(
    top: &Path,
    dir: &Path,
    dest: &str,
    include_sensitive: bool,
    claimed: &mut BTreeMap<String, &'static str>,
    files: &mut Vec<PlannedFile>,
    dirs: &mut Vec<String>,
    bytes: &mut u64,
    objects: &mut u64,
) -> Result<()> {
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
            check_sensitive(&format!("{rel}/"), include_sensitive)?;
            dirs.push(rel.clone());
            walk_input(
                top,
                &path,
                &rel,
                include_sensitive,
                claimed,
                files,
                dirs,
                bytes,
                objects,
            )?;
        } else if ft.is_file() {
            check_sensitive(&rel, include_sensitive)?;
            claim(claimed, &rel, "file")?;
            *bytes += meta.len();
            *objects += 1;
            files.push(PlannedFile {
                source: path,
                dest: rel,
                mode: meta.permissions().mode() & 0o755,
                size: meta.len(),
            });
        } else {
            return Err(WsError::InvalidInput {
                path,
                reason: "not a regular file or directory".into(),
            });
        }
    }
    Ok(())
}
