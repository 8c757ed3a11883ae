//! Listing a workspace view: the primary bucket's files merged with its
//! private objects, paged like the store.

use std::collections::{BTreeMap, HashMap};

use stow_store::{page_of_sorted, ListPage, ListQuery, ObjectSummary};

use super::props::Stamp;
use super::{store_err, StoreResult, ViewObject, WorkspaceBucket};
use crate::error::Result;
use crate::paths::check_checkpoint_path;

impl WorkspaceBucket {
    /// Every private-store object of `bucket`, in key order.
    pub(super) fn private_summaries(&self, bucket: &str) -> StoreResult<Vec<ObjectSummary>> {
        let mut out = Vec::new();
        let mut after: Option<String> = None;
        loop {
            let page = self.store.list_objects(
                bucket,
                &ListQuery {
                    start_after: after.clone(),
                    max_keys: 1000,
                    ..ListQuery::default()
                },
            )?;
            after = page.objects.last().map(|o| o.key.clone());
            out.extend(page.objects);
            if !page.is_truncated || after.is_none() {
                return Ok(out);
            }
        }
    }

    /// Lists the primary bucket: files merged with private objects, paged
    /// like the store, hashing only the files that land on the page.
    pub(super) fn list_primary(&self, query: &ListQuery) -> StoreResult<ListPage> {
        // Only the directory the prefix names can hold matching files.
        let base = match query.prefix.rsplit_once('/') {
            Some((dir, _)) if check_checkpoint_path(dir).is_ok() => dir,
            Some(_) => "",
            None => "",
        };
        let mut merged = BTreeMap::new();
        for o in self.private_summaries(&self.primary)? {
            merged.insert(o.key.clone(), o);
        }
        let mut files = HashMap::new();
        for (key, meta) in self.walk_files(base)? {
            merged.insert(
                key.clone(),
                ObjectSummary {
                    key: key.clone(),
                    size: meta.len(),
                    etag: String::new(),
                    last_modified_ns: Stamp::of(&meta).mtime_ns,
                },
            );
            files.insert(key, meta);
        }
        let mut page = page_of_sorted(merged.into_values(), query)?;
        for o in &mut page.objects {
            let Some(meta) = files.get(&o.key) else {
                continue;
            };
            let stamp = Stamp::of(meta);
            o.etag = match self.props.load(&o.key, stamp)? {
                Some(p) => p.etag,
                None => match self.open_file(&o.key)? {
                    Some((mut f, m)) => {
                        let meta = self.file_meta(&o.key, &mut f, &m)?;
                        o.size = meta.size;
                        o.last_modified_ns = meta.last_modified_ns;
                        meta.etag
                    }
                    // Deleted since the walk: its last known size stays.
                    None => String::from("\"\""),
                },
            };
        }
        Ok(page)
    }

    // ---- conveniences for checkpoints, restore and tests -----------------

    /// Every object of a bucket in key byte order: files (primary only) and
    /// private-store objects.
    pub fn list_view(&self, bucket: &str) -> Result<Vec<ViewObject>> {
        let mut out: Vec<ViewObject> = if bucket == self.primary {
            self.walk_files("")
                .map_err(store_err)?
                .into_iter()
                .map(|(key, m)| ViewObject {
                    bucket: bucket.to_string(),
                    key,
                    size: m.len(),
                    file: true,
                })
                .collect()
        } else {
            Vec::new()
        };
        out.extend(self.private_objects(bucket)?);
        out.sort_by(|a, b| a.key.cmp(&b.key));
        out.dedup_by(|later, earlier| later.key == earlier.key);
        Ok(out)
    }

