//! A workspace's history: which checkpoints it has, newest last, and its
//! **head** (the checkpoint its tree last matched), so `workspace log` and
//! a capture's default parent never read every checkpoint's summary.
//!
//! One append-only file per workspace, `R/.stow/history/<ws>.jsonl`, one
//! JSON line each:
//!
//! - `{"checkpoint": <summary>}`: a checkpoint of the workspace was
//!   published; one of the tree's own (`capture`, `rewind`) moves the head;
//! - `{"head": "<cp>"}`: the head moved without a new checkpoint (restore,
//!   adopt, rewind).
//!
//! Crash rule: the line is appended and made durable **before** the
//! checkpoint is renamed into place (`publish`), so the history never
//! misses a published checkpoint. A line whose checkpoint is not there (a
//! capture killed before its rename, a deleted checkpoint) is skipped when
//! read; for an ID listed twice (a keyed capture retried after such a
//! kill) the last line wins. A torn last line (a kill mid-append) is
//! skipped, and the next append starts on a fresh line. A workspace whose
//! file is missing (made before histories existed) gets one built from
//! its summaries, oldest first, on first use.

use std::collections::HashMap;
use std::fs::{self, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::error::{Result, WsError};
use crate::format::{summaries, Origin, Summary};
use crate::fsutil::{atomic_write, create_private_dir};
use crate::layout::{checkpoints_dir, state};
use crate::paths::check_workspace_id;
use crate::registry::Registry;

/// One line of a history file.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Line {
    Checkpoint(Summary),
    Head(String),
}

impl Line {
    /// The head this line moves to, if it moves it.
    fn head(&self) -> Option<&str> {
        match self {
            Line::Checkpoint(s) if s.origin.is_none_or(Origin::is_of_the_tree) => Some(&s.id),
            Line::Checkpoint(_) => None,
            Line::Head(id) => Some(id),
        }
    }
}

fn history_path(registry: &Registry, ws: &str) -> PathBuf {
    state(registry).join("history").join(format!("{ws}.jsonl"))
}

/// The history file of `ws`, built from its summaries when missing. The
/// caller holds the registry lock (every writer does).
fn ensure(registry: &Registry, ws: &str) -> Result<PathBuf> {
    check_workspace_id(ws)?;
    let path = history_path(registry, ws);
    if path.exists() {
        return Ok(path);
    }
    create_private_dir(path.parent().unwrap_or(&state(registry)))?;
    let mut bytes = Vec::new();
    for s in from_summaries(registry, ws)? {
        encode_line(&Line::Checkpoint(s), &mut bytes)?;
    }
    atomic_write(&path, &bytes, 0o600)?;
    Ok(path)
}

/// The checkpoints of `ws`, oldest first, from their summaries (for a
/// workspace whose history file is missing).
fn from_summaries(registry: &Registry, ws: &str) -> Result<Vec<Summary>> {
    let mut mine: Vec<Summary> = summaries(registry)?
        .into_iter()
        .filter(|s| s.workspace_id == ws)
        .collect();
    mine.sort_by(|a, b| a.created.cmp(&b.created).then_with(|| a.id.cmp(&b.id)));
    Ok(mine)
}

fn encode_line(line: &Line, out: &mut Vec<u8>) -> Result<()> {
    serde_json::to_writer(&mut *out, line)
        .map_err(|e| WsError::InvalidRequest(format!("encode a history line: {e}")))?;
    out.push(b'\n');
    Ok(())
}

