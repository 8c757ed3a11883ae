//! The control socket: one request line, one JSON answer line.
//!
//! Requests: `cut` (drop everything unsynced), `cut SEED` (a random subset
//! survives), `sync` (as `syncfs`), `status` (pending counts). After a cut
//! the daemon unmounts and exits.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::sync::Arc;

use crate::core::Core;
use crate::error::{Context, Error, Result};
use crate::model::CutMode;

/// What the daemon should do after answering.
pub enum After {
    /// Keep serving.
    Continue,
    /// Power is off: unmount and exit.
    Exit,
}

/// Answers one request; returns the JSON line and what comes next.
pub fn answer(core: &Core, line: &str) -> (String, After) {
    let mut words = line.split_whitespace();
    let r: Result<(String, After)> = match (words.next(), words.next()) {
        (Some("cut"), seed) => {
            let mode = match seed.map(str::parse::<u64>) {
                None => Ok(CutMode::DropAll),
                Some(Ok(s)) => Ok(CutMode::Subset(s)),
                Some(Err(_)) => Err(Error::Control(format!("bad seed in {line:?}"))),
            };
            mode.and_then(|m| core.cut(m)).map(|r| {
                let s = r.stats;
                (
                    format!(
                        "{{\"ok\":true,\"meta_kept\":{},\"meta_dropped\":{},\"data_kept\":{},\"data_dropped\":{},\"files\":{},\"dirs\":{}}}",
                        s.meta_kept, s.meta_dropped, s.data_kept, s.data_dropped, r.files, r.dirs
                    ),
                    After::Exit,
                )
            })
        }
        (Some("sync"), None) => core
            .sync_all()
            .map(|()| ("{\"ok\":true}".to_string(), After::Continue)),
        (Some("status"), None) => core.pending().map(|(m, d)| {
            (
                format!("{{\"ok\":true,\"pending_meta\":{m},\"pending_data\":{d}}}"),
                After::Continue,
            )
        }),
        _ => Err(Error::Control(format!("unknown request {line:?}"))),
    };
    match r {
        Ok(x) => x,
        Err(e) => (
            format!("{{\"ok\":false,\"error\":{}}}", json_string(&e.to_string())),
            After::Continue,
        ),
    }
}

/// Serves the socket until a cut; then returns.
pub fn serve(core: Arc<Core>, listener: UnixListener) -> Result<()> {
    for stream in listener.incoming() {
        let stream = stream.ctx(|| "accept on the control socket".into())?;
        let mut line = String::new();
        let mut reader = BufReader::new(&stream);
        if reader.read_line(&mut line).is_err() {
            continue;
        }
        let (reply, after) = answer(&core, line.trim());
        let mut w = &stream;
        let _ = w
            .write_all(reply.as_bytes())
            .and_then(|()| w.write_all(b"\n"));
        if let After::Exit = after {
            return Ok(());
        }
    }
    Ok(())
}

/// Sends one request to a daemon's socket and returns its answer line.
pub fn request(socket: &Path, line: &str) -> Result<String> {
    let mut s = UnixStream::connect(socket).ctx(|| format!("connect to {}", socket.display()))?;
    s.write_all(format!("{line}\n").as_bytes())
        .ctx(|| "send request".into())?;
    let mut out = String::new();
    BufReader::new(&s)
        .read_line(&mut out)
        .ctx(|| "read answer".into())?;
    if out.is_empty() {
        return Err(Error::Control("the daemon closed the socket".into()));
    }
    Ok(out.trim_end().to_string())
}

/// A JSON string literal.
fn json_string(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}
