//! The three servers of the suite: finding their binaries, starting them
//! on free ports until they answer, and reading their CPU time and memory
//! from `/proc`.

use std::io::{BufRead, BufReader};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::harness::{context, Result};

use super::{ACCESS_KEY, REGION, S3S_FS_VERSION, SECRET_KEY};

/// User+system CPU time of process `pid`, from `/proc/PID/stat`.
pub(crate) fn cpu_of(pid: u32) -> Option<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
    // SAFETY: sysconf only reads a configuration value.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    let hz = if hz > 0 { hz as u64 } else { 100 };
    Some(Duration::from_nanos(ticks * 1_000_000_000 / hz))
}

/// A field of `/proc/PID/status` in KiB (`VmHWM:`, `VmRSS:`).
pub(crate) fn status_kib(pid: u32, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with(field))?;
    line[field.len()..].split_whitespace().next()?.parse().ok()
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Ours,
    S3sFs,
    Moto,
}

impl Kind {
    pub(crate) const ALL: [Kind; 3] = [Kind::Ours, Kind::S3sFs, Kind::Moto];

    pub(crate) fn name(self) -> &'static str {
        match self {
            Kind::Ours => "stow-s3",
            Kind::S3sFs => "s3s-fs",
            Kind::Moto => "moto",
        }
    }

    pub(crate) fn slug(self) -> &'static str {
        match self {
            Kind::Ours => "stow_s3",
            Kind::S3sFs => "s3s_fs",
            Kind::Moto => "moto",
        }
    }
}

/// A running server.
pub(crate) struct Server {
    pub(crate) kind: Kind,
    pub(crate) child: Child,
    pub(crate) addr: SocketAddr,
}

impl Server {
    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    pub(crate) fn cpu(&self) -> Option<Duration> {
        cpu_of(self.pid())
    }

    /// SIGTERM, then SIGKILL if it has not exited within 5 s.
    pub(crate) fn stop(mut self) {
        // SAFETY: kill on our own child's pid.
        unsafe {
            libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM);
        }
        let t = Instant::now();
        while t.elapsed() < Duration::from_secs(5) {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Where the peer binaries live.
pub(crate) struct Bins {
    pub(crate) ours: PathBuf,
    pub(crate) s3s_fs: PathBuf,
    pub(crate) moto: PathBuf,
}

pub(crate) fn free_port() -> Result<u16> {
    let l = TcpListener::bind("127.0.0.1:0").map_err(context("find a free port"))?;
    Ok(l.local_addr()?.port())
}

/// Finds (or installs under `target/bench-peers/`) the server binaries.
pub(crate) fn find_bins() -> Result<Bins> {
    let exe = std::env::current_exe().map_err(context("locate the bench binary"))?;
    let dir = exe.parent().ok_or("the bench binary has no directory")?;
    let ours = crate::suites::mcp::server_binary()?;
    let s3s_fs = match std::env::var_os("S3S_FS_BIN") {
        Some(p) => PathBuf::from(p),
        None => {
            let target = dir
                .parent()
                .ok_or("the bench binary is not under target/")?;
            let root = target.join("bench-peers").join("s3s-fs");
            let bin = root.join("bin").join("s3s-fs");
            if !bin.is_file() {
                eprintln!(
                    "installing s3s-fs {S3S_FS_VERSION} into {} (a peer: never committed)",
                    root.display()
                );
                let status = Command::new(std::env::var_os("CARGO").unwrap_or("cargo".into()))
                    .args(["install", "s3s-fs", "--version"])
                    .arg(format!("={S3S_FS_VERSION}"))
                    .args(["--locked", "--features", "binary", "--root"])
                    .arg(&root)
                    .status()
                    .map_err(context("run cargo install s3s-fs"))?;
                if !status.success() {
                    return Err(format!("cargo install s3s-fs failed: {status}").into());
                }
            }
            bin
        }
    };
    let moto = match std::env::var_os("MOTO_SERVER") {
        Some(p) => PathBuf::from(p),
        None => Command::new("pyenv")
            .args(["which", "moto_server"])
            .stderr(Stdio::null())
            .output()
            .ok()
            .filter(|o| o.status.success())
            .and_then(|o| String::from_utf8(o.stdout).ok())
            .map(|s| PathBuf::from(s.trim()))
            .filter(|p| p.is_file())
            .unwrap_or_else(|| PathBuf::from("moto_server")),
    };
    Ok(Bins { ours, s3s_fs, moto })
}

/// Starts `kind` on `dir`; returns it and its start-to-ready time (ms).
pub(crate) fn start(kind: Kind, bins: &Bins, dir: &Path) -> Result<(Server, f64)> {
    std::fs::create_dir_all(dir).map_err(context(format!("create {}", dir.display())))?;
    match kind {
        Kind::Ours => start_ours(&bins.ours, dir),
        Kind::S3sFs => {
            let port = free_port()?;
            let mut cmd = Command::new(&bins.s3s_fs);
            cmd.args(["--host", "127.0.0.1", "--port", &port.to_string()])
                .args(["--access-key", ACCESS_KEY, "--secret-key", SECRET_KEY])
                .arg(dir);
            start_polled(kind, cmd, port, Duration::from_secs(30))
        }
        Kind::Moto => {
            let port = free_port()?;
            let mut cmd = Command::new(&bins.moto);
            cmd.args(["-H", "127.0.0.1", "-p", &port.to_string()])
                .current_dir(dir);
            start_polled(kind, cmd, port, Duration::from_secs(60))
        }
    }
}

/// Spawns a peer and polls its port until it accepts a connection.
pub(crate) fn start_polled(
    kind: Kind,
    mut cmd: Command,
    port: u16,
    limit: Duration,
) -> Result<(Server, f64)> {
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let t = Instant::now();
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(context(format!("start {}", kind.name())))?;
    loop {
        if TcpStream::connect_timeout(&addr, Duration::from_millis(100)).is_ok() {
            let ms = t.elapsed().as_secs_f64() * 1e3;
            return Ok((Server { kind, child, addr }, ms));
        }
        if let Ok(Some(status)) = child.try_wait() {
            return Err(format!("{} exited before it was ready: {status}", kind.name()).into());
        }
        if t.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!("{} was not ready within {limit:?}", kind.name()).into());
        }
        std::thread::sleep(Duration::from_micros(500));
    }
}

