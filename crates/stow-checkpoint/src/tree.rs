//! Tree manifests: a capture's files, directories, links and skipped
//! entries stored as one content-addressed *node* per directory, so an
//! unchanged directory costs a 32-byte reference instead of its entries,
//! and a capture after a few changes writes only the nodes on their paths
//! to the root (git's tree objects, in our own format).
//!
//! A node is a blob in the partition's blob store (`blobs/<xx>/<sha256>`,
//! the same durability rules as payloads), binary, every list sorted by
//! name:
//!
//! ```text
//! magic "stow-node\0\x01" (11 bytes)
//! files:   u32 count × (name | size u64 | mode u32 | sha256 [32] | props)
//! dirs:    u32 count × (name | mode u32 | node sha256 [32])
//! links:   u32 count × (name | target: u32 len + bytes)
//! skipped: u32 count × (name | reason: u32 len + bytes)
//! name:    u32 len + UTF-8 bytes (one path component)
//! props:   u8 flags (1: content type, 2: metadata) | [u32 len + type]
//!          | [u32 count × (key, value), each u32 len + bytes]
//! ```
//!
//! Integers are little-endian. A manifest in this layout names the root
//! node (`tree`) instead of listing `files`, `dirs`, `links` and
//! `skipped`; [`load_tree`] expands it back into those lists, so every
//! reader sees the same [`CheckpointManifest`](crate::CheckpointManifest)
//! whichever layout the checkpoint was written in.

use std::collections::{BTreeMap, HashMap};
use std::fs;

use sha2::{Digest, Sha256};

use crate::blobs::blob_path;
use crate::error::{Result, WsError};
use crate::format::{DirectoryEntry, FileEntry, FileProps, LinkEntry, SkippedEntry};
use crate::fsutil::hex;
use crate::registry::Registry;
use crate::scan::Scan;
use crate::statcache::unhex32;

const MAGIC: &[u8; 11] = b"stow-node\x00\x01";

/// Every node of a captured tree, children before their parents.
pub(crate) struct BuiltTree {
    /// The root node's SHA-256.
    pub root: [u8; 32],
    /// (SHA-256, encoded node), each distinct node encoded here once
    /// (reused nodes are not).
    pub nodes: Vec<([u8; 32], Vec<u8>)>,
    /// Each directory's node: the root's, then `scan.dirs`' in order.
    pub dir_shas: Vec<[u8; 32]>,
}

/// The entries of one directory while its node is built: indexes into
/// the scan's sorted lists.
#[derive(Default)]
struct Members {
    files: Vec<usize>,
    dirs: Vec<usize>,
    links: Vec<usize>,
    skipped: Vec<usize>,
}

/// Splits a slash path into its parent directory ("" for the root) and
/// its last component.
fn split_parent(path: &str) -> (&str, &str) {
    path.rsplit_once('/').unwrap_or(("", path))
}

/// The indexes of the entries of `list` (sorted by `key`, a slash path)
/// directly in directory `dir` ("" for the root). A subdirectory's
/// entries are skipped by one binary search: they lie in `["sub/", "sub0")`.
pub(crate) fn direct_members<T>(list: &[T], key: impl Fn(&T) -> &str, dir: &str) -> Vec<usize> {
    let prefix = if dir.is_empty() {
        String::new()
    } else {
        format!("{dir}/")
    };
    let mut out = Vec::new();
    let mut i = list.partition_point(|e| key(e) < prefix.as_str());
    while let Some(e) = list.get(i) {
        let path = key(e);
        let Some(rest) = path.strip_prefix(prefix.as_str()) else {
            break;
        };
        match rest.find('/') {
            None => {
                out.push(i);
                i += 1;
            }
            Some(slash) => {
                let end = format!("{}0", &path[..prefix.len() + slash]);
                i += gallop(&list[i..], |e| key(e) < end.as_str());
            }
        }
    }
    out
}

/// `list.partition_point(before)`, searched from the front in doubling
/// steps: a subdirectory's entries are usually a short run, so its end is
/// found in a few comparisons wherever it lies in a large list.
fn gallop<T>(list: &[T], before: impl Fn(&T) -> bool) -> usize {
    let mut hi = 1;
    while hi < list.len() && list.get(hi).is_some_and(&before) {
        hi *= 2;
    }
    let lo = hi / 2;
    let hi = hi.min(list.len());
    lo + list[lo..hi].partition_point(before)
}

