//! The properties database of a workspace view: the properties of
//! file-backed objects written through the view (content type, metadata,
//! checksum, multipart ETag and parts), kept in `<root>/.stow/file-props.db`
//! and tied to the file's [`Stamp`]. A file changed behind the view's back
//! no longer matches its stamp: it gets default properties and the MD5 of
//! its bytes as its ETag.

use std::fs::{self, File};
use std::io::{self, Read, Seek, SeekFrom};
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::{Mutex, MutexGuard};

use md5::{Digest, Md5};
use rusqlite::{params, Connection, OptionalExtension};
use serde::{Deserialize, Serialize};
use stow_store::{Checksum, ObjectMeta, ObjectProps, PartSummary, StoreError};

use super::{store_err, StoreResult, WorkspaceBucket};
use crate::error::{Result, WsError};

const PROPS_DB: &str = "file-props.db";

/// What identifies one version of a file without reading it. The ctime
/// cannot be set by a writer, so any write after ours changes the stamp.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Stamp {
    pub(super) size: u64,
    pub(super) mtime_ns: i64,
    ctime_ns: i64,
    ino: u64,
}

impl Stamp {
    /// The stamp of a file's metadata.
    pub(super) fn of(m: &fs::Metadata) -> Stamp {
        Stamp {
            size: m.len(),
            mtime_ns: m.mtime() * 1_000_000_000 + m.mtime_nsec(),
            ctime_ns: m.ctime() * 1_000_000_000 + m.ctime_nsec(),
            ino: m.ino(),
        }
    }

    /// The stamp as stored in the database.
    fn encode(&self) -> String {
        format!(
            "{}:{}:{}:{}",
            self.size, self.mtime_ns, self.ctime_ns, self.ino
        )
    }
}

/// Properties of one file-backed object, valid while its stamp holds.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(super) struct StampedProps {
    pub(super) etag: String,
    #[serde(default)]
    pub(super) props: ObjectProps,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) checksum: Option<Checksum>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(super) parts: Vec<PartSummary>,
}

/// The properties database: one row per key, its stamp and properties.
pub(super) struct PropsDb {
    conn: Mutex<Connection>,
}

impl PropsDb {
    /// Opens (creating if needed) the database of the view of `root`.
    pub(super) fn open(root: &Path) -> StoreResult<PropsDb> {
        let conn = Connection::open(root.join(".stow").join(PROPS_DB))?;
        conn.busy_timeout(std::time::Duration::from_secs(5))?;
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "synchronous", "FULL")?;
        conn.execute_batch(
            "CREATE TABLE IF NOT EXISTS file_props (
                 key TEXT PRIMARY KEY,
                 stamp TEXT NOT NULL,
                 props TEXT NOT NULL
             )",
        )?;
        Ok(PropsDb {
            conn: Mutex::new(conn),
        })
    }

    fn db(&self) -> MutexGuard<'_, Connection> {
        self.conn.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The properties recorded for `key`, if they were recorded for the
    /// file version `stamp` (and still decode).
    pub(super) fn load(&self, key: &str, stamp: Stamp) -> StoreResult<Option<StampedProps>> {
        let row: Option<(String, String)> = self
            .db()
            .query_row(
                "SELECT stamp, props FROM file_props WHERE key = ?1",
                [key],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .optional()?;
        Ok(row
            .filter(|(s, _)| *s == stamp.encode())
            .and_then(|(_, p)| serde_json::from_str(&p).ok()))
    }

    /// Records `props` for the file version `stamp` of `key`.
    pub(super) fn save(&self, key: &str, stamp: Stamp, props: &StampedProps) -> StoreResult<()> {
        let json = serde_json::to_string(props)
            .map_err(|e| StoreError::Corrupt(format!("cannot encode properties: {e}")))?;
        self.db().execute(
            "INSERT INTO file_props (key, stamp, props) VALUES (?1, ?2, ?3)
             ON CONFLICT (key) DO UPDATE SET stamp = excluded.stamp, props = excluded.props",
            params![key, stamp.encode(), json],
        )?;
        Ok(())
    }

    /// Forgets the properties of `key`.
    pub(super) fn forget(&self, key: &str) -> StoreResult<()> {
        self.db()
            .execute("DELETE FROM file_props WHERE key = ?1", [key])?;
        Ok(())
    }

    /// Every row, in key order: key, encoded stamp, encoded properties.
    fn rows(&self) -> StoreResult<Vec<(String, String, String)>> {
        let db = self.db();
        let mut st = db.prepare("SELECT key, stamp, props FROM file_props ORDER BY key")?;
        let rows = st.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }
}

