//! The model of what the store must hold (built from done lines, each thread's one in-flight operation either way) and the observation matched against it.

use super::*;

/// An object's bytes: the concatenation of `(op id, size)` bodies.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct Content {
    pub(crate) pieces: Vec<(u64, u64)>,
    pub(crate) multipart: bool,
}

impl Content {
    pub(crate) fn single(id: u64, size: u64) -> Self {
        Content {
            pieces: vec![(id, size)],
            multipart: false,
        }
    }
    pub(crate) fn size(&self) -> u64 {
        self.pieces.iter().map(|p| p.1).sum()
    }
}

#[derive(Debug, Clone)]
pub(crate) struct Obj {
    pub(crate) content: Content,
    /// `None` when written by an in-flight operation (not reported).
    pub(crate) version: Option<String>,
}

#[derive(Debug, Clone)]
pub(crate) struct Upload {
    pub(crate) bucket: String,
    pub(crate) key: String,
    pub(crate) parts: BTreeMap<u32, (u64, u64)>,
}

#[derive(Debug, Clone, Default)]
pub(crate) struct World {
    pub(crate) objects: BTreeMap<(String, String), Obj>,
    /// Ids starting with `?` stand for an upload created by an in-flight op.
    pub(crate) uploads: BTreeMap<String, Upload>,
    pub(crate) spare: bool,
}

/// Expected bodies and MD5s, each generated once. Bodies are kept only while
/// an object of the model holds them (see [`Digests::forget_dead`]).
#[derive(Default)]
pub(crate) struct Digests {
    pub(crate) md5: HashMap<(u64, u64), [u8; 16]>,
    pub(crate) bodies: HashMap<Vec<(u64, u64)>, Vec<u8>>,
}

impl Digests {
    pub(crate) fn bytes(&mut self, pieces: &[(u64, u64)]) -> &[u8] {
        self.bodies.entry(pieces.to_vec()).or_insert_with(|| {
            let mut v = Vec::new();
            for (id, size) in pieces {
                v.extend_from_slice(&body(*id, *size));
            }
            v
        })
    }
    pub(crate) fn piece(&mut self, id: u64, size: u64) -> [u8; 16] {
        if let Some(d) = self.md5.get(&(id, size)) {
            return *d;
        }
        let d = md5_of(self.bytes(&[(id, size)]));
        self.md5.insert((id, size), d);
        d
    }
    pub(crate) fn piece_etag(&mut self, id: u64, size: u64) -> String {
        format!("\"{}\"", hex(&self.piece(id, size)))
    }
    /// The ETag of `c`: its MD5, or S3's MD5 of the part MD5s with the count.
    pub(crate) fn etag(&mut self, c: &Content) -> String {
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
    pub(crate) fn forget_dead(&mut self, world: &World) {
        let live: HashSet<&Vec<(u64, u64)>> =
            world.objects.values().map(|o| &o.content.pieces).collect();
        self.bodies.retain(|k, _| live.contains(k));
    }
}

/// A reported keyed save whose receipt must resolve.
pub(crate) struct ReceiptCheck {
    pub(crate) bucket: String,
    pub(crate) key: String,
    pub(crate) request_key: String,
    pub(crate) etag: String,
    pub(crate) version: String,
    pub(crate) size: u64,
}

/// What a completion would produce, or `None` if it must be refused.
pub(crate) fn completion(
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

pub(crate) fn expect_object(
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
pub(crate) fn apply(
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

pub(crate) struct ObsObject {
    pub(crate) size: u64,
    pub(crate) etag: String,
    pub(crate) version: String,
    pub(crate) part_sizes: Vec<u64>,
    pub(crate) bytes: Vec<u8>,
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
pub(crate) struct ObsUpload {
    pub(crate) bucket: String,
    pub(crate) key: String,
    pub(crate) parts: BTreeMap<u32, (u64, String)>,
}

pub(crate) struct Observed {
    pub(crate) objects: BTreeMap<(String, String), ObsObject>,
    pub(crate) uploads: BTreeMap<String, ObsUpload>,
    pub(crate) spare: bool,
}

/// Reads everything: every object in full, every upload and part.
pub(crate) fn observe(store: &Store) -> Result<Observed, String> {
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
pub(crate) fn matches(want: &World, obs: &Observed, d: &mut Digests) -> Result<World, Vec<String>> {
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