/// Builds the nodes of scan `scan`, whose files have the digests
/// `digests` (same order) and, in a portable capture, the S3 properties
/// `props`. `reuse` may name a directory's node known to be unchanged
/// (then it is not encoded again).
pub(crate) fn build(
    scan: &Scan,
    digests: &[[u8; 32]],
    props: Option<&HashMap<String, FileProps>>,
    reuse: &dyn Fn(&str) -> Option<[u8; 32]>,
) -> Result<BuiltTree> {
    build_reusing(scan, digests, props, reused_nodes(scan, reuse))
}

/// Each directory's node `reuse` names: slot 0 is the root, slot i + 1 is
/// `scan.dirs[i]` (the order [`build_reusing`] takes).
pub(crate) fn reused_nodes(
    scan: &Scan,
    reuse: &dyn Fn(&str) -> Option<[u8; 32]>,
) -> Vec<Option<[u8; 32]>> {
    std::iter::once(reuse(""))
        .chain(scan.dirs.iter().map(|d| reuse(&d.path)))
        .collect()
}

/// [`build`] with each directory's reusable node given by slot (see
/// [`reused_nodes`]). Directories are built deepest first, a depth at a
/// time: the directories of one depth need only the nodes of deeper ones,
/// so a large depth is shared between worker threads.
pub(crate) fn build_reusing(
    scan: &Scan,
    digests: &[[u8; 32]],
    props: Option<&HashMap<String, FileProps>>,
    reused: Vec<Option<[u8; 32]>>,
) -> Result<BuiltTree> {
    if reused.len() != scan.dirs.len() + 1 {
        return Err(WsError::InvalidRequest(
            "reused nodes do not match the scan's directories".into(),
        ));
    }
    let encoder = NodeEncoder {
        scan,
        digests,
        props,
    };
    // Slot 0 is the root, slot i + 1 is `scan.dirs[i]`; the slots to
    // build, by depth.
    let mut levels: Vec<Vec<usize>> = Vec::new();
    for (s, r) in reused.iter().enumerate() {
        if r.is_none() {
            let depth = encoder.dir_path(s).split('/').count() - usize::from(s == 0);
            if levels.len() <= depth {
                levels.resize_with(depth + 1, Vec::new);
            }
            levels[depth].push(s);
        }
    }
    let all_built = reused.iter().all(Option::is_none);
    let mut shas = reused;
    let mut placed = [0usize; 4];
    let mut nodes: Vec<([u8; 32], Vec<u8>)> = Vec::new();
    let mut seen: std::collections::HashSet<[u8; 32]> = std::collections::HashSet::new();
    for level in levels.iter().rev() {
        for built in encoder.level(level, &shas)? {
            let (s, sha, out, counts) = built;
            shas[s] = Some(sha);
            for (n, c) in placed.iter_mut().zip(counts) {
                *n += c;
            }
            if seen.insert(sha) {
                nodes.push((sha, out));
            }
        }
    }
    // Built whole, every entry must have found its directory.
    let lengths = [
        scan.files.len(),
        scan.dirs.len(),
        scan.links.len(),
        scan.skipped.len(),
    ];
    if all_built && placed != lengths {
        return Err(WsError::InvalidRequest(format!(
            "the scan holds entries outside its directories ({placed:?} of {lengths:?} placed)"
        )));
    }
    let dir_shas: Vec<[u8; 32]> = shas.into_iter().flatten().collect();
    let root = *dir_shas
        .first()
        .filter(|_| dir_shas.len() == scan.dirs.len() + 1)
        .ok_or_else(|| WsError::InvalidRequest("a tree node is missing".into()))?;
    Ok(BuiltTree {
        root,
        nodes,
        dir_shas,
    })
}

/// One built directory: its slot, node digest, encoded node, and how many
/// files, directories, links and skipped entries it placed.
type BuiltNode = (usize, [u8; 32], Vec<u8>, [usize; 4]);

