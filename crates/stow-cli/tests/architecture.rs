//! The crate graph's invariants (ARCHITECTURE.md, "Invariants"), checked
//! from each crate's manifest: which project crates each may depend on,
//! and that the storage crates carry no protocol or CLI dependency. Cargo
//! already refuses a dependency cycle; this refuses an edge that would
//! blur a crate's job before anyone builds on it.

use std::collections::BTreeSet;
use std::path::Path;

/// Each crate's allowed project dependencies (exactly these).
const PROJECT_EDGES: &[(&str, &[&str])] = &[
    ("stow-store", &[]),
    ("stow-checkpoint", &["stow-store"]),
    ("stow-workspace", &["stow-checkpoint", "stow-store"]),
    ("stow-remote", &["stow-checkpoint"]),
    ("stow-s3-http", &["stow-store"]),
    (
        "stow-console",
        &["stow-checkpoint", "stow-s3-http", "stow-store"],
    ),
    (
        "stow-mcp",
        &["stow-checkpoint", "stow-store", "stow-workspace"],
    ),
];

/// Dependencies that belong to the protocol crates and the CLI only.
const PROTOCOL_CRATES: &[&str] = &[
    "hyper", "s3s", "rmcp", "clap", "tokio", "axum", "reqwest", "http",
];

/// The storage crates: they know nothing of HTTP, JSON-RPC or the CLI.
const STORAGE_CRATES: &[&str] = &["stow-store", "stow-checkpoint", "stow-workspace"];

/// The names under `[dependencies]` of a crate's manifest (build and
/// dev-dependencies are not part of the graph a user links).
fn dependencies(krate: &str) -> BTreeSet<String> {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(krate)
        .join("Cargo.toml");
    let text = std::fs::read_to_string(&manifest)
        .unwrap_or_else(|e| panic!("read {}: {e}", manifest.display()));
    let mut in_deps = false;
    let mut names = BTreeSet::new();
    for line in text.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            in_deps = line == "[dependencies]";
            continue;
        }
        if !in_deps || line.is_empty() || line.starts_with('#') {
            continue;
        }
        if let Some(name) = line.split(['=', '.', ' ']).next() {
            names.insert(name.to_string());
        }
    }
    assert!(!names.is_empty(), "{krate} lists no dependencies");
    names
}

#[test]
fn each_crate_depends_only_on_the_project_crates_below_it() {
    for (krate, allowed) in PROJECT_EDGES {
        let project: BTreeSet<String> = dependencies(krate)
            .into_iter()
            .filter(|d| d.starts_with("stow-"))
            .collect();
        let allowed: BTreeSet<String> = allowed.iter().map(|s| s.to_string()).collect();
        assert_eq!(
            project, allowed,
            "{krate}'s project dependencies changed: update ARCHITECTURE.md's invariants first"
        );
    }
}

#[test]
fn the_power_loss_harness_links_no_project_crate() {
    // tools/powerloss judges the product from outside (a mount and a
    // control socket); linking a project crate would let it share the
    // product's assumptions.
    let deps = dependencies("../tools/powerloss");
    assert!(deps.contains("fuser"), "{deps:?}");
    let project: Vec<&String> = deps.iter().filter(|d| d.starts_with("stow-")).collect();
    assert!(
        project.is_empty(),
        "the power-loss harness depends on {project:?}"
    );
}

#[test]
fn storage_crates_know_no_protocol() {
    for krate in STORAGE_CRATES {
        let deps = dependencies(krate);
        for protocol in PROTOCOL_CRATES {
            assert!(
                !deps.contains(*protocol),
                "{krate} depends on {protocol}: storage crates know nothing of HTTP, JSON-RPC or the CLI"
            );
        }
    }
}

#[test]
fn the_engine_never_names_the_lifecycle() {
    // A dependency edge is refused above; this catches a path written into
    // the engine's source (a doc link or a test helper) as well.
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../stow-checkpoint/src");
    let mut stack = vec![src];
    let mut files = 0;
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                files += 1;
                let text = std::fs::read_to_string(&path).unwrap();
                assert!(
                    !text.contains("stow_workspace::"),
                    "{} names stow_workspace",
                    path.display()
                );
            }
        }
    }
    assert!(
        files > 20,
        "the engine's sources were not found ({files} files)"
    );
}
