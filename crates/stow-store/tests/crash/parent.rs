//! The parent side: running a child, killing it, and checking one iteration.

use super::*;

pub(crate) struct ChildRun {
    pub(crate) lines: Vec<Line>,
    /// Killed before it reported being ready (possibly during recovery).
    pub(crate) early: bool,
    pub(crate) exited_by_itself: bool,
}

pub(crate) fn run_child(
    exe: &Path,
    dir: &Path,
    stderr: &Path,
    seed: u64,
    base: u64,
    rng: &mut StdRng,
) -> Result<ChildRun, String> {
    let mut child = Command::new(exe)
        .args([CHILD_TEST, "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, dir)
        .env(CHILD_SEED_ENV, seed.to_string())
        .env(CHILD_BASE_ENV, base.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(stderr).map_err(|e| e.to_string())?)
        .spawn()
        .map_err(|e| format!("cannot spawn the child: {e}"))?;
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if let Some(at) = line.find(MARK) {
                let parsed = serde_json::from_str::<Line>(&line[at + MARK.len()..])
                    .map_err(|e| format!("malformed line {line:?}: {e}"));
                if tx.send(parsed).is_err() {
                    break;
                }
            }
        }
    });
    let spawned = Instant::now();
    // Sometimes kill before the child reports ready (while it opens and
    // recovers the store); otherwise some time after it is ready.
    let early = rng.random_bool(0.15);
    let mut deadline = early.then(|| spawned + Duration::from_millis(rng.random_range(0..=15)));
    let delay = if rng.random_bool(0.1) {
        Duration::from_millis(rng.random_range(120..=500))
    } else {
        Duration::from_millis(rng.random_range(5..=80))
    };
    let mut lines = Vec::new();
    let mut problem = None;
    loop {
        let wait = deadline.map_or(Duration::from_secs(60), |d| {
            d.saturating_duration_since(Instant::now())
        });
        match rx.recv_timeout(wait) {
            Ok(Ok(line)) => {
                if line == Line::Ready && deadline.is_none() {
                    deadline = Some(Instant::now() + delay);
                }
                lines.push(line);
            }
            Ok(Err(e)) => {
                problem = Some(e);
                break;
            }
            Err(RecvTimeoutError::Timeout) => {
                if deadline.is_none() {
                    problem = Some("the child did not become ready within 60 s".into());
                }
                break;
            }
            Err(RecvTimeoutError::Disconnected) => break,
        }
    }
    let _ = child.kill(); // SIGKILL
    let status = child.wait().map_err(|e| e.to_string())?;
    reader
        .join()
        .map_err(|_| "the reader thread panicked".to_string())?;
    for line in rx.try_iter() {
        match line {
            Ok(l) => lines.push(l),
            Err(e) => problem = problem.or(Some(e)),
        }
    }
    let exited_by_itself = status.signal() != Some(libc::SIGKILL);
    if exited_by_itself && !status.success() {
        problem = problem.or(Some(format!("the child failed: {status}")));
    }
    if let Some(p) = problem {
        let err = std::fs::read_to_string(stderr).unwrap_or_default();
        return Err(format!("{p}\n--- child stderr ---\n{err}"));
    }
    Ok(ChildRun {
        early: early && !lines_have_ready(&lines),
        lines,
        exited_by_itself,
    })
}

pub(crate) fn lines_have_ready(lines: &[Line]) -> bool {
    lines.first() == Some(&Line::Ready)
}

#[derive(Default)]
pub(crate) struct Stats {
    pub(crate) iterations: usize,
    pub(crate) early_kills: usize,
    pub(crate) exited: usize,
    pub(crate) ops_done: usize,
    pub(crate) in_flight: usize,
    pub(crate) in_flight_applied: usize,
    pub(crate) by_kind: BTreeMap<&'static str, usize>,
    pub(crate) max_ops: usize,
    pub(crate) receipts_checked: usize,
    pub(crate) child_time: Duration,
    pub(crate) check_time: Duration,
}

pub(crate) fn kind(op: &Op) -> &'static str {
    match op {
        Op::Put { .. } => "put",
        Op::Save { .. } => "save",
        Op::SaveRetry { .. } => "save-retry",
        Op::Delete { .. } => "delete",
        Op::Copy { .. } => "copy",
        Op::CreateUpload { .. } => "create-upload",
        Op::UploadPart { .. } => "upload-part",
        Op::Complete { .. } => "complete",
        Op::Abort { .. } => "abort",
        Op::CreateSpare => "create-bucket",
        Op::DeleteSpare => "delete-bucket",
    }
}