/// Encodes the nodes of one scan.
struct NodeEncoder<'a> {
    scan: &'a Scan,
    digests: &'a [[u8; 32]],
    props: Option<&'a HashMap<String, FileProps>>,
}

impl NodeEncoder<'_> {
    /// Fewest directories of one depth worth a second thread.
    const PARALLEL_FROM: usize = 64;

    fn dir_path(&self, s: usize) -> &str {
        if s == 0 {
            ""
        } else {
            self.scan.dirs[s - 1].path.as_str()
        }
    }

    /// The nodes of the directories `slots` (all of one depth), given the
    /// nodes of every deeper directory in `shas`; in `slots`' order.
    fn level(&self, slots: &[usize], shas: &[Option<[u8; 32]>]) -> Result<Vec<BuiltNode>> {
        let threads = crate::parallel::worker_threads(slots.len() / Self::PARALLEL_FROM + 1);
        if threads <= 1 {
            return slots.iter().map(|&s| self.node(s, shas)).collect();
        }
        let chunk = slots.len().div_ceil(threads);
        let parts: Vec<Result<Vec<BuiltNode>>> = std::thread::scope(|scope| {
            let workers: Vec<_> = slots
                .chunks(chunk)
                .map(|part| scope.spawn(move || part.iter().map(|&s| self.node(s, shas)).collect()))
                .collect();
            workers
                .into_iter()
                .map(|w| {
                    w.join().unwrap_or_else(|_| {
                        Err(WsError::InvalidRequest("a node worker panicked".into()))
                    })
                })
                .collect()
        });
        let mut out = Vec::with_capacity(slots.len());
        for part in parts {
            out.extend(part?);
        }
        Ok(out)
    }

    /// The node of directory slot `s`. Only directories whose node is
    /// built need their members, found by binary search in the scan's
    /// sorted lists: a capture after a few changes looks at the
    /// directories on their paths, not the tree.
    fn node(&self, s: usize, shas: &[Option<[u8; 32]>]) -> Result<BuiltNode> {
        let scan = self.scan;
        let dir = self.dir_path(s);
        let m = Members {
            files: direct_members(&scan.files, |f| &f.path, dir),
            dirs: direct_members(&scan.dirs, |d| &d.path, dir),
            links: direct_members(&scan.links, |l| &l.path, dir),
            skipped: direct_members(&scan.skipped, |k| &k.path, dir),
        };
        let mut out = Vec::with_capacity(64 + m.files.len() * 80);
        out.extend_from_slice(MAGIC);
        put_u32(&mut out, m.files.len());
        for &i in &m.files {
            let f = &scan.files[i];
            put_str(&mut out, split_parent(&f.path).1);
            out.extend_from_slice(&f.size.to_le_bytes());
            out.extend_from_slice(&f.mode.to_le_bytes());
            let sha = self
                .digests
                .get(i)
                .ok_or_else(|| WsError::InvalidRequest(format!("{}: no digest", f.path)))?;
            out.extend_from_slice(sha);
            put_props(&mut out, self.props.and_then(|p| p.get(&*f.path)));
        }
        put_u32(&mut out, m.dirs.len());
        for &i in &m.dirs {
            let d = &scan.dirs[i];
            put_str(&mut out, split_parent(&d.path).1);
            out.extend_from_slice(&d.mode.to_le_bytes());
            let child = shas.get(i + 1).copied().flatten().ok_or_else(|| {
                WsError::InvalidRequest(format!("{}: node built out of order", d.path))
            })?;
            out.extend_from_slice(&child);
        }
        put_u32(&mut out, m.links.len());
        for &i in &m.links {
            let l = &scan.links[i];
            put_str(&mut out, split_parent(&l.path).1);
            put_str(&mut out, &l.target);
        }
        put_u32(&mut out, m.skipped.len());
        for &i in &m.skipped {
            let k = &scan.skipped[i];
            put_str(&mut out, split_parent(&k.path).1);
            put_str(&mut out, &k.reason);
        }
        let sha: [u8; 32] = Sha256::digest(&out).into();
        let counts = [m.files.len(), m.dirs.len(), m.links.len(), m.skipped.len()];
        Ok((s, sha, out, counts))
    }
}

