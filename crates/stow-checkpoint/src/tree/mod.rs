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
use crate::format::{DirectoryEntry, FileEntry, LinkEntry, SkippedEntry};
use crate::fsutil::hex;
use crate::registry::Registry;
use crate::statcache::unhex32;

const MAGIC: &[u8; 11] = b"stow-node\x00\x01";

mod build;

pub(crate) use build::{build, build_reusing, direct_members, reused_nodes, BuiltTree};

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
mod tests;
