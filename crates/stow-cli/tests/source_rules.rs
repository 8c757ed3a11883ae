//! Rules of the sources (ARCHITECTURE.md, "Invariants"; DEVELOPERS.md's
//! engineering style), checked over every workspace member's `src`:
//!
//! - a function over 120 lines says why at its top: its doc comment holds
//!   "Long" ("Long because …", "Long on purpose: …");
//! - a file over 800 lines says why in its `//!` header, the same way;
//! - no import circles inside a crate.
//!
//! No import circles inside a crate: at
//! every level of a crate's module tree, the modules that share a parent
//! refer to each other (through `crate::`, `super::` and `self::` paths)
//! without a circle. A reference from inside a module to one of its own
//! ancestors is allowed — a folder's `mod.rs` is the common ground of its
//! children — so what this refuses is two siblings that each need the
//! other, where one of them (or a third module both use) should hold the
//! shared part. Test code (`#[cfg(test)]` items and `tests` modules) is
//! left out: tests may reach anywhere.
//!
//! The source is read as text, not parsed: comments, string literals and
//! test items are removed first, then every path starting at `crate`,
//! `super` or `self` is followed through `use` groups. It is a check of
//! this repository's code, not a Rust front end.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A module: its path below the crate root (empty for the root).
type ModPath = Vec<String>;

/// The packages whose module graphs are checked: every workspace member
/// (the root manifest's `members`) with a `src` folder.
fn crate_sources() -> Vec<(String, PathBuf)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let manifest = std::fs::read_to_string(root.join("Cargo.toml")).expect("read Cargo.toml");
    let members = manifest
        .lines()
        .find_map(|l| l.trim().strip_prefix("members = ["))
        .expect("a one-line members list in the root Cargo.toml");
    let mut found: Vec<(String, PathBuf)> = members
        .trim_end_matches(']')
        .split(',')
        .map(|m| m.trim().trim_matches('"'))
        .filter(|m| !m.is_empty())
        .map(|m| (m.to_string(), root.join(m).join("src")))
        .filter(|(_, src)| src.is_dir())
        .collect();
    found.sort();
    assert!(
        found.len() >= 8,
        "expected the project's packages, found {found:?}"
    );
    found
}

/// Every `.rs` file below `src` with the module path it defines
/// (`lib.rs`/`main.rs` the root, `a/mod.rs` and `a.rs` both `a`).
fn module_files(src: &Path) -> BTreeMap<ModPath, PathBuf> {
    let mut files = BTreeMap::new();
    let mut stack = vec![src.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).expect("read source dir") {
            let path = entry.expect("source entry").path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            if path.extension().and_then(|e| e.to_str()) != Some("rs") {
                continue;
            }
            let rel = path.strip_prefix(src).expect("below src");
            let mut parts: ModPath = rel
                .iter()
                .map(|p| p.to_string_lossy().trim_end_matches(".rs").to_string())
                .collect();
            let last = parts.last().cloned().unwrap_or_default();
            if last == "mod" || (parts.len() == 1 && (last == "lib" || last == "main")) {
                parts.pop();
            }
            if parts.is_empty() && files.contains_key(&parts) {
                // A crate with both lib.rs and main.rs: keep lib.rs as the
                // root; main.rs only calls into it.
                continue;
            }
            if parts.iter().any(|p| p == "bin") {
                continue;
            }
            files.insert(parts, path);
        }
    }
    files
}

