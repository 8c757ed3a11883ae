//! Path rules: portable destination names, sensitive-path detection, team
//! names. Pure functions; nothing here touches the disk.

use crate::error::{Result, WsError};

/// Windows device names refused as the stem of any segment, so a workspace
/// copied to Windows never meets a name it cannot create.
const DEVICE_NAMES: &[&str] = &[
    "CON", "PRN", "AUX", "NUL", "COM1", "COM2", "COM3", "COM4", "COM5", "COM6", "COM7", "COM8",
    "COM9", "LPT1", "LPT2", "LPT3", "LPT4", "LPT5", "LPT6", "LPT7", "LPT8", "LPT9",
];

/// Why a single path segment is not portable, or `None` when it is.
pub fn segment_problem(seg: &str) -> Option<&'static str> {
    if seg.is_empty() {
        return Some("empty path segment");
    }
    if seg == "." || seg == ".." {
        return Some("relative segment (. or ..)");
    }
    if seg.ends_with('.') || seg.ends_with(' ') {
        return Some("segment ends with a dot or a space");
    }
    // Bytes suffice: every refused character is ASCII, and UTF-8 never
    // encodes a non-ASCII character with ASCII bytes.
    if seg.bytes().any(|b| b"<>:\"|?*".contains(&b)) {
        return Some("segment contains one of < > : \" | ? *");
    }
    if seg.bytes().any(|b| b < 0x20) {
        return Some("segment contains a control character");
    }
    let stem = seg.split('.').next().unwrap_or(seg);
    if DEVICE_NAMES.iter().any(|d| d.eq_ignore_ascii_case(stem)) {
        return Some("segment is a Windows device name");
    }
    None
}

fn bad(path: &str, reason: impl Into<String>) -> WsError {
    WsError::InvalidPath {
        path: path.to_string(),
        reason: reason.into(),
    }
}

/// Validates a destination (or working directory) relative to a new root and
/// returns its clean slash form; `""` means the root itself.
pub fn clean_destination(dest: &str) -> Result<String> {
    if dest.is_empty() || dest == "." {
        return Ok(String::new());
    }
    if dest.starts_with('/') {
        return Err(bad(dest, "absolute destinations are refused"));
    }
    if dest.contains('\\') {
        return Err(bad(dest, "backslashes are refused"));
    }
    let mut segs = Vec::new();
    for seg in dest.split('/') {
        match seg {
            "" | "." => continue,
            ".." => return Err(bad(dest, "parent traversal (..) is refused")),
            s => segs.push(s),
        }
    }
    if let Some(first) = segs.first() {
        if first.eq_ignore_ascii_case(".stow") {
            return Err(bad(dest, ".stow is reserved"));
        }
    }
    for seg in &segs {
        if let Some(reason) = segment_problem(seg) {
            return Err(bad(dest, reason));
        }
    }
    Ok(segs.join("/"))
}

/// Joins a clean relative directory and a relative name with `/`.
pub fn join_rel(dir: &str, name: &str) -> String {
    match (dir.is_empty(), name.is_empty()) {
        (true, _) => name.to_string(),
        (_, true) => dir.to_string(),
        _ => format!("{dir}/{name}"),
    }
}

/// The one rule for the names a workspace tree keeps to itself: `.git` at
/// any depth and `.stow` at the root (`depth` 0), compared without case,
/// are never captured, restored, listed as objects or sent anywhere.
/// Returns why `name` at `depth` is reserved, or `None`.
pub fn reserved_segment(depth: usize, name: &str) -> Option<&'static str> {
    if name.eq_ignore_ascii_case(".git") {
        Some(".git is never captured")
    } else if depth == 0 && name.eq_ignore_ascii_case(".stow") {
        Some(".stow is reserved")
    } else {
        None
    }
}

/// Whether a slash path (a file path or an object key) has a reserved
/// segment ([`reserved_segment`]).
pub fn is_reserved_path(path: &str) -> bool {
    path.split('/')
        .enumerate()
        .any(|(depth, seg)| reserved_segment(depth, seg).is_some())
}

/// Validates a checkpoint path: clean slash form, portable segments, no
/// reserved segment ([`reserved_segment`]).
pub fn check_checkpoint_path(path: &str) -> Result<()> {
    if path.is_empty() || path.starts_with('/') || path.contains('\\') {
        return Err(bad(path, "not a clean relative slash path"));
    }
    for (i, seg) in path.split('/').enumerate() {
        if let Some(reason) = segment_problem(seg) {
            return Err(bad(path, reason));
        }
        if let Some(reason) = reserved_segment(i, seg) {
            return Err(bad(path, reason));
        }
    }
    Ok(())
}

