//! stow-bench: benchmarks for stow-s3, each suite measured side by side
//! with a peer doing the same work, alternating (A B A B …).
//!
//! ```text
//! cargo run --release -p stow-bench -- store [--quick] [--json out.json] [--dir DIR]
//! ```

mod data;
mod harness;
mod machine;
mod report;
mod suites;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::harness::Result;
use crate::suites::SuiteArgs;

#[derive(Debug, Parser)]
#[command(
    name = "stow-bench",
    version,
    about = "Benchmarks for stow-s3, measured side by side with peers"
)]
struct Cli {
    #[command(subcommand)]
    suite: Suite,
}

#[derive(Debug, Subcommand)]
enum Suite {
    /// stow-store against the raw filesystem (a file per object): durable
    /// puts, gets, keyed saves, 64 MiB objects, copy, listing.
    Store(SuiteArgs),
    /// `stow-s3 mcp` over stdio against the same store operations in
    /// process: cold start, p50/p99 read and save latency, server RSS.
    Mcp(SuiteArgs),
    /// Keyed portable captures through a running `stow-s3 mcp` workspace
    /// server against the same captures through the CLI; inspect pages.
    McpWorkspace(SuiteArgs),
    /// Workspace checkpoints against cp -a + sync and git add+commit on a
    /// generated 10,000-file tree: first/incremental checkpoint, restore,
    /// disk growth.
    Workspace(SuiteArgs),
    /// `stow-s3 workspace push/pull/adopt` against `aws s3 sync` of the
    /// same tree, both against one `stow-s3 serve` on loopback.
    Remote(SuiteArgs),
    /// `stow-s3 serve` against s3s-fs and moto_server, driven by a compiled
    /// SigV4 HTTP/1.1 load generator: 4 KiB PUT/GET at 1 and 16
    /// connections, large PUT/GET, LIST, server CPU per op, RSS, start time.
    S3(SuiteArgs),
    /// What S3 versioning costs on one `stow-s3 serve`: 4 KiB PUT (fresh
    /// keys and overwrites) and GET in a versioned bucket against an
    /// unversioned one, and ListObjectVersions pages of 1,000 in 100,000
    /// versions against ListObjectsV2 pages (issue 29).
    S3Versions(SuiteArgs),
    /// Drive 4 KiB (or --size) PUTs at an already running server, for
    /// profiling it; prints the rate only.
    S3Load(suites::s3::LoadArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // The libraries' debug logs (e.g. STOW_LOG=stow_workspace=debug for the
    // phases of each capture) go to stderr; off unless asked for.
    if let Ok(filter) = tracing_subscriber::EnvFilter::try_from_env("STOW_LOG") {
        tracing_subscriber::fmt()
            .with_writer(std::io::stderr)
            .with_env_filter(filter)
            .init();
    }
    match run(&cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("stow-bench: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: &Cli) -> Result<()> {
    let (report, args) = match &cli.suite {
        Suite::S3Load(args) => return suites::s3::load(args),
        Suite::Store(args) => (suites::store::run(args)?, args),
        Suite::Mcp(args) => (suites::mcp::run(args)?, args),
        Suite::McpWorkspace(args) => (suites::mcp_workspace::run(args)?, args),
        Suite::Workspace(args) => (suites::workspace::run(args)?, args),
        Suite::Remote(args) => (suites::remote::run(args)?, args),
        Suite::S3(args) => (suites::s3::run(args)?, args),
        Suite::S3Versions(args) => (suites::s3::versions::run(args)?, args),
    };
    print!("{}", report.table());
    if let Some(path) = &args.json {
        report.write_json(path)?;
        eprintln!("wrote {}", path.display());
    }
    Ok(())
}
