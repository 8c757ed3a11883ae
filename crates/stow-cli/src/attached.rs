//! `stow-s3 workspace attach|detach|status|log|rewind`: the directory an agent
//! already works in, checkpointed in place. Parses, calls the libraries,
//! returns one JSON document.

use std::path::PathBuf;

use clap::Subcommand;

use stow_checkpoint::progress::Progress;
use stow_checkpoint::watch_service::{self, RewindCall, StatusCall, WatchReply};

use crate::args::RegistryArgs;
use crate::output::json;
use crate::progress::TerminalBar;
use crate::CliError;

/// The verbs of attached workspaces (flattened into `workspace`).
#[derive(Subcommand)]
pub enum AttachedCommand {
    /// Register an existing directory (default: the current one) as a
    /// workspace, in place: nothing is copied; only DIR/.stow is written.
    Attach {
        /// The directory to attach (default: the current one).
        #[arg(long)]
        root: Option<PathBuf>,
        /// TTL in seconds (informational: attached workspaces are never collected).
        #[arg(long, default_value_t = 0)]
        ttl_seconds: u64,
        /// The bucket view's byte quota (default 64 MiB).
        #[arg(long, default_value_t = 0)]
        max_bytes: u64,
        /// The bucket view's object quota (default 10,000).
        #[arg(long, default_value_t = 0)]
        max_objects: u64,
        /// Capture what git ignores too (default: leave it out, as git does).
        #[arg(long)]
        no_gitignore: bool,
        #[command(flatten)]
        registry: RegistryArgs,
    },
    /// Forget an attached workspace: its record, its .stow and (unless
    /// kept) its checkpoints; nothing else in the tree is touched.
    Detach {
        /// The workspace (default: the one holding the current directory).
        #[arg(long)]
        id: Option<String>,
        /// Keep its checkpoints in the registry.
        #[arg(long)]
        keep_checkpoints: bool,
        #[command(flatten)]
        registry: RegistryArgs,
    },
    /// What changed in the tree since a checkpoint (default: the head).
    Status {
        /// The workspace (default: the one holding the current directory).
        #[arg(long)]
        id: Option<String>,
        /// Compare with this checkpoint instead of the head.
        #[arg(long)]
        against: Option<String>,
        /// Entries per page (1 to 10000; default: all).
        #[arg(long)]
        limit: Option<usize>,
        /// The `next_cursor` of the previous page.
        #[arg(long)]
        cursor: Option<String>,
        #[command(flatten)]
        registry: RegistryArgs,
    },
    /// Put the tree back to a checkpoint, in place. The tree is captured
    /// first (the undo checkpoint: rewind to it to undo); only what
    /// differs is written; a path written meanwhile is left alone and
    /// reported (exit 1, workspace_changed).
    Rewind {
        /// The checkpoint to rewind to.
        #[arg(long)]
        to: String,
        /// The workspace (default: the one holding the current directory).
        #[arg(long)]
        id: Option<String>,
        /// Only these files or directories (relative to the root); the
        /// head stays on the undo checkpoint.
        #[arg(long, num_args = 1..)]
        paths: Vec<String>,
        /// Print the plan (the changes, as status reports them) and change nothing.
        #[arg(long)]
        dry_run: bool,
        /// Rewind sensitive-looking paths (.env, keys) too; the checkpoint
        /// must have been taken with --include-sensitive. Without it they
        /// are never touched.
        #[arg(long)]
        include_sensitive: bool,
        /// The undo checkpoint's message (default "before rewind to CP").
        #[arg(long)]
        message: Option<String>,
        /// A key that makes the rewind idempotent: the same key and inputs
        /// answer the first rewind's result.
        #[arg(long)]
        request_key: Option<String>,
        #[command(flatten)]
        registry: RegistryArgs,
    },
    /// The workspace's checkpoints, newest first, with messages and its head.
    Log {
        /// The workspace (default: the one holding the current directory).
        #[arg(long)]
        id: Option<String>,
        /// Checkpoints per page (1 to 1000).
        #[arg(long, default_value_t = 50)]
        limit: usize,
        /// The `next_cursor` of the previous page.
        #[arg(long)]
        cursor: Option<String>,
        #[command(flatten)]
        registry: RegistryArgs,
    },
}