/// [`check_checkpoint_path`] for a path whose parent directory is known to
/// pass it: only the last segment is checked (same errors, same order).
pub fn check_checkpoint_leaf(path: &str) -> Result<()> {
    let (parent, leaf) = match path.rsplit_once('/') {
        Some((parent, leaf)) => (Some(parent), leaf),
        None => (None, path),
    };
    if path.is_empty() || leaf.contains('\\') || parent.is_some_and(str::is_empty) {
        return Err(bad(path, "not a clean relative slash path"));
    }
    if let Some(reason) = segment_problem(leaf) {
        return Err(bad(path, reason));
    }
    if let Some(reason) = reserved_segment(usize::from(parent.is_some()), leaf) {
        return Err(bad(path, reason));
    }
    Ok(())
}

/// File names that are credentials wherever they appear (compared without
/// regard to ASCII case).
const SENSITIVE_NAMES: &[&str] = &[
    ".env",
    ".npmrc",
    ".netrc",
    "credentials",
    "credentials.json",
    "service-account.json",
    "id_rsa",
    "id_ed25519",
];

/// Whether a slash-relative path looks like a credential (filename check
/// only; this is not secret scanning).
pub fn is_sensitive(rel: &str) -> bool {
    // Runs for every file of every scan, so it compares in place (ASCII
    // case-insensitive, `\\` read as `/`) instead of building a lowered copy.
    let base = rel.rsplit(['/', '\\']).next().unwrap_or(rel);
    if SENSITIVE_NAMES.iter().any(|e| e.eq_ignore_ascii_case(base))
        || [".env.", "id_rsa.", "id_ed25519."]
            .iter()
            .any(|pre| starts_with_ci(base, pre))
        || [".pem", ".key", ".p12", ".pfx"]
            .iter()
            .any(|ext| ends_with_ci(base, ext))
    {
        return true;
    }
    [
        "/.aws/credentials",
        "/.ssh/",
        "/.config/gcloud/credentials.db",
    ]
    .iter()
    .any(|needle| contains_slashed_ci(rel, needle))
}

fn starts_with_ci(s: &str, prefix: &str) -> bool {
    s.len() >= prefix.len() && s.as_bytes()[..prefix.len()].eq_ignore_ascii_case(prefix.as_bytes())
}

fn ends_with_ci(s: &str, suffix: &str) -> bool {
    s.len() >= suffix.len()
        && s.as_bytes()[s.len() - suffix.len()..].eq_ignore_ascii_case(suffix.as_bytes())
}

/// Whether `/` + `path` contains `needle` (which starts with `/`), ignoring
/// ASCII case and reading `\\` as `/`.
fn contains_slashed_ci(path: &str, needle: &str) -> bool {
    let norm = |b: u8| {
        if b == b'\\' {
            b'/'
        } else {
            b.to_ascii_lowercase()
        }
    };
    let n = needle.as_bytes();
    let p = path.as_bytes();
    // Position 0 of the virtual haystack is the leading '/'.
    let at = |i: usize| if i == 0 { b'/' } else { norm(p[i - 1]) };
    let len = p.len() + 1;
    len >= n.len()
        && (0..=len - n.len()).any(|start| n.iter().enumerate().all(|(k, &c)| at(start + k) == c))
}

/// Validates a team name: 1–64 of `[A-Za-z0-9._-]`, not starting with `.`.
pub fn check_team(team: &str) -> Result<()> {
    let ok = !team.is_empty()
        && team.len() <= 64
        && !team.starts_with('.')
        && team
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || b == b'-');
    if ok {
        Ok(())
    } else {
        Err(WsError::InvalidRequest(format!(
            "invalid team name {team:?}: use 1-64 characters of [A-Za-z0-9._-], not starting with ."
        )))
    }
}

/// Validates a workspace ID: 1–128 of `[A-Za-z0-9_-]`.
pub fn check_workspace_id(id: &str) -> Result<()> {
    let ok = !id.is_empty()
        && id.len() <= 128
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if ok {
        Ok(())
    } else {
        Err(WsError::InvalidRequest(format!(
            "invalid workspace id {id:?}"
        )))
    }
}