    /// Objects of a bucket held in the private store only.
    pub fn private_objects(&self, bucket: &str) -> Result<Vec<ViewObject>> {
        Ok(self
            .private_summaries(bucket)
            .map_err(store_err)?
            .into_iter()
            .map(|o| ViewObject {
                bucket: bucket.to_string(),
                key: o.key,
                size: o.size,
                file: false,
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use std::fs;

    use stow_store::{ListQuery, PutOptions};

    use super::super::{scratch_view, WorkspaceBucket};

    /// Files `a.txt`, `dir/b.txt`, `dir/sub/c.txt`, `z.txt`; private
    /// objects `a\p`, `dir/b\q`, `dir/sub` (a blocked path: `dir/sub` is a
    /// directory) and `z.txt` (shadowed by the file).
    fn populated() -> (tempfile::TempDir, WorkspaceBucket) {
        let (tmp, view) = scratch_view(None);
        let root = tmp.path();
        fs::create_dir_all(root.join("dir/sub")).unwrap();
        for (path, body) in [
            ("a.txt", &b"a"[..]),
            ("dir/b.txt", b"bb"),
            ("dir/sub/c.txt", b"ccc"),
            ("z.txt", b"zzzz"),
        ] {
            fs::write(root.join(path), body).unwrap();
        }
        for key in ["a\\p", "dir/b\\q", "dir/sub", "z.txt"] {
            let body = format!("private {key}");
            view.store
                .put_object("wsb", key, &mut body.as_bytes(), PutOptions::default())
                .unwrap();
        }
        (tmp, view)
    }

    fn query(prefix: &str, delimiter: Option<&str>, after: Option<&str>, max: usize) -> ListQuery {
        ListQuery {
            prefix: prefix.into(),
            delimiter: delimiter.map(str::to_string),
            start_after: after.map(str::to_string),
            max_keys: max,
        }
    }

    const ALL: [&str; 7] = [
        "a.txt",
        "a\\p",
        "dir/b.txt",
        "dir/b\\q",
        "dir/sub",
        "dir/sub/c.txt",
        "z.txt",
    ];

    #[test]
    fn files_and_private_objects_merge_in_key_order() {
        let (_tmp, view) = populated();
        let page = view.list_primary(&query("", None, None, 1000)).unwrap();
        let keys: Vec<&str> = page.objects.iter().map(|o| o.key.as_str()).collect();
        assert_eq!(keys, ALL);
        assert!(!page.is_truncated);
        // A file wins over the private object it shadows, and gets its MD5.
        let z = &page.objects[6];
        assert_eq!(z.size, 4);
        assert_eq!(z.etag, format!("\"{}\"", md5_hex(b"zzzz")));
        let private = &page.objects[1];
        assert_eq!(private.size, "private a\\p".len() as u64);
        assert_eq!(private.etag, format!("\"{}\"", md5_hex(b"private a\\p")));

        let view_keys: Vec<(String, bool)> = view
            .list_view("wsb")
            .unwrap()
            .into_iter()
            .map(|o| (o.key, o.file))
            .collect();
        let expected: Vec<(String, bool)> = ALL
            .iter()
            .map(|k| (k.to_string(), !k.contains('\\') && *k != "dir/sub"))
            .collect();
        assert_eq!(view_keys, expected);
    }

    fn md5_hex(bytes: &[u8]) -> String {
        use md5::{Digest, Md5};
        Md5::digest(bytes)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    }

    #[test]
    fn prefix_and_delimiter_group_like_the_store() {
        let (_tmp, view) = populated();
        let page = view
            .list_primary(&query("dir/", Some("/"), None, 1000))
            .unwrap();
        let keys: Vec<&str> = page.objects.iter().map(|o| o.key.as_str()).collect();
        assert_eq!(keys, ["dir/b.txt", "dir/b\\q", "dir/sub"]);
        assert_eq!(page.common_prefixes, ["dir/sub/"]);

        let page = view
            .list_primary(&query("", Some("/"), None, 1000))
            .unwrap();
        let keys: Vec<&str> = page.objects.iter().map(|o| o.key.as_str()).collect();
        assert_eq!(keys, ["a.txt", "a\\p", "z.txt"]);
        assert_eq!(page.common_prefixes, ["dir/"]);

        let page = view
            .list_primary(&query("dir/sub/", None, None, 1000))
            .unwrap();
        let keys: Vec<&str> = page.objects.iter().map(|o| o.key.as_str()).collect();
        assert_eq!(keys, ["dir/sub/c.txt"]);
        let page = view.list_primary(&query("a", None, None, 1000)).unwrap();
        let keys: Vec<&str> = page.objects.iter().map(|o| o.key.as_str()).collect();
        assert_eq!(keys, ["a.txt", "a\\p"]);
    }

    #[test]
    fn pages_continue_after_their_marker_across_files_and_objects() {
        let (_tmp, view) = populated();
        let mut seen = Vec::new();
        let mut after: Option<String> = None;
        let mut pages = 0;
        loop {
            let page = view
                .list_primary(&query("", None, after.as_deref(), 2))
                .unwrap();
            pages += 1;
            assert!(page.objects.len() <= 2);
            seen.extend(page.objects.iter().map(|o| o.key.clone()));
            if !page.is_truncated {
                break;
            }
            after = page.next_marker.clone();
            assert!(after.is_some());
            assert!(pages < 10, "paging does not end");
        }
        assert_eq!(seen, ALL);
        assert_eq!(pages, 4);
    }
}