/// Spawns `stow-s3 serve --port 0 --ready-fd N` and reads the readiness
/// JSON line from the pipe.
pub(crate) fn start_ours(bin: &Path, dir: &Path) -> Result<(Server, f64)> {
    use std::os::fd::FromRawFd as _;
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: pipe writes two descriptors into the array.
    if unsafe { libc::pipe(fds.as_mut_ptr()) } != 0 {
        return Err(format!("pipe: {}", std::io::Error::last_os_error()).into());
    }
    let [rfd, wfd] = fds;
    // SAFETY: both descriptors were just created and are owned here; the
    // read end is closed on exec, the write end is inherited by the child.
    let reader = unsafe {
        libc::fcntl(rfd, libc::F_SETFD, libc::FD_CLOEXEC);
        std::fs::File::from_raw_fd(rfd)
    };
    // SAFETY: as above; dropped (closed) once the child has it.
    let writer = unsafe { std::fs::File::from_raw_fd(wfd) };
    let t = Instant::now();
    let child = Command::new(bin)
        .args(["serve", "--port", "0", "--ready-fd", &wfd.to_string()])
        .arg("--data-dir")
        .arg(dir)
        .args(["--access-key", ACCESS_KEY, "--secret-key", SECRET_KEY])
        .args(["--region", REGION])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(context(format!("start {}", bin.display())));
    drop(writer);
    let mut child = child?;
    let mut line = String::new();
    // Bounded: the child's exit closes the last write end (EOF).
    BufReader::new(reader).read_line(&mut line)?;
    let ms = t.elapsed().as_secs_f64() * 1e3;
    let ready: serde_json::Value = match serde_json::from_str(&line) {
        Ok(v) => v,
        Err(_) => {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!("stow-s3 did not announce readiness (got {line:?})").into());
        }
    };
    let endpoint = ready["endpoint"].as_str().unwrap_or("");
    let addr: SocketAddr = endpoint
        .trim_start_matches("http://")
        .parse()
        .map_err(context(format!("endpoint {endpoint:?}")))?;
    Ok((
        Server {
            kind: Kind::Ours,
            child,
            addr,
        },
        ms,
    ))
}
