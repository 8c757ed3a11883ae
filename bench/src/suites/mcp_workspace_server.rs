//! The workspace-profile MCP server the suites drive: started over a
//! registry and workspace (optionally with capture bounds), and one keyed
//! capture through it.

use std::path::Path;
use std::time::Instant;

use serde_json::json;

use crate::harness::{Result, Run};
use crate::suites::mcp::Server;

/// One keyed capture through the server; its CPU is the server's.
pub(crate) fn mcp_capture(server: &mut Server, ws: &str, key: &str) -> Result<Run> {
    let cpu0 = crate::suites::mcp::cpu_of(server.pid());
    let t = Instant::now();
    let env = server.tool(
        "stow_checkpoint_create",
        json!({"workspace_id": ws, "request_key": key}),
    )?;
    let elapsed_s = t.elapsed().as_secs_f64();
    if env["outcome"] != "committed" {
        return Err(format!("MCP capture: {env}").into());
    }
    let cpu = crate::suites::mcp::cpu_of(server.pid())
        .zip(cpu0)
        .map(|(b, a)| b.saturating_sub(a).as_secs_f64());
    Ok(Run {
        elapsed_s,
        cpu_s: cpu,
        ops: 1,
        bytes: 0,
    })
}

/// A workspace-profile server whose per-capture bounds admit `max_bytes`
/// and `max_files`.
pub(crate) fn serve_bounded(
    bin: &Path,
    reg: &Path,
    ws: &str,
    max_bytes: u64,
    max_files: u64,
) -> Result<Server> {
    let (b, f) = (max_bytes.to_string(), max_files.to_string());
    serve_with(bin, reg, ws, &["--max-bytes", &b, "--max-files", &f])
}

pub(super) fn serve(bin: &Path, reg: &Path, ws: &str) -> Result<Server> {
    serve_with(bin, reg, ws, &[])
}

/// A workspace-profile server over registry `reg` and workspace `ws`, a
/// 600 s deadline and `extra` flags, initialized.
fn serve_with(bin: &Path, reg: &Path, ws: &str, extra: &[&str]) -> Result<Server> {
    let reg = reg.display().to_string();
    let mut args = vec![
        "--registry-dir",
        &reg,
        "--workspace-id",
        ws,
        "--timeout",
        "600s",
    ];
    args.extend_from_slice(extra);
    let mut s = Server::spawn_with(bin, &args)?;
    s.initialize()?;
    Ok(s)
}
