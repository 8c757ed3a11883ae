//! A line diff of two small texts for the workspace pages' file view: the
//! longest common subsequence of lines, as a unified listing with long
//! unchanged runs folded.

use serde::Serialize;

/// Largest side compared, in bytes (larger files show sizes only).
pub const MAX_TEXT_BYTES: usize = 64 * 1024;
/// Most lines on a side (the table is lines × lines).
pub const MAX_LINES: usize = 2000;
/// Unchanged lines kept around a change; longer runs are folded.
const CONTEXT: usize = 3;

/// One line of a unified listing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Line {
    /// `" "` unchanged, `"-"` only in the old text, `"+"` only in the new,
    /// `"…"` a fold of `text` unchanged lines.
    pub op: &'static str,
    /// The line (without its newline), or the folded count. A changed
    /// line shows what a plain listing would hide: a carriage return
    /// before its newline as [`CARRIAGE_RETURN`], no newline at all (the
    /// text's last line) as [`NO_NEWLINE`].
    pub text: String,
}

/// Shown for the `\r` of a changed line ending in `\r\n`.
pub const CARRIAGE_RETURN: &str = "\u{240d}";
/// Appended to a changed last line that has no newline.
pub const NO_NEWLINE: &str = " \u{2205} no newline at end of file";

/// Why two sides are not compared as text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotText {
    /// A side is larger than [`MAX_TEXT_BYTES`] or [`MAX_LINES`].
    TooLarge,
    /// A side is not UTF-8 or holds a NUL byte.
    Binary,
}

impl NotText {
    /// The reason shown to the page.
    pub fn reason(self) -> &'static str {
        match self {
            NotText::TooLarge => "too_large",
            NotText::Binary => "binary",
        }
    }
}

/// The text of one side, if it may be compared.
pub fn as_text(bytes: &[u8]) -> Result<&str, NotText> {
    if bytes.len() > MAX_TEXT_BYTES {
        return Err(NotText::TooLarge);
    }
    if bytes.contains(&0) {
        return Err(NotText::Binary);
    }
    let text = std::str::from_utf8(bytes).map_err(|_| NotText::Binary)?;
    if text.lines().count() > MAX_LINES {
        return Err(NotText::TooLarge);
    }
    Ok(text)
}

/// The unified listing of `old` → `new`, unchanged runs longer than twice
/// the context folded.
pub fn unified(old: &str, new: &str) -> Vec<Line> {
    // Lines with their endings: a text that only gained a `\r` or lost its
    // last newline differs, and shows where.
    let a: Vec<&str> = old.split_inclusive('\n').collect();
    let b: Vec<&str> = new.split_inclusive('\n').collect();
    let (n, m) = (a.len(), b.len());
    // lcs[i][j]: the longest common subsequence of a[i..] and b[j..].
    let width = m + 1;
    let mut lcs = vec![0u16; (n + 1) * width];
    for i in (0..n).rev() {
        for j in (0..m).rev() {
            lcs[i * width + j] = if a[i] == b[j] {
                lcs[(i + 1) * width + j + 1].saturating_add(1)
            } else {
                lcs[(i + 1) * width + j].max(lcs[i * width + j + 1])
            };
        }
    }
    let mut lines = Vec::with_capacity(n.max(m));
    let (mut i, mut j) = (0, 0);
    while i < n || j < m {
        if i < n && j < m && a[i] == b[j] {
            lines.push((" ", a[i]));
            i += 1;
            j += 1;
        } else if i < n && (j == m || lcs[(i + 1) * width + j] >= lcs[i * width + j + 1]) {
            // Removals before additions, as unified diffs list them.
            lines.push(("-", a[i]));
            i += 1;
        } else {
            lines.push(("+", b[j]));
            j += 1;
        }
    }
    fold(&lines)
}