/// Appends `line` to the history of `ws` and makes it durable.
fn append(registry: &Registry, ws: &str, line: &Line) -> Result<()> {
    let path = ensure(registry, ws)?;
    let mut f = OpenOptions::new()
        .append(true)
        .read(true)
        .custom_flags(libc::O_CLOEXEC)
        .open(&path)
        .map_err(|e| WsError::io_at("open history", &path, e))?;
    let len = f
        .metadata()
        .map_err(|e| WsError::io_at("stat history", &path, e))?
        .len();
    let mut bytes = Vec::new();
    if len > 0 {
        // A kill mid-append leaves a torn last line: start a fresh one.
        let mut last = [0u8; 1];
        f.read_exact_at(&mut last, len - 1)
            .map_err(|e| WsError::io_at("read history", &path, e))?;
        if last[0] != b'\n' {
            bytes.push(b'\n');
        }
    }
    encode_line(line, &mut bytes)?;
    f.write_all(&bytes)
        .and_then(|()| f.sync_data())
        .map_err(|e| WsError::io_at("append history", &path, e))
}

/// Records that `summary`'s checkpoint is being published (the one
/// publication path calls this before the rename that makes it visible).
pub(crate) fn record_published(registry: &Registry, summary: &Summary) -> Result<()> {
    append(
        registry,
        &summary.workspace_id,
        &Line::Checkpoint(summary.clone()),
    )
}

/// Moves the head of `ws` to checkpoint `id` (restore, adopt, rewind).
/// The caller holds the registry lock.
pub fn set_head(registry: &Registry, ws: &str, id: &str) -> Result<()> {
    append(registry, ws, &Line::Head(id.to_string()))
}

/// Forgets the history of `ws` (the workspace is gone).
pub fn forget(registry: &Registry, ws: &str) {
    let _ = fs::remove_file(history_path(registry, ws));
}

/// The lines of a history file's text that parse (a torn or damaged line
/// is skipped).
fn parse(text: &[u8]) -> Vec<Line> {
    text.split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .filter_map(|l| serde_json::from_slice(l).ok())
        .collect()
}

/// The bytes read from a history file's end to find its head; past them
/// the whole file is read.
const TAIL_BYTES: u64 = 64 << 10;

/// The head of `ws`: the checkpoint its tree last matched, if any. Reads
/// only the file's tail when the head was moved there; writes nothing (a
/// capture asks while it holds the registry lock).
pub fn head(registry: &Registry, ws: &str) -> Result<Option<String>> {
    let path = history_path(registry, ws);
    let mut f = match fs::File::open(&path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let lines: Vec<Line> = from_summaries(registry, ws)?
                .into_iter()
                .map(Line::Checkpoint)
                .collect();
            return Ok(lines
                .iter()
                .rev()
                .find_map(|l| l.head().map(str::to_string)));
        }
        Err(e) => return Err(WsError::io_at("open history", &path, e)),
    };
    let len = f
        .metadata()
        .map_err(|e| WsError::io_at("stat history", &path, e))?
        .len();
    let start = len.saturating_sub(TAIL_BYTES);
    let mut tail = Vec::new();
    f.seek(SeekFrom::Start(start))
        .and_then(|_| f.read_to_end(&mut tail))
        .map_err(|e| WsError::io_at("read history", &path, e))?;
    // The first line of a partial tail may be cut: skip it.
    let from = if start > 0 {
        tail.iter()
            .position(|b| *b == b'\n')
            .map_or(tail.len(), |i| i + 1)
    } else {
        0
    };
    // A line whose checkpoint is not there (a capture killed between the
    // line and its publication) moves no head.
    let dir = checkpoints_dir(registry);
    let found = parse(&tail[from..])
        .iter()
        .rev()
        .filter_map(Line::head)
        .find(|h| dir.join(h).is_dir())
        .map(str::to_string);
    if found.is_some() || start == 0 {
        return Ok(found);
    }
    Ok(read_file(registry, ws)?.head)
}

/// A history as read: the checkpoints that are there, oldest first, and
/// the head.
struct History {
    entries: Vec<Summary>,
    head: Option<String>,
}

fn build_and_read(registry: &Registry, ws: &str) -> Result<History> {
    // Building writes the file: only under the registry lock.
    let _lock = registry.lock()?;
    ensure(registry, ws)?;
    read_file(registry, ws)
}

fn read(registry: &Registry, ws: &str) -> Result<History> {
    if history_path(registry, ws).exists() {
        read_file(registry, ws)
    } else {
        build_and_read(registry, ws)
    }
}

