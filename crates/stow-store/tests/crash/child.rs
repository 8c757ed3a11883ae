//! The child side: a seeded sequence of store operations on two threads, each announced by an intent line and reported by a done line.

use super::*;

pub(crate) struct ChildUpload {
    pub(crate) id: String,
    pub(crate) bucket: String,
    pub(crate) key: String,
    pub(crate) parts: BTreeMap<u32, (u64, String)>,
}

pub(crate) fn body_size(rng: &mut StdRng) -> u64 {
    match rng.random_range(0..100) {
        0..5 => [0, 1, 32 * 1024 - 1, 32 * 1024, 32 * 1024 + 1][rng.random_range(0..5)],
        5..50 => rng.random_range(1..=32 * 1024),
        50..90 => rng.random_range(40 * 1024..=512 * 1024),
        _ => rng.random_range(512 * 1024..=3 * 1024 * 1024),
    }
}

pub(crate) fn child_thread(store: &Store, t: u64, seed: u64, base: u64) {
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

pub(crate) fn choose_op(
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

pub(crate) fn object_out(meta: &ObjectMeta, replayed: bool) -> Out {
    Out::Object {
        etag: meta.etag.clone(),
        version: meta.version.clone(),
        size: meta.size,
        replayed,
    }
}

pub(crate) fn run_op(store: &Store, id: u64, op: &Op) -> Result<Out, String> {
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
