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
