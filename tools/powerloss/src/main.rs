//! `powerloss`: mount the harness, cut its power, sync it, ask its state.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// A FUSE file system that loses what was not made durable when told to.
#[derive(Parser)]
#[command(name = "powerloss")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Mounts BACKING at MNT (foreground); prints `POWERLOSS_READY` once
    /// mounted.
    Mount {
        /// The directory that holds the data (the "disk").
        backing: PathBuf,
        /// The mount point.
        mnt: PathBuf,
        /// The control socket to create.
        #[arg(long)]
        control: PathBuf,
        /// FUSE worker threads.
        #[arg(long, default_value_t = 4)]
        threads: usize,
    },
    /// Cuts the power: unsynced changes vanish, the daemon unmounts and
    /// exits. With --seed a random subset of them survives instead.
    Cut {
        /// The daemon's control socket.
        #[arg(long)]
        control: PathBuf,
        /// Keep a random subset (this seed) instead of dropping all.
        #[arg(long)]
        seed: Option<u64>,
    },
    /// Makes everything durable (as syncfs would).
    Sync {
        /// The daemon's control socket.
        #[arg(long)]
        control: PathBuf,
    },
    /// Prints the counts of pending changes.
    Status {
        /// The daemon's control socket.
        #[arg(long)]
        control: PathBuf,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let r = match cli.cmd {
        Cmd::Mount {
            backing,
            mnt,
            control,
            threads,
        } => stow_powerloss::run(&backing, &mnt, &control, threads, || {
            println!(
                "POWERLOSS_READY mnt={} control={}",
                mnt.display(),
                control.display()
            );
        })
        .map(|()| None),
        Cmd::Cut { control, seed } => {
            let line = match seed {
                Some(s) => format!("cut {s}"),
                None => "cut".to_string(),
            };
            stow_powerloss::control::request(&control, &line).map(Some)
        }
        Cmd::Sync { control } => stow_powerloss::control::request(&control, "sync").map(Some),
        Cmd::Status { control } => stow_powerloss::control::request(&control, "status").map(Some),
    };
    match r {
        Ok(None) => ExitCode::SUCCESS,
        Ok(Some(answer)) => {
            println!("{answer}");
            if answer.starts_with("{\"ok\":true") {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
        Err(e) => {
            eprintln!("powerloss: {e}");
            ExitCode::FAILURE
        }
    }
}