/// Checks the store after one killed child; returns the new model.
pub(crate) fn check_iteration(
    dir: &Path,
    world: &World,
    run: &ChildRun,
    d: &mut Digests,
    stats: &mut Stats,
) -> Result<World, String> {
    // Replay the reported operations on the model, checking their results.
    let mut world = world.clone();
    let mut pending: BTreeMap<u64, (u64, Op)> = BTreeMap::new();
    let mut saves = HashMap::new();
    let mut receipts = Vec::new();
    let mut ops = 0;
    for (i, line) in run.lines.iter().enumerate() {
        match line {
            Line::Ready if i == 0 => {}
            Line::Ready => return Err("READY twice".into()),
            Line::Intent { thread, id, op } => {
                if let Some(prev) = pending.insert(*thread, (*id, op.clone())) {
                    return Err(format!(
                        "thread {thread} started op {id} while {prev:?} was running"
                    ));
                }
            }
            Line::Done { thread, id, out } => {
                let Some((pid, op)) = pending.remove(thread) else {
                    return Err(format!("op {id} done without an intent"));
                };
                if pid != *id {
                    return Err(format!(
                        "thread {thread}: op {id} done while op {pid} was running"
                    ));
                }
                apply(
                    &mut world,
                    *id,
                    &op,
                    Some(out),
                    d,
                    &mut saves,
                    &mut receipts,
                )
                .map_err(|e| format!("op {id} {op:?}: {e}"))?;
                ops += 1;
                *stats.by_kind.entry(kind(&op)).or_default() += 1;
            }
        }
    }
    stats.ops_done += ops;
    stats.max_ops = stats.max_ops.max(ops);
    let in_flight: Vec<(u64, Op)> = pending.into_values().collect();
    stats.in_flight += in_flight.len();

    let store = Store::open(dir, StoreOptions::default())
        .map_err(|e| format!("reopen failed: {}", err_text(&e)))?;
    let problems = store.verify().map_err(|e| err_text(&e))?;
    if !problems.is_empty() {
        return Err(format!(
            "verify after the crash found problems: {problems:#?}"
        ));
    }
    let obs = observe(&store)?;

    // Each in-flight op committed or did not; find the combination the store shows.
    let mut failures = Vec::new();
    let mut resolved = None;
    for mask in 0..(1u32 << in_flight.len()) {
        let mut candidate = world.clone();
        for (i, (id, op)) in in_flight.iter().enumerate() {
            if mask & (1 << i) != 0 {
                apply(
                    &mut candidate,
                    *id,
                    op,
                    None,
                    d,
                    &mut HashMap::new(),
                    &mut Vec::new(),
                )?;
            }
        }
        match matches(&candidate, &obs, d) {
            Ok(w) => {
                resolved = Some((mask, w));
                break;
            }
            Err(diffs) => failures.push(format!("assuming in-flight mask {mask:b}: {diffs:#?}")),
        }
    }
    let Some((mask, resolved)) = resolved else {
        return Err(format!(
            "the store matches no outcome of the reported ops (in flight: {in_flight:?}):\n{}",
            failures.join("\n")
        ));
    };
    stats.in_flight_applied += mask.count_ones() as usize;

    // Receipts: every reported keyed save resolves to what it reported; an
    // in-flight save left a receipt exactly when its object was written.
    let mut retire = Vec::new();
    for r in &receipts {
        let meta = store
            .resolve_save(&r.bucket, &r.key, &r.request_key)
            .map_err(|e| {
                format!(
                    "receipt {} of a reported save: {}",
                    r.request_key,
                    err_text(&e)
                )
            })?;
        if meta.etag != r.etag || meta.version != r.version || meta.size != r.size {
            return Err(format!(
                "receipt {} resolves to {meta:?}, the save reported {} / {} / {}",
                r.request_key, r.etag, r.version, r.size
            ));
        }
        retire.push(r.request_key.clone());
    }
    for (i, (_, op)) in in_flight.iter().enumerate() {
        let Op::Save {
            bucket,
            key,
            request_key,
            ..
        } = op
        else {
            continue;
        };
        let applied = mask & (1 << i) != 0;
        match (store.resolve_save(bucket, key, request_key), applied) {
            (Err(StoreError::ReceiptNotFound), false) => {}
            (Ok(meta), true) => {
                let current = &resolved.objects[&(bucket.clone(), key.clone())];
                if Some(&meta.version) != current.version.as_ref() {
                    return Err(format!(
                        "in-flight save {request_key}: receipt names version {}, the object has {:?}",
                        meta.version, current.version
                    ));
                }
                retire.push(request_key.clone());
            }
            (got, applied) => {
                return Err(format!(
                    "in-flight save {request_key} (object written: {applied}): resolve_save gave {got:?}"
                ))
            }
        }
    }
    stats.receipts_checked += retire.len();
    let retired = store.retire_receipts(&retire).map_err(|e| err_text(&e))?;
    if retired != retire.len() as u64 {
        return Err(format!("retired {retired} of {} receipts", retire.len()));
    }
    let left = store.list_receipts(None, 10).map_err(|e| err_text(&e))?;
    if !left.is_empty() || store.receipt_usage().map_err(|e| err_text(&e))? != (0, 0) {
        return Err(format!(
            "receipts no reported or in-flight save explains: {left:?}"
        ));
    }

    // Usage equals the model.
    let bytes = resolved
        .objects
        .values()
        .map(|o| o.content.size())
        .sum::<u64>()
        + resolved
            .uploads
            .values()
            .flat_map(|u| u.parts.values())
            .map(|p| p.1)
            .sum::<u64>();
    let want = Usage {
        bytes,
        objects: resolved.objects.len() as u64,
    };
    let usage = store.usage().map_err(|e| err_text(&e))?;
    if usage != want {
        return Err(format!("usage is {usage:?}, the model says {want:?}"));
    }
    Ok(resolved)
}
