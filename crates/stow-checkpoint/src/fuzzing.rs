//! Entry points for the coverage-guided fuzzer (`fuzz/`, issue 28) and for
//! the regression run of its corpus in `make test`: each takes hostile
//! bytes and must return (an error is fine), never panic, hang or allocate
//! without bound. Not an API: the parsers stay private; this module only
//! lets the fuzz crate reach them.
//!
//! [`seeds`] writes a seed corpus with this crate's own writers, so the
//! fuzzer starts from valid inputs (`cargo test -p stow-checkpoint
//! fuzz_seeds` with `STOW_FUZZ_SEEDS=DIR`).

use std::collections::HashMap;

use crate::format::{CheckpointManifest, DirectoryEntry, LinkEntry, SkippedEntry};
use crate::scan::{Scan, Scanned};
use crate::statcache::StatCache;
use crate::transfer::archive::ArchiveLimits;

/// A tree node (`tree.rs`): decoded strictly.
pub fn tree_node(bytes: &[u8]) {
    let _ = crate::tree::decode_node(bytes);
}

/// A stat cache file (`statcache.rs`): a torn or foreign one is "no cache".
pub fn stat_cache(bytes: &[u8]) {
    let _ = StatCache::decode(bytes);
}

/// An archive's or a remote's manifest document, checked against every
/// rule with the default limits.
pub fn manifest_document(bytes: &[u8]) {
    let _ = crate::transfer::archive::decode_manifest_document(bytes, ArchiveLimits::default());
}

/// Seed inputs per target, made by this crate's writers: (target, name,
/// bytes).
pub fn seeds() -> Vec<(&'static str, String, Vec<u8>)> {
    let mut out = Vec::new();
    let scan = sample_scan();
    let digests: Vec<[u8; 32]> = (0..scan.files.len()).map(|i| [i as u8 + 1; 32]).collect();
    let mut props = HashMap::new();
    props.insert(
        "src/lib.rs".to_string(),
        crate::format::FileProps {
            content_type: Some("text/x-rust".into()),
            metadata: [("k".to_string(), "v".to_string())].into_iter().collect(),
        },
    );
    for (label, p) in [("plain", None), ("props", Some(&props))] {
        if let Ok(built) = crate::tree::build(&scan, &digests, p, &|_| None) {
            for (i, (_, bytes)) in built.nodes.into_iter().enumerate() {
                out.push(("tree_node", format!("{label}-{i}"), bytes));
            }
        }
    }
    let cache = StatCache {
        scan_start_ns: 1_700_000_000_000_000_000,
        entries: scan
            .files
            .iter()
            .zip(&digests)
            .map(|(f, d)| crate::capture::cache_entry(f, *d))
            .collect(),
        nodes: vec![[7; 32], [9; 32]],
    };
    out.push(("stat_cache", "two-files".into(), cache.encode()));
    out.push(("stat_cache", "empty".into(), StatCache::default().encode()));
    let manifest = sample_manifest(&scan, &digests);
    if let Ok(doc) = crate::transfer::archive::manifest_document(&manifest) {
        out.push(("manifest_document", "small".into(), doc));
    }
    out
}

fn sample_scan() -> Scan {
    let file = |path: &str, size: u64, mode: u32| Scanned {
        path: path.into(),
        size,
        mode,
        mtime_ns: 1_600_000_000_000_000_000,
        ctime_ns: 1_600_000_000_000_000_000,
        ino: size + 1,
        nlink: 1,
    };
    Scan {
        files: vec![file("README.md", 12, 0o644), file("src/lib.rs", 40, 0o755)],
        excluded: Vec::new(),
        dirs: vec![DirectoryEntry {
            path: "src".into(),
            mode: 0o755,
        }],
        links: vec![LinkEntry {
            path: "src/link".into(),
            target: "lib.rs".into(),
        }],
        skipped: vec![SkippedEntry {
            path: "fifo".into(),
            reason: "a FIFO is not captured".into(),
        }],
        ignored: Vec::new(),
    }
}

fn sample_manifest(scan: &Scan, digests: &[[u8; 32]]) -> CheckpointManifest {
    CheckpointManifest {
        version: 1,
        id: "cp_0123456789abcdef01234567".into(),
        workspace_id: "ws_0123456789abcdef".into(),
        parent_id: None,
        created: "2026-12-02T00:00:00Z".into(),
        files: scan
            .files
            .iter()
            .zip(digests)
            .map(|(f, d)| crate::format::FileEntry {
                path: f.path.to_string(),
                size: f.size,
                mode: f.mode,
                sha256: crate::fsutil::hex(d),
                content_type: None,
                metadata: Default::default(),
            })
            .collect(),
        dirs: scan.dirs.clone(),
        links: scan.links.clone(),
        skipped: scan.skipped.clone(),
        ..CheckpointManifest::default()
    }
}

#[cfg(test)]
mod tests {
    /// Writes the seed corpus into `$STOW_FUZZ_SEEDS/<target>/<name>` when
    /// the variable is set; always checks that every seed goes through its
    /// entry point.
    #[test]
    fn fuzz_seeds() {
        let seeds = super::seeds();
        for target in ["tree_node", "stat_cache", "manifest_document"] {
            assert!(
                seeds.iter().any(|(t, _, _)| *t == target),
                "no seed for {target}"
            );
        }
        for (target, _, bytes) in &seeds {
            match *target {
                "tree_node" => assert!(crate::tree::decode_node(bytes).is_some()),
                "stat_cache" => assert!(crate::statcache::StatCache::decode(bytes).is_some()),
                _ => super::manifest_document(bytes),
            }
        }
        if let Some(dir) = std::env::var_os("STOW_FUZZ_SEEDS") {
            for (target, name, bytes) in seeds {
                let d = std::path::Path::new(&dir).join(target);
                std::fs::create_dir_all(&d).unwrap();
                std::fs::write(d.join(format!("seed-{name}")), bytes).unwrap();
            }
        }
    }
}