/// A line as listed: without its ending; a changed one with its ending
/// made visible where it is not a plain `\n`.
fn shown(line: &str, changed: bool) -> String {
    let (body, newline) = match line.strip_suffix('\n') {
        Some(body) => (body, true),
        None => (line, false),
    };
    let carriage = newline && body.ends_with('\r');
    let body = if carriage {
        &body[..body.len() - 1]
    } else {
        body
    };
    if !changed {
        return body.to_string();
    }
    let mut text = body.to_string();
    if carriage {
        text.push_str(CARRIAGE_RETURN);
    }
    if !newline {
        text.push_str(NO_NEWLINE);
    }
    text
}

/// Folds unchanged runs, keeping [`CONTEXT`] lines next to each change.
fn fold(lines: &[(&'static str, &str)]) -> Vec<Line> {
    let mut out = Vec::new();
    let mut k = 0;
    while k < lines.len() {
        if lines[k].0 != " " {
            out.push(Line {
                op: lines[k].0,
                text: shown(lines[k].1, true),
            });
            k += 1;
            continue;
        }
        let start = k;
        while k < lines.len() && lines[k].0 == " " {
            k += 1;
        }
        let keep_before = if start == 0 { 0 } else { CONTEXT };
        let keep_after = if k == lines.len() { 0 } else { CONTEXT };
        let run = k - start;
        if run > keep_before + keep_after {
            let same = |l: &(&'static str, &str)| Line {
                op: " ",
                text: shown(l.1, false),
            };
            out.extend(lines[start..start + keep_before].iter().map(same));
            out.push(Line {
                op: "…",
                text: (run - keep_before - keep_after).to_string(),
            });
            out.extend(lines[k - keep_after..k].iter().map(same));
        } else {
            out.extend(lines[start..k].iter().map(|l| Line {
                op: " ",
                text: shown(l.1, false),
            }));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ops(lines: &[Line]) -> String {
        lines
            .iter()
            .map(|l| format!("{}{}\n", l.op, l.text))
            .collect()
    }

    #[test]
    fn a_changed_line_is_a_removal_and_an_addition() {
        let d = unified("a\nb\nc\n", "a\nB\nc\nd\n");
        assert_eq!(ops(&d), " a\n-b\n+B\n c\n+d\n");
    }

    #[test]
    fn added_and_deleted_files_are_all_one_side() {
        assert_eq!(ops(&unified("", "x\ny\n")), "+x\n+y\n");
        assert_eq!(ops(&unified("x\n", "")), "-x\n");
        assert!(unified("same\n", "same\n")
            .iter()
            .all(|l| l.op != "+" && l.op != "-"));
    }

    #[test]
    fn long_unchanged_runs_are_folded() {
        let old: String = (0..20).map(|i| format!("{i}\n")).collect();
        let new = old.replace("10\n", "ten\n");
        let d = unified(&old, &new);
        assert_eq!(ops(&d), "…7\n 7\n 8\n 9\n-10\n+ten\n 11\n 12\n 13\n…6\n");
    }

    #[test]
    fn line_endings_that_changed_are_shown() {
        // A final newline lost, and one line's ending turned to CRLF.
        let d = unified("a\nhello\n", "a\r\nhello");
        assert_eq!(
            ops(&d),
            format!("-a\n-hello\n+a{CARRIAGE_RETURN}\n+hello{NO_NEWLINE}\n")
        );
        // Unchanged CRLF lines list as plain lines.
        assert_eq!(
            ops(&unified("x\r\n", "x\r\ny\r\n")),
            format!(" x\n+y{CARRIAGE_RETURN}\n")
        );
    }

    #[test]
    fn only_small_utf8_text_is_compared() {
        assert_eq!(as_text(b"hi\n"), Ok("hi\n"));
        assert_eq!(as_text(b"a\0b"), Err(NotText::Binary));
        assert_eq!(as_text(&[0xff, 0xfe]), Err(NotText::Binary));
        assert_eq!(
            as_text(&vec![b'x'; MAX_TEXT_BYTES + 1]),
            Err(NotText::TooLarge)
        );
        assert_eq!(
            as_text("\n".repeat(MAX_LINES + 1).as_bytes()),
            Err(NotText::TooLarge)
        );
    }
}
