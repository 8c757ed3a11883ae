//! `stow-s3 mcp`: parses the profile flags and runs the MCP server on
//! stdio (see the `stow-mcp` crate).
//!
//! The object profile is selected by `--object-dir` or `--bucket` (given at
//! all, even empty); otherwise the workspace profile is meant. A flag of the
//! other profile counts as given whatever its value (`--create-bucket=false`
//! included) and is refused as incompatible.
//!
//! In MCP mode stdout carries JSON-RPC only, so refusals are reported on
//! stderr and the process exits directly (2 for usage, 1 otherwise) instead
//! of printing the CLI's JSON error document.

use std::path::PathBuf;

use clap::Args;

use crate::CliError;

/// Flags of both MCP profiles.
#[derive(Debug, Args)]
#[command(
    about = "Serve MCP over stdio: the object profile (guarded saves of one bucket) or the workspace profile",
    long_about = "Serve MCP over stdio for an agent host.\n\n\
Object profile: stow-s3 mcp --object-dir /abs/objects --bucket files [--create-bucket] [--read-only] [--browser]\n\
Workspace profile: stow-s3 mcp --registry-dir /abs/registry --workspace-id ID --timeout 30s [--export-root D [--adopt-root D]]\n\n\
The server owns the object directory until stdin closes or SIGINT/SIGTERM; object data and save receipts remain."
)]
pub struct McpArgs {
    /// Object profile: the owned object-store directory (made absolute).
    #[arg(long, value_name = "DIR", help_heading = "Object profile")]
    object_dir: Option<PathBuf>,
    /// Object profile: the single bucket tools may touch.
    #[arg(long, value_name = "NAME", help_heading = "Object profile")]
    bucket: Option<String>,
    /// Object profile: create the bucket (and store) if missing.
    #[arg(long, value_name = "BOOL", num_args = 0..=1, require_equals = true, default_missing_value = "true", help_heading = "Object profile")]
    create_bucket: Option<bool>,
    /// Object profile: allow reads and resolution only.
    #[arg(long, value_name = "BOOL", num_args = 0..=1, require_equals = true, default_missing_value = "true", help_heading = "Object profile")]
    read_only: Option<bool>,
    /// Object profile: add the bucket browser tools and resources.
    #[arg(long, value_name = "BOOL", num_args = 0..=1, require_equals = true, default_missing_value = "true", help_heading = "Object profile")]
    browser: Option<bool>,
    /// Object profile: store object-count quota [default: 10000].
    #[arg(
        long,
        value_name = "N",
        allow_hyphen_values = true,
        help_heading = "Object profile"
    )]
    max_objects: Option<i64>,
    /// Object profile: narrow the per-body limit, 0..=65536 (0 = 65536).
    #[arg(
        long,
        value_name = "N",
        allow_hyphen_values = true,
        help_heading = "Object profile"
    )]
    max_object_bytes: Option<i64>,
    /// Object profile: narrow the observation pool, 0..=256 (0 = 256).
    #[arg(
        long,
        value_name = "N",
        allow_hyphen_values = true,
        help_heading = "Object profile"
    )]
    max_observations: Option<i64>,
    /// Both profiles: object-store byte quota, or per-capture byte bound [default: 1073741824].
    #[arg(long, value_name = "N", allow_hyphen_values = true)]
    max_bytes: Option<i64>,
    /// Workspace profile: the workspace registry directory.
    #[arg(long, value_name = "DIR", help_heading = "Workspace profile")]
    registry_dir: Option<String>,
    /// Workspace profile: the one workspace the tools may touch.
    #[arg(long, value_name = "ID", help_heading = "Workspace profile")]
    workspace_id: Option<String>,
    /// Workspace profile: the workspace holding DIR (an attached or
    /// prepared one), instead of --registry-dir and --workspace-id; the
    /// deadline defaults to 30s.
    #[arg(long, value_name = "DIR", help_heading = "Workspace profile")]
    workspace_root: Option<std::path::PathBuf>,
    /// Workspace profile: per-capture file bound.
    #[arg(
        long,
        value_name = "N",
        allow_hyphen_values = true,
        help_heading = "Workspace profile"
    )]
    max_files: Option<String>,
    /// Workspace profile: deadline of capture, resolve, export and adopt (e.g. 30s).
    #[arg(
        long,
        value_name = "DURATION",
        allow_hyphen_values = true,
        help_heading = "Workspace profile"
    )]
    timeout: Option<String>,
    /// Workspace profile: existing directory enabling handoff export.
    #[arg(long, value_name = "DIR", help_heading = "Workspace profile")]
    export_root: Option<String>,
    /// Workspace profile: existing directory enabling adoption (with --export-root).
    #[arg(long, value_name = "DIR", help_heading = "Workspace profile")]
    adopt_root: Option<String>,
    /// Workspace profile: the registry's team partition (<registry-dir>/teams/<team>).
    #[arg(long, value_name = "TEAM", help_heading = "Workspace profile")]
    team: Option<String>,
}

