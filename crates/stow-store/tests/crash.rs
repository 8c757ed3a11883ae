//! SIGKILL crash test of the disk store.
//!
//! `sigkill_crash_recovery` re-executes this test binary as a child process
//! that runs `crash_child` (which does nothing unless `STOW_CRASH_CHILD` is
//! set). The child opens the store and runs a seeded random sequence of
//! operations in two threads, each thread on its own keys: keyed saves and
//! replays of them, plain puts (inline and file bodies), deletes, copies,
//! multipart uploads (parts, completion, abort) and creation / deletion of a
//! spare bucket. Before each operation the child prints an intent line, and
//! after it returns a done line with its result; body bytes derive from the
//! operation id alone.
//!
//! The parent kills the child with SIGKILL after a random delay, reopens the
//! store and checks that it is consistent (`verify`), that every object reads
//! back in full with the bytes the operation that wrote it produced, that
//! every reported operation is durable (the state equals the model built from
//! done lines, plus possibly the effect of each thread's one in-flight
//! operation), that uploads and their parts survived, that receipts of
//! reported keyed saves resolve to the reported object (and that a receipt of
//! an in-flight save exists exactly when its object was written), and that
//! usage equals the model. The same directory is reused for every iteration,
//! so state accumulates.
//!
//! A SIGKILL leaves the kernel's page cache intact, so this test checks
//! atomicity and roll-forward recovery, not power-loss durability: a missing
//! fsync goes unnoticed here.
//!
//! `STOW_CRASH_ITERS` and `STOW_CRASH_SEED` override the number of iterations
//! and the base seed.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::fmt::Write as _;
use std::io::{BufRead, BufReader, Cursor, Write};
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::{Duration, Instant};

use md5::{Digest, Md5};
use rand::rngs::StdRng;
use rand::{Rng, RngCore, SeedableRng};
use serde::{Deserialize, Serialize};
use stow_store::*;

const CHILD_ENV: &str = "STOW_CRASH_CHILD";
const CHILD_SEED_ENV: &str = "STOW_CRASH_CHILD_SEED";
const CHILD_BASE_ENV: &str = "STOW_CRASH_CHILD_BASE";
const CHILD_TEST: &str = "crash_child";
/// Prefix of every protocol line (libtest may print before it on a line).
const MARK: &str = "@@stow-crash@@ ";
const BUCKETS: [&str; 2] = ["crash-a", "crash-b"];
/// Created and deleted by thread 0 only.
const SPARE: &str = "crash-spare";
const THREADS: u64 = 2;
const KEYS_PER_THREAD: usize = 5;
const MAX_OPEN_UPLOADS: usize = 2;
const MAX_OPS_PER_THREAD: u64 = 5_000;
const DEFAULT_ITERATIONS: usize = 220;
const DEFAULT_SEED: u64 = 0x5709_c4a5_0001;