/// The source with comments, string and char literals blanked out (their
/// newlines kept, so line numbers stay the file's).
fn strip_comments_and_strings(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let blank = |out: &mut String, span: &str, with: &str| {
        out.push_str(with);
        out.extend(span.chars().filter(|c| *c == '\n'));
    };
    let mut i = 0;
    while i < text.len() {
        let rest = &text[i..];
        let end = if rest.starts_with("//") {
            let end = rest.find('\n').unwrap_or(rest.len());
            blank(&mut out, &rest[..end], "");
            end
        } else if rest.starts_with("/*") {
            let end = rest.find("*/").map(|e| e + 2).unwrap_or(rest.len());
            blank(&mut out, &rest[..end], " ");
            end
        } else if rest.starts_with("r#\"") || rest.starts_with("r\"") {
            let hashes = rest[1..].chars().take_while(|c| *c == '#').count();
            let close = format!("\"{}", "#".repeat(hashes));
            let body = 1 + hashes + 1;
            let end = rest[body..]
                .find(&close)
                .map(|e| body + e + close.len())
                .unwrap_or(rest.len());
            blank(&mut out, &rest[..end], "\"\"");
            end
        } else if rest.starts_with('"') {
            let rb = rest.as_bytes();
            let mut j = 1;
            while j < rb.len() && rb[j] != b'"' {
                j += if rb[j] == b'\\' { 2 } else { 1 };
            }
            let end = (j + 1).min(rest.len());
            blank(&mut out, &rest[..end], "\"\"");
            end
        } else if rest.starts_with('\'') && is_char_literal(rest) {
            let end = rest[1..].find('\'').map(|e| e + 2).unwrap_or(rest.len());
            out.push_str("' '");
            end
        } else {
            let c = rest.chars().next().expect("non-empty rest");
            out.push(c);
            c.len_utf8()
        };
        i += end;
    }
    out
}

/// Whether a `'` starts a char literal rather than a lifetime.
fn is_char_literal(rest: &str) -> bool {
    let mut chars = rest.chars().skip(1);
    matches!(
        (chars.next(), chars.next()),
        (Some('\\'), _) | (Some(_), Some('\''))
    )
}

/// The source without `#[cfg(test)]` items (their lines left blank), and
/// the names of child modules declared test-only (`#[cfg(test)] mod
/// tests;`).
fn strip_test_items(text: &str) -> (String, BTreeSet<String>) {
    let mut out = String::with_capacity(text.len());
    let mut test_children = BTreeSet::new();
    let mut rest = text;
    while let Some(at) = rest.find("#[cfg(test)]") {
        out.push_str(&rest[..at]);
        let after = &rest[at + "#[cfg(test)]".len()..];
        // The item ends at the first `;` before any `{`, or at the brace
        // that closes the first `{`.
        let semi = after.find(';');
        let brace = after.find('{');
        let end = match (semi, brace) {
            (Some(s), Some(b)) if s < b => s + 1,
            (Some(s), None) => s + 1,
            (_, Some(b)) => matching_brace(after, b)
                .map(|e| e + 1)
                .unwrap_or(after.len()),
            (None, None) => after.len(),
        };
        let item = after[..end].trim();
        if let Some(name) = item.strip_prefix("mod ").and_then(|m| m.strip_suffix(';')) {
            test_children.insert(name.trim().to_string());
        }
        // The item's lines stay, blank: line numbers stay the file's.
        out.extend(after[..end].chars().filter(|c| *c == '\n'));
        rest = &after[end..];
    }
    out.push_str(rest);
    (out, test_children)
}

/// The index of the `}` closing the `{` at `open`.
fn matching_brace(text: &str, open: usize) -> Option<usize> {
    let mut depth = 0usize;
    for (i, c) in text[open..].char_indices() {
        match c {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    return Some(open + i);
                }
            }
            _ => {}
        }
    }
    None
}

/// Every path named in the text that starts at `crate`, `super` or
/// `self`, with `use` groups expanded: `crate::a::{b, c::d}` gives
/// `crate::a::b` and `crate::a::c::d`.
fn relative_paths(text: &str) -> Vec<Vec<String>> {
    let tokens = tokenize(text);
    let mut paths = Vec::new();
    let mut i = 0;
    while i < tokens.len() {
        let t = tokens[i].as_str();
        let starts = matches!(t, "crate" | "super" | "self")
            && tokens.get(i + 1).map(String::as_str) == Some("::")
            && (i == 0 || tokens[i - 1] != "::");
        if starts {
            let (expanded, next) = parse_tree(&tokens, i);
            paths.extend(expanded);
            i = next.max(i + 1);
        } else {
            i += 1;
        }
    }
    paths
}

