//! Times a checkpoint after changing 10 files of a generated tree (for
//! profiling): `cargo run --example incremental -- DIR FILES`.

use std::fs;
use std::time::Instant;

use stow_checkpoint::{self as checkpoint, CaptureOptions};
use stow_workspace::{prepare, Registry};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let dir = std::path::PathBuf::from(args.get(1).ok_or("usage: incremental DIR FILES")?);
    let files: u64 = args
        .get(2)
        .map(|s| s.parse())
        .transpose()?
        .unwrap_or(10_000);
    fs::create_dir_all(dir.join("tree"))?;
    for i in 0..files {
        let p = dir.join(format!("tree/d{:02}/f{i:05}.dat", i % 37));
        fs::create_dir_all(p.parent().ok_or("no parent")?)?;
        fs::write(&p, vec![(i % 251) as u8; 15_000])?;
    }
    fs::write(
        dir.join("task.json"),
        r#"{"version":1,"root":"ws","registry_dir":"reg","max_bytes":1000000000,"max_objects":100000,"inputs":[{"source":"tree","destination":"."}]}"#,
    )?;
    let ws = prepare(&dir.join("task.json"))?;
    let reg = Registry::resolve(Some(&dir.join("reg")), None)?;
    let opts = CaptureOptions::default();
    let t = Instant::now();
    checkpoint::capture(&reg, &ws.workspace_id, &opts)?;
    eprintln!("first: {:?}", t.elapsed());
    for round in 0..5u64 {
        for j in 0..10u64 {
            let i = (round * 1000 + j * 97) % files;
            fs::write(
                ws.root.join(format!("d{:02}/f{i:05}.dat", i % 37)),
                vec![(round + 7) as u8; 15_000],
            )?;
        }
        let t = Instant::now();
        checkpoint::capture(&reg, &ws.workspace_id, &opts)?;
        eprintln!("incremental: {:?}", t.elapsed());
    }
    Ok(())
}
