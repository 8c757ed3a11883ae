//! Tests of building, reading and expanding tree nodes.

use super::build::{put_str, put_u32, NodeEncoder};
use super::*;
use crate::format::FileProps;
use crate::scan::{Scan, Scanned};
use sha2::{Digest, Sha256};

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
                super::build::gallop(&list, |&x| x < cut),
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
