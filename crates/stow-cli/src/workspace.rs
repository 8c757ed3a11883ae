//! `stow-s3 workspace …`: agent workspaces. Parses, calls `stow-workspace`,
//! returns one JSON document; all behaviour lives in the library.

use std::path::PathBuf;

use clap::Subcommand;
use stow_checkpoint::archive::{self, ArchiveLimits, ExportOptions, ImportOptions};
use stow_checkpoint::delta::{self, ApplyOptions, DeltaOptions};
use stow_checkpoint::watch_service::{self, CaptureRequest, WatchReply};
use stow_checkpoint::CaptureSpec;
use stow_checkpoint::WsError;
use stow_workspace::admin::{self, PolicyUpdate};
use stow_workspace::handoff::AdoptOptions;
use stow_workspace::restore::{self, RestoreLimits};
use stow_workspace::{handoff, open};

use crate::args::{RegistryArgs, TransferArgs};
use crate::output::{json, mismatched_reply};
use crate::progress::TerminalBar;
use crate::CliError;
use stow_checkpoint::progress::Progress;

impl From<WsError> for CliError {
    fn from(e: WsError) -> Self {
        CliError::new(e.code().to_string(), e.to_string())
    }
}

#[derive(Subcommand)]
pub enum WorkspaceCommand {
    /// Create a workspace from a version-1 task manifest.
    Prepare {
        /// The task manifest (JSON).
        #[arg(long)]
        manifest: PathBuf,
    },
    /// List the workspaces of a registry partition.
    List {
        #[command(flatten)]
        registry: RegistryArgs,
    },
    /// Take ownership of a workspace (by ID, or from a handoff document).
    Resume {
        /// Workspace ID (default: the workspace holding the current
        /// directory, when no --handoff is given).
        #[arg(long)]
        id: Option<String>,
        /// A handoff document (not both with --id, --registry-dir or --team).
        #[arg(long)]
        handoff: Option<PathBuf>,
        #[command(flatten)]
        registry: RegistryArgs,
    },
    /// Serve the workspace's bucket view over S3 (files are objects of its
    /// bucket); the workspace is claimed while the server runs.
    Serve(crate::serve::WorkspaceServeArgs),
    /// Write a handoff document: same-machine (version 1), or portable
    /// (version 2) with --archive.
    Handoff {
        /// Workspace ID (default: the workspace holding the current directory).
        #[arg(long)]
        id: Option<String>,
        /// A checkpoint to name alongside the workspace.
        #[arg(long)]
        checkpoint_id: Option<String>,
        /// Export the checkpoint to this new archive and record its digest
        /// (portable handoff; needs --checkpoint-id).
        #[arg(long)]
        archive: Option<PathBuf>,
        /// Push the checkpoint to this remote and name it in the document
        /// (portable handoff; needs --checkpoint-id; not with --archive).
        #[arg(long, conflicts_with = "archive")]
        remote: Option<String>,
        /// Overall deadline of the push (e.g. 90s, 10m; default 30m).
        #[arg(long, requires = "remote")]
        timeout: Option<String>,
        /// Write the document here (mode 0600) and print nothing.
        #[arg(long)]
        output: Option<PathBuf>,
        #[command(flatten)]
        registry: RegistryArgs,
    },
    /// Adopt a portable handoff (an archive, or a remote it names), or a
    /// checkpoint of a remote: verify, bring in and restore it into a new
    /// root as a new (adopted) workspace.
    Adopt {
        /// The version-2 handoff document.
        #[arg(long, required_unless_present = "remote", conflicts_with = "remote")]
        handoff: Option<PathBuf>,
        /// Pull from this remote of the partition (with --checkpoint-id).
        #[arg(long, requires = "checkpoint_id")]
        remote: Option<String>,
        /// The remote checkpoint to adopt.
        #[arg(long, requires = "remote")]
        checkpoint_id: Option<String>,
        /// The new root (must not exist; its parent must).
        #[arg(long)]
        root: PathBuf,
        /// Overall deadline of remote traffic (default 30m).
        #[arg(long)]
        timeout: Option<String>,
        #[command(flatten)]
        transfer: TransferArgs,
        #[command(flatten)]
        registry: RegistryArgs,
    },
    /// Upload a checkpoint to a remote: the blobs it lacks, then the
    /// manifest (create-only writes; a rerun sends nothing twice).
    Push(crate::remote::PushArgs),
    /// Download a remote checkpoint into the registry, verified before it
    /// is published.
    Pull(crate::remote::PullArgs),
    /// List the checkpoints a remote holds.
    RemoteList(crate::remote::RemoteListArgs),
    /// Export a checkpoint to a new gzip tar archive.
    Export {
        #[arg(long)]
        checkpoint_id: String,
        /// The archive to create (never replaced).
        #[arg(long)]
        output: PathBuf,
        #[command(flatten)]
        transfer: TransferArgs,
        #[command(flatten)]
        registry: RegistryArgs,
    },
    /// Validate an archive and list what it holds, extracting nothing.
    Preview {
        #[arg(long)]
        archive: PathBuf,
        /// Payload byte bound (default 1 GiB).
        #[arg(long, default_value_t = 0)]
        max_bytes: u64,
        /// Payload count bound (default 100,000).
        #[arg(long, default_value_t = 0)]
        max_files: u64,
    },
    /// Import an archive's checkpoint into the registry.
    Import {
        #[arg(long)]
        archive: PathBuf,
        #[command(flatten)]
        transfer: TransferArgs,
        #[command(flatten)]
        registry: RegistryArgs,
    },
    /// Record the changes from one checkpoint to another (of one
    /// workspace), with the target's bytes, in a new document.
    Delta {
        /// The base checkpoint.
        #[arg(long)]
        from: String,
        /// The target checkpoint.
        #[arg(long)]
        to: String,
        /// The document to create (never replaced).
        #[arg(long)]
        output: PathBuf,
        #[command(flatten)]
        transfer: TransferArgs,
        #[command(flatten)]
        registry: RegistryArgs,
    },
    /// Apply a delta to its base, publishing a new checkpoint (the base is
    /// unchanged).
    Apply {
        #[arg(long)]
        delta: PathBuf,
        /// The checkpoint to apply it to.
        #[arg(long)]
        base: String,
        /// The document's SHA-256, checked before it is decoded.
        #[arg(long)]
        expect_sha256: Option<String>,
        /// Allow sensitive-looking paths (the delta must carry them on purpose).
        #[arg(long)]
        include_sensitive: bool,
        #[command(flatten)]
        registry: RegistryArgs,
    },
    /// Remove blobs no published checkpoint names.
    Gc {
        #[command(flatten)]
        registry: RegistryArgs,
    },
    /// Check every checkpoint of the partition: manifests and tree nodes
    /// read back, every payload read against its SHA-256; names exactly
    /// the damaged checkpoints.
    Check {
        /// Only look the payloads up (present, right size), without reading them.
        #[arg(long)]
        quick: bool,
        #[command(flatten)]
        registry: RegistryArgs,
    },
    /// Capture the workspace's files into an immutable checkpoint.
    Checkpoint {
        /// The workspace (default: the one holding the current directory).
        #[arg(long)]
        id: Option<String>,
        /// A message stored with the checkpoint (at most 4 KiB of UTF-8).
        #[arg(long)]
        message: Option<String>,
        /// Parent checkpoint to record.
        #[arg(long)]
        parent: Option<String>,
        /// Per-capture byte cap (0 = none).
        #[arg(long, default_value_t = 0)]
        max_bytes: u64,
        /// Per-capture file cap (0 = none).
        #[arg(long, default_value_t = 0)]
        max_files: u64,
        /// Capture sensitive-looking paths too.
        #[arg(long)]
        include_sensitive: bool,
        /// Portable (v2): capture the workspace bucket's objects and buckets too.
        #[arg(long)]
        portable: bool,
        /// Capture what the root's .stowignore would keep out, too.
        #[arg(long)]
        no_ignore: bool,
        /// Keyed capture: a caller-persisted request key (replays, never repeats).
        #[arg(long)]
        request_key: Option<String>,
        /// Only resolve the request key's outcome; never capture.
        #[arg(long)]
        resolve: bool,
        /// Deadline of a keyed capture (e.g. 30s); required with a key.
        #[arg(long)]
        timeout: Option<String>,
        /// An agent host's hook: read its JSON payload (stdin, or PAYLOAD)
        /// and take a keyed checkpoint of the workspace holding its `cwd`;
        /// silent on stdout, exit 0 when there is no workspace.
        #[arg(long, conflicts_with_all = ["id", "message", "parent", "request_key", "resolve", "timeout"])]
        hook: bool,
        /// With --hook: print the result on stdout.
        #[arg(long, requires = "hook")]
        print: bool,
        /// With --hook: the payload as an argument (Codex's `notify`).
        #[arg(requires = "hook", value_name = "PAYLOAD")]
        payload: Option<String>,
        #[command(flatten)]
        registry: RegistryArgs,
    },
    /// Keep a watch over the workspace's tree for later captures: `workspace
    /// checkpoint` then reads only what changed. Prints one JSON line when
    /// ready; runs until SIGINT or SIGTERM.
    Watch {
        /// The workspace (default: the one holding the current directory).
        #[arg(long)]
        id: Option<String>,
        /// Stop (as on SIGTERM) when this process, which must be the
        /// parent, exits.
        #[arg(long)]
        parent_pid: Option<i32>,
        #[command(flatten)]
        registry: RegistryArgs,
    },
    /// Compare two checkpoints.
    Diff {
        #[arg(long)]
        from: String,
        #[arg(long)]
        to: String,
        #[command(flatten)]
        registry: RegistryArgs,
    },
    /// Restore a checkpoint into a new root as a new workspace.
    Restore {
        #[arg(long)]
        checkpoint_id: String,
        /// The new root (must not exist; its parent must).
        #[arg(long)]
        root: PathBuf,
        /// Narrow the byte limit (default: sized by the checkpoint).
        #[arg(long, default_value_t = 0)]
        max_bytes: u64,
        /// Narrow the file limit (default: sized by the checkpoint).
        #[arg(long, default_value_t = 0)]
        max_files: u64,
        #[command(flatten)]
        registry: RegistryArgs,
    },
    /// Delete a checkpoint (refused while another names it as parent).
    CheckpointDelete {
        #[arg(long)]
        checkpoint_id: String,
        #[command(flatten)]
        registry: RegistryArgs,
    },
    /// Destroy an owned, idle workspace with its checkpoints.
    Destroy {
        /// Workspace ID (default: the workspace holding the current directory).
        #[arg(long)]
        id: Option<String>,
        #[command(flatten)]
        registry: RegistryArgs,
    },
    #[command(flatten)]
    Attached(crate::attached::AttachedCommand),
    /// Destroy expired workspaces (TTL) of a partition.
    Collect {
        #[command(flatten)]
        registry: RegistryArgs,
    },
    /// Forget records whose directory is gone.
    Prune {
        /// Also forget adopted workspaces whose directory is gone.
        #[arg(long)]
        include_adopted: bool,
        #[command(flatten)]
        registry: RegistryArgs,
    },
    /// Show or set the standing registry policy.
    #[command(subcommand)]
    Policy(PolicyCommand),
}