fn read_file(registry: &Registry, ws: &str) -> Result<History> {
    let path = history_path(registry, ws);
    let text = fs::read(&path).map_err(|e| WsError::io_at("read history", &path, e))?;
    let dir = checkpoints_dir(registry);
    let mut head = None;
    let mut entries: Vec<Summary> = Vec::new();
    let mut at: HashMap<String, usize> = HashMap::new();
    for line in parse(&text) {
        if let Some(h) = line.head().filter(|h| dir.join(h).is_dir()) {
            head = Some(h.to_string());
        }
        if let Line::Checkpoint(s) = line {
            // The last line of an ID wins, in its place.
            if let Some(i) = at.remove(&s.id) {
                entries[i].id.clear();
            }
            at.insert(s.id.clone(), entries.len());
            entries.push(s);
        }
    }
    entries.retain(|s| !s.id.is_empty() && dir.join(&s.id).is_dir());
    Ok(History { entries, head })
}

/// One checkpoint as `workspace log` lists it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct LogEntry {
    pub checkpoint_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_id: Option<String>,
    pub created: String,
    pub files: u64,
    pub bytes: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    pub origin: Origin,
    /// Whether this is the workspace's head.
    pub head: bool,
}

/// A page of a workspace's log, newest first.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LogPage {
    pub version: u32,
    pub workspace_id: String,
    /// The checkpoint the tree last matched.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub head: Option<String>,
    pub checkpoints: Vec<LogEntry>,
    /// Pass back as `cursor` for the next page; absent on the last.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

/// Largest page of a log.
pub const MAX_LOG_LIMIT: usize = 1000;

/// The checkpoints of `ws`, newest first: at most `limit` (1..=1000) after
/// `cursor` (from an earlier page of the same workspace's log).
pub fn log(registry: &Registry, ws: &str, limit: usize, cursor: Option<&str>) -> Result<LogPage> {
    check_workspace_id(ws)?;
    registry.get(ws)?;
    if limit == 0 || limit > MAX_LOG_LIMIT {
        return Err(WsError::InvalidRequest(format!(
            "limit must be 1 to {MAX_LOG_LIMIT}"
        )));
    }
    let after = cursor.map(|c| decode_cursor(c, ws)).transpose()?;
    let history = read(registry, ws)?;
    let newest_first = history.entries.iter().rev();
    let skip = match &after {
        None => 0,
        Some(id) => {
            let i = history
                .entries
                .iter()
                .rev()
                .position(|s| &s.id == id)
                .ok_or_else(|| {
                    WsError::InvalidRequest(format!(
                        "cursor names checkpoint {id}, which is no longer in the log; start again"
                    ))
                })?;
            i + 1
        }
    };
    let page: Vec<&Summary> = newest_first.skip(skip).take(limit + 1).collect();
    let more = page.len() > limit;
    let checkpoints: Vec<LogEntry> = page
        .into_iter()
        .take(limit)
        .map(|s| LogEntry {
            checkpoint_id: s.id.clone(),
            parent_id: s.parent_id.clone(),
            created: s.created.clone(),
            files: s.files,
            bytes: s.bytes,
            message: s.message.clone(),
            origin: s.origin.unwrap_or(Origin::Capture),
            head: history.head.as_deref() == Some(s.id.as_str()),
        })
        .collect();
    let next_cursor = more
        .then(|| {
            checkpoints
                .last()
                .map(|e| encode_cursor(ws, &e.checkpoint_id))
        })
        .flatten();
    Ok(LogPage {
        version: 1,
        workspace_id: ws.to_string(),
        head: history.head,
        checkpoints,
        next_cursor,
    })
}

const CURSOR_PREFIX: &str = "log1:";

/// An opaque cursor bound to the workspace: the last checkpoint listed.
fn encode_cursor(ws: &str, last: &str) -> String {
    crate::cursor::encode(&format!("{CURSOR_PREFIX}{ws}:{last}"))
}

