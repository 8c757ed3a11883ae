//! Listing: an index range scan in key byte order, skipping over whole
//! common prefixes instead of reading every key beneath them.

use rusqlite::{params, Connection};

use crate::error::{Result, StoreError};
use crate::model::{ListPage, ListQuery, ObjectSummary};

const BATCH: i64 = 1000;

/// The smallest byte string greater than every string that starts with
/// `prefix`, or `None` when there is none (empty or all `0xff`).
pub(crate) fn successor(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut s = prefix.to_vec();
    while let Some(last) = s.pop() {
        if last < 0xff {
            s.push(last + 1);
            return Some(s);
        }
    }
    None
}

/// Where the scan resumes: at a key (inclusive) or after it (exclusive).
enum Lower {
    From(Vec<u8>),
    After(Vec<u8>),
}

pub(crate) fn list(conn: &Connection, bucket: i64, q: &ListQuery) -> Result<ListPage> {
    let mut page = ListPage::default();
    if q.max_keys == 0 {
        return Ok(page);
    }
    let prefix = q.prefix.as_bytes();
    let upper = successor(prefix);
    let delim = q.delimiter.as_deref().map(str::as_bytes);
    let after = q.start_after.as_deref().map(str::as_bytes).unwrap_or(b"");
    let mut lower = if after >= prefix {
        Lower::After(after.to_vec())
    } else {
        Lower::From(prefix.to_vec())
    };
    let mut from_st = conn.prepare_cached(
        "SELECT key, size, etag, modified_ns FROM objects
         WHERE bucket = ?1 AND key >= ?2 AND (?3 IS NULL OR key < ?3) ORDER BY key LIMIT ?4",
    )?;
    let mut after_st = conn.prepare_cached(
        "SELECT key, size, etag, modified_ns FROM objects
         WHERE bucket = ?1 AND key > ?2 AND (?3 IS NULL OR key < ?3) ORDER BY key LIMIT ?4",
    )?;
    let full = |p: &ListPage| p.objects.len() + p.common_prefixes.len() >= q.max_keys;
    'scan: loop {
        let (st, bound) = match &lower {
            Lower::From(k) => (&mut from_st, k),
            Lower::After(k) => (&mut after_st, k),
        };
        let mut rows = st.query(params![bucket, bound, upper, BATCH])?;
        let mut seen = 0i64;
        let mut next_lower = None;
        while let Some(row) = rows.next()? {
            seen += 1;
            let key: Vec<u8> = row.get(0)?;
            let rolled = delim.and_then(|d| {
                let rest = &key[prefix.len()..];
                find(rest, d).map(|i| key[..prefix.len() + i + d.len()].to_vec())
            });
            if let Some(cp) = rolled {
                // Everything under `cp` collapses into one entry; resume past it.
                let resume = successor(&cp);
                let fresh = cp.as_slice() > after;
                if fresh {
                    if full(&page) {
                        page.is_truncated = true;
                        break 'scan;
                    }
                    page.common_prefixes.push(utf8(cp)?);
                }
                next_lower = Some(match resume {
                    Some(s) => Lower::From(s),
                    None => break 'scan,
                });
                break;
            }
            if full(&page) {
                page.is_truncated = true;
                break 'scan;
            }
            page.objects.push(ObjectSummary {
                key: utf8(key.clone())?,
                size: row.get::<_, i64>(1)? as u64,
                etag: row.get(2)?,
                last_modified_ns: row.get(3)?,
            });
            next_lower = Some(Lower::After(key));
        }
        match next_lower {
            Some(l) if seen > 0 => lower = l,
            _ => break,
        }
        if seen < BATCH && !matches!(lower, Lower::From(_)) {
            break;
        }
    }
    if page.is_truncated {
        page.next_marker = last_entry(&page);
    }
    Ok(page)
}

/// Pages an in-memory listing with the same rules as the store's index
/// scan: `objects` must be in key byte order. For backends whose objects
/// are not all in the index (a workspace's files).
pub fn page_of_sorted(
    objects: impl IntoIterator<Item = ObjectSummary>,
    q: &ListQuery,
) -> Result<ListPage> {
    if q.delimiter.as_deref() == Some("") {
        return Err(StoreError::InvalidArgument {
            reason: "delimiter must not be empty".into(),
        });
    }
    let mut page = ListPage::default();
    if q.max_keys == 0 {
        return Ok(page);
    }
    let after = q.start_after.as_deref().unwrap_or("");
    let full = |p: &ListPage| p.objects.len() + p.common_prefixes.len() >= q.max_keys;
    for o in objects {
        if !o.key.starts_with(&q.prefix) || o.key.as_str() <= after {
            continue;
        }
        let rolled = q.delimiter.as_deref().and_then(|d| {
            o.key[q.prefix.len()..]
                .find(d)
                .map(|i| &o.key[..q.prefix.len() + i + d.len()])
        });
        if let Some(cp) = rolled {
            if cp <= after || page.common_prefixes.last().map(String::as_str) == Some(cp) {
                continue;
            }
            if full(&page) {
                page.is_truncated = true;
                break;
            }
            page.common_prefixes.push(cp.to_string());
            continue;
        }
        if full(&page) {
            page.is_truncated = true;
            break;
        }
        page.objects.push(o);
    }
    if page.is_truncated {
        page.next_marker = last_entry(&page);
    }
    Ok(page)
}

fn last_entry(page: &ListPage) -> Option<String> {
    let k = page.objects.last().map(|o| o.key.clone());
    let p = page.common_prefixes.last().cloned();
    match (k, p) {
        (Some(k), Some(p)) => Some(if k.as_bytes() > p.as_bytes() { k } else { p }),
        (k, p) => k.or(p),
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

fn utf8(key: Vec<u8>) -> Result<String> {
    String::from_utf8(key).map_err(|_| StoreError::Corrupt("stored key is not UTF-8".into()))
}

#[cfg(test)]
mod tests {
    use super::successor;

    #[test]
    fn successor_increments_last_byte() {
        assert_eq!(successor(b"a/"), Some(b"a0".to_vec()));
        assert_eq!(successor(b"a\xff"), Some(b"b".to_vec()));
        assert_eq!(successor(b"\xff\xff"), None);
        assert_eq!(successor(b""), None);
    }
}