/// Runs one verb of the attached-workspace family (attach, detach,
/// status, log, rewind) and returns the JSON document the CLI prints. Long
/// because it is the one match over those verbs; each arm only turns parsed
/// arguments into one library call.
pub fn run(cmd: AttachedCommand) -> Result<serde_json::Value, CliError> {
    use AttachedCommand as A;
    match cmd {
        A::Attach {
            root,
            ttl_seconds,
            max_bytes,
            max_objects,
            no_gitignore,
            registry,
        } => {
            let root = match root {
                Some(r) => r,
                None => std::env::current_dir()
                    .map_err(|e| CliError::new("io_failure", format!("current directory: {e}")))?,
            };
            let opts = stow_workspace::attach::AttachOptions {
                root,
                ttl_seconds,
                max_bytes,
                max_objects,
                no_gitignore,
            };
            json(stow_workspace::attach::attach(&registry.open()?, &opts)?)
        }
        A::Detach {
            id,
            keep_checkpoints,
            registry,
        } => {
            let (id, registry) = registry.workspace(id)?;
            json(stow_workspace::attach::detach(
                &registry,
                &id,
                keep_checkpoints,
            )?)
        }
        A::Status {
            id,
            against,
            limit,
            cursor,
            registry,
        } => {
            let (id, registry) = registry.workspace(id)?;
            let call = StatusCall {
                workspace_id: id,
                against,
            };
            match watch_service::status(&registry, &call) {
                WatchReply::Status { result } => match (limit, cursor) {
                    (None, None) => json(result),
                    (limit, cursor) => json(stow_checkpoint::status::page(
                        *result,
                        limit.unwrap_or(stow_checkpoint::status::MAX_PAGE),
                        cursor.as_deref(),
                    )?),
                },
                WatchReply::Refused { code, message, .. } => Err(CliError::new(code, message)),
                WatchReply::Captured { .. }
                | WatchReply::Keyed { .. }
                | WatchReply::Rewound { .. } => Err(crate::output::mismatched_reply()),
            }
        }
        A::Rewind {
            to,
            id,
            paths,
            dry_run,
            include_sensitive,
            message,
            request_key,
            registry,
        } => {
            let (id, registry) = registry.workspace(id)?;
            let bar = TerminalBar::for_stderr();
            let progress = bar.as_ref().map(|b| b as &dyn Progress);
            let result = if dry_run {
                // A plan changes nothing: no watch service is needed.
                stow_checkpoint::rewind::rewind(
                    &registry,
                    &stow_checkpoint::rewind::RewindRequest {
                        workspace_id: &id,
                        to: &to,
                        paths,
                        dry_run,
                        include_sensitive,
                        message,
                        request_key: request_key.as_deref(),
                        progress,
                        monitor: None,
                    },
                )?
            } else {
                let call = RewindCall {
                    workspace_id: id,
                    to,
                    paths,
                    message,
                    request_key,
                    include_sensitive,
                };
                match watch_service::rewind(&registry, &call, progress) {
                    WatchReply::Rewound { result } => *result,
                    WatchReply::Refused { code, message, .. } => {
                        return Err(CliError::new(code, message))
                    }
                    WatchReply::Captured { .. }
                    | WatchReply::Keyed { .. }
                    | WatchReply::Status { .. } => return Err(crate::output::mismatched_reply()),
                }
            };
            match result.error() {
                None => json(result),
                // The result still says what was done: it is the document.
                Some(e) => Err(CliError {
                    document: Some(json(&result)?),
                    ..CliError::from(e)
                }),
            }
        }
        A::Log {
            id,
            limit,
            cursor,
            registry,
        } => {
            let (id, registry) = registry.workspace(id)?;
            json(stow_checkpoint::history::log(
                &registry,
                &id,
                limit,
                cursor.as_deref(),
            )?)
        }
    }
}
