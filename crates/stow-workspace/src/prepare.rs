//! `prepare`: validate everything, then create the root, register it, stage
//! Git inputs and copy file inputs. A refusal before creation touches
//! nothing; a failure after creation removes what this call created.

use std::fs;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::describe::{capabilities, RegistryBound, RepositoryResult, WorkspaceResult};
use crate::git;
use crate::identity::{
    claim_session, new_workspace_id, record_base_identity, registry_base, write_identity, Identity,
};
use crate::manifest::{check_seeded, Plan, TaskManifest};
use stow_checkpoint::fsutil::{
    atomic_write, create_dirs_within, create_private_dir, now_rfc3339, random_hex, syncfs,
};
use stow_checkpoint::progress::PhaseClock;
use stow_checkpoint::registry::{
    authority_names, min_bound, Record, Registry, POLICY_VERSION, READ_WRITE_MASK,
};
use stow_checkpoint::walk as tree;
use stow_checkpoint::{Result, WsError};

/// Prepares a workspace from the manifest file at `manifest_path`.
pub fn prepare(manifest_path: &Path) -> Result<WorkspaceResult> {
    let mut clock = PhaseClock::start("prepare");
    let manifest = TaskManifest::load(manifest_path)?;
    let plan = Plan::build(&manifest, manifest_path)?;
    clock.lap("plan");
    let registry = Registry::resolve(plan.registry_base.as_deref(), plan.team.as_deref())?;
    crate::identity::check_root_apart(&registry, &plan.root)?;
    // The bound is checked before anything is created, then again under
    // the registry lock at registration (a concurrent prepare may race).
    let bound = min_bound(plan.max_workspaces, registry.policy()?.max_workspaces);
    let count = registry.count()?;
    if bound > 0 && count >= bound {
        return Err(capacity_error(count, bound));
    }
    let existed = registry.dir().exists();
    let id = new_workspace_id();
    let bucket = plan
        .bucket
        .clone()
        .unwrap_or_else(|| format!("stow-workspace-{}", random_hex(8)));
    fs::DirBuilder::new()
        .mode(0o755)
        .create(&plan.root)
        .map_err(|e| WsError::io_at("create root", &plan.root, e))?;
    match prepare_created(&plan, &registry, &id, &bucket, bound, &mut clock) {
        Ok(r) => Ok(r),
        Err(err) => {
            let _ = fs::remove_dir_all(&plan.root);
            let _ = registry.remove(&id);
            if !existed {
                forget_new_partition(&registry);
            }
            Err(err)
        }
    }
}

/// Removes a registry partition this call created, if it holds no records.
fn forget_new_partition(registry: &Registry) {
    if registry.records().map(|r| r.is_empty()).unwrap_or(false) {
        let _ = fs::remove_dir_all(registry.state_dir());
        let mut dir = Some(registry.dir().to_path_buf());
        // Only empty directories go; `remove_dir` refuses anything else.
        while let Some(d) = dir {
            if fs::remove_dir(&d).is_err() {
                break;
            }
            dir = d.parent().map(Path::to_path_buf);
        }
    }
}

fn capacity_error(count: u64, bound: u64) -> WsError {
    WsError::CapacityExceeded(format!(
        "the registry holds {count} workspaces, at its bound of {bound}; run `stow-s3 workspace prune` for missing directories, `stow-s3 workspace collect` for expired workspaces, or raise max_workspaces"
    ))
}