#[derive(Subcommand)]
pub enum PolicyCommand {
    /// Show the policy and current usage.
    Show {
        #[command(flatten)]
        registry: RegistryArgs,
    },
    /// Set bounds (0 = unlimited); refused if usage already exceeds them.
    Set {
        #[arg(long)]
        max_workspaces: Option<u64>,
        #[arg(long)]
        max_checkpoints: Option<u64>,
        #[arg(long)]
        max_checkpoint_bytes: Option<u64>,
        #[command(flatten)]
        registry: RegistryArgs,
    },
}

/// A capture's reply as the CLI answers it. The keyed form prints its
/// envelope even when it carries an error, and then exits 1 (the envelope,
/// not `{"error"}`, is the one JSON document).
fn captured(reply: WatchReply) -> Result<serde_json::Value, CliError> {
    match reply {
        WatchReply::Captured { result } => json(result),
        WatchReply::Keyed { envelope, message } => match &envelope.error {
            None => json(&envelope),
            Some(e) => Err(CliError {
                document: Some(json(&envelope)?),
                ..CliError::new(e.code.clone(), message.unwrap_or_default())
            }),
        },
        WatchReply::Refused { code, message, .. } => Err(CliError::new(code, message)),
        WatchReply::Rewound { .. } | WatchReply::Status { .. } => Err(mismatched_reply()),
    }
}