/// Validates a checkpoint ID: `cp_` + 24 lowercase hex.
pub fn check_checkpoint_id(id: &str) -> Result<()> {
    let ok = id.len() == 27
        && id.starts_with("cp_")
        && id[3..]
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    if ok {
        Ok(())
    } else {
        Err(WsError::InvalidRequest(format!(
            "invalid checkpoint id {id:?}"
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn portable_segments() {
        for bad in [
            "CON", "nul.txt", "com3.log", "Lpt9", "a:b", "a?", "x.", "x ", "a\u{1}", "<", "|",
        ] {
            assert!(segment_problem(bad).is_some(), "{bad}");
        }
        for good in [
            "a", "console", "con_", "COM10", ".hidden", "a b", "file.txt",
        ] {
            assert!(segment_problem(good).is_none(), "{good}");
        }
    }

    #[test]
    fn destinations() {
        assert_eq!(clean_destination("").unwrap(), "");
        assert_eq!(clean_destination("./a//b/").unwrap(), "a/b");
        for bad in [
            "/abs", "a\\b", "../x", "a/../b", ".stow", ".STOW/x", "a/nul", "a/b:c",
        ] {
            assert!(clean_destination(bad).is_err(), "{bad}");
        }
        assert_eq!(clean_destination("a/.stow").unwrap(), "a/.stow");
    }

    #[test]
    fn sensitive() {
        for s in [
            ".env",
            "a/.env.local",
            ".npmrc",
            "x/.netrc",
            "credentials",
            "k/server.PEM",
            "id_rsa",
            "id_rsa.pub",
            "home/.ssh/config",
            ".aws/credentials",
            "a/.config/gcloud/credentials.db",
            "tls.key",
            "c.p12",
            "c.pfx",
            "service-account.json",
        ] {
            assert!(is_sensitive(s), "{s}");
        }
        for s in ["env", "src/main.rs", "keys/readme.md", "environment.txt"] {
            assert!(!is_sensitive(s), "{s}");
        }
    }

    /// The straightforward form of the rule (lowered copy, `\\` replaced),
    /// against which the in-place comparison is checked.
    fn is_sensitive_reference(rel: &str) -> bool {
        let p = rel.replace('\\', "/").to_ascii_lowercase();
        let base = p.rsplit('/').next().unwrap_or(&p);
        SENSITIVE_NAMES.contains(&base)
            || base.starts_with(".env.")
            || base.starts_with("id_rsa.")
            || base.starts_with("id_ed25519.")
            || [".pem", ".key", ".p12", ".pfx"]
                .iter()
                .any(|e| base.ends_with(e))
            || [
                "/.aws/credentials",
                "/.ssh/",
                "/.config/gcloud/credentials.db",
            ]
            .iter()
            .any(|n| format!("/{p}").contains(n))
    }

    #[test]
    fn sensitive_matches_reference_on_generated_paths() {
        // Pieces that build near-misses of every rule, mixed in case and
        // separator; a fixed-seed generator keeps the test reproducible.
        let pieces = [
            "/",
            "\\",
            ".",
            "SSH",
            "ssh",
            ".ssh",
            ".Aws",
            "credentials",
            "CREDENTIALS.db",
            ".config",
            "gcloud",
            "env",
            ".ENV",
            "id_rsa",
            "ID_ED25519",
            ".pem",
            "KEY",
            ".p12",
            ".PFX",
            "x",
            "é",
            "npmrc",
            ".netrc",
            "service-account.json",
            "json",
        ];
        let mut state = 0x5704_b3e4_c4a1_2026u64;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for _ in 0..50_000 {
            let n = 1 + next() % 6;
            let path: String = (0..n)
                .map(|_| pieces[(next() % pieces.len() as u64) as usize])
                .collect();
            assert_eq!(
                is_sensitive(&path),
                is_sensitive_reference(&path),
                "{path:?}"
            );
        }
        for s in ["A\\.SSH\\id", "x/.Aws/Credentials", "", "/", "\\.ssh\\"] {
            assert_eq!(is_sensitive(s), is_sensitive_reference(s), "{s:?}");
        }
        assert!(is_sensitive(".SSH/known_hosts"));
        assert!(!is_sensitive("x.ssh/known_hosts"));
    }

    #[test]
    fn leaf_check_agrees_with_whole_path_check_under_a_valid_parent() {
        let dirs = ["", "a", "a/b", "src/.github", "x/.stow"];
        let leaves = [
            "f.txt",
            ".git",
            ".GIT",
            ".stow",
            "nul",
            "Com1.txt",
            "a:b",
            "tab\there",
            "end.",
            "end ",
            "",
            "..",
            ".",
            "back\\slash",
            "ok-é",
        ];
        for d in dirs {
            if !d.is_empty() {
                check_checkpoint_path(d).unwrap();
            }
            for l in leaves {
                let path = if d.is_empty() {
                    l.to_string()
                } else {
                    format!("{d}/{l}")
                };
                let whole = check_checkpoint_path(&path).map_err(|e| e.to_string());
                let leaf = check_checkpoint_leaf(&path).map_err(|e| e.to_string());
                assert_eq!(leaf, whole, "{path:?}");
            }
        }
    }

    #[test]
    fn ids_and_teams() {
        assert!(check_team("platform").is_ok());
        for bad in ["", ".", "..", ".x", "a/b", &"x".repeat(65)] {
            assert!(check_team(bad).is_err(), "{bad}");
        }
        assert!(check_checkpoint_id("cp_0123456789abcdef01234567").is_ok());
        assert!(check_checkpoint_id("cp_0123456789ABCDEF01234567").is_err());
        assert!(check_workspace_id("ws_00ff").is_ok());
        assert!(check_workspace_id("../x").is_err());
    }
}
