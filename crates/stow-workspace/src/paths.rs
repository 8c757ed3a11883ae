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
    if seg.chars().any(|c| "<>:\"|?*".contains(c)) {
        return Some("segment contains one of < > : \" | ? *");
    }
    if seg.chars().any(|c| (c as u32) < 0x20) {
        return Some("segment contains a control character");
    }
    let stem = seg.split('.').next().unwrap_or(seg).to_ascii_uppercase();
    if DEVICE_NAMES.contains(&stem.as_str()) {
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

/// Validates a checkpoint path: clean slash form, portable segments, no
/// `.git` segment, no leading `.stow`.
pub fn check_checkpoint_path(path: &str) -> Result<()> {
    if path.is_empty() || path.starts_with('/') || path.contains('\\') {
        return Err(bad(path, "not a clean relative slash path"));
    }
    for (i, seg) in path.split('/').enumerate() {
        if let Some(reason) = segment_problem(seg) {
            return Err(bad(path, reason));
        }
        if seg.eq_ignore_ascii_case(".git") {
            return Err(bad(path, ".git is never captured"));
        }
        if i == 0 && seg.eq_ignore_ascii_case(".stow") {
            return Err(bad(path, ".stow is reserved"));
        }
    }
    Ok(())
}

/// Whether a slash-relative path looks like a credential (filename check
/// only; this is not secret scanning).
pub fn is_sensitive(rel: &str) -> bool {
    let p = rel.replace('\\', "/").to_ascii_lowercase();
    let base = p.rsplit('/').next().unwrap_or(&p);
    let exact = [
        ".env",
        ".npmrc",
        ".netrc",
        "credentials",
        "credentials.json",
        "service-account.json",
        "id_rsa",
        "id_ed25519",
    ];
    if exact.contains(&base)
        || base.starts_with(".env.")
        || base.starts_with("id_rsa.")
        || base.starts_with("id_ed25519.")
    {
        return true;
    }
    if [".pem", ".key", ".p12", ".pfx"]
        .iter()
        .any(|ext| base.ends_with(ext))
    {
        return true;
    }
    let slashed = format!("/{p}");
    [
        "/.aws/credentials",
        "/.ssh/",
        "/.config/gcloud/credentials.db",
    ]
    .iter()
    .any(|needle| slashed.contains(needle))
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