/// The deadline of the workspace profile chosen by `--workspace-root`
/// when `--timeout` is not given.
const DEFAULT_ROOT_TIMEOUT: &str = "30s";

/// The registry directory, workspace and team of the workspace holding
/// `root` (its nearest ancestor with a workspace identity).
fn workspace_at(root: &std::path::Path) -> Result<(String, String, Option<String>), Refusal> {
    let refuse = |why: String| Refusal {
        usage: false,
        message: format!("--workspace-root {}: {why}", root.display()),
    };
    let dir = std::fs::canonicalize(root).map_err(|e| refuse(e.to_string()))?;
    let (_, ident) = stow_workspace::find_workspace(&dir).ok_or_else(|| {
        refuse("no workspace at or above it (run `stow-s3 workspace attach` there)".into())
    })?;
    let registry_dir = match ident.registry_dir {
        Some(d) => d,
        None => {
            stow_checkpoint::registry::default_registry_root().map_err(|e| refuse(e.to_string()))?
        }
    };
    Ok((
        registry_dir.display().to_string(),
        ident.workspace_id,
        ident.team,
    ))
}

/// The profile `stow-s3 mcp` runs.
enum Profile {
    Object(stow_mcp::ObjectConfig),
    Workspace(stow_mcp::workspace::WorkspaceConfig),
}

/// A refusal before serving: a message and the exit code.
struct Refusal {
    usage: bool,
    message: String,
}

fn usage(message: String) -> Refusal {
    Refusal {
        usage: true,
        message,
    }
}

impl McpArgs {
    fn given_workspace_flags(&self) -> Vec<&'static str> {
        let mut given = Vec::new();
        for (flag, present) in [
            ("--registry-dir", self.registry_dir.is_some()),
            ("--workspace-id", self.workspace_id.is_some()),
            ("--workspace-root", self.workspace_root.is_some()),
            ("--max-files", self.max_files.is_some()),
            ("--timeout", self.timeout.is_some()),
            ("--export-root", self.export_root.is_some()),
            ("--adopt-root", self.adopt_root.is_some()),
            ("--team", self.team.is_some()),
        ] {
            if present {
                given.push(flag);
            }
        }
        given
    }

    fn given_object_flags(&self) -> Vec<&'static str> {
        let mut given = Vec::new();
        for (flag, present) in [
            ("--object-dir", self.object_dir.is_some()),
            ("--bucket", self.bucket.is_some()),
            ("--max-objects", self.max_objects.is_some()),
            ("--max-object-bytes", self.max_object_bytes.is_some()),
            ("--max-observations", self.max_observations.is_some()),
            ("--create-bucket", self.create_bucket.is_some()),
            ("--read-only", self.read_only.is_some()),
            ("--browser", self.browser.is_some()),
        ] {
            if present {
                given.push(flag);
            }
        }
        given
    }

    /// The profile's configuration, or why there is none.
    fn profile(self) -> Result<Profile, Refusal> {
        if self.object_dir.is_none() && self.bucket.is_none() {
            if let Some(flag) = self.given_object_flags().first() {
                return Err(usage(format!(
                    "{flag} is incompatible with the workspace profile (it needs --object-dir and --bucket)"
                )));
            }
            if self.given_workspace_flags().is_empty() {
                return Err(usage(
                    "choose a profile: --object-dir DIR --bucket NAME (objects) or --registry-dir DIR --workspace-id ID (workspace)"
                        .to_string(),
                ));
            }
            let max_files = match self.max_files.as_deref().map(str::parse::<i64>) {
                None => None,
                Some(Ok(n)) => Some(n),
                Some(Err(_)) => return Err(usage("--max-files must be a number".into())),
            };
            let (registry_dir, workspace_id, team, timeout) = match &self.workspace_root {
                Some(root) => {
                    for (flag, given) in [
                        ("--registry-dir", self.registry_dir.is_some()),
                        ("--workspace-id", self.workspace_id.is_some()),
                        ("--team", self.team.is_some()),
                    ] {
                        if given {
                            return Err(usage(format!(
                                "{flag} is incompatible with --workspace-root (the workspace names its registry)"
                            )));
                        }
                    }
                    let (registry_dir, workspace_id, team) = workspace_at(root)?;
                    let timeout = self.timeout.or_else(|| Some(DEFAULT_ROOT_TIMEOUT.into()));
                    (registry_dir, workspace_id, team, timeout)
                }
                None => (
                    self.registry_dir.unwrap_or_default(),
                    self.workspace_id.unwrap_or_default(),
                    self.team,
                    self.timeout,
                ),
            };
            return Ok(Profile::Workspace(stow_mcp::workspace::WorkspaceConfig {
                registry_dir,
                workspace_id,
                team,
                timeout,
                max_bytes: self.max_bytes,
                max_files,
                export_root: self.export_root,
                adopt_root: self.adopt_root,
            }));
        }
        self.object_config().map(Profile::Object)
    }

    /// The object profile's configuration (`--object-dir`/`--bucket` given).
    fn object_config(self) -> Result<stow_mcp::ObjectConfig, Refusal> {
        if let Some(flag) = self.given_workspace_flags().first() {
            return Err(usage(format!(
                "{flag} is incompatible with the object profile (--object-dir/--bucket)"
            )));
        }
        Ok(stow_mcp::ObjectConfig {
            object_dir: self.object_dir.unwrap_or_default(),
            bucket: self.bucket.unwrap_or_default(),
            create_bucket: self.create_bucket.unwrap_or(false),
            read_only: self.read_only.unwrap_or(false),
            browser: self.browser.unwrap_or(false),
            max_objects: self.max_objects.unwrap_or(0),
            max_bytes: self.max_bytes.unwrap_or(0),
            max_object_bytes: self.max_object_bytes.unwrap_or(0),
            max_observations: self.max_observations.unwrap_or(0),
        })
    }
}