fn put_u32(out: &mut Vec<u8>, n: usize) {
    out.extend_from_slice(&(n as u32).to_le_bytes());
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    put_u32(out, s.len());
    out.extend_from_slice(s.as_bytes());
}

fn put_props(out: &mut Vec<u8>, props: Option<&FileProps>) {
    let ct = props.and_then(|p| p.content_type.as_deref());
    let meta = props.map(|p| &p.metadata).filter(|m| !m.is_empty());
    out.push(u8::from(ct.is_some()) | (u8::from(meta.is_some()) << 1));
    if let Some(ct) = ct {
        put_str(out, ct);
    }
    if let Some(meta) = meta {
        put_u32(out, meta.len());
        for (k, v) in meta {
            put_str(out, k);
            put_str(out, v);
        }
    }
}

/// Whether the blob file at `path` is a tree node (it starts with the
/// node magic).
pub(crate) fn is_node_file(path: &std::path::Path) -> bool {
    use std::io::Read;
    let mut head = [0u8; MAGIC.len()];
    fs::File::open(path)
        .and_then(|mut f| f.read_exact(&mut head))
        .is_ok_and(|()| head == *MAGIC)
}

/// A tree expanded into a manifest's lists (each sorted by path), with
/// the digests of every node it is made of.
#[derive(Debug, Default)]
pub(crate) struct Expanded {
    pub files: Vec<FileEntry>,
    pub dirs: Vec<DirectoryEntry>,
    pub links: Vec<LinkEntry>,
    pub skipped: Vec<SkippedEntry>,
    /// Hex digests of the distinct nodes.
    pub nodes: Vec<String>,
}

/// One decoded node.
pub(crate) struct Node {
    files: Vec<FileEntry>,
    dirs: Vec<(String, u32, [u8; 32])>,
    links: Vec<LinkEntry>,
    skipped: Vec<SkippedEntry>,
}

/// Reads the tree whose root node is `root` (hex) out of the blob store:
/// every node is checked against its digest and decoded strictly.
pub(crate) fn load_tree(registry: &Registry, root: &str) -> Result<Expanded> {
    let root_sha = unhex32(root).ok_or_else(|| corrupt(root, "not a SHA-256"))?;
    let mut cache: HashMap<[u8; 32], std::rc::Rc<Node>> = HashMap::new();
    let mut out = Expanded::default();
    let mut stack: Vec<(String, [u8; 32])> = vec![(String::new(), root_sha)];
    while let Some((prefix, sha)) = stack.pop() {
        let node = match cache.get(&sha) {
            Some(n) => n.clone(),
            None => {
                let n = std::rc::Rc::new(read_node(registry, &sha)?);
                cache.insert(sha, n.clone());
                out.nodes.push(hex(&sha));
                n
            }
        };
        let join = |name: &str| {
            if prefix.is_empty() {
                name.to_string()
            } else {
                format!("{prefix}/{name}")
            }
        };
        for f in &node.files {
            out.files.push(FileEntry {
                path: join(&f.path),
                ..f.clone()
            });
        }
        for l in &node.links {
            out.links.push(LinkEntry {
                path: join(&l.path),
                target: l.target.clone(),
            });
        }
        for k in &node.skipped {
            out.skipped.push(SkippedEntry {
                path: join(&k.path),
                reason: k.reason.clone(),
            });
        }
        for (name, mode, child) in &node.dirs {
            let path = join(name);
            out.dirs.push(DirectoryEntry {
                path: path.clone(),
                mode: *mode,
            });
            stack.push((path, *child));
        }
    }
    out.files.sort_unstable_by(|a, b| a.path.cmp(&b.path));
    out.dirs.sort_unstable_by(|a, b| a.path.cmp(&b.path));
    out.links.sort_unstable_by(|a, b| a.path.cmp(&b.path));
    out.skipped.sort_unstable_by(|a, b| a.path.cmp(&b.path));
    Ok(out)
}

/// A directory's node on each side of a comparison (`None`: not there).
type NodePair = (Option<[u8; 32]>, Option<[u8; 32]>);

