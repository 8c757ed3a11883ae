//! The tar layer of an archive: ustar headers (through the `tar` crate's
//! `Header`), a PAX `path` record for names ustar cannot hold, and a strict
//! block-by-block reader that accepts regular entries only.

use std::io::{self, Read, Write};

use tar::{EntryType, Header};

/// A tar block.
pub(super) const BLOCK: usize = 512;
/// Largest PAX extended header read.
const MAX_PAX_BYTES: u64 = 64 << 10;

/// Zero bytes that pad an entry of `size` bytes to a whole block.
pub(super) fn padding(size: u64) -> usize {
    ((BLOCK as u64 - size % BLOCK as u64) % BLOCK as u64) as usize
}

/// A regular-file header as every archive entry has it: mode 0600, owner
/// 0:0, mtime 0.
fn regular(size: u64, kind: EntryType) -> Header {
    let mut h = Header::new_ustar();
    h.set_size(size);
    h.set_mode(0o600);
    h.set_uid(0);
    h.set_gid(0);
    h.set_mtime(0);
    h.set_entry_type(kind);
    h
}

/// Writes the header of a regular entry `name` of `size` bytes; a name
/// that does not fit ustar's fields goes first in a PAX `path` record.
pub(super) fn write_header(out: &mut dyn Write, name: &str, size: u64) -> io::Result<()> {
    let mut h = regular(size, EntryType::Regular);
    if h.set_path(name).is_err() {
        let record = pax_record("path", name);
        let mut x = regular(record.len() as u64, EntryType::XHeader);
        x.set_path("PaxHeaders/path")?;
        x.set_cksum();
        out.write_all(x.as_bytes())?;
        out.write_all(&record)?;
        out.write_all(&[0u8; BLOCK][..padding(record.len() as u64)])?;
        // Readers without PAX support see a stand-in name.
        h.set_path("PaxHeaders/long-name")?;
    }
    h.set_cksum();
    out.write_all(h.as_bytes())
}

/// Writes the end of the archive: two zero blocks.
pub(super) fn write_end(out: &mut dyn Write) -> io::Result<()> {
    out.write_all(&[0u8; 2 * BLOCK])
}

/// `"<len> <key>=<value>\n"`, where `<len>` counts the whole record.
fn pax_record(key: &str, value: &str) -> Vec<u8> {
    let body = format!(" {key}={value}\n");
    let mut len = body.len() + 1;
    while format!("{len}{body}").len() != len {
        len += 1;
    }
    format!("{len}{body}").into_bytes()
}

/// The next regular entry's name and size, or `None` at the end of the
/// archive (a zero block). Anything but a regular file (links, devices,
/// FIFOs, directories, GNU or global extensions) is refused with a message.
pub(super) fn next_entry(input: &mut dyn Read) -> Result<Option<(String, u64)>, String> {
    let mut pax_path: Option<String> = None;
    let mut pax_size: Option<u64> = None;
    let mut block = [0u8; BLOCK];
    loop {
        input
            .read_exact(&mut block)
            .map_err(|e| format!("the tar stream ends early ({e})"))?;
        if block.iter().all(|&b| b == 0) {
            if pax_path.is_some() || pax_size.is_some() {
                return Err("a PAX header is not followed by an entry".into());
            }
            return Ok(None);
        }
        let h = Header::from_byte_slice(&block);
        if h.as_ustar().is_none() {
            return Err("an entry header is not in ustar/PAX format".into());
        }
        let stored = h.cksum().map_err(|_| "an entry header has no checksum")?;
        if stored != checksum(&block) {
            return Err("an entry header's checksum does not match".into());
        }
        let size = h.size().map_err(|_| "an entry header has no valid size")?;
        let kind = h.entry_type();
        if kind == EntryType::XHeader {
            if pax_path.is_some() || pax_size.is_some() {
                return Err("two PAX headers in a row".into());
            }
            if size > MAX_PAX_BYTES {
                return Err("a PAX header is too large".into());
            }
            let mut data = vec![0u8; size as usize];
            input
                .read_exact(&mut data)
                .map_err(|e| format!("the tar stream ends early ({e})"))?;
            skip(input, padding(size))?;
            for (key, value) in parse_pax(&data)? {
                match key.as_str() {
                    "path" => pax_path = Some(value),
                    "size" => {
                        pax_size = Some(
                            value
                                .parse()
                                .map_err(|_| "a PAX size is not a number".to_string())?,
                        )
                    }
                    // Descriptive fields other writers add; an entry's
                    // data does not depend on them.
                    "mtime" | "atime" | "ctime" | "uid" | "gid" | "uname" | "gname" | "comment"
                    | "hdrcharset" => {}
                    other => return Err(format!("unsupported PAX field {other:?}")),
                }
            }
            continue;
        }
        let name = match pax_path.take() {
            Some(p) => p,
            None => String::from_utf8(h.path_bytes().into_owned())
                .map_err(|_| "an entry name is not UTF-8".to_string())?,
        };
        if !kind.is_file() {
            return Err(format!(
                "entry {name:?} is {}; an archive holds regular files only",
                describe(kind)
            ));
        }
        return Ok(Some((name, pax_size.take().unwrap_or(size))));
    }
}

