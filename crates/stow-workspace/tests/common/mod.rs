//! Helpers shared by the checkpoint test files: a prepared workspace in
//! a team partition, and what to count in its registry.
// Each test file uses only some of these.
#![allow(dead_code)]

use std::fs;
use std::path::PathBuf;

use stow_checkpoint::{self as checkpoint, CaptureOptions};
use stow_workspace::{prepare, Registry, WorkspaceResult};

pub struct Ws {
    pub _tmp: tempfile::TempDir,
    pub dir: PathBuf,
    pub reg: Registry,
    pub ws: WorkspaceResult,
}

pub fn setup(extra: &str) -> Ws {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().to_path_buf();
    fs::create_dir_all(dir.join("in/nested")).unwrap();
    fs::write(dir.join("in/seed.txt"), "seed").unwrap();
    fs::write(dir.join("in/nested/second.txt"), "second").unwrap();
    let m = dir.join("task.json");
    fs::write(
        &m,
        format!(r#"{{"version":1,"root":"ws","registry_dir":"reg","team":"t","inputs":[{{"source":"in","destination":"."}}]{extra}}}"#),
    )
    .unwrap();
    let ws = prepare(&m).unwrap();
    let reg = Registry::resolve(Some(&dir.join("reg")), Some("t")).unwrap();
    Ws {
        _tmp: tmp,
        dir,
        reg,
        ws,
    }
}

pub fn cap(w: &Ws) -> checkpoint::CheckpointResult {
    checkpoint::capture(&w.reg, &w.ws.workspace_id, &CaptureOptions::default()).unwrap()
}

/// Stage directories left in the checkpoints directory (a failed capture
/// must remove its own).
pub fn leftover_stages(reg: &Registry) -> usize {
    fs::read_dir(reg.dir().join(".stow/checkpoints")).map_or(0, |d| {
        d.flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with(".stage-"))
            .count()
    })
}

/// Payload blobs in the store (tree nodes, which start with their magic,
/// are not counted).
pub fn blob_count(reg: &Registry) -> usize {
    let mut n = 0;
    for sub in fs::read_dir(reg.dir().join(".stow/blobs"))
        .unwrap()
        .flatten()
    {
        n += fs::read_dir(sub.path())
            .unwrap()
            .flatten()
            .filter(|b| !fs::read(b.path()).unwrap().starts_with(b"stow-node\0"))
            .count();
    }
    n
}

/// A blob path inside a registry partition, as the checkpoint layout names it.
pub fn blob_file(reg: &Registry, sha: &str) -> PathBuf {
    reg.state_dir().join("blobs").join(&sha[..2]).join(sha)
}