// ---- protocol ------------------------------------------------------------

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
enum Op {
    Put {
        bucket: String,
        key: String,
        size: u64,
    },
    Save {
        bucket: String,
        key: String,
        size: u64,
        request_key: String,
    },
    /// The same keyed save again (body of op `body_id`): must replay.
    SaveRetry {
        bucket: String,
        key: String,
        body_id: u64,
        size: u64,
        request_key: String,
    },
    Delete {
        bucket: String,
        key: String,
    },
    Copy {
        src_bucket: String,
        src_key: String,
        bucket: String,
        key: String,
    },
    CreateUpload {
        bucket: String,
        key: String,
    },
    UploadPart {
        bucket: String,
        key: String,
        upload_id: String,
        part: u32,
        size: u64,
    },
    Complete {
        bucket: String,
        key: String,
        upload_id: String,
        parts: Vec<(u32, String)>,
    },
    Abort {
        bucket: String,
        key: String,
        upload_id: String,
    },
    CreateSpare,
    DeleteSpare,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
enum Out {
    Object {
        etag: String,
        version: String,
        size: u64,
        replayed: bool,
    },
    Deleted(bool),
    Upload(String),
    Part {
        etag: String,
        size: u64,
    },
    Created(bool),
    Unit,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
enum Line {
    Ready,
    Intent {
        thread: u64,
        id: u64,
        op: Op,
    },
    Done {
        thread: u64,
        id: u64,
        out: Result<Out, String>,
    },
}

/// The body of operation `id`: `size` bytes from a generator seeded by `id`.
fn body(id: u64, size: u64) -> Vec<u8> {
    let mut v = vec![0u8; size as usize];
    StdRng::seed_from_u64(id).fill_bytes(&mut v);
    v
}

fn md5_of(bytes: &[u8]) -> [u8; 16] {
    Md5::digest(bytes).into()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().fold(String::new(), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

fn err_text(e: &StoreError) -> String {
    format!("{}: {e}", e.code())
}

// ---- child ---------------------------------------------------------------

fn emit(line: &Line) {
    // One write per line, well under PIPE_BUF: a kill never tears a line.
    let text = format!("{MARK}{}\n", serde_json::to_string(line).unwrap());
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes()).unwrap();
    out.flush().unwrap();
}

/// Runs only as the child of `sigkill_crash_recovery`.
#[test]
fn crash_child() {
    let Some(dir) = std::env::var_os(CHILD_ENV) else {
        return;
    };
    let seed: u64 = std::env::var(CHILD_SEED_ENV).unwrap().parse().unwrap();
    let base: u64 = std::env::var(CHILD_BASE_ENV).unwrap().parse().unwrap();
    let store = Store::open(&dir, StoreOptions::default()).expect("the store opens after a crash");
    emit(&Line::Ready);
    let threads: Vec<_> = (0..THREADS)
        .map(|t| {
            let store = store.clone();
            std::thread::spawn(move || child_thread(&store, t, seed, base))
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
}

struct ChildUpload {
    id: String,
    bucket: String,
    key: String,
    parts: BTreeMap<u32, (u64, String)>,
}

fn body_size(rng: &mut StdRng) -> u64 {
    match rng.random_range(0..100) {
        0..5 => [0, 1, 32 * 1024 - 1, 32 * 1024, 32 * 1024 + 1][rng.random_range(0..5)],
        5..50 => rng.random_range(1..=32 * 1024),
        50..90 => rng.random_range(40 * 1024..=512 * 1024),
        _ => rng.random_range(512 * 1024..=3 * 1024 * 1024),
    }
}

fn child_thread(store: &Store, t: u64, seed: u64, base: u64) {
    let mut rng = StdRng::seed_from_u64(seed ^ (t + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15));
    let prefix = format!("t{t}/");
    // Learn what earlier runs left: existing keys, open uploads, the spare bucket.
    let mut existing = BTreeSet::new();
    let mut uploads = Vec::new();
    for b in BUCKETS {
        let q = ListQuery {
            prefix: prefix.clone(),
            max_keys: 10_000,
            ..Default::default()
        };
        for o in store.list_objects(b, &q).unwrap().objects {
            existing.insert((b.to_string(), o.key));
        }
        for u in store
            .list_uploads(b, &prefix, None, None, 10_000)
            .unwrap()
            .uploads
        {
            let parts = store
                .list_parts(b, &u.key, &u.upload_id, 0, 10_000)
                .unwrap()
                .parts
                .into_iter()
                .map(|p| (p.part_number, (p.size, p.etag)))
                .collect();
            uploads.push(ChildUpload {
                id: u.upload_id,
                bucket: b.to_string(),
                key: u.key,
                parts,
            });
        }
    }
    let mut spare = t == 0 && store.head_bucket(SPARE).is_ok();
    let mut retry: Option<Op> = None;

    for n in 0..MAX_OPS_PER_THREAD {
        let id = base + t * 100_000 + n;
        let op = match retry.take() {
            Some(op) => op,
            None => choose_op(&mut rng, t, id, &existing, &uploads, spare),
        };
        emit(&Line::Intent {
            thread: t,
            id,
            op: op.clone(),
        });
        let out = run_op(store, id, &op);
        if let Ok(o) = &out {
            match &op {
                Op::Put { bucket, key, .. } | Op::Save { bucket, key, .. } => {
                    existing.insert((bucket.clone(), key.clone()));
                }
                Op::Copy { bucket, key, .. } => {
                    existing.insert((bucket.clone(), key.clone()));
                }
                Op::Delete { bucket, key } => {
                    existing.remove(&(bucket.clone(), key.clone()));
                }
                Op::CreateUpload { bucket, key } => {
                    if let Out::Upload(uid) = o {
                        uploads.push(ChildUpload {
                            id: uid.clone(),
                            bucket: bucket.clone(),
                            key: key.clone(),
                            parts: BTreeMap::new(),
                        });
                    }
                }
                Op::UploadPart {
                    upload_id,
                    part,
                    size,
                    ..
                } => {
                    if let (Out::Part { etag, .. }, Some(u)) =
                        (o, uploads.iter_mut().find(|u| &u.id == upload_id))
                    {
                        u.parts.insert(*part, (*size, etag.clone()));
                    }
                }
                Op::Complete {
                    bucket,
                    key,
                    upload_id,
                    ..
                } => {
                    uploads.retain(|u| &u.id != upload_id);
                    existing.insert((bucket.clone(), key.clone()));
                }
                Op::Abort { upload_id, .. } => uploads.retain(|u| &u.id != upload_id),
                Op::CreateSpare => spare = true,
                Op::DeleteSpare => spare = false,
                Op::SaveRetry { .. } => {}
            }
        }
        if let (
            Op::Save {
                bucket,
                key,
                size,
                request_key,
            },
            Ok(_),
        ) = (&op, &out)
        {
            if rng.random_bool(0.25) {
                retry = Some(Op::SaveRetry {
                    bucket: bucket.clone(),
                    key: key.clone(),
                    body_id: id,
                    size: *size,
                    request_key: request_key.clone(),
                });
            }
        }
        emit(&Line::Done { thread: t, id, out });
    }
}

fn choose_op(
    rng: &mut StdRng,
    t: u64,
    id: u64,
    existing: &BTreeSet<(String, String)>,
    uploads: &[ChildUpload],
    spare: bool,
) -> Op {
    let place = |rng: &mut StdRng| {
        (
            BUCKETS[rng.random_range(0..BUCKETS.len())].to_string(),
            format!("t{t}/k{}", rng.random_range(0..KEYS_PER_THREAD)),
        )
    };
    let (bucket, key) = place(rng);
    let roll = rng.random_range(0..100);
    match roll {
        0..20 => Op::Save {
            bucket,
            key,
            size: body_size(rng),
            request_key: format!("rk-{id}"),
        },
        45..57 => Op::Delete { bucket, key },
        57..69 => {
            let (src_bucket, src_key) = if !existing.is_empty() && rng.random_bool(0.85) {
                existing
                    .iter()
                    .nth(rng.random_range(0..existing.len()))
                    .unwrap()
                    .clone()
            } else {
                place(rng)
            };
            Op::Copy {
                src_bucket,
                src_key,
                bucket,
                key,
            }
        }
        69..75 if uploads.len() < MAX_OPEN_UPLOADS => Op::CreateUpload { bucket, key },
        75..85 if !uploads.is_empty() => {
            let u = &uploads[rng.random_range(0..uploads.len())];
            let part = match (u.parts.contains_key(&1), rng.random_bool(0.7)) {
                (false, true) | (true, false) => 1,
                _ => 2,
            };
            let size = if part == 1 && rng.random_bool(0.15) {
                MIN_PART_SIZE
            } else {
                rng.random_range(0..=200 * 1024)
            };
            Op::UploadPart {
                bucket: u.bucket.clone(),
                key: u.key.clone(),
                upload_id: u.id.clone(),
                part,
                size,
            }
        }
        85..92 if uploads.iter().any(|u| !u.parts.is_empty()) => {
            let ready: Vec<&ChildUpload> = uploads.iter().filter(|u| !u.parts.is_empty()).collect();
            let u = ready[rng.random_range(0..ready.len())];
            let both = matches!(
                (u.parts.get(&1), u.parts.get(&2)),
                (Some((s1, _)), Some(_)) if *s1 >= MIN_PART_SIZE
            );
            let parts = if both {
                vec![1, 2]
            } else {
                vec![*u.parts.keys().next().unwrap()]
            };
            Op::Complete {
                bucket: u.bucket.clone(),
                key: u.key.clone(),
                upload_id: u.id.clone(),
                parts: parts
                    .into_iter()
                    .map(|n| (n, u.parts[&n].1.clone()))
                    .collect(),
            }
        }
        92..95 if !uploads.is_empty() => {
            let u = &uploads[rng.random_range(0..uploads.len())];
            Op::Abort {
                bucket: u.bucket.clone(),
                key: u.key.clone(),
                upload_id: u.id.clone(),
            }
        }
        95..100 if t == 0 => {
            if spare {
                Op::DeleteSpare
            } else {
                Op::CreateSpare
            }
        }
        _ => Op::Put {
            bucket,
            key,
            size: body_size(rng),
        },
    }
}

fn object_out(meta: &ObjectMeta, replayed: bool) -> Out {
    Out::Object {
        etag: meta.etag.clone(),
        version: meta.version.clone(),
        size: meta.size,
        replayed,
    }
}

fn run_op(store: &Store, id: u64, op: &Op) -> Result<Out, String> {
    let saved = |bucket: &str, key: &str, body_id: u64, size: u64, rk: &str| {
        let req = SaveRequest {
            bucket: bucket.to_string(),
            key: key.to_string(),
            props: ObjectProps::default(),
            checksum_algorithm: None,
            guard: SaveGuard::Replace,
            request_key: Some(rk.to_string()),
        };
        store
            .save(req, &mut Cursor::new(body(body_id, size)))
            .map(|s| object_out(&s.object, s.replayed))
    };
    let out = match op {
        Op::Put { bucket, key, size } => store
            .put_object(
                bucket,
                key,
                &mut Cursor::new(body(id, *size)),
                PutOptions::default(),
            )
            .map(|m| object_out(&m, false)),
        Op::Save {
            bucket,
            key,
            size,
            request_key,
        } => saved(bucket, key, id, *size, request_key),
        Op::SaveRetry {
            bucket,
            key,
            body_id,
            size,
            request_key,
        } => saved(bucket, key, *body_id, *size, request_key),
        Op::Delete { bucket, key } => store.delete_object(bucket, key).map(Out::Deleted),
        Op::Copy {
            src_bucket,
            src_key,
            bucket,
            key,
        } => store
            .copy_object(src_bucket, src_key, bucket, key, CopyOptions::default())
            .map(|m| object_out(&m, false)),
        Op::CreateUpload { bucket, key } => store
            .create_upload(bucket, key, CreateUploadOptions::default())
            .map(|u| Out::Upload(u.upload_id)),
        Op::UploadPart {
            bucket,
            key,
            upload_id,
            part,
            size,
        } => store
            .upload_part(
                bucket,
                key,
                upload_id,
                i64::from(*part),
                &mut Cursor::new(body(id, *size)),
                PartOptions::default(),
            )
            .map(|p| Out::Part {
                etag: p.etag,
                size: p.size,
            }),
        Op::Complete {
            bucket,
            key,
            upload_id,
            parts,
        } => {
            let listed: Vec<CompletedPart> = parts
                .iter()
                .map(|(n, etag)| CompletedPart {
                    part_number: *n,
                    etag: etag.clone(),
                })
                .collect();
            store
                .complete_upload(bucket, key, upload_id, &listed, WriteCondition::Always)
                .map(|m| object_out(&m, false))
        }
        Op::Abort {
            bucket,
            key,
            upload_id,
        } => store
            .abort_upload(bucket, key, upload_id)
            .map(|()| Out::Unit),
        Op::CreateSpare => store.create_bucket(SPARE).map(Out::Created),
        Op::DeleteSpare => store.delete_bucket(SPARE).map(|()| Out::Unit),
    };
    out.map_err(|e| err_text(&e))
}

// ---- model ---------------------------------------------------------------

/// An object's bytes: the concatenation of `(op id, size)` bodies.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Content {
    pieces: Vec<(u64, u64)>,
    multipart: bool,
}

impl Content {
    fn single(id: u64, size: u64) -> Self {
        Content {
            pieces: vec![(id, size)],
            multipart: false,
        }
    }
    fn size(&self) -> u64 {
        self.pieces.iter().map(|p| p.1).sum()
    }
}

#[derive(Debug, Clone)]
struct Obj {
    content: Content,
    /// `None` when written by an in-flight operation (not reported).
    version: Option<String>,
}

#[derive(Debug, Clone)]
struct Upload {
    bucket: String,
    key: String,
    parts: BTreeMap<u32, (u64, u64)>,
}

#[derive(Debug, Clone, Default)]
struct World {
    objects: BTreeMap<(String, String), Obj>,
    /// Ids starting with `?` stand for an upload created by an in-flight op.
    uploads: BTreeMap<String, Upload>,
    spare: bool,
}

/// Expected bodies and MD5s, each generated once. Bodies are kept only while
/// an object of the model holds them (see [`Digests::forget_dead`]).
#[derive(Default)]
struct Digests {
    md5: HashMap<(u64, u64), [u8; 16]>,
    bodies: HashMap<Vec<(u64, u64)>, Vec<u8>>,
}

impl Digests {
    fn bytes(&mut self, pieces: &[(u64, u64)]) -> &[u8] {
        self.bodies.entry(pieces.to_vec()).or_insert_with(|| {
            let mut v = Vec::new();
            for (id, size) in pieces {
                v.extend_from_slice(&body(*id, *size));
            }
            v
        })
    }
    fn piece(&mut self, id: u64, size: u64) -> [u8; 16] {
        if let Some(d) = self.md5.get(&(id, size)) {
            return *d;
        }
        let d = md5_of(self.bytes(&[(id, size)]));
        self.md5.insert((id, size), d);
        d
    }
    fn piece_etag(&mut self, id: u64, size: u64) -> String {
        format!("\"{}\"", hex(&self.piece(id, size)))
    }
    /// The ETag of `c`: its MD5, or S3's MD5 of the part MD5s with the count.
    fn etag(&mut self, c: &Content) -> String {
        if !c.multipart {
            let (id, size) = c.pieces[0];
            return self.piece_etag(id, size);
        }
        let mut h = Md5::new();
        for (id, size) in &c.pieces {
            h.update(self.piece(*id, *size));
        }
        format!("\"{}-{}\"", hex(&h.finalize()), c.pieces.len())
    }
    fn forget_dead(&mut self, world: &World) {
        let live: HashSet<&Vec<(u64, u64)>> =
            world.objects.values().map(|o| &o.content.pieces).collect();
        self.bodies.retain(|k, _| live.contains(k));
    }
}

/// A reported keyed save whose receipt must resolve.
struct ReceiptCheck {
    bucket: String,
    key: String,
    request_key: String,
    etag: String,
    version: String,
    size: u64,
}

/// What a completion would produce, or `None` if it must be refused.
fn completion(
    world: &World,
    bucket: &str,
    key: &str,
    upload_id: &str,
    parts: &[(u32, String)],
    d: &mut Digests,
) -> Option<Content> {
    let up = world.uploads.get(upload_id)?;
    if up.bucket != bucket || up.key != key || parts.is_empty() {
        return None;
    }
    let mut pieces = Vec::new();
    for (i, (n, etag)) in parts.iter().enumerate() {
        let &(id, size) = up.parts.get(n)?;
        if d.piece_etag(id, size) != *etag {
            return None;
        }
        if i + 1 < parts.len() && size < MIN_PART_SIZE {
            return None;
        }
        pieces.push((id, size));
    }
    Some(Content {
        pieces,
        multipart: true,
    })
}

fn expect_object(
    out: &Result<Out, String>,
    content: &Content,
    replayed: bool,
    d: &mut Digests,
) -> Result<String, String> {
    match out {
        Ok(Out::Object {
            etag,
            version,
            size,
            replayed: r,
        }) => {
            let want = d.etag(content);
            if *etag != want || *size != content.size() || *r != replayed {
                return Err(format!(
                    "reported object {etag} / {size} bytes / replayed {r}, model wants {want} / {} / {replayed}",
                    content.size()
                ));
            }
            Ok(version.clone())
        }
        other => Err(format!("expected an object, got {other:?}")),
    }
}

/// Applies op `id` to the model. With `out` (a done line) the reported result
/// is checked against the model; without (an in-flight op assumed to have
/// committed) it is applied only if it would have succeeded.
fn apply(
    world: &mut World,
    id: u64,
    op: &Op,
    out: Option<&Result<Out, String>>,
    d: &mut Digests,
    saves: &mut HashMap<String, (String, String)>,
    receipts: &mut Vec<ReceiptCheck>,
) -> Result<(), String> {
    let unexpected = |what: &str| -> Result<(), String> { Err(format!("{what}: {out:?}")) };
    match op {
        Op::Put { bucket, key, size }
        | Op::Save {
            bucket, key, size, ..
        } => {
            let content = Content::single(id, *size);
            let version = match out {
                Some(out) => Some(expect_object(out, &content, false, d)?),
                None => None,
            };
            if let (Op::Save { request_key, .. }, Some(Ok(Out::Object { etag, .. })), Some(v)) =
                (op, out, &version)
            {
                saves.insert(request_key.clone(), (etag.clone(), v.clone()));
                receipts.push(ReceiptCheck {
                    bucket: bucket.clone(),
                    key: key.clone(),
                    request_key: request_key.clone(),
                    etag: etag.clone(),
                    version: v.clone(),
                    size: *size,
                });
            }
            world
                .objects
                .insert((bucket.clone(), key.clone()), Obj { content, version });
        }
        Op::SaveRetry {
            body_id,
            size,
            request_key,
            ..
        } => {
            if let Some(out) = out {
                let version = expect_object(out, &Content::single(*body_id, *size), true, d)?;
                match saves.get(request_key) {
                    Some((_, v)) if *v == version => {}
                    other => {
                        return Err(format!(
                            "replay of {request_key} gave version {version}, the save reported {other:?}"
                        ))
                    }
                }
            }
        }
        Op::Delete { bucket, key } => {
            let existed = world
                .objects
                .remove(&(bucket.clone(), key.clone()))
                .is_some();
            match out {
                None => {}
                Some(Ok(Out::Deleted(d))) if *d == existed => {}
                Some(_) => return unexpected(&format!("delete of a key that existed: {existed}")),
            }
        }
        Op::Copy {
            src_bucket,
            src_key,
            bucket,
            key,
        } => {
            let src = world
                .objects
                .get(&(src_bucket.clone(), src_key.clone()))
                .map(|o| o.content.clone());
            match (src, out) {
                (None, None) => {}
                (None, Some(Err(e))) if e.starts_with("no_such_key") => {}
                (None, Some(_)) => return unexpected("copy of an absent source"),
                (Some(content), out) => {
                    let version = match out {
                        Some(out) => Some(expect_object(out, &content, false, d)?),
                        None => None,
                    };
                    world
                        .objects
                        .insert((bucket.clone(), key.clone()), Obj { content, version });
                }
            }
        }
        Op::CreateUpload { bucket, key } => {
            let uid = match out {
                None => format!("?{id}"),
                Some(Ok(Out::Upload(uid))) => uid.clone(),
                Some(_) => return unexpected("create upload"),
            };
            world.uploads.insert(
                uid,
                Upload {
                    bucket: bucket.clone(),
                    key: key.clone(),
                    parts: BTreeMap::new(),
                },
            );
        }
        Op::UploadPart {
            bucket,
            key,
            upload_id,
            part,
            size,
        } => {
            let up = world
                .uploads
                .get_mut(upload_id)
                .filter(|u| u.bucket == *bucket && u.key == *key);
            match (up, out) {
                (None, None) => {}
                (None, Some(Err(e))) if e.starts_with("no_such_upload") => {}
                (None, Some(_)) => return unexpected("part of an unknown upload"),
                (Some(up), out) => {
                    if let Some(out) = out {
                        let want = d.piece_etag(id, *size);
                        if *out
                            != Ok(Out::Part {
                                etag: want.clone(),
                                size: *size,
                            })
                        {
                            return Err(format!("part upload: want {want} / {size}, got {out:?}"));
                        }
                    }
                    up.parts.insert(*part, (id, *size));
                }
            }
        }
        Op::Complete {
            bucket,
            key,
            upload_id,
            parts,
        } => match (completion(world, bucket, key, upload_id, parts, d), out) {
            (None, None) => {}
            (None, Some(Err(_))) => {}
            (None, Some(_)) => return unexpected("completion the model refuses"),
            (Some(content), out) => {
                let version = match out {
                    Some(out) => Some(expect_object(out, &content, false, d)?),
                    None => None,
                };
                world.uploads.remove(upload_id);
                world
                    .objects
                    .insert((bucket.clone(), key.clone()), Obj { content, version });
            }
        },
        Op::Abort {
            bucket,
            key,
            upload_id,
        } => {
            let known = world
                .uploads
                .get(upload_id)
                .is_some_and(|u| u.bucket == *bucket && u.key == *key);
            match out {
                None | Some(Ok(Out::Unit)) if known => {
                    world.uploads.remove(upload_id);
                }
                None => {}
                Some(Err(e)) if !known && e.starts_with("no_such_upload") => {}
                Some(_) => return unexpected(&format!("abort of an upload known: {known}")),
            }
        }
        Op::CreateSpare => {
            match out {
                None => {}
                Some(Ok(Out::Created(c))) if *c != world.spare => {}
                Some(_) => {
                    return unexpected(&format!("create spare bucket, existed: {}", world.spare))
                }
            }
            world.spare = true;
        }
        Op::DeleteSpare => match out {
            None | Some(Ok(Out::Unit)) if world.spare => world.spare = false,
            None => {}
            Some(Err(e)) if !world.spare && e.starts_with("no_such_bucket") => {}
            Some(_) => {
                return unexpected(&format!("delete spare bucket, existed: {}", world.spare))
            }
        },
    }
    Ok(())
}

// ---- observation ---------------------------------------------------------

struct ObsObject {
    size: u64,
    etag: String,
    version: String,
    part_sizes: Vec<u64>,
    bytes: Vec<u8>,
}

impl std::fmt::Debug for ObsObject {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ObsObject")
            .field("size", &self.size)
            .field("etag", &self.etag)
            .field("version", &self.version)
            .field("part_sizes", &self.part_sizes)
            .field("bytes_md5", &hex(&md5_of(&self.bytes)))
            .finish()
    }
}

#[derive(Debug)]
struct ObsUpload {
    bucket: String,
    key: String,
    parts: BTreeMap<u32, (u64, String)>,
}

struct Observed {
    objects: BTreeMap<(String, String), ObsObject>,
    uploads: BTreeMap<String, ObsUpload>,
    spare: bool,
}

/// Reads everything: every object in full, every upload and part.
fn observe(store: &Store) -> Result<Observed, String> {
    let e = |e: StoreError| err_text(&e);
    let buckets: Vec<String> = store
        .list_buckets()
        .map_err(e)?
        .into_iter()
        .map(|b| b.name)
        .collect();
    let spare = buckets.iter().any(|b| b == SPARE);
    for b in &buckets {
        if !BUCKETS.contains(&b.as_str()) && b != SPARE {
            return Err(format!("unexpected bucket {b}"));
        }
    }
    let mut objects = BTreeMap::new();
    let mut uploads = BTreeMap::new();
    for b in &buckets {
        let q = ListQuery {
            max_keys: 10_000,
            ..Default::default()
        };
        let page = store.list_objects(b, &q).map_err(e)?;
        if page.is_truncated {
            return Err(format!("listing of {b} is truncated"));
        }
        for summary in page.objects {
            let read = store.get_object(b, &summary.key, None).map_err(e)?;
            let meta = read.meta.clone();
            let bytes = read
                .body
                .into_vec()
                .map_err(|err| format!("reading {b}/{}: {}", summary.key, err_text(&err)))?;
            if bytes.len() as u64 != meta.size
                || summary.size != meta.size
                || summary.etag != meta.etag
            {
                return Err(format!(
                    "{b}/{}: read {} bytes, meta says {} ({}), listing says {} ({})",
                    summary.key,
                    bytes.len(),
                    meta.size,
                    meta.etag,
                    summary.size,
                    summary.etag
                ));
            }
            objects.insert(
                (b.clone(), summary.key),
                ObsObject {
                    size: meta.size,
                    etag: meta.etag,
                    version: meta.version,
                    part_sizes: meta.parts.iter().map(|p| p.size).collect(),
                    bytes,
                },
            );
        }
        let page = store.list_uploads(b, "", None, None, 10_000).map_err(e)?;
        if page.is_truncated {
            return Err(format!("upload listing of {b} is truncated"));
        }
        for u in page.uploads {
            let parts = store
                .list_parts(b, &u.key, &u.upload_id, 0, 10_000)
                .map_err(e)?;
            uploads.insert(
                u.upload_id,
                ObsUpload {
                    bucket: b.clone(),
                    key: u.key,
                    parts: parts
                        .parts
                        .into_iter()
                        .map(|p| (p.part_number, (p.size, p.etag)))
                        .collect(),
                },
            );
        }
    }
    Ok(Observed {
        objects,
        uploads,
        spare,
    })
}

/// Whether the store is in state `want`; returns `want` with the unknowns
/// (versions and ids written by in-flight ops) filled in from the store.
fn matches(want: &World, obs: &Observed, d: &mut Digests) -> Result<World, Vec<String>> {
    let mut diffs = Vec::new();
    let mut out = want.clone();
    if want.spare != obs.spare {
        diffs.push(format!(
            "spare bucket: model {}, store {}",
            want.spare, obs.spare
        ));
    }
    let keys: BTreeSet<_> = want.objects.keys().chain(obs.objects.keys()).collect();
    for k in keys {
        match (want.objects.get(k), obs.objects.get(k)) {
            (Some(_), None) => diffs.push(format!("{k:?}: missing from the store")),
            (None, Some(o)) => diffs.push(format!("{k:?}: unexpected object {o:?}")),
            (None, None) => unreachable!(),
            (Some(w), Some(o)) => {
                // The bytes equal the generated body, whose MD5 gives the
                // ETag compared below: so the bytes' MD5 matches the ETag.
                let etag = d.etag(&w.content);
                let same_bytes = o.bytes == d.bytes(&w.content.pieces);
                let part_sizes: Vec<u64> = if w.content.multipart {
                    w.content.pieces.iter().map(|p| p.1).collect()
                } else {
                    Vec::new()
                };
                if o.size != w.content.size()
                    || o.etag != etag
                    || !same_bytes
                    || o.part_sizes != part_sizes
                    || w.version.as_ref().is_some_and(|v| *v != o.version)
                {
                    diffs.push(format!(
                        "{k:?}: store has {o:?}, model has {w:?} (etag {etag}, same bytes: {same_bytes})"
                    ));
                }
                out.objects.get_mut(k).unwrap().version = Some(o.version.clone());
            }
        }
    }
    let mut unmatched: BTreeSet<&String> = obs.uploads.keys().collect();
    for (uid, w) in &want.uploads {
        if uid.starts_with('?') {
            continue;
        }
        let Some(o) = obs.uploads.get(uid) else {
            diffs.push(format!("upload {uid} ({}/{}) is missing", w.bucket, w.key));
            continue;
        };
        unmatched.remove(uid);
        let want_parts: BTreeMap<u32, (u64, String)> = w
            .parts
            .iter()
            .map(|(n, (id, size))| (*n, (*size, d.piece_etag(*id, *size))))
            .collect();
        if o.bucket != w.bucket || o.key != w.key || o.parts != want_parts {
            diffs.push(format!(
                "upload {uid}: store has {o:?}, model has {w:?} = {want_parts:?}"
            ));
        }
    }
    for (uid, w) in want.uploads.iter().filter(|(u, _)| u.starts_with('?')) {
        let found = unmatched
            .iter()
            .copied()
            .find(|o| {
                let o = &obs.uploads[*o];
                o.bucket == w.bucket && o.key == w.key && o.parts.is_empty()
            })
            .cloned();
        match found {
            Some(real) => {
                unmatched.remove(&real);
                let up = out.uploads.remove(uid).unwrap();
                out.uploads.insert(real, up);
            }
            None => diffs.push(format!("upload {uid} of {}/{} is missing", w.bucket, w.key)),
        }
    }
    for uid in unmatched {
        diffs.push(format!("unexpected upload {uid}: {:?}", obs.uploads[uid]));
    }
    if diffs.is_empty() {
        Ok(out)
    } else {
        Err(diffs)
    }
}

// ---- parent --------------------------------------------------------------

struct ChildRun {
    lines: Vec<Line>,
    /// Killed before it reported being ready (possibly during recovery).
    early: bool,
    exited_by_itself: bool,
}

fn run_child(
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

fn lines_have_ready(lines: &[Line]) -> bool {
    lines.first() == Some(&Line::Ready)
}

#[derive(Default)]
struct Stats {
    iterations: usize,
    early_kills: usize,
    exited: usize,
    ops_done: usize,
    in_flight: usize,
    in_flight_applied: usize,
    by_kind: BTreeMap<&'static str, usize>,
    max_ops: usize,
    receipts_checked: usize,
    child_time: Duration,
    check_time: Duration,
}

fn kind(op: &Op) -> &'static str {
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
fn check_iteration(
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

#[test]
fn sigkill_crash_recovery() {
    if std::env::var_os(CHILD_ENV).is_some() {
        return;
    }
    let iterations: usize = std::env::var("STOW_CRASH_ITERS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(DEFAULT_ITERATIONS);
    let seed: u64 = std::env::var("STOW_CRASH_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(DEFAULT_SEED);
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("store");
    let stderr = tmp.path().join("child-stderr.txt");
    {
        let store = Store::open(&dir, StoreOptions::default()).unwrap();
        for b in BUCKETS {
            store.create_bucket(b).unwrap();
        }
    }
    let exe = std::env::current_exe().unwrap();
    let mut rng = StdRng::seed_from_u64(seed);
    let mut world = World::default();
    let mut digests = Digests::default();
    let mut stats = Stats::default();
    let started = Instant::now();
    for iteration in 0..iterations {
        let child_seed: u64 = rng.random();
        let base = (iteration as u64 + 1) * 1_000_000;
        let t0 = Instant::now();
        let result = run_child(&exe, &dir, &stderr, child_seed, base, &mut rng).and_then(|run| {
            stats.child_time += t0.elapsed();
            let t1 = Instant::now();
            stats.early_kills += usize::from(run.early);
            stats.exited += usize::from(run.exited_by_itself);
            check_iteration(&dir, &world, &run, &mut digests, &mut stats)
                .map_err(|e| {
                    let tail: Vec<String> = run
                        .lines
                        .iter()
                        .rev()
                        .take(12)
                        .rev()
                        .map(|l| format!("{l:?}"))
                        .collect();
                    format!("{e}\n--- last reported lines ---\n{}", tail.join("\n"))
                })
                .inspect(|_| stats.check_time += t1.elapsed())
        });
        match result {
            Ok(w) => {
                digests.forget_dead(&w);
                world = w;
            }
            Err(e) => {
                let kept = tmp.keep();
                panic!(
                    "iteration {iteration} (seed {seed}, child seed {child_seed}) failed; store left in {}:\n{e}",
                    kept.display()
                );
            }
        }
        stats.iterations += 1;
    }
    eprintln!(
        "crash test: {} iterations in {:.1?} (seed {seed}): {} early kills, {} child exits, \
         {} ops reported (max {} per run), {} in flight at kill ({} committed), \
         {} receipts checked; {:?}; final state {} objects, {} uploads; \
         {:.1?} running children, {:.1?} checking",
        stats.iterations,
        started.elapsed(),
        stats.early_kills,
        stats.exited,
        stats.ops_done,
        stats.max_ops,
        stats.in_flight,
        stats.in_flight_applied,
        stats.receipts_checked,
        stats.by_kind,
        world.objects.len(),
        world.uploads.len(),
        stats.child_time,
        stats.check_time,
    );
}