/// Identifiers, `::`, braces and commas; everything else is a separator.
fn tokenize(text: &str) -> Vec<String> {
    let mut tokens = Vec::new();
    let mut chars = text.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        if c.is_alphanumeric() || c == '_' {
            let mut end = i + c.len_utf8();
            while let Some(&(j, d)) = chars.peek() {
                if d.is_alphanumeric() || d == '_' {
                    end = j + d.len_utf8();
                    chars.next();
                } else {
                    break;
                }
            }
            tokens.push(text[i..end].to_string());
        } else if c == ':' && chars.peek().map(|p| p.1) == Some(':') {
            chars.next();
            tokens.push("::".into());
        } else if matches!(c, '{' | '}' | ',' | ';' | '*') {
            tokens.push(c.to_string());
        } else if !c.is_whitespace() {
            tokens.push("#".into());
        }
    }
    tokens
}

/// One use tree from `tokens[start]`: its expanded paths and the index
/// after it.
fn parse_tree(tokens: &[String], start: usize) -> (Vec<Vec<String>>, usize) {
    let mut prefix = Vec::new();
    let mut i = start;
    loop {
        match tokens.get(i).map(String::as_str) {
            Some("{") => {
                let mut out = Vec::new();
                i += 1;
                loop {
                    match tokens.get(i).map(String::as_str) {
                        Some("}") => {
                            i += 1;
                            break;
                        }
                        Some(",") => i += 1,
                        None => break,
                        _ => {
                            let (inner, next) = parse_tree(tokens, i);
                            for p in inner {
                                let mut full = prefix.clone();
                                full.extend(p);
                                out.push(full);
                            }
                            i = next.max(i + 1);
                        }
                    }
                }
                return (out, i);
            }
            Some(t) if t.chars().all(|c| c.is_alphanumeric() || c == '_') => {
                prefix.push(t.to_string());
                i += 1;
                if tokens.get(i).map(String::as_str) == Some("::") {
                    i += 1;
                } else {
                    return (vec![prefix], i);
                }
            }
            _ => return (vec![prefix], i),
        }
    }
}

/// `path` (relative to the module `here`) as a path from the crate root.
fn absolute(here: &ModPath, path: &[String]) -> Option<ModPath> {
    let mut base: ModPath = Vec::new();
    let mut rest = path;
    match rest.first().map(String::as_str) {
        Some("crate") => rest = &rest[1..],
        Some("self") => {
            base = here.clone();
            rest = &rest[1..];
        }
        Some("super") => {
            base = here.clone();
            while rest.first().map(String::as_str) == Some("super") {
                base.pop()?;
                rest = &rest[1..];
            }
        }
        _ => return None,
    }
    base.extend(rest.iter().cloned());
    Some(base)
}

/// The module graph of one crate: each module's references to others.
fn references(src: &Path) -> BTreeMap<ModPath, BTreeSet<ModPath>> {
    let files = module_files(src);
    let mut test_only: BTreeSet<ModPath> = BTreeSet::new();
    let mut texts = BTreeMap::new();
    for (module, file) in &files {
        let raw = std::fs::read_to_string(file).expect("read source");
        let (text, test_children) = strip_test_items(&strip_comments_and_strings(&raw));
        for child in test_children {
            let mut path = module.clone();
            path.push(child);
            test_only.insert(path);
        }
        texts.insert(module.clone(), text);
    }
    let mut graph = BTreeMap::new();
    for (module, text) in &texts {
        if test_only.iter().any(|t| module.starts_with(t))
            || module.last().map(String::as_str) == Some("tests")
        {
            continue;
        }
        let mut targets = BTreeSet::new();
        for path in relative_paths(text) {
            let Some(full) = absolute(module, &path) else {
                continue;
            };
            // The longest prefix that is a module file.
            let target = (0..=full.len())
                .rev()
                .map(|n| full[..n].to_vec())
                .find(|p| files.contains_key(p));
            if let Some(target) = target {
                if &target != module {
                    targets.insert(target);
                }
            }
        }
        graph.insert(module.clone(), targets);
    }
    graph
}

/// A parent's children and, for each, the siblings its subtree refers to
/// (with one such reference, from module to module, to show).
type SiblingEdges = BTreeMap<String, BTreeMap<String, (ModPath, ModPath)>>;

