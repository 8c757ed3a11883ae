//! Admitting a new checkpoint under a workspace's retention caps and the
//! partition's standing policy.

use crate::error::{Result, WsError};
use crate::format::Summary;
use crate::registry::{min_bound, Registry};

/// A workspace's retention caps (0 = unlimited); a workspace not
/// registered here (an imported checkpoint's) has none.
#[derive(Clone, Copy, Default)]
pub(crate) struct RetentionCaps {
    pub max_checkpoints: u64,
    pub max_checkpoint_bytes: u64,
}

impl RetentionCaps {
    pub(crate) fn of(rec: &crate::registry::Record) -> RetentionCaps {
        RetentionCaps {
            max_checkpoints: rec.max_checkpoints,
            max_checkpoint_bytes: rec.max_checkpoint_bytes,
        }
    }
}

/// Admits a new checkpoint of `bytes` for workspace `ws` under its
/// retention caps and the partition's standing policy; refuses rather
/// than evicting. `all`: every checkpoint of the registry partition.
pub(crate) fn admit(
    registry: &Registry,
    ws: &str,
    caps: RetentionCaps,
    bytes: u64,
    all: &[Summary],
) -> Result<()> {
    let mine: Vec<&Summary> = all.iter().filter(|s| s.workspace_id == ws).collect();
    let my_bytes: u64 = mine.iter().map(|s| s.bytes).sum();
    if caps.max_checkpoints > 0 && mine.len() as u64 >= caps.max_checkpoints {
        return Err(WsError::CapacityExceeded(format!(
            "workspace {ws} retains {} checkpoints, at its limit of {}; delete one first",
            mine.len(),
            caps.max_checkpoints
        )));
    }
    if caps.max_checkpoint_bytes > 0 && my_bytes + bytes > caps.max_checkpoint_bytes {
        return Err(WsError::CapacityExceeded(format!(
            "retained checkpoint bytes {} + {bytes} would exceed the limit of {}",
            my_bytes, caps.max_checkpoint_bytes
        )));
    }
    let policy = registry.policy()?;
    let total_bytes: u64 = all.iter().map(|s| s.bytes).sum();
    if min_bound(policy.max_checkpoints, 0) > 0 && all.len() as u64 >= policy.max_checkpoints {
        return Err(WsError::CapacityExceeded(format!(
            "the registry retains {} checkpoints, at its policy limit of {}",
            all.len(),
            policy.max_checkpoints
        )));
    }
    if policy.max_checkpoint_bytes > 0 && total_bytes + bytes > policy.max_checkpoint_bytes {
        return Err(WsError::CapacityExceeded(format!(
            "registry checkpoint bytes {total_bytes} + {bytes} would exceed the policy limit of {}",
            policy.max_checkpoint_bytes
        )));
    }
    Ok(())
}
