//! Where the engine keeps its state inside a registry partition.

use std::path::PathBuf;

use crate::registry::Registry;

/// The partition's private state directory (`R/.stow`).
pub(crate) fn state(registry: &Registry) -> PathBuf {
    registry.state_dir()
}

/// Published checkpoints, one directory each.
pub(crate) fn checkpoints_dir(registry: &Registry) -> PathBuf {
    state(registry).join("checkpoints")
}

/// The per-workspace stat cache (binary; see `statcache`).
pub(crate) fn cache_path(registry: &Registry, ws: &str) -> PathBuf {
    state(registry)
        .join("statcache")
        .join(format!("{ws}.cache"))
}

/// The JSON stat cache of earlier versions, removed with the workspace.
pub(crate) fn legacy_cache_path(registry: &Registry, ws: &str) -> PathBuf {
    state(registry).join("statcache").join(format!("{ws}.json"))
}

/// Now, in nanoseconds since the Unix epoch (0 if the clock is before it).
pub(crate) fn now_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as i64)
        .unwrap_or(0)
}