/// The quoted MD5 ETag of a file's bytes.
pub(super) fn quoted_md5(file: &mut File) -> io::Result<String> {
    file.seek(SeekFrom::Start(0))?;
    let mut hasher = Md5::new();
    let mut buf = vec![0u8; 256 * 1024];
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    let digest = hasher.finalize();
    Ok(format!("\"{}\"", stow_store::hex(&digest)))
}

impl WorkspaceBucket {
    /// The object metadata of a file with properties `p`.
    pub(super) fn meta_from(&self, key: &str, m: &fs::Metadata, p: StampedProps) -> ObjectMeta {
        let stamp = Stamp::of(m);
        ObjectMeta {
            bucket: self.primary.clone(),
            key: key.to_string(),
            size: stamp.size,
            etag: p.etag,
            last_modified_ns: stamp.mtime_ns,
            version: String::new(),
            version_id: None,
            props: p.props,
            checksum: p.checksum,
            parts: p.parts,
        }
    }

    /// The metadata of an open file: its recorded properties while its
    /// stamp holds, else default properties and the MD5 of its bytes (then
    /// recorded, so the next request does not hash again).
    pub(super) fn file_meta(
        &self,
        key: &str,
        file: &mut File,
        m: &fs::Metadata,
    ) -> StoreResult<ObjectMeta> {
        let stamp = Stamp::of(m);
        let props = match self.props.load(key, stamp)? {
            Some(p) => p,
            None => {
                let p = StampedProps {
                    etag: quoted_md5(file)?,
                    ..StampedProps::default()
                };
                // Hashing raced with a writer: report, but do not record.
                if Stamp::of(&file.metadata()?) == stamp {
                    self.props.save(key, stamp, &p)?;
                }
                p
            }
        };
        Ok(self.meta_from(key, m, props))
    }

    /// Replaces the tags of the file at `key` (its other properties and
    /// bytes unchanged): they are kept with its properties, so they hold
    /// while the file is unchanged, as its other properties do. `None`
    /// when no file is there. The caller holds the write lock.
    pub(super) fn set_file_tags(
        &self,
        key: &str,
        tags: std::collections::BTreeMap<String, String>,
    ) -> StoreResult<Option<ObjectMeta>> {
        let Some((mut f, m)) = self.open_file(key)? else {
            return Ok(None);
        };
        let meta = self.file_meta(key, &mut f, &m)?;
        let stamp = Stamp::of(&m);
        let mut p = StampedProps {
            etag: meta.etag,
            props: meta.props,
            checksum: meta.checksum,
            parts: meta.parts,
        };
        p.props.tags = tags;
        self.props.save(key, stamp, &p)?;
        Ok(Some(self.meta_from(key, &m, p)))
    }

    /// The properties recorded for files written through S3 that still
    /// hold (the file is unchanged since), by key.
    pub fn file_properties(&self) -> Result<Vec<(String, ObjectProps)>> {
        let rows = self.props.rows().map_err(store_err)?;
        let mut out = Vec::new();
        for (key, stamp, props) in rows {
            let Some((_, m)) = self.regular_file(&key).map_err(store_err)? else {
                continue;
            };
            if Stamp::of(&m).encode() != stamp {
                continue;
            }
            if let Ok(p) = serde_json::from_str::<StampedProps>(&props) {
                out.push((key, p.props));
            }
        }
        Ok(out)
    }

    /// Records `props` for a restored file: they hold until the file
    /// changes, and its ETag is its MD5.
    pub fn restore_file_properties(&self, key: &str, props: ObjectProps) -> Result<()> {
        let _w = self.lock_writes();
        let Some((mut f, m)) = self.open_file(key).map_err(store_err)? else {
            return Err(WsError::NotFound(format!("restored file {key}")));
        };
        let etag = quoted_md5(&mut f).map_err(|e| store_err(e.into()))?;
        let saved = StampedProps {
            etag,
            props,
            ..StampedProps::default()
        };
        self.props
            .save(key, Stamp::of(&m), &saved)
            .map_err(store_err)
    }
}