/// Runs one `workspace` verb and returns the JSON document the CLI
/// prints. Long because it is the one match over the verbs; each arm only
/// turns parsed arguments into one library call and its result.
pub fn run(cmd: WorkspaceCommand) -> Result<serde_json::Value, CliError> {
    use WorkspaceCommand as C;
    match cmd {
        C::Prepare { manifest } => json(stow_workspace::prepare(&manifest)?),
        C::List { registry } => json(admin::list(&registry.open()?)?),
        C::Resume {
            id,
            handoff,
            registry,
        } => match (id, handoff) {
            (None, Some(doc)) if registry.registry_dir.is_none() && registry.team.is_none() => {
                json(handoff::resume_handoff(&doc)?)
            }
            (_, Some(_)) => Err(CliError::new(
                "invalid_request",
                "use --handoff or --id/--registry-dir/--team, not both",
            )),
            (id, None) => {
                let (id, registry) = registry.workspace(id)?;
                json(open::resume(&registry, &id, None, true)?)
            }
        },
        C::Serve(mut args) => {
            let (id, registry) = args.registry.workspace(args.id.take())?;
            crate::serve::run_workspace(&registry, &id, args)
        }
        C::Handoff {
            id,
            checkpoint_id,
            archive: _,
            remote: Some(remote),
            timeout,
            output,
            registry,
        } => {
            let cp = checkpoint_id.ok_or_else(|| {
                CliError::new("invalid_request", "--remote needs --checkpoint-id")
            })?;
            let connector = crate::remote::connector(timeout.as_deref())?;
            let (id, registry) = registry.workspace(id)?;
            let (doc, _pushed) = handoff::handoff_via_remote(
                &registry,
                &id,
                &cp,
                &remote,
                &connector,
                output.as_deref(),
            )?;
            if output.is_some() {
                Ok(serde_json::Value::Null)
            } else {
                json(doc)
            }
        }
        C::Handoff {
            id,
            checkpoint_id,
            archive,
            remote: None,
            timeout: _,
            output,
            registry,
        } => {
            let (id, registry) = registry.workspace(id)?;
            let doc = handoff::handoff(
                &registry,
                &id,
                checkpoint_id.as_deref(),
                archive.as_deref(),
                output.as_deref(),
            )?;
            // With --output the document is the file; stdout stays empty.
            if output.is_some() {
                Ok(serde_json::Value::Null)
            } else {
                json(doc)
            }
        }
        C::Checkpoint {
            id,
            message,
            parent,
            max_bytes,
            max_files,
            include_sensitive,
            portable,
            no_ignore,
            request_key,
            resolve,
            timeout,
            hook,
            print,
            payload,
            registry,
        } => {
            if hook {
                return crate::hook::run(payload, print);
            }
            let (id, registry) = registry.workspace(id)?;
            let req = CaptureRequest {
                spec: CaptureSpec {
                    message,
                    parent,
                    max_bytes,
                    max_files,
                    include_sensitive,
                    portable,
                    no_ignore,
                },
                workspace_id: id,
                request_key,
                resolve,
                timeout_nanos: timeout
                    .as_deref()
                    .and_then(crate::parse_duration)
                    .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)),
            };
            let bar = TerminalBar::for_stderr();
            let progress = bar.as_ref().map(|b| b as &dyn Progress);
            captured(watch_service::capture(&registry, &req, progress))
        }
        C::Watch {
            id,
            parent_pid,
            registry,
        } => {
            let (id, registry) = registry.workspace(id)?;
            crate::watch::run(&registry, &id, parent_pid)
        }
        C::Attached(cmd) => crate::attached::run(cmd),
        C::Adopt {
            handoff: doc,
            remote,
            checkpoint_id,
            root,
            timeout,
            transfer,
            registry,
        } => {
            let bar = TerminalBar::for_stderr();
            let connector = crate::remote::connector(timeout.as_deref())?;
            let opts = AdoptOptions {
                include_sensitive: transfer.include_sensitive,
                limits: transfer.limits(),
                progress: bar.as_ref().map(|b| b as &dyn Progress),
                connector: Some(&connector),
            };
            match (doc, remote, checkpoint_id) {
                (Some(doc), None, None) => json(handoff::adopt(
                    registry.registry_dir.as_deref(),
                    registry.team.as_deref(),
                    &doc,
                    &root,
                    &opts,
                )?),
                (None, Some(remote), Some(cp)) => json(handoff::adopt_remote(
                    &registry.open()?,
                    &remote,
                    &cp,
                    &root,
                    &opts,
                )?),
                _ => Err(CliError::new(
                    "invalid_request",
                    "adopt needs --handoff, or --remote with --checkpoint-id",
                )),
            }
        }
        C::Push(args) => crate::remote::push(args),
        C::Pull(args) => crate::remote::pull(args),
        C::RemoteList(args) => crate::remote::remote_list(args),
        C::Export {
            checkpoint_id,
            output,
            transfer,
            registry,
        } => {
            let bar = TerminalBar::for_stderr();
            json(archive::export(
                &registry.open()?,
                &checkpoint_id,
                &output,
                &ExportOptions {
                    include_sensitive: transfer.include_sensitive,
                    limits: transfer.limits(),
                    progress: bar.as_ref().map(|b| b as &dyn Progress),
                },
            )?)
        }
        C::Preview {
            archive: path,
            max_bytes,
            max_files,
        } => json(archive::preview(
            &path,
            ArchiveLimits {
                max_bytes,
                max_files,
            },
        )?),
        C::Import {
            archive: path,
            transfer,
            registry,
        } => {
            let bar = TerminalBar::for_stderr();
            json(archive::import(
                &registry.open()?,
                &path,
                &ImportOptions {
                    include_sensitive: transfer.include_sensitive,
                    limits: transfer.limits(),
                    progress: bar.as_ref().map(|b| b as &dyn Progress),
                },
            )?)
        }
        C::Delta {
            from,
            to,
            output,
            transfer,
            registry,
        } => json(delta::delta(
            &registry.open()?,
            &from,
            &to,
            &output,
            DeltaOptions {
                include_sensitive: transfer.include_sensitive,
                limits: transfer.limits(),
            },
        )?),
        C::Apply {
            delta: path,
            base,
            expect_sha256,
            include_sensitive,
            registry,
        } => json(delta::apply(
            &registry.open()?,
            &path,
            &base,
            &ApplyOptions {
                expect_sha256,
                include_sensitive,
            },
        )?),
        C::Gc { registry } => json(stow_checkpoint::gc(&registry.open()?)?),
        C::Check { quick, registry } => {
            let r = stow_checkpoint::check(&registry.open()?, quick)?;
            if r.damaged.is_empty() {
                return json(r);
            }
            let list: Vec<String> = r
                .damaged
                .iter()
                .map(|d| format!("{}: {}", d.checkpoint_id, d.problems.join("; ")))
                .collect();
            Err(CliError::new(
                "inconsistent",
                format!(
                    "{} of {} checkpoints are damaged: {}",
                    r.damaged.len(),
                    r.checkpoints,
                    list.join(" | ")
                ),
            ))
        }
        C::Diff { from, to, registry } => {
            json(stow_checkpoint::diff(&registry.open()?, &from, &to)?)
        }
        C::Restore {
            checkpoint_id,
            root,
            max_bytes,
            max_files,
            registry,
        } => {
            let bar = TerminalBar::for_stderr();
            json(restore::restore(
                &registry.open()?,
                &checkpoint_id,
                &root,
                RestoreLimits {
                    max_bytes,
                    max_files,
                    progress: bar.as_ref().map(|b| b as &dyn Progress),
                },
            )?)
        }
        C::CheckpointDelete {
            checkpoint_id,
            registry,
        } => json(stow_checkpoint::delete(&registry.open()?, &checkpoint_id)?),
        C::Destroy { id, registry } => {
            let (id, registry) = registry.workspace(id)?;
            json(admin::destroy(&registry, &id)?)
        }
        C::Collect { registry } => json(admin::collect(&registry.open()?)?),
        C::Prune {
            include_adopted,
            registry,
        } => json(admin::prune(&registry.open()?, include_adopted)?),
        C::Policy(PolicyCommand::Show { registry }) => json(admin::policy_show(&registry.open()?)?),
        C::Policy(PolicyCommand::Set {
            max_workspaces,
            max_checkpoints,
            max_checkpoint_bytes,
            registry,
        }) => json(admin::policy_set(
            &registry.open()?,
            PolicyUpdate {
                max_workspaces,
                max_checkpoints,
                max_checkpoint_bytes,
            },
        )?),
    }
}
