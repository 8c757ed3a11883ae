//! `stow-bench s3-load`: the suite's load generator against one running
//! server, for profiling it alone.

use std::net::SocketAddr;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::harness::{run_threads, Result, Work};

use super::client::{ok, Conn, Creds};
use super::{ACCESS_KEY, REGION, SECRET_KEY};

/// Options of `stow-bench s3-load`.
#[derive(Debug, Clone, clap::Args)]
pub struct LoadArgs {
    /// Address of a running server (host:port).
    #[arg(long)]
    pub addr: SocketAddr,
    #[arg(long, default_value = ACCESS_KEY)]
    pub access_key: String,
    #[arg(long, default_value = SECRET_KEY)]
    pub secret_key: String,
    /// Bucket to PUT into (created if missing).
    #[arg(long, default_value = "load")]
    pub bucket: String,
    /// Body size in bytes.
    #[arg(long, default_value_t = 4096)]
    pub size: usize,
    /// Connections (one worker thread each).
    #[arg(long, default_value_t = 16)]
    pub conns: usize,
    /// How long to run.
    #[arg(long, default_value_t = 10)]
    pub seconds: u64,
    /// GET instead: each connection PUTs one object, then reads it back
    /// until the time is up.
    #[arg(long)]
    pub get: bool,
    /// With `--get`: first write this many objects, then read keys picked
    /// at random among them (0: each connection reads its own one object).
    #[arg(long, default_value_t = 0)]
    pub keys: usize,
}

/// Drives PUTs (or GETs) at a server someone else started, for profiling it (e.g.
/// under `perf record -p`); prints the rate. Not a comparison.
pub fn load(args: &LoadArgs) -> Result<()> {
    let c = Creds {
        access_key: args.access_key.clone(),
        secret_key: args.secret_key.clone(),
        region: REGION.into(),
    };
    let mut conn = Conn::new(args.addr, &c)?;
    let r = conn.request("PUT", &format!("/{}", args.bucket), "", b"", false)?;
    if r.status != 409 {
        ok("create bucket", r)?;
    }
    let body = vec![0x5au8; args.size];
    let cap = Duration::from_secs(args.seconds);
    let start = Instant::now();
    let stamp = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    let shared_key = |i: usize| format!("/{}/{stamp}/shared/{i}", args.bucket);
    if args.get && args.keys > 0 {
        run_threads(args.conns, |t| {
            let mut conn = Conn::new(args.addr, &c)?;
            for i in (t..args.keys).step_by(args.conns) {
                ok(
                    "PUT object",
                    conn.request("PUT", &shared_key(i), "", &body, false)?,
                )?;
            }
            Ok(Work::default())
        })?;
    }
    let start = if args.keys > 0 { Instant::now() } else { start };
    let run = run_threads(args.conns, |t| {
        let mut conn = Conn::new(args.addr, &c)?;
        let mut w = Work::default();
        let read_back = format!("/{}/{stamp}/{t}/read", args.bucket);
        if args.get && args.keys == 0 {
            ok(
                "PUT object",
                conn.request("PUT", &read_back, "", &body, false)?,
            )?;
        }
        // A cheap seeded generator: the same keys every run.
        let mut seed = 0x9e37_79b9_7f4a_7c15u64 ^ t as u64;
        while start.elapsed() < cap {
            if args.get && args.keys > 0 {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                let key = shared_key((seed % args.keys as u64) as usize);
                ok("GET object", conn.request("GET", &key, "", b"", false)?)?;
            } else if args.get {
                ok(
                    "GET object",
                    conn.request("GET", &read_back, "", b"", false)?,
                )?;
            } else {
                let path = format!("/{}/{stamp}/{t}/{}", args.bucket, w.ops);
                ok("PUT object", conn.request("PUT", &path, "", &body, false)?)?;
            }
            w.ops += 1;
        }
        Ok(w)
    })?;
    println!(
        "{} {}s of {} bytes on {} connections in {:.2} s: {:.0} ops/s",
        run.ops,
        if args.get { "GET" } else { "PUT" },
        args.size,
        args.conns,
        run.elapsed_s,
        run.ops as f64 / run.elapsed_s
    );
    Ok(())
}
