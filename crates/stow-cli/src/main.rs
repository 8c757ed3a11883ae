//! `stow-s3`: the command-line entry point. It parses arguments, calls the
//! library crates, and prints exactly one JSON document on stdout. Logs and
//! diagnostics go to stderr. Exit codes: 0 success, 1 refused or failed,
//! 2 usage error.

mod args;
mod attached;
mod hook;
mod mcp;
mod output;
mod progress;
mod receipts;
mod remote;
mod serve;
mod watch;
mod workspace;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use serde::Serialize;

/// Portable working storage for agents, tools and tests.
#[derive(Parser)]
#[command(name = "stow-s3", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve an S3-compatible endpoint (default: ./.stow on 127.0.0.1:9000).
    Serve(serve::ServeArgs),
    /// Serve MCP over stdio for agent hosts (object profile: guarded saves of one bucket).
    Mcp(mcp::McpArgs),
    /// Inspect and retire durable save receipts of an object store.
    #[command(subcommand)]
    Receipts(receipts::ReceiptsCommand),
    /// Agent workspaces: prepare, checkpoints, diff, restore, handoff, registry.
    #[command(subcommand)]
    Workspace(workspace::WorkspaceCommand),
    /// Named remotes (S3 services) of a registry partition, for pushing
    /// and pulling checkpoints.
    #[command(subcommand)]
    Remote(remote::RemoteCommand),
    /// Check an object store's consistency (usage, references, blob files)
    /// and every object's bytes against its ETag.
    Check {
        /// The store's data directory.
        #[arg(long, visible_alias = "object-dir", default_value = ".stow")]
        data_dir: PathBuf,
        /// Skip reading the objects' bytes (bookkeeping only).
        #[arg(long)]
        quick: bool,
    },
}

/// A refusal or failure: printed as `{"error": {"code", "message"}}`, or
/// as its own `document` when the command's one JSON document carries the
/// error itself (a keyed capture's envelope); either way the exit code is 1.
#[derive(Debug, Serialize)]
pub struct CliError {
    pub code: String,
    pub message: String,
    #[serde(skip)]
    pub document: Option<serde_json::Value>,
    /// A usage error (exit 2), like clap's own.
    #[serde(skip)]
    pub usage: bool,
    /// Nothing on stdout (a hook's host may read it as the hook's answer).
    #[serde(skip)]
    pub quiet: bool,
}

impl CliError {
    /// A refusal printed as `{"error": {"code", "message"}}`.
    pub fn new(code: impl Into<String>, message: impl Into<String>) -> CliError {
        CliError {
            code: code.into(),
            message: message.into(),
            document: None,
            usage: false,
            quiet: false,
        }
    }

    /// This error as a hook reports it: stderr only, and exit 1 (hosts
    /// treat 2 as "block the agent").
    pub fn for_hook(self) -> CliError {
        CliError {
            usage: false,
            quiet: true,
            document: None,
            ..self
        }
    }

    /// A usage error: printed like any refusal (code `usage`), exit 2.
    pub fn usage(message: impl Into<String>) -> CliError {
        CliError {
            usage: true,
            ..CliError::new("usage", message)
        }
    }
}

impl From<stow_store::StoreError> for CliError {
    fn from(e: stow_store::StoreError) -> Self {
        use stow_store::StoreError as E;
        // The CLI has always reported the two size limits under the codes
        // of their broader kinds; the store's finer codes stay internal.
        let code = match &e {
            E::KeyTooLong { .. } => "invalid_key",
            E::MetadataTooLarge { .. } => "invalid_metadata",
            other => other.code(),
        };
        CliError::new(code, e.to_string())
    }
}

/// Prints the command's one JSON document: pretty (2-space indent) plus a
/// newline, for people and parsers alike.
pub fn print_json(value: &serde_json::Value) {
    use std::io::Write as _;
    let text = serde_json::to_string_pretty(value).unwrap_or_else(|_| value.to_string());
    // A closed pipe (`| head`) is the reader's choice, not a crash.
    let _ = writeln!(std::io::stdout().lock(), "{text}");
}

/// A duration flag: plain seconds (`30`, `1.5`) or humantime (`90s`, `10m`).
pub fn parse_duration(text: &str) -> Option<std::time::Duration> {
    let t = text.trim();
    match t.parse::<f64>() {
        Ok(secs) if secs.is_finite() && secs >= 0.0 => {
            std::time::Duration::try_from_secs_f64(secs).ok()
        }
        Ok(_) => None,
        Err(_) => humantime::parse_duration(t).ok(),
    }
}