fn prepare_created(
    plan: &Plan,
    registry: &Registry,
    id: &str,
    bucket: &str,
    bound: u64,
    clock: &mut PhaseClock,
) -> Result<WorkspaceResult> {
    let root = &plan.root;
    let created = now_rfc3339();
    write_identity(
        root,
        &Identity {
            version: 1,
            workspace_id: id.to_string(),
            bucket: bucket.to_string(),
            created: created.clone(),
            owned: true,
            base_identity: None,
            registry_dir: registry_base(registry),
            team: registry.team().map(str::to_string),
        },
    )?;
    let _session = claim_session(root, id)?;
    let working_dir = if plan.working_directory.is_empty() {
        root.clone()
    } else {
        root.join(&plan.working_directory)
    };
    let rec = Record {
        id: id.to_string(),
        dir: root.clone(),
        working_directory: Some(working_dir.clone()),
        bucket: bucket.to_string(),
        created: created.clone(),
        last_used: created,
        ttl_seconds: plan.ttl_seconds,
        policy_version: POLICY_VERSION,
        authority_mask: READ_WRITE_MASK,
        max_bytes: plan.max_bytes,
        max_objects: plan.max_objects,
        max_checkpoint_bytes: plan.max_checkpoint_bytes,
        max_checkpoints: plan.max_checkpoints,
        owned: true,
        gitignore: false,
        attached: false,
    };
    let count = register(registry, &rec, bound)?;
    let repositories = stage_repositories(plan)?;
    make_directories(plan)?;
    clock.lap("git");
    // The Git checkouts are in place: they are counted now, the copies as
    // they are made, and the identity of the whole tree is hashed while
    // the files are copied.
    let (checkout_bytes, checkout_files) = tree::seeded_totals(root, 0)?;
    let present = tree::identity_files(root)?;
    let copied = copy_all(&plan.files, root, present)?;
    clock.lap("copy");
    create_dirs_within(root, &plan.working_directory, 0o755)?;
    let base_identity = copied.base_identity;
    let seeded_bytes = checkout_bytes + copied.bytes;
    let seeded_objects = checkout_files + plan.files.len() as u64;
    check_seeded(
        seeded_bytes,
        seeded_objects,
        plan.max_bytes,
        plan.max_objects,
    )?;
    if !repositories.is_empty() {
        let prov = serde_json::json!({ "repositories": repositories });
        atomic_write(
            &root.join(".stow").join("provenance.json"),
            prov.to_string().as_bytes(),
            0o600,
        )?;
    }
    // The tree on disk before the workspace is recorded as ready (one
    // flush of its file system, not a fsync per file).
    syncfs(root)?;
    // Persist the record once more so its working directory is durable even
    // if the first write raced a concurrent registry edit.
    registry.put(&rec)?;
    record_base_identity(root, &base_identity)?;
    clock.lap("record");
    Ok(WorkspaceResult {
        version: 1,
        workspace_id: id.to_string(),
        root: root.clone(),
        working_directory: working_dir,
        bucket: bucket.to_string(),
        registry_dir: Some(registry.dir().to_path_buf()),
        team: registry.team().map(str::to_string),
        seeded_bytes,
        seeded_objects,
        base_identity,
        repositories,
        checkpoint_id: None,
        capabilities: capabilities(&rec, RegistryBound::new(bound, count)),
        authority: authority_names(rec.authority_mask),
    })
}

/// Records `rec` in the registry under its lock, unless the partition is
/// at its workspace bound; returns the count of workspaces with it.
fn register(registry: &Registry, rec: &Record, bound: u64) -> Result<u64> {
    let _lock = registry.lock()?;
    let bound = min_bound(bound, registry.policy()?.max_workspaces);
    let count = registry.count()?;
    if bound > 0 && count >= bound {
        return Err(capacity_error(count, bound));
    }
    registry.put(rec)?;
    Ok(count + 1)
}

/// Checks out the plan's Git repositories (their hooks disabled) at their
/// destinations.
fn stage_repositories(plan: &Plan) -> Result<Vec<RepositoryResult>> {
    let root = &plan.root;
    let mut repositories = Vec::new();
    if plan.repos.is_empty() {
        return Ok(repositories);
    }
    let hooks = root.join(".stow").join("disabled-hooks");
    create_private_dir(&hooks)?;
    for r in &plan.repos {
        let dest = root.join(&r.dest);
        if let Some((parent, _)) = r.dest.rsplit_once('/') {
            create_dirs_within(root, parent, 0o755)?;
        }
        git::stage(&r.toplevel, &r.commit, &dest, &hooks)?;
        repositories.push(RepositoryResult {
            source: r.toplevel.clone(),
            destination: r.dest.clone(),
            reference: r.reference.clone(),
            commit: r.commit.clone(),
        });
    }
    Ok(repositories)
}