fn decode_cursor(cursor: &str, ws: &str) -> Result<String> {
    let bad = || WsError::InvalidRequest("invalid cursor (not from this workspace's log)".into());
    let rest = crate::cursor::decode(cursor, CURSOR_PREFIX, 512).ok_or_else(bad)?;
    let (owner, last) = rest.split_once(':').ok_or_else(bad)?;
    if owner != ws || crate::paths::check_checkpoint_id(last).is_err() {
        return Err(bad());
    }
    Ok(last.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn summary(id: &str, origin: Option<Origin>) -> Summary {
        Summary {
            version: 1,
            id: id.into(),
            workspace_id: "ws_0000000000000001".into(),
            parent_id: None,
            created: "2026-12-02T00:00:00Z".into(),
            files: 1,
            bytes: 1,
            message: None,
            origin,
        }
    }

    #[test]
    fn the_head_follows_captures_and_head_lines_not_imports() {
        let lines = [
            Line::Checkpoint(summary("cp_a", Some(Origin::Capture))),
            Line::Checkpoint(summary("cp_b", Some(Origin::Import))),
        ];
        assert_eq!(lines.iter().rev().find_map(Line::head), Some("cp_a"));
        assert_eq!(Line::Head("cp_b".into()).head(), Some("cp_b"));
        // A summary from before origins were recorded is a capture.
        assert_eq!(Line::Checkpoint(summary("cp_c", None)).head(), Some("cp_c"));
    }

    #[test]
    fn a_line_whose_checkpoint_was_never_published_moves_no_head() {
        let tmp = tempfile::tempdir().unwrap();
        let registry = Registry::at(tmp.path(), None).unwrap();
        registry.ensure().unwrap();
        let ws = "ws_0000000000000001";
        let published = summary("cp_000000000000000000000001", Some(Origin::Capture));
        let dir = checkpoints_dir(&registry).join(&published.id);
        fs::create_dir_all(&dir).unwrap();
        fs::write(
            dir.join("summary.json"),
            serde_json::to_vec(&published).unwrap(),
        )
        .unwrap();
        record_published(&registry, &published).unwrap();
        // A capture killed after its line, before its rename.
        record_published(
            &registry,
            &summary("cp_000000000000000000000002", Some(Origin::Capture)),
        )
        .unwrap();
        assert_eq!(
            head(&registry, ws).unwrap().as_deref(),
            Some(published.id.as_str())
        );
        assert_eq!(
            read(&registry, ws).unwrap().head.as_deref(),
            Some(published.id.as_str())
        );
        // Nor does a head line naming a checkpoint that is not there.
        set_head(&registry, ws, "cp_000000000000000000000003").unwrap();
        assert_eq!(
            head(&registry, ws).unwrap().as_deref(),
            Some(published.id.as_str())
        );
    }

    #[test]
    fn torn_and_damaged_lines_are_skipped() {
        let mut text = Vec::new();
        encode_line(&Line::Head("cp_a".into()), &mut text).unwrap();
        text.extend_from_slice(b"{\"head\": \"cp_to");
        text.push(b'\n');
        encode_line(&Line::Head("cp_b".into()), &mut text).unwrap();
        text.extend_from_slice(b"{\"checkpoint\": {\"id\"");
        let lines = parse(&text);
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[1].head(), Some("cp_b"));
    }

    #[test]
    fn cursors_are_bound_to_their_workspace() {
        let c = encode_cursor("ws_0000000000000001", "cp_0123456789abcdef01234567");
        assert_eq!(
            decode_cursor(&c, "ws_0000000000000001").unwrap(),
            "cp_0123456789abcdef01234567"
        );
        assert!(decode_cursor(&c, "ws_0000000000000002").is_err());
        assert!(decode_cursor("zz", "ws_0000000000000001").is_err());
        assert!(decode_cursor(
            &crate::fsutil::hex(b"log1:ws_0000000000000001:../x"),
            "ws_0000000000000001"
        )
        .is_err());
    }
}
