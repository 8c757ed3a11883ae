//! `stow-s3 remote …` (named remotes of a registry partition) and the
//! workspace verbs that talk to one: push, pull, remote-list. Parses,
//! calls `stow-workspace` with `stow-remote`'s client, returns one JSON
//! document.

use std::time::Duration;

use clap::{Args, Subcommand};
use stow_checkpoint::progress::Progress;
use stow_checkpoint::remote::{self, Connector, PullOptions, PushOptions, RemoteSpec, RemoteStore};
use stow_checkpoint::Registry;
use stow_remote::{S3Connector, DEFAULT_TIMEOUT};

use crate::args::{RegistryArgs, TransferArgs};
use crate::output::json;
use crate::progress::TerminalBar;
use crate::CliError;

#[derive(Subcommand)]
pub enum RemoteCommand {
    /// Name an S3 location (s3://BUCKET[/PREFIX]) for pushing and pulling
    /// checkpoints. Credentials are never stored: they come from the
    /// standard AWS chain when the remote is used.
    Add {
        name: String,
        /// s3://BUCKET[/PREFIX]
        url: String,
        /// The service's endpoint (default: AWS_ENDPOINT_URL, else AWS).
        #[arg(long)]
        endpoint_url: Option<String>,
        #[arg(long)]
        region: Option<String>,
        /// A profile of the shared AWS config/credentials files.
        #[arg(long)]
        profile: Option<String>,
        #[command(flatten)]
        registry: RegistryArgs,
    },
    /// List the partition's remotes.
    List {
        #[command(flatten)]
        registry: RegistryArgs,
    },
    /// Forget a remote (nothing on the remote is touched).
    Remove {
        name: String,
        #[command(flatten)]
        registry: RegistryArgs,
    },
    /// List the checkpoints a remote holds (as `workspace remote-list`;
    /// `ls` is kept as an alias). `remote list` lists the remotes.
    #[command(alias = "ls")]
    Checkpoints {
        name: String,
        /// Overall deadline (e.g. 90s, 10m; default 30m).
        #[arg(long)]
        timeout: Option<String>,
        #[command(flatten)]
        registry: RegistryArgs,
    },
}

/// `workspace push`.
#[derive(Args)]
pub struct PushArgs {
    #[arg(long)]
    checkpoint_id: String,
    /// A remote of the partition (`stow-s3 remote add`).
    #[arg(long)]
    remote: String,
    /// Overall deadline (e.g. 90s, 10m; default 30m).
    #[arg(long)]
    timeout: Option<String>,
    /// Push a checkpoint holding sensitive-looking paths (.env, keys).
    #[arg(long)]
    include_sensitive: bool,
    #[command(flatten)]
    registry: RegistryArgs,
}

/// `workspace pull`.
#[derive(Args)]
pub struct PullArgs {
    #[arg(long)]
    checkpoint_id: String,
    #[arg(long)]
    remote: String,
    /// Overall deadline (e.g. 90s, 10m; default 30m).
    #[arg(long)]
    timeout: Option<String>,
    #[command(flatten)]
    transfer: TransferArgs,
    #[command(flatten)]
    registry: RegistryArgs,
}

/// `workspace remote-list`.
#[derive(Args)]
pub struct RemoteListArgs {
    #[arg(long)]
    remote: String,
    /// Overall deadline (e.g. 90s, 10m; default 30m).
    #[arg(long)]
    timeout: Option<String>,
    #[command(flatten)]
    registry: RegistryArgs,
}

/// The client for this command's remote traffic, with its deadline.
pub(crate) fn connector(timeout: Option<&str>) -> Result<S3Connector, CliError> {
    let limit = match timeout {
        None => DEFAULT_TIMEOUT,
        Some(t) => match crate::parse_duration(t) {
            Some(d) if d > Duration::ZERO => d,
            _ => {
                return Err(CliError::new(
                    "invalid_request",
                    format!(
                        "--timeout {t:?} is not a positive duration (seconds, or e.g. 90s, 10m)"
                    ),
                ))
            }
        },
    };
    Ok(S3Connector::new(limit))
}

fn open(
    registry: &Registry,
    name: &str,
    timeout: Option<&str>,
) -> Result<Box<dyn RemoteStore>, CliError> {
    let spec = remote::get_remote(registry, name)?;
    let store = connector(timeout)?
        .connect(&spec)
        .map_err(stow_checkpoint::WsError::from)?;
    Ok(store)
}

pub fn run(cmd: RemoteCommand) -> Result<serde_json::Value, CliError> {
    match cmd {
        RemoteCommand::Add {
            name,
            url,
            endpoint_url,
            region,
            profile,
            registry,
        } => json(remote::add_remote(
            &registry.open()?,
            &name,
            RemoteSpec {
                url,
                endpoint_url,
                region,
                profile,
            },
        )?),
        RemoteCommand::List { registry } => json(remote::list_remotes(&registry.open()?)?),
        RemoteCommand::Remove { name, registry } => {
            json(remote::remove_remote(&registry.open()?, &name)?)
        }
        RemoteCommand::Checkpoints {
            name,
            timeout,
            registry,
        } => {
            let store = open(&registry.open()?, &name, timeout.as_deref())?;
            json(remote::remote_list(store.as_ref())?)
        }
    }
}

pub fn push(args: PushArgs) -> Result<serde_json::Value, CliError> {
    let registry = args.registry.open()?;
    let store = open(&registry, &args.remote, args.timeout.as_deref())?;
    let bar = TerminalBar::for_stderr();
    json(remote::push(
        &registry,
        &args.checkpoint_id,
        store.as_ref(),
        &PushOptions {
            include_sensitive: args.include_sensitive,
            progress: bar.as_ref().map(|b| b as &dyn Progress),
        },
    )?)
}

pub fn pull(args: PullArgs) -> Result<serde_json::Value, CliError> {
    let registry = args.registry.open()?;
    let store = open(&registry, &args.remote, args.timeout.as_deref())?;
    let bar = TerminalBar::for_stderr();
    json(remote::pull(
        &registry,
        &args.checkpoint_id,
        store.as_ref(),
        &PullOptions {
            include_sensitive: args.transfer.include_sensitive,
            limits: args.transfer.limits(),
            progress: bar.as_ref().map(|b| b as &dyn Progress),
            expect_workspace: None,
        },
    )?)
}

pub fn remote_list(args: RemoteListArgs) -> Result<serde_json::Value, CliError> {
    let registry = args.registry.open()?;
    let store = open(&registry, &args.remote, args.timeout.as_deref())?;
    json(remote::remote_list(store.as_ref())?)
}
