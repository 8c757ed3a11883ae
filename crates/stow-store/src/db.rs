//! The metadata database: schema, connections, and group commit.
//!
//! All metadata (buckets, object records, blob reference counts, multipart
//! state, receipts, usage) lives in one SQLite database in WAL mode with
//! `synchronous=FULL`, so a commit is durable when it returns. Writers do not
//! commit one by one: each write is queued as a job; when no batch is
//! running, the writer that finds the queue first becomes the leader and
//! runs every queued job in one transaction (each in its own savepoint, so
//! one job's refusal does not undo another's work), paying for one fsync on
//! behalf of all of them (group commit). Writers that arrive meanwhile wait
//! on a condition variable and form the next batch.

use std::path::Path;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use rusqlite::{Connection, OpenFlags};

use crate::blobs::{BlobId, BlobStore};
use crate::error::{Result, StoreError};

/// Applied in one transaction, so a fresh store costs one fsync here.
const SCHEMA: &str = "
BEGIN;
CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS usage (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    bytes INTEGER NOT NULL, objects INTEGER NOT NULL,
    receipts INTEGER NOT NULL, receipt_bytes INTEGER NOT NULL);
INSERT OR IGNORE INTO usage VALUES (1, 0, 0, 0, 0);
CREATE TABLE IF NOT EXISTS buckets (
    id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE, created_ns INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS blobs (
    id INTEGER PRIMARY KEY, size INTEGER NOT NULL, refs INTEGER NOT NULL, data BLOB);
CREATE TABLE IF NOT EXISTS objects (
    bucket INTEGER NOT NULL, key BLOB NOT NULL, size INTEGER NOT NULL,
    etag TEXT NOT NULL, modified_ns INTEGER NOT NULL, generation BLOB NOT NULL,
    props TEXT NOT NULL, extents BLOB NOT NULL,
    PRIMARY KEY (bucket, key)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS uploads (
    id TEXT PRIMARY KEY, bucket INTEGER NOT NULL, key BLOB NOT NULL,
    initiated_ns INTEGER NOT NULL, props TEXT NOT NULL) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS uploads_by_key ON uploads (bucket, key, initiated_ns, id);
CREATE TABLE IF NOT EXISTS parts (
    upload TEXT NOT NULL, number INTEGER NOT NULL, blob INTEGER NOT NULL,
    size INTEGER NOT NULL, etag TEXT NOT NULL, modified_ns INTEGER NOT NULL,
    checksum TEXT, PRIMARY KEY (upload, number)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS receipts (
    request_key TEXT PRIMARY KEY, bucket TEXT NOT NULL, key BLOB NOT NULL,
    meaning BLOB NOT NULL, outcome TEXT NOT NULL, object TEXT,
    created_ns INTEGER NOT NULL, bytes INTEGER NOT NULL) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS dead_blobs (id INTEGER PRIMARY KEY);
COMMIT;
";

/// File work that must follow a commit: staged blobs to move into place, and
/// blobs no record references any more.
#[derive(Default)]
pub(crate) struct Effects {
    pub publish: Vec<BlobId>,
    pub unlink: Vec<BlobId>,
}

type Finish = Box<dyn FnOnce(Result<(), &StoreError>) + Send>;
/// A queued write: given the open transaction (or the reason there is none),
/// it runs and returns how to report its result once the commit is settled.
type Job = Box<dyn FnOnce(Result<&Connection, &StoreError>, &mut Effects) -> Finish + Send>;

struct Writer {
    conn: Connection,
    /// Dead blobs whose files were unlinked after the last commit; their
    /// `dead_blobs` rows are dropped in the next transaction.
    unlinked: Vec<BlobId>,
}

/// Queued writes and whether a leader is running a batch.
#[derive(Default)]
struct Queue {
    jobs: Vec<Job>,
    leader: bool,
}

/// The metadata database of one store.
pub(crate) struct Db {
    writer: Mutex<Writer>,
    queue: Mutex<Queue>,
    /// Signalled when a batch ends: its writers' results are ready, and
    /// the next batch may start.
    batch_done: Condvar,
    /// Read connections (disk only; the memory database has one connection).
    readers: Option<Mutex<Vec<Connection>>>,
    path: Option<std::path::PathBuf>,
    cache_bytes: u64,
    blobs: Arc<BlobStore>,
}

/// WAL frames between automatic checkpoints (SQLite's default is 1000).
const WAL_CHECKPOINT_PAGES: i64 = 8000;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn configure(conn: &Connection, cache_bytes: u64) -> Result<()> {
    // Every statement the store runs fits, so none is parsed twice.
    conn.set_prepared_statement_cache_capacity(64);
    conn.execute_batch(&format!(
        // busy_timeout first: switching to WAL needs a lock that another
        // connection closing the database may briefly hold.
        "PRAGMA busy_timeout=10000; PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL;
         PRAGMA cache_size=-{}; PRAGMA temp_store=MEMORY;",
        (cache_bytes / 1024).max(64)
    ))?;
    Ok(())
}

/// Runs one fixed statement (BEGIN, COMMIT, SAVEPOINT …) through the
/// connection's statement cache: these run several times per request, and
/// parsing them each time showed up in profiles of small PUTs.
fn exec(conn: &Connection, sql: &str) -> rusqlite::Result<()> {
    conn.prepare_cached(sql)?.execute([]).map(|_| ())
}

fn commit_error(e: &StoreError) -> StoreError {
    StoreError::Io(std::io::Error::other(format!("commit failed: {e}")))
}

impl Db {
    /// Opens (creating if needed) the database file at `path`.
    pub fn open(path: &Path, blobs: Arc<BlobStore>, cache_bytes: u64) -> Result<Self> {
        let conn = Connection::open(path)?;
        configure(&conn, cache_bytes)?;
        // Checkpoint less often: a small PUT rewrites the same few pages
        // (usage row, index tails), so a longer WAL holds far fewer distinct
        // pages per frame and each checkpoint copies less per write. The
        // WAL stays bounded (about 32 MiB) and a clean close removes it.
        conn.pragma_update(None, "wal_autocheckpoint", WAL_CHECKPOINT_PAGES)?;
        conn.execute_batch(SCHEMA)?;
        Ok(Self {
            writer: Mutex::new(Writer {
                conn,
                unlinked: Vec::new(),
            }),
            queue: Mutex::new(Queue::default()),
            batch_done: Condvar::new(),
            readers: Some(Mutex::new(Vec::new())),
            path: Some(path.to_path_buf()),
            cache_bytes,
            blobs,
        })
    }

    /// An in-memory database.
    pub fn memory(blobs: Arc<BlobStore>) -> Result<Self> {
        let conn = Connection::open_in_memory()?;
        conn.set_prepared_statement_cache_capacity(64);
        conn.execute_batch(SCHEMA)?;
        Ok(Self {
            writer: Mutex::new(Writer {
                conn,
                unlinked: Vec::new(),
            }),
            queue: Mutex::new(Queue::default()),
            batch_done: Condvar::new(),
            readers: None,
            path: None,
            cache_bytes: 0,
            blobs,
        })
    }

    /// Runs `f` on a consistent snapshot.
    pub fn read<T>(&self, f: impl FnOnce(&Connection) -> Result<T>) -> Result<T> {
        let (Some(pool), Some(path)) = (&self.readers, &self.path) else {
            let w = lock(&self.writer);
            return f(&w.conn);
        };
        let conn = match lock(pool).pop() {
            Some(c) => c,
            None => {
                let c = Connection::open_with_flags(
                    path,
                    OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
                )?;
                configure(&c, self.cache_bytes)?;
                c
            }
        };
        exec(&conn, "BEGIN")?;
        let out = f(&conn);
        let end = exec(&conn, "COMMIT");
        lock(pool).push(conn);
        let out = out?;
        end?;
        Ok(out)
    }

    /// Runs `f` in a write transaction, grouped with whatever other writes are
    /// queued, and returns once the transaction is durable. An `Err` from `f`
    /// undoes only `f`'s own changes.
    pub fn write<T, F>(&self, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&Connection, &mut Effects) -> Result<T> + Send + 'static,
    {
        let slot: Arc<Mutex<Option<Result<T>>>> = Arc::new(Mutex::new(None));
        let out = Arc::clone(&slot);
        let job: Job = Box::new(move |conn, effects| {
            let mut mine = Effects::default();
            let result = conn
                .map_err(commit_error)
                .and_then(|conn| run_in_savepoint(conn, f, &mut mine));
            if result.is_ok() {
                effects.publish.append(&mut mine.publish);
                effects.unlink.append(&mut mine.unlink);
            }
            Box::new(move |commit: Result<(), &StoreError>| {
                let result = match (result, commit) {
                    (Ok(v), Ok(())) => Ok(v),
                    (Ok(_), Err(e)) => Err(commit_error(e)),
                    (Err(e), _) => Err(e),
                };
                *lock(&out) = Some(result);
            })
        });
        // Followers wait on the condition variable, not on the connection,
        // so a finished batch releases all its writers at once and the jobs
        // queued meanwhile go out together in the next batch.
        let mut queue = lock(&self.queue);
        queue.jobs.push(job);
        loop {
            if let Some(done) = lock(&slot).take() {
                return done;
            }
            if queue.leader {
                queue = self
                    .batch_done
                    .wait(queue)
                    .unwrap_or_else(|e| e.into_inner());
                continue;
            }
            queue.leader = true;
            let jobs = std::mem::take(&mut queue.jobs);
            drop(queue);
            {
                // Hands leadership back even if the batch panics.
                let _leading = Leading(self);
                let mut writer = lock(&self.writer);
                self.run_batch(&mut writer, jobs);
            }
            queue = lock(&self.queue);
        }
    }

    fn run_batch(&self, writer: &mut Writer, jobs: Vec<Job>) {
        let conn = &writer.conn;
        let begin = conn
            .prepare_cached("BEGIN IMMEDIATE")
            .and_then(|mut st| st.execute([]))
            .map_err(StoreError::from)
            .and_then(|_| {
                let mut del = conn.prepare_cached("DELETE FROM dead_blobs WHERE id = ?1")?;
                for id in &writer.unlinked {
                    del.execute([id.0])?;
                }
                Ok(())
            });
        let mut effects = Effects::default();
        if let Err(e) = begin {
            tracing::error!("cannot begin write transaction: {e}");
            let _ = conn.execute_batch("ROLLBACK");
            for job in jobs {
                job(Err(&e), &mut effects)(Err(&e));
            }
            return;
        }
        let finishes: Vec<Finish> = jobs
            .into_iter()
            .map(|j| j(Ok(conn), &mut effects))
            .collect();
        let commit = exec(conn, "COMMIT").map_err(StoreError::from);
        match &commit {
            Ok(()) => {
                writer.unlinked.clear();
                for id in &effects.publish {
                    self.blobs.publish(*id);
                }
                for id in &effects.unlink {
                    self.blobs.remove(*id);
                }
                if !effects.unlink.is_empty() {
                    self.blobs.sync_removed(&effects.unlink);
                }
                writer.unlinked = effects.unlink;
            }
            Err(e) => {
                tracing::error!("commit failed: {e}");
                let _ = conn.execute_batch("ROLLBACK");
            }
        }
        for finish in finishes {
            finish(commit.as_ref().map(|_| ()));
        }
    }
}

/// Leadership of the write queue; dropping it lets the next batch start.
struct Leading<'a>(&'a Db);

impl Drop for Leading<'_> {
    fn drop(&mut self) {
        lock(&self.0.queue).leader = false;
        self.0.batch_done.notify_all();
    }
}

fn run_in_savepoint<T>(
    conn: &Connection,
    f: impl FnOnce(&Connection, &mut Effects) -> Result<T>,
    effects: &mut Effects,
) -> Result<T> {
    exec(conn, "SAVEPOINT job")?;
    match f(conn, effects) {
        Ok(v) => {
            exec(conn, "RELEASE job")?;
            Ok(v)
        }
        Err(e) => {
            let _ = conn.execute_batch("ROLLBACK TO job; RELEASE job");
            Err(e)
        }
    }
}