/// Makes the plan's directories, and the parents of its file inputs'
/// destinations (`docs/notes.md`) like directory inputs' (0755, never
/// through a symlink), each once, before the files are copied on a few
/// threads.
fn make_directories(plan: &Plan) -> Result<()> {
    let root = &plan.root;
    for d in &plan.dirs {
        create_dirs_within(root, d, 0o755)?;
    }
    let parents: std::collections::BTreeSet<&str> = plan
        .files
        .iter()
        .filter_map(|f| f.dest.rsplit_once('/').map(|(parent, _)| parent))
        .collect();
    for parent in parents {
        create_dirs_within(root, parent, 0o755)?;
    }
    Ok(())
}

/// What the copies of a prepare add up to.
struct Copied {
    /// The `base_identity` of the whole tree after the copies.
    base_identity: String,
    /// Bytes copied (as read, so a source that changed since planning is
    /// counted as copied).
    bytes: u64,
}

/// How a finished copy reaches the identity thread.
enum Handoff {
    /// Not copied yet.
    Pending,
    /// Copied, and the destination is still open: hashed without opening
    /// it again.
    Open(fs::File),
    /// Copied and closed: hashed by path.
    Closed,
}

/// Copies at most held open for the identity thread; past this the copy
/// threads close theirs (a file descriptor limit is often 1,024).
const HELD_OPEN: usize = 64;

/// The copies' progress, shared by the copy threads and the identity thread.
struct Handoffs {
    slots: Vec<Handoff>,
    held: usize,
    failed: bool,
}