/// Writes a diagnostic line to stderr. A stderr that cannot take it (a log
/// file on a full disk) must not crash the command: `eprintln!` panics.
pub fn diagnose(line: std::fmt::Arguments<'_>) {
    use std::io::Write as _;
    let _ = writeln!(std::io::stderr().lock(), "{line}");
}

/// Formats nanoseconds since the epoch as RFC 3339 UTC with nanoseconds.
pub fn rfc3339_ns(ns: i64) -> String {
    let t = std::time::UNIX_EPOCH + std::time::Duration::from_nanos(ns.max(0) as u64);
    humantime::format_rfc3339_nanos(t).to_string()
}

fn run(cli: Cli) -> Result<serde_json::Value, CliError> {
    match cli.command {
        Command::Serve(args) => serve::run(args),
        Command::Mcp(args) => mcp::run(args),
        Command::Receipts(cmd) => receipts::run(cmd),
        Command::Workspace(cmd) => workspace::run(cmd),
        Command::Remote(cmd) => remote::run(cmd),
        Command::Check { data_dir, quick } => {
            let store = stow_store::Store::open_existing(&data_dir, Default::default())?;
            let mut problems = store.verify()?;
            if !quick {
                problems.extend(store.verify_contents()?);
            }
            let usage = store.usage()?;
            let consistent = problems.is_empty();
            let out = serde_json::json!({
                "consistent": consistent,
                "problems": problems,
                "usage": usage,
            });
            if consistent {
                Ok(out)
            } else {
                Err(CliError::new(
                    "inconsistent",
                    format!("the store has problems: {}", problems.join("; ")),
                ))
            }
        }
    }
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        // A failed log write is dropped: reporting it would `eprintln!`,
        // which panics when stderr itself is full.
        .log_internal_errors(false)
        // Colours only for a person at a terminal: a log file or an MCP
        // host's captured stderr gets plain text.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("STOW_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .init();
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let code = if e.use_stderr() { 2 } else { 0 };
            let _ = e.print();
            return ExitCode::from(code);
        }
    };
    match run(cli) {
        // `serve` reports readiness itself and prints nothing at exit.
        Ok(serde_json::Value::Null) => ExitCode::SUCCESS,
        Ok(value) => {
            print_json(&value);
            ExitCode::SUCCESS
        }
        Err(err) => {
            diagnose(format_args!("stow-s3: {} ({})", err.message, err.code));
            match &err.document {
                _ if err.quiet => {}
                Some(document) => print_json(&with_error(document, &err)),
                None => print_json(&serde_json::json!({ "error": err })),
            }
            ExitCode::from(if err.usage { 2 } else { 1 })
        }
    }
}

/// A result document that is also a refusal (a rewind with conflicts)
/// with the `error` member every refusal's document has. A document with
/// an `error` of its own keeps it (a keyed capture's envelope, whose error
/// has no message by design: that goes to stderr).
fn with_error(document: &serde_json::Value, err: &CliError) -> serde_json::Value {
    let mut document = document.clone();
    if let Some(doc) = document.as_object_mut() {
        doc.entry("error")
            .or_insert_with(|| serde_json::json!({ "code": err.code, "message": err.message }));
    }
    document
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    #[test]
    fn durations_are_seconds_or_humantime() {
        assert_eq!(super::parse_duration("30"), Some(Duration::from_secs(30)));
        assert_eq!(
            super::parse_duration("1.5"),
            Some(Duration::from_millis(1500))
        );
        assert_eq!(super::parse_duration("90s"), Some(Duration::from_secs(90)));
        assert_eq!(super::parse_duration("10m"), Some(Duration::from_secs(600)));
        for bad in ["", "soon", "-1", "NaN", "inf", "1e400"] {
            assert_eq!(super::parse_duration(bad), None, "{bad}");
        }
    }

    #[test]
    fn store_size_limits_keep_their_cli_codes() {
        use stow_store::StoreError as E;
        let code = |e: E| super::CliError::from(e).code;
        assert_eq!(code(E::KeyTooLong { len: 2, limit: 1 }), "invalid_key");
        assert_eq!(
            code(E::MetadataTooLarge { size: 2, limit: 1 }),
            "invalid_metadata"
        );
        assert_eq!(code(E::InvalidKey { reason: "r" }), "invalid_key");
        assert_eq!(code(E::Conflict), "conflict");
    }
}