#[cfg(test)]
mod tests {
    use std::fs;

    use stow_store::{ObjectBackend, ObjectProps, PartSummary};

    use super::super::scratch_view;
    use super::{quoted_md5, Stamp, StampedProps};

    fn props_of(etag: &str) -> StampedProps {
        StampedProps {
            etag: etag.to_string(),
            props: ObjectProps {
                content_type: Some("text/x-test".into()),
                ..ObjectProps::default()
            },
            checksum: None,
            parts: vec![PartSummary {
                size: 3,
                checksum: None,
            }],
        }
    }

    #[test]
    fn properties_round_trip_while_the_stamp_holds() {
        let (tmp, view) = scratch_view(None);
        let path = tmp.path().join("f.txt");
        fs::write(&path, b"abc").unwrap();
        let stamp = Stamp::of(&fs::metadata(&path).unwrap());
        view.props
            .save("f.txt", stamp, &props_of("\"e-1\""))
            .unwrap();

        let got = view.props.load("f.txt", stamp).unwrap().unwrap();
        assert_eq!(got.etag, "\"e-1\"");
        assert_eq!(got.props.content_type.as_deref(), Some("text/x-test"));
        assert_eq!(got.parts.len(), 1);
        assert!(view.props.load("other.txt", stamp).unwrap().is_none());

        // A save replaces the row; forget drops it.
        view.props
            .save("f.txt", stamp, &props_of("\"e-2\""))
            .unwrap();
        assert_eq!(
            view.props.load("f.txt", stamp).unwrap().unwrap().etag,
            "\"e-2\""
        );
        view.props.forget("f.txt").unwrap();
        assert!(view.props.load("f.txt", stamp).unwrap().is_none());
    }

    #[test]
    fn another_stamp_finds_no_properties() {
        let (tmp, view) = scratch_view(None);
        let path = tmp.path().join("f.txt");
        fs::write(&path, b"abc").unwrap();
        let stamp = Stamp::of(&fs::metadata(&path).unwrap());
        view.props
            .save("f.txt", stamp, &props_of("\"e-1\""))
            .unwrap();
        for other in [
            Stamp { size: 4, ..stamp },
            Stamp {
                mtime_ns: stamp.mtime_ns + 1,
                ..stamp
            },
            Stamp {
                ctime_ns: stamp.ctime_ns + 1,
                ..stamp
            },
            Stamp {
                ino: stamp.ino + 1,
                ..stamp
            },
        ] {
            assert!(view.props.load("f.txt", other).unwrap().is_none());
        }
    }

    /// A file changed behind the view's back reads with default properties
    /// and the MD5 of its new bytes, which are then recorded.
    #[test]
    fn a_changed_file_gets_default_properties_and_its_md5() {
        let (tmp, view) = scratch_view(None);
        let typed = ObjectProps {
            content_type: Some("text/x-test".into()),
            ..ObjectProps::default()
        };
        view.put_bytes("wsb", "f.txt", b"first", typed).unwrap();
        let meta = ObjectBackend::head_object(&view, "wsb", "f.txt").unwrap();
        assert_eq!(meta.props.content_type.as_deref(), Some("text/x-test"));

        let path = tmp.path().join("f.txt");
        fs::write(&path, b"second!").unwrap();
        let meta = ObjectBackend::head_object(&view, "wsb", "f.txt").unwrap();
        assert_eq!(meta.props, ObjectProps::default());
        assert_eq!(meta.size, 7);
        let md5 = quoted_md5(&mut fs::File::open(&path).unwrap()).unwrap();
        assert_eq!(md5, "\"26de793d084efdd1c4134652c5494af1\"");
        assert_eq!(meta.etag, md5);
        let stamp = Stamp::of(&fs::metadata(&path).unwrap());
        assert_eq!(view.props.load("f.txt", stamp).unwrap().unwrap().etag, md5);
    }
}