/// Copies every planned file into `root` on a few threads, a directory
/// at a time (see `parallel`), and hashes the `base_identity` of the
/// resulting tree: `present` (the regular files already there, in walk
/// order) and the copies. One more thread hashes meanwhile, in walk
/// order, taking each copy as soon as it is complete (still open when it
/// can), so the tree is not read again afterwards. Stops at the first
/// failure. Long because the copying threads, the hashing thread and
/// the hand-off between them share one thread scope.
fn copy_all(
    files: &[crate::manifest::PlannedFile],
    root: &Path,
    present: Vec<(String, PathBuf)>,
) -> Result<Copied> {
    use std::io::{Seek, SeekFrom};
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::{Condvar, Mutex, MutexGuard};
    use stow_checkpoint::parallel::{for_each_in_dir_runs, parent_dir, worker_threads};
    // Grouped by directory, so each thread creates in a directory of its own.
    let mut order: Vec<&crate::manifest::PlannedFile> = files.iter().collect();
    order.sort_by(|a, b| (parent_dir(&a.dest), &a.dest).cmp(&(parent_dir(&b.dest), &b.dest)));
    let work: Vec<(usize, &crate::manifest::PlannedFile)> = order.into_iter().enumerate().collect();
    let hashed: Vec<bool> = work
        .iter()
        .map(|(_, f)| !tree::identity_excludes(&f.dest))
        .collect();
    // Everything the identity covers, in walk order: what was there, and
    // each copy (by its index in `work`).
    enum Covered<'a> {
        Present(&'a Path),
        Copy(usize),
    }
    let mut covered: Vec<(&str, Covered)> = present
        .iter()
        .map(|(rel, path)| (rel.as_str(), Covered::Present(path)))
        .chain(
            work.iter()
                .filter(|(i, _)| hashed[*i])
                .map(|(i, f)| (f.dest.as_str(), Covered::Copy(*i))),
        )
        .collect();
    covered.sort_by(|a, b| tree::walk_order(a.0, b.0));
    let state = Mutex::new(Handoffs {
        slots: work.iter().map(|_| Handoff::Pending).collect(),
        held: 0,
        failed: false,
    });
    let changed = Condvar::new();
    let lock = || -> MutexGuard<'_, Handoffs> { state.lock().unwrap_or_else(|e| e.into_inner()) };
    let copied_bytes = AtomicU64::new(0);
    let identity = || -> Result<Option<String>> {
        let mut h = <sha2::Sha256 as sha2::Digest>::new();
        let mut buf = vec![0u8; 256 << 10];
        for (rel, at) in &covered {
            let i = match at {
                Covered::Present(path) => {
                    tree::feed_identity(&mut h, rel, path, &mut buf)?;
                    continue;
                }
                Covered::Copy(i) => *i,
            };
            let handoff = {
                let mut st = changed
                    .wait_while(lock(), |st| {
                        matches!(st.slots[i], Handoff::Pending) && !st.failed
                    })
                    .unwrap_or_else(|e| e.into_inner());
                if st.failed {
                    return Ok(None);
                }
                let handoff = std::mem::replace(&mut st.slots[i], Handoff::Closed);
                if matches!(handoff, Handoff::Open(_)) {
                    st.held -= 1;
                }
                handoff
            };
            let path = root.join(rel);
            match handoff {
                Handoff::Open(mut file) => file
                    .seek(SeekFrom::Start(0))
                    .and_then(|_| tree::feed_identity_from(&mut h, rel, &mut file, &mut buf))
                    .map_err(|e| WsError::io_at("read", &path, e))?,
                _ => tree::feed_identity(&mut h, rel, &path, &mut buf)?,
            }
        }
        Ok(Some(tree::finish_identity(h)))
    };
    let (copies, identity) = std::thread::scope(|s| {
        let identity = s.spawn(identity);
        let copies = for_each_in_dir_runs(
            &work,
            |(_, f)| parent_dir(&f.dest),
            worker_threads(work.len()),
            || (),
            |_, (i, f)| {
                let r = copy_new_file(&f.source, &root.join(&f.dest), f.mode);
                let mut closing = None;
                let mut st = lock();
                let r = match r {
                    Ok((file, n)) => {
                        copied_bytes.fetch_add(n, Ordering::Relaxed);
                        st.slots[*i] = if hashed[*i] && st.held < HELD_OPEN {
                            st.held += 1;
                            Handoff::Open(file)
                        } else {
                            closing = Some(file);
                            Handoff::Closed
                        };
                        Ok(())
                    }
                    Err(e) => {
                        st.failed = true;
                        Err(e)
                    }
                };
                drop(st);
                changed.notify_all();
                drop(closing);
                r
            },
        );
        (copies, identity.join())
    });
    copies?;
    let base_identity = match identity {
        Ok(Ok(Some(id))) => id,
        Ok(Ok(None)) => return Err(WsError::InvalidRequest("prepare stopped early".into())),
        Ok(Err(e)) => return Err(e),
        Err(_) => {
            return Err(WsError::InvalidRequest(
                "the identity worker panicked".into(),
            ))
        }
    };
    Ok(Copied {
        base_identity,
        bytes: copied_bytes.into_inner(),
    })
}

/// Copies `src` to a new file `dst` (which must not exist) with `mode`,
/// returning the new file, still open for reading, and the bytes copied.
/// The copy is in-kernel (`copy_file_range`, which reflinks where the file
/// system can).
pub(crate) fn copy_new_file(src: &Path, dst: &Path, mode: u32) -> Result<(fs::File, u64)> {
    let mut input = fs::File::open(src).map_err(|e| WsError::io_at("read", src, e))?;
    // Exclusive create: a second input aimed at the same file fails here
    // instead of silently overwriting the first.
    let mut output = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(dst)
        .map_err(|e| WsError::io_at("create", dst, e))?;
    let n =
        std::io::copy(&mut input, &mut output).map_err(|e| WsError::io_at("copy into", dst, e))?;
    output
        .set_permissions(fs::Permissions::from_mode(mode))
        .map_err(|e| WsError::io_at("chmod", dst, e))?;
    Ok((output, n))
}
