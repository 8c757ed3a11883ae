//! The fuzz targets by name (issue 28): `fuzz/` runs each under
//! libFuzzer, and `make test` runs each over its corpus in `fuzz/corpus`
//! (`tests/fuzz_corpus.rs`). Every target takes hostile bytes and must
//! return, never panic, hang or allocate without bound. Not an API.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use stow_checkpoint::archive::ArchiveLimits;
use stow_checkpoint::fuzzing as engine;

/// Every target, named as its directory in `fuzz/corpus` and its binary
/// in `fuzz/fuzz_targets`.
pub const TARGETS: &[&str] = &[
    "tree_node",
    "stat_cache",
    "manifest_document",
    "archive_preview",
    "archive_import",
    "delta_document",
    "task_manifest",
    "handoff_document",
];

/// Runs target `target` on `bytes` (an unknown name does nothing).
pub fn run(target: &str, bytes: &[u8]) {
    match target {
        "tree_node" => engine::tree_node(bytes),
        "stat_cache" => engine::stat_cache(bytes),
        "manifest_document" => engine::manifest_document(bytes),
        "archive_preview" => through_file(bytes, "in.tar.gz", |p| {
            let _ = stow_checkpoint::archive::preview(p, ArchiveLimits::default());
        }),
        "archive_import" => through_file(bytes, "in.tar.gz", import_into_scratch),
        "delta_document" => through_file(bytes, "in.delta", |p| {
            let _ = stow_checkpoint::delta::read_document(p, None);
        }),
        "task_manifest" => through_file(bytes, "task.json", |p| {
            let _ = crate::manifest::TaskManifest::load(p);
        }),
        "handoff_document" => through_file(bytes, "handoff.json", |p| {
            let _ = crate::handoff::HandoffDocument::load(p);
        }),
        _ => {}
    }
}

/// Imports the archive at `archive` into a scratch registry beside it;
/// whether refused or published, the registry must then check clean: a
/// refusal leaves nothing half-written, an import only whole checkpoints.
fn import_into_scratch(archive: &Path) {
    let Some(dir) = archive.parent() else { return };
    let Ok(registry) = stow_checkpoint::Registry::at(&dir.join("registry"), None) else {
        return;
    };
    let opts = stow_checkpoint::archive::ImportOptions {
        include_sensitive: false,
        limits: ArchiveLimits::default(),
        progress: None,
    };
    let imported = stow_checkpoint::archive::import(&registry, archive, &opts);
    let checked = stow_checkpoint::check(&registry, false);
    match checked {
        Ok(c) if c.damaged.is_empty() => {}
        other => {
            panic!("the registry does not check clean after an import ({imported:?}): {other:?}")
        }
    }
}

/// Calls `f` with a file holding `bytes` (the readers under test take
/// paths), in a directory of its own that is removed afterwards.
fn through_file(bytes: &[u8], name: &str, f: impl FnOnce(&Path)) {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let dir = std::env::temp_dir().join(format!(
        "stow-fuzz-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    if std::fs::create_dir_all(&dir).is_err() {
        return;
    }
    let path = dir.join(name);
    if std::fs::write(&path, bytes).is_ok() {
        f(&path);
    }
    let _ = std::fs::remove_dir_all(&dir);
}
