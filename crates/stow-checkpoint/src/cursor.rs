//! Opaque paging cursors (`workspace log`, `workspace status`): text with
//! a kind prefix, hex-encoded, so a client passes it back unread. Each
//! caller binds its own fields (workspace, checkpoint, last entry) after
//! the prefix and checks them on the way back.

use crate::fsutil::hex;

/// The cursor for `text` (which starts with its kind's prefix).
pub(crate) fn encode(text: &str) -> String {
    hex(text.as_bytes())
}

/// The text of `cursor` after `prefix`; `None` when it is not hex of
/// UTF-8 text starting with `prefix`, or longer than `max_len`.
pub(crate) fn decode(cursor: &str, prefix: &str, max_len: usize) -> Option<String> {
    if !cursor.len().is_multiple_of(2) || cursor.len() > max_len {
        return None;
    }
    let bytes: Option<Vec<u8>> = (0..cursor.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(cursor.get(i..i + 2)?, 16).ok())
        .collect();
    let text = String::from_utf8(bytes?).ok()?;
    text.strip_prefix(prefix).map(str::to_string)
}

#[cfg(test)]
mod tests {
    #[test]
    fn cursors_round_trip_and_refuse_what_is_not_theirs() {
        let c = super::encode("k1:ws:cp");
        assert_eq!(super::decode(&c, "k1:", 100).as_deref(), Some("ws:cp"));
        assert_eq!(super::decode(&c, "k2:", 100), None);
        assert_eq!(super::decode(&c, "k1:", 4), None);
        assert_eq!(super::decode("zz", "", 100), None);
        assert_eq!(super::decode("abc", "", 100), None);
        assert_eq!(super::decode("ff", "", 100), None);
    }
}