fn refuse(r: Refusal) -> ! {
    crate::diagnose(format_args!("stow-s3 mcp: {}", r.message));
    std::process::exit(if r.usage { 2 } else { 1 })
}

/// Runs `stow-s3 mcp`. Returns `Null` (nothing to print) after a clean
/// close; refusals exit directly without writing to stdout.
pub fn run(args: McpArgs) -> Result<serde_json::Value, CliError> {
    let served = match args.profile().unwrap_or_else(|r| refuse(r)) {
        Profile::Object(config) => stow_mcp::serve_object_profile(&config),
        Profile::Workspace(config) => stow_mcp::workspace::serve_workspace_profile(&config),
    };
    match served {
        Ok(()) => Ok(serde_json::Value::Null),
        Err(e) => refuse(Refusal {
            usage: matches!(
                e,
                stow_mcp::ServeError::Config(_) | stow_mcp::ServeError::Workspace(_)
            ),
            message: e.to_string(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct T {
        #[command(flatten)]
        args: McpArgs,
    }

    fn parse(argv: &[&str]) -> McpArgs {
        let mut full = vec!["t"];
        full.extend_from_slice(argv);
        T::try_parse_from(full).unwrap().args
    }

    #[test]
    fn object_mode_with_flags() {
        let cfg = parse(&[
            "--object-dir",
            "/x",
            "--bucket",
            "files",
            "--create-bucket",
            "--browser",
        ])
        .object_config()
        .ok()
        .unwrap();
        assert!(cfg.create_bucket && cfg.browser && !cfg.read_only);
        let cfg = parse(&[
            "--object-dir=/x",
            "--bucket=files",
            "--read-only=false",
            "--max-objects",
            "-1",
        ])
        .object_config()
        .ok()
        .unwrap();
        assert!(!cfg.read_only);
        assert_eq!(cfg.max_objects, -1);
    }

    #[test]
    fn mixed_profiles_are_incompatible() {
        for argv in [
            &["--object-dir", "/x", "--bucket", "b", "--timeout", "0s"][..],
            &["--bucket", "b", "--registry-dir", ""][..],
            &["--registry-dir", "/r", "--create-bucket=false"][..],
        ] {
            let err = parse(argv).profile().err().unwrap();
            assert!(
                err.usage && err.message.contains("incompatible"),
                "{}",
                err.message
            );
        }
    }
}