/// The circles among siblings: for each parent module, the edges between
/// its children's subtrees, and any strongly connected set of them.
fn sibling_circles(graph: &BTreeMap<ModPath, BTreeSet<ModPath>>) -> Vec<String> {
    // parent -> child -> sibling it refers to -> one reference shown.
    let mut edges: BTreeMap<ModPath, SiblingEdges> = BTreeMap::new();
    for (from, targets) in graph {
        for to in targets {
            let common = from.iter().zip(to).take_while(|(a, b)| a == b).count();
            if common >= from.len() || common >= to.len() {
                continue; // one is the other's ancestor
            }
            let parent = from[..common].to_vec();
            edges
                .entry(parent)
                .or_default()
                .entry(from[common].clone())
                .or_default()
                .entry(to[common].clone())
                .or_insert((from.clone(), to.clone()));
        }
    }
    let mut circles = Vec::new();
    for (parent, level) in &edges {
        for component in strongly_connected(level) {
            if component.len() < 2 {
                continue;
            }
            let mut why = Vec::new();
            for a in &component {
                for (b, (from, to)) in level.get(a).into_iter().flatten() {
                    if component.contains(b) {
                        why.push(format!("{} -> {}", from.join("::"), to.join("::")));
                    }
                }
            }
            circles.push(format!(
                "in `{}`: {{{}}} ({})",
                if parent.is_empty() {
                    "crate".into()
                } else {
                    parent.join("::")
                },
                component.iter().cloned().collect::<Vec<_>>().join(", "),
                why.join("; ")
            ));
        }
    }
    circles
}

/// Tarjan's strongly connected components of a small graph.
fn strongly_connected<V>(edges: &BTreeMap<String, BTreeMap<String, V>>) -> Vec<BTreeSet<String>> {
    let mut nodes: BTreeSet<&String> = edges.keys().collect();
    for targets in edges.values() {
        nodes.extend(targets.keys());
    }
    // Repeated reachability is plenty for a few dozen siblings.
    let reach = |start: &String| -> BTreeSet<String> {
        let mut seen = BTreeSet::new();
        let mut stack = vec![start.clone()];
        while let Some(n) = stack.pop() {
            for next in edges.get(&n).into_iter().flat_map(|t| t.keys()) {
                if seen.insert(next.clone()) {
                    stack.push(next.clone());
                }
            }
        }
        seen
    };
    let reachable: BTreeMap<&String, BTreeSet<String>> =
        nodes.iter().map(|n| (*n, reach(n))).collect();
    let mut done = BTreeSet::new();
    let mut components = Vec::new();
    for n in &nodes {
        if done.contains(*n) {
            continue;
        }
        let component: BTreeSet<String> = reachable[n]
            .iter()
            .filter(|m| reachable.get(m).is_some_and(|r| r.contains(*n)))
            .cloned()
            .chain(std::iter::once((*n).clone()))
            .collect();
        done.extend(component.iter().cloned());
        components.push(component);
    }
    components
}

/// Most lines a function may have without saying why.
const LONG_FUNCTION_LINES: usize = 120;
/// Most lines a file may have without saying why.
const LONG_FILE_LINES: usize = 800;

/// The functions of `text` (comments and strings blanked, tests kept out)
/// with more than `LONG_FUNCTION_LINES` lines: (first line, name, lines).
fn long_functions(text: &str) -> Vec<(usize, String, usize)> {
    let mut found = Vec::new();
    let bytes = text.as_bytes();
    let mut at = 0;
    while let Some(i) = text[at..].find("fn ").map(|i| i + at) {
        at = i + 3;
        // An item, not a word ending in "fn" or a closure type `Fn(`.
        if i > 0 && (bytes[i - 1].is_ascii_alphanumeric() || bytes[i - 1] == b'_') {
            continue;
        }
        let name: String = text[at..]
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        if name.is_empty() {
            continue;
        }
        // The body opens at the first `{` not after a `;` (a declaration).
        let rest = &text[at..];
        let (Some(open), semi) = (rest.find('{'), rest.find(';')) else {
            continue;
        };
        if semi.is_some_and(|s| s < open) {
            continue;
        }
        let Some(close) = matching_brace(rest, open) else {
            continue;
        };
        let first = text[..i].matches('\n').count() + 1;
        let lines = text[i..at + close].matches('\n').count() + 1;
        if lines > LONG_FUNCTION_LINES {
            found.push((first, name, lines));
        }
    }
    found
}

