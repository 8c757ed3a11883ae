//! Building the nodes of a scanned tree: each directory's entries found
//! in the scan's sorted lists, encoded in the node format (see the parent
//! module), deepest directories first.

use std::collections::HashMap;

use sha2::{Digest, Sha256};

use super::MAGIC;
use crate::error::{Result, WsError};
use crate::format::FileProps;
use crate::scan::Scan;

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
pub(super) fn gallop<T>(list: &[T], before: impl Fn(&T) -> bool) -> usize {
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
pub(super) struct NodeEncoder<'a> {
    pub(super) scan: &'a Scan,
    pub(super) digests: &'a [[u8; 32]],
    pub(super) props: Option<&'a HashMap<String, FileProps>>,
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
    pub(super) fn node(&self, s: usize, shas: &[Option<[u8; 32]>]) -> Result<BuiltNode> {
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

pub(super) fn put_u32(out: &mut Vec<u8>, n: usize) {
    out.extend_from_slice(&(n as u32).to_le_bytes());
}

pub(super) fn put_str(out: &mut Vec<u8>, s: &str) {
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