/// Reads and discards `n` bytes.
pub(super) fn skip(input: &mut dyn Read, n: usize) -> Result<(), String> {
    let mut pad = [0u8; BLOCK];
    input
        .read_exact(&mut pad[..n])
        .map_err(|e| format!("the tar stream ends early ({e})"))
}

fn describe(kind: EntryType) -> &'static str {
    match kind {
        EntryType::Symlink => "a symbolic link",
        EntryType::Link => "a hard link",
        EntryType::Char => "a character device",
        EntryType::Block => "a block device",
        EntryType::Directory => "a directory",
        EntryType::Fifo => "a FIFO",
        EntryType::GNULongName | EntryType::GNULongLink => "a GNU long-name extension",
        EntryType::GNUSparse => "a sparse file",
        EntryType::XGlobalHeader => "a PAX global header",
        _ => "not a regular file",
    }
}

/// The header checksum: the sum of its bytes with the checksum field read
/// as spaces.
fn checksum(block: &[u8; BLOCK]) -> u32 {
    block
        .iter()
        .enumerate()
        .map(|(i, &b)| {
            if (148..156).contains(&i) {
                32
            } else {
                b as u32
            }
        })
        .sum()
}

/// `(key, value)` records of a PAX extended header.
fn parse_pax(mut data: &[u8]) -> Result<Vec<(String, String)>, String> {
    let bad = || "a PAX header is malformed".to_string();
    let mut out = Vec::new();
    while !data.is_empty() {
        let sp = data.iter().position(|&b| b == b' ').ok_or_else(bad)?;
        let len: usize = std::str::from_utf8(&data[..sp])
            .ok()
            .and_then(|s| s.parse().ok())
            .ok_or_else(bad)?;
        if len <= sp + 1 || len > data.len() || data[len - 1] != b'\n' {
            return Err(bad());
        }
        let record = std::str::from_utf8(&data[sp + 1..len - 1]).map_err(|_| bad())?;
        let (k, v) = record.split_once('=').ok_or_else(bad)?;
        out.push((k.to_string(), v.to_string()));
        data = &data[len..];
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pax_records_count_their_own_length() {
        for n in [1usize, 80, 95, 96, 97, 990, 995, 4000] {
            let value = "x".repeat(n);
            let r = pax_record("path", &value);
            let parsed = parse_pax(&r).unwrap();
            assert_eq!(parsed, vec![("path".to_string(), value)]);
        }
    }

    #[test]
    fn long_names_round_trip_and_other_kinds_are_refused() {
        let long = format!("files/{}/{}", "d".repeat(150), "f".repeat(120));
        let mut out = Vec::new();
        for (name, size) in [("manifest.json", 3u64), (long.as_str(), 600)] {
            write_header(&mut out, name, size).unwrap();
            out.extend(vec![7u8; size as usize]);
            out.extend(vec![0u8; padding(size)]);
        }
        write_end(&mut out).unwrap();
        let mut r = &out[..];
        assert_eq!(
            next_entry(&mut r).unwrap(),
            Some(("manifest.json".into(), 3))
        );
        skip(&mut r, 3 + padding(3)).unwrap();
        assert_eq!(next_entry(&mut r).unwrap(), Some((long.clone(), 600)));
        let mut data = vec![0u8; 600 + padding(600)];
        r.read_exact(&mut data).unwrap();
        assert_eq!(next_entry(&mut r).unwrap(), None);
        // Python and GNU tar read the same bytes (checked end to end); here,
        // the tar crate's own reader agrees on names and sizes.
        let mut a = tar::Archive::new(&out[..]);
        let names: Vec<String> = a
            .entries()
            .unwrap()
            .map(|e| e.unwrap().path().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, vec!["manifest.json".to_string(), long]);

        for kind in [
            EntryType::Symlink,
            EntryType::Link,
            EntryType::Char,
            EntryType::Block,
            EntryType::Directory,
            EntryType::Fifo,
            EntryType::GNULongName,
        ] {
            let mut h = regular(0, kind);
            h.set_path("files/x").unwrap();
            h.set_cksum();
            let err = next_entry(&mut &h.as_bytes()[..]).unwrap_err();
            assert!(err.contains("regular files only"), "{kind:?}: {err}");
        }
        // A flipped byte breaks the checksum.
        let mut h = regular(1, EntryType::Regular);
        h.set_path("files/x").unwrap();
        h.set_cksum();
        let mut bytes = h.as_bytes().to_vec();
        bytes[0] ^= 1;
        assert!(next_entry(&mut &bytes[..])
            .unwrap_err()
            .contains("checksum"));
    }
}