/// The doc comment lines right above line `line` (1-based) of `raw`.
fn doc_above(raw: &str, line: usize) -> String {
    let lines: Vec<&str> = raw.lines().collect();
    let mut doc = Vec::new();
    let mut n = line.saturating_sub(1);
    while n > 0 {
        let l = lines[n - 1].trim();
        if l.starts_with("///") || l.starts_with("#[") {
            doc.push(l);
            n -= 1;
        } else {
            break;
        }
    }
    doc.join(" ")
}

#[test]
fn long_functions_and_files_say_why() {
    let mut unexplained = Vec::new();
    for (name, src) in crate_sources() {
        for file in module_files(&src).values() {
            let raw = std::fs::read_to_string(file).expect("read source");
            let shown = format!(
                "{name}/{}",
                file.strip_prefix(&src).unwrap_or(file).display()
            );
            let header: String = raw.lines().take_while(|l| l.starts_with("//!")).collect();
            if raw.lines().count() > LONG_FILE_LINES && !header.contains("Long") {
                unexplained.push(format!("{shown}: {} lines", raw.lines().count()));
            }
            // Blanked, not removed: line numbers stay those of the file.
            let (text, _) = strip_test_items(&strip_comments_and_strings(&raw));
            for (line, f, lines) in long_functions(&text) {
                if !doc_above(&raw, line).contains("Long") {
                    unexplained.push(format!("{shown}:{line} fn {f}: {lines} lines"));
                }
            }
        }
    }
    assert!(
        unexplained.is_empty(),
        "over {LONG_FUNCTION_LINES} lines (a function) or {LONG_FILE_LINES} (a file) without a \"Long because …\" at the top:\n{}",
        unexplained.join("\n")
    );
}

#[test]
fn no_crate_has_an_import_circle() {
    let mut circles = Vec::new();
    for (name, src) in crate_sources() {
        for circle in sibling_circles(&references(&src)) {
            circles.push(format!("{name}: {circle}"));
        }
    }
    assert!(
        circles.is_empty(),
        "import circles:\n{}",
        circles.join("\n")
    );
}

#[test]
fn the_checker_sees_a_circle_and_a_group() {
    let text = "use crate::a::{b::{C, D}, e};\nfn f() { super::g::h(); }";
    let paths = relative_paths(&strip_comments_and_strings(text));
    let shown: Vec<String> = paths.iter().map(|p| p.join("::")).collect();
    assert_eq!(
        shown,
        [
            "crate::a::b::C",
            "crate::a::b::D",
            "crate::a::e",
            "super::g::h"
        ]
    );
    let (kept, tests) = strip_test_items(
        "fn a() {}\n#[cfg(test)]\nmod tests { use crate::x; }\n#[cfg(test)]\nmod more;",
    );
    assert!(!kept.contains("crate::x"));
    assert_eq!(tests.into_iter().collect::<Vec<_>>(), ["more"]);
    let mut graph = BTreeMap::new();
    let m = |s: &str| s.split("::").map(String::from).collect::<ModPath>();
    graph.insert(m("a::x"), BTreeSet::from([m("b")]));
    graph.insert(m("b"), BTreeSet::from([m("a")]));
    graph.insert(m("a"), BTreeSet::from([m("a::x")]));
    let circles = sibling_circles(&graph);
    assert_eq!(circles.len(), 1, "{circles:?}");
    assert!(circles[0].contains("{a, b}"), "{circles:?}");
}

#[test]
fn the_checker_counts_a_long_function_by_its_lines() {
    let body = |n: usize| "    x();\n".repeat(n);
    let text = format!(
        "trait T {{ fn declared(&self); }}\n/// Long because it is.\nfn long() {{\n{}}}\nfn short() {{\n{}}}\nfn unsaid() {{\n\"{{\";\n{}}}\n",
        body(130),
        body(100),
        body(125)
    );
    let found = long_functions(&strip_comments_and_strings(&text));
    let names: Vec<(&str, usize)> = found.iter().map(|(_, n, l)| (n.as_str(), *l)).collect();
    assert_eq!(names, [("long", 132), ("unsaid", 128)]);
    assert!(doc_above(&text, found[0].0).contains("Long"));
    assert!(!doc_above(&text, found[1].0).contains("Long"));
}