/// Two trees (root nodes `a` and `b`, hex) expanded only where they
/// differ: a directory whose node is the same in both is listed (with
/// each side's mode) but not entered, so the work follows the change, not
/// the tree. Each side's lists are sorted by path; `nodes` stays empty.
pub(crate) fn expand_differing(
    registry: &Registry,
    a: &str,
    b: &str,
) -> Result<(Expanded, Expanded)> {
    let sha = |h: &str| unhex32(h).ok_or_else(|| corrupt(h, "not a SHA-256"));
    expand_differing_in(registry, &HashMap::new(), sha(a)?, sha(b)?)
}

/// [`expand_differing`] of root nodes `a` and `b`, where the nodes in
/// `in_memory` (built and never stored: a status's live tree) are read
/// from there and every other node from the blob store.
pub(crate) fn expand_differing_in(
    registry: &Registry,
    in_memory: &HashMap<[u8; 32], &[u8]>,
    a: [u8; 32],
    b: [u8; 32],
) -> Result<(Expanded, Expanded)> {
    let (mut left, mut right) = (Expanded::default(), Expanded::default());
    let mut stack: Vec<(String, NodePair)> = vec![(String::new(), (Some(a), Some(b)))];
    while let Some((prefix, (a, b))) = stack.pop() {
        if a.is_some() && a == b {
            continue;
        }
        let join = |name: &str| {
            if prefix.is_empty() {
                name.to_string()
            } else {
                format!("{prefix}/{name}")
            }
        };
        let read = |s: Option<[u8; 32]>| {
            s.map(|s| match in_memory.get(&s) {
                Some(bytes) => decode_node(bytes).ok_or_else(|| corrupt(&hex(&s), "malformed")),
                None => read_node(registry, &s),
            })
            .transpose()
        };
        let (na, nb) = (read(a)?, read(b)?);
        for (node, out) in [(&na, &mut left), (&nb, &mut right)] {
            let Some(node) = node else { continue };
            out.files.extend(node.files.iter().map(|f| FileEntry {
                path: join(&f.path),
                ..f.clone()
            }));
            out.links.extend(node.links.iter().map(|l| LinkEntry {
                path: join(&l.path),
                target: l.target.clone(),
            }));
            out.skipped
                .extend(node.skipped.iter().map(|k| SkippedEntry {
                    path: join(&k.path),
                    reason: k.reason.clone(),
                }));
            out.dirs
                .extend(node.dirs.iter().map(|(name, mode, _)| DirectoryEntry {
                    path: join(name),
                    mode: *mode,
                }));
        }
        // Subdirectories by name: entered unless both sides hold the same node.
        let mut children: BTreeMap<&str, NodePair> = BTreeMap::new();
        for (name, _, child) in na.iter().flat_map(|n| &n.dirs) {
            children.entry(name).or_default().0 = Some(*child);
        }
        for (name, _, child) in nb.iter().flat_map(|n| &n.dirs) {
            children.entry(name).or_default().1 = Some(*child);
        }
        for (name, pair) in children {
            stack.push((join(name), pair));
        }
    }
    for out in [&mut left, &mut right] {
        out.files.sort_unstable_by(|a, b| a.path.cmp(&b.path));
        out.dirs.sort_unstable_by(|a, b| a.path.cmp(&b.path));
        out.links.sort_unstable_by(|a, b| a.path.cmp(&b.path));
        out.skipped.sort_unstable_by(|a, b| a.path.cmp(&b.path));
    }
    Ok((left, right))
}

fn corrupt(node: &str, why: &str) -> WsError {
    WsError::Corrupt(format!("checkpoint tree node {node}: {why}"))
}

fn read_node(registry: &Registry, sha: &[u8; 32]) -> Result<Node> {
    let name = hex(sha);
    let path = blob_path(registry, &name);
    let bytes = fs::read(&path).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => corrupt(&name, "missing from the blob store"),
        _ => WsError::io_at("read", &path, e),
    })?;
    if Sha256::digest(&bytes).as_slice() != sha {
        return Err(corrupt(&name, "its bytes do not match its digest"));
    }
    decode_node(&bytes).ok_or_else(|| corrupt(&name, "malformed"))
}

/// A cursor over a node's bytes; every read is bounds-checked.
struct Cursor<'a>(&'a [u8]);

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (head, tail) = self.0.split_at(n);
        self.0 = tail;
        Some(head)
    }

    fn array<const N: usize>(&mut self) -> Option<[u8; N]> {
        self.take(N)?.try_into().ok()
    }

    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.array()?))
    }

    fn string(&mut self) -> Option<String> {
        let n = self.u32()? as usize;
        String::from_utf8(self.take(n)?.to_vec()).ok()
    }

    /// A count of items each at least `min` bytes long: bounded by the
    /// bytes left, so a bad count cannot make a huge allocation.
    fn count(&mut self, min: usize) -> Option<usize> {
        let n = self.u32()? as usize;
        (n <= self.0.len() / min).then_some(n)
    }

    /// One path component, in strictly increasing order after `last`.
    fn name(&mut self, last: &mut Option<String>) -> Option<String> {
        let name = self.string()?;
        let bad = name.is_empty()
            || name == "."
            || name == ".."
            || name.contains('/')
            || name.contains('\0')
            || last.as_ref().is_some_and(|l| *l >= name);
        if bad {
            return None;
        }
        *last = Some(name.clone());
        Some(name)
    }
}

pub(crate) fn decode_node(bytes: &[u8]) -> Option<Node> {
    let mut c = Cursor(bytes.strip_prefix(MAGIC.as_slice())?);
    let mut last = None;
    let n = c.count(49)?;
    let mut files = Vec::with_capacity(n);
    for _ in 0..n {
        let path = c.name(&mut last)?;
        let size = u64::from_le_bytes(c.array()?);
        let mode = c.u32()?;
        if mode > 0o777 {
            return None;
        }
        let sha256 = hex(&c.array::<32>()?);
        let flags = c.array::<1>()?[0];
        if flags > 3 {
            return None;
        }
        let content_type = if flags & 1 != 0 {
            Some(c.string()?)
        } else {
            None
        };
        let mut metadata = BTreeMap::new();
        if flags & 2 != 0 {
            let m = c.count(8)?;
            if m == 0 {
                return None;
            }
            for _ in 0..m {
                let k = c.string()?;
                let v = c.string()?;
                if metadata.insert(k, v).is_some() {
                    return None;
                }
            }
        }
        files.push(FileEntry {
            path,
            size,
            mode,
            sha256,
            content_type,
            metadata,
        });
    }
    let mut last = None;
    let n = c.count(41)?;
    let mut dirs = Vec::with_capacity(n);
    for _ in 0..n {
        let name = c.name(&mut last)?;
        let mode = c.u32()?;
        if mode > 0o7777 {
            return None;
        }
        dirs.push((name, mode, c.array::<32>()?));
    }
    let mut last = None;
    let n = c.count(8)?;
    let mut links = Vec::with_capacity(n);
    for _ in 0..n {
        let path = c.name(&mut last)?;
        let target = c.string()?;
        links.push(LinkEntry { path, target });
    }
    let mut last = None;
    let n = c.count(8)?;
    let mut skipped = Vec::with_capacity(n);
    for _ in 0..n {
        let path = c.name(&mut last)?;
        let reason = c.string()?;
        skipped.push(SkippedEntry { path, reason });
    }
    if !c.0.is_empty() {
        return None;
    }
    // One name, one kind.
    let mut names: std::collections::HashSet<&str> = std::collections::HashSet::new();
    let all_unique = files
        .iter()
        .map(|f| f.path.as_str())
        .chain(dirs.iter().map(|d| d.0.as_str()))
        .chain(links.iter().map(|l| l.path.as_str()))
        .chain(skipped.iter().map(|s| s.path.as_str()))
        .all(|n| names.insert(n));
    all_unique.then_some(Node {
        files,
        dirs,
        links,
        skipped,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scan::Scanned;

    fn sample() -> (Scan, Vec<[u8; 32]>) {
        // Path order, as a scan sorts: "a.txt" < "a/…" < "b".
        let scan = Scan {
            files: vec![
                Scanned::for_test("a.txt", 1),
                Scanned::for_test("a/x", 2),
                Scanned::for_test("a/y/z", 3),
                Scanned::for_test("b/x", 2),
            ],
            dirs: ["a", "a/y", "b", "e"]
                .iter()
                .map(|p| DirectoryEntry {
                    path: (*p).into(),
                    mode: 0o755,
                })
                .collect(),
            links: vec![LinkEntry {
                path: "a/l".into(),
                target: "../a.txt".into(),
            }],
            skipped: vec![SkippedEntry {
                path: "b/sock".into(),
                reason: "a socket is not captured".into(),
            }],
            ..Scan::default()
        };
        (scan, vec![[1; 32], [2; 32], [3; 32], [2; 32]])
    }

    #[test]
    fn nodes_round_trip_and_identical_directories_share_one_node() {
        let (scan, produced) = sample();
        let mut props = HashMap::new();
        props.insert(
            "a/x".to_string(),
            FileProps {
                content_type: Some("text/plain".into()),
                metadata: [("k".to_string(), "v".to_string())].into(),
            },
        );
        let built = build(&scan, &produced, Some(&props), &|_| None).unwrap();
        // root, a, a/y, b, e: five directories, all different.
        assert_eq!(built.nodes.len(), 5);
        for (sha, bytes) in &built.nodes {
            assert_eq!(Sha256::digest(bytes).as_slice(), sha);
            assert!(decode_node(bytes).is_some());
        }
        let root = decode_node(&built.nodes.last().unwrap().1).unwrap();
        assert_eq!(root.files.len(), 1);
        assert_eq!(
            root.dirs.iter().map(|d| d.0.as_str()).collect::<Vec<_>>(),
            ["a", "b", "e"]
        );
        let a = built
            .nodes
            .iter()
            .find(|(s, _)| *s == root.dirs[0].2)
            .map(|(_, b)| decode_node(b).unwrap())
            .unwrap();
        assert_eq!(a.files[0].content_type.as_deref(), Some("text/plain"));
        assert_eq!(a.links[0].target, "../a.txt");

        // Two empty directories are one node.
        let twin = Scan {
            dirs: ["p", "q"]
                .iter()
                .map(|p| DirectoryEntry {
                    path: (*p).into(),
                    mode: 0o755,
                })
                .collect(),
            ..Scan::default()
        };
        assert_eq!(build(&twin, &[], None, &|_| None).unwrap().nodes.len(), 2);
    }

    /// A wide tree (its deepest level shared between threads) builds the
    /// same nodes as one directory at a time in reverse path order, and
    /// the same again when every deepest node is given as reused.
    #[test]
    fn a_wide_tree_builds_as_one_directory_at_a_time_does() {
        let mut dirs = Vec::new();
        let mut files = Vec::new();
        for top in 0..10 {
            dirs.push(format!("t{top}"));
            for sub in 0..30 {
                dirs.push(format!("t{top}/s{sub:02}"));
                for f in 0..2 {
                    files.push(Scanned::for_test(
                        &format!("t{top}/s{sub:02}/f{f}"),
                        sub + f,
                    ));
                }
            }
        }
        dirs.sort();
        files.sort_by(|a, b| a.path.cmp(&b.path));
        let scan = Scan {
            files,
            dirs: dirs
                .iter()
                .map(|p| DirectoryEntry {
                    path: p.clone(),
                    mode: 0o755,
                })
                .collect(),
            ..Scan::default()
        };
        let digests: Vec<[u8; 32]> = (0..scan.files.len()).map(|i| [(i % 7) as u8; 32]).collect();
        let built = build(&scan, &digests, None, &|_| None).unwrap();
        // The reference: one directory at a time, children first.
        let encoder = NodeEncoder {
            scan: &scan,
            digests: &digests,
            props: None,
        };
        let mut shas = vec![None; scan.dirs.len() + 1];
        for s in (1..=scan.dirs.len()).rev().chain(std::iter::once(0)) {
            shas[s] = Some(encoder.node(s, &shas).unwrap().1);
        }
        let want: Vec<[u8; 32]> = shas.into_iter().flatten().collect();
        assert_eq!(built.dir_shas, want);
        assert_eq!(built.root, want[0]);
        // 300 directories of two files with digests from a short cycle:
        // fewer distinct nodes than directories, each kept once.
        let distinct: std::collections::HashSet<_> = want.iter().collect();
        assert_eq!(built.nodes.len(), distinct.len());
        let deepest = |p: &str| p.matches('/').count() == 1;
        let reused: Vec<Option<[u8; 32]>> = std::iter::once(None)
            .chain(
                scan.dirs
                    .iter()
                    .zip(&want[1..])
                    .map(|(d, sha)| deepest(&d.path).then_some(*sha)),
            )
            .collect();
        let again = build_reusing(&scan, &digests, None, reused).unwrap();
        assert_eq!(again.dir_shas, want);
    }

    #[test]
    fn differing_trees_are_expanded_only_where_their_nodes_differ() {
        use crate::scan::Scanned;
        let tmp = tempfile::tempdir().unwrap();
        let registry = Registry::at(tmp.path(), None).unwrap();
        let write = |built: &BuiltTree| {
            for (sha, bytes) in &built.nodes {
                let p = blob_path(&registry, &hex(sha));
                fs::create_dir_all(p.parent().unwrap()).unwrap();
                fs::write(p, bytes).unwrap();
            }
            hex(&built.root)
        };
        let tree_of = |files: &[(&str, &str)], dirs: &[&str]| {
            let scan = Scan {
                files: files.iter().map(|(p, _)| Scanned::for_test(p, 1)).collect(),
                dirs: dirs
                    .iter()
                    .map(|d| DirectoryEntry {
                        path: d.to_string(),
                        mode: 0o755,
                    })
                    .collect(),
                ..Default::default()
            };
            let digests: Vec<[u8; 32]> = files
                .iter()
                .map(|(_, c)| Sha256::digest(c.as_bytes()).into())
                .collect();
            build(&scan, &digests, None, &|_| None).unwrap()
        };
        let a = write(&tree_of(
            &[
                ("changed/z", "3"),
                ("gone/w", "4"),
                ("same/deep/y", "2"),
                ("same/x", "1"),
            ],
            &["changed", "gone", "same", "same/deep"],
        ));
        let b = write(&tree_of(
            &[
                ("changed/z", "33"),
                ("new/v", "5"),
                ("same/deep/y", "2"),
                ("same/x", "1"),
            ],
            &["changed", "new", "same", "same/deep"],
        ));
        let (l, r) = expand_differing(&registry, &a, &b).unwrap();
        let paths = |e: &Expanded| e.files.iter().map(|f| f.path.clone()).collect::<Vec<_>>();
        assert_eq!(paths(&l), ["changed/z", "gone/w"]);
        assert_eq!(paths(&r), ["changed/z", "new/v"]);
        // The unchanged directory is listed on both sides, not entered.
        let dirs = |e: &Expanded| e.dirs.iter().map(|d| d.path.clone()).collect::<Vec<_>>();
        assert_eq!(dirs(&l), ["changed", "gone", "same"]);
        assert_eq!(dirs(&r), ["changed", "new", "same"]);
        assert_eq!(
            expand_differing(&registry, &a, &a).unwrap().0.files.len(),
            0
        );
    }

    #[test]
    fn gallop_finds_the_partition_point_anywhere() {
        for len in 0..70usize {
            let list: Vec<usize> = (0..len).collect();
            for cut in 0..=len {
                assert_eq!(
                    super::gallop(&list, |&x| x < cut),
                    cut,
                    "len {len} cut {cut}"
                );
            }
        }
    }

    #[test]
    fn malformed_nodes_are_refused() {
        let (scan, produced) = sample();
        let built = build(&scan, &produced, None, &|_| None).unwrap();
        let bytes = &built.nodes.last().unwrap().1;
        for cut in 0..bytes.len() {
            assert!(decode_node(&bytes[..cut]).is_none(), "cut at {cut}");
        }
        let mut extra = bytes.clone();
        extra.push(0);
        assert!(decode_node(&extra).is_none());
        // Names out of order, empty, with a slash or a dot-dot.
        for bad in [["b", "a"], ["", "a"], ["a/b", "c"], ["..", "a"]] {
            let mut out = MAGIC.to_vec();
            put_u32(&mut out, 0);
            put_u32(&mut out, 2);
            for name in bad {
                put_str(&mut out, name);
                out.extend_from_slice(&0o755u32.to_le_bytes());
                out.extend_from_slice(&[0; 32]);
            }
            put_u32(&mut out, 0);
            put_u32(&mut out, 0);
            assert!(decode_node(&out).is_none(), "{bad:?}");
        }
    }
}
