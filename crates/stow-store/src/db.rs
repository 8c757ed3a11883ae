//! The metadata database: schema, connections, and group commit.
//!
//! All metadata (buckets, object records, blob reference counts, multipart
//! state, receipts, usage) lives in one SQLite database in WAL mode with
//! `synchronous=FULL`, so a commit is durable when it returns. Writers do not
//! commit one by one: each write is queued as a job, and a batch runs every
//! queued job in one transaction (each in its own savepoint, so one job's
//! refusal does not undo another's work), paying for one fsync on behalf of
//! all of them (group commit). A waiting writer that finds no batch running
//! runs one itself (no handoff when writes are rare); jobs that queue up
//! meanwhile form the next batch, which the store's commit thread runs, and
//! it keeps running batches while writes keep coming. A writer never runs
//! more than its own batch.
//!
//! Each waiting writer sleeps on its own thread's park token and is woken
//! once, when its result is ready. [`Db::submit`] queues a job without
//! waiting at all (for callers on an async runtime, which must not block):
//! its result goes to a callback on the commit thread.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::{self, JoinHandle, Thread};

use rusqlite::{Connection, OpenFlags};

use crate::blobs::{BlobId, BlobStore, ReadPin, Reclaimer};
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
    id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE, created_ns INTEGER NOT NULL,
    acl TEXT, versioning INTEGER NOT NULL DEFAULT 0, cors TEXT, object_lock TEXT,
    lifecycle TEXT, tags TEXT, ownership TEXT, public_access_block TEXT, policy TEXT,
    encryption TEXT);
CREATE TABLE IF NOT EXISTS blobs (
    id INTEGER PRIMARY KEY, size INTEGER NOT NULL, refs INTEGER NOT NULL, data BLOB);
CREATE TABLE IF NOT EXISTS objects (
    bucket INTEGER NOT NULL, key BLOB NOT NULL, size INTEGER NOT NULL,
    etag TEXT NOT NULL, modified_ns INTEGER NOT NULL, generation BLOB NOT NULL,
    props TEXT NOT NULL, extents BLOB NOT NULL,
    vid TEXT, seq INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (bucket, key)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS versions (
    bucket INTEGER NOT NULL, key BLOB NOT NULL, seq INTEGER NOT NULL, vid TEXT,
    marker INTEGER NOT NULL, size INTEGER NOT NULL, etag TEXT NOT NULL,
    modified_ns INTEGER NOT NULL, generation BLOB NOT NULL, props TEXT NOT NULL,
    extents BLOB NOT NULL,
    PRIMARY KEY (bucket, key, seq DESC)) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS versions_null ON versions (bucket, key) WHERE vid IS NULL;
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
CREATE TABLE IF NOT EXISTS completed_uploads (
    id TEXT PRIMARY KEY, bucket INTEGER NOT NULL, key BLOB NOT NULL, parts TEXT NOT NULL,
    size INTEGER NOT NULL, etag TEXT NOT NULL, modified_ns INTEGER NOT NULL,
    generation BLOB NOT NULL, props TEXT NOT NULL, completed_ns INTEGER NOT NULL,
    version_id TEXT) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS completed_uploads_by_time ON completed_uploads (completed_ns);
COMMIT;
";

/// The schema version [`migrate`] brings a database to (`PRAGMA
/// user_version`): 1 added `buckets.acl` (NULL = private); 2 added
/// versioning: `buckets.versioning` (0 unversioned, 1 enabled, 2
/// suspended), `objects.vid` and `objects.seq` (the current version's ID,
/// NULL = the null version, and its place among the key's versions) and
/// the `versions` table (every other version and every delete marker); 3
/// added `buckets.cors` (the bucket's CORS rules as JSON, NULL = none); 4
/// added `buckets.object_lock` (the bucket's object lock configuration as
/// JSON, NULL = object lock not enabled; a version's retention and legal
/// hold live in its `props`, so no other column was needed); 5 added
/// `buckets.lifecycle` (the bucket's lifecycle rules as JSON, NULL =
/// none); 6 added `buckets.tags` (the bucket's tags as a JSON object), `buckets.ownership`
/// (its Object Ownership setting as JSON) and `buckets.public_access_block`
/// (its public access block as JSON), each NULL = none set, and
/// `completed_uploads.version_id` (the version ID a remembered completion
/// answered, NULL = none), so a retried completion answers the same one;
/// 7 added `buckets.policy` (the bucket's policy document, the text its
/// client sent, NULL = none); 8 added `buckets.encryption` (the bucket's
/// default encryption as JSON, NULL = none).
const SCHEMA_VERSION: i64 = 8;

/// Columns a version of the schema added to a table that existed before
/// it: `(table, column, definition)`.
const ADDED_COLUMNS: &[(&str, &str, &str)] = &[
    ("buckets", "acl", "TEXT"),
    ("buckets", "versioning", "INTEGER NOT NULL DEFAULT 0"),
    ("objects", "vid", "TEXT"),
    ("objects", "seq", "INTEGER NOT NULL DEFAULT 0"),
    ("buckets", "cors", "TEXT"),
    ("buckets", "object_lock", "TEXT"),
    ("buckets", "lifecycle", "TEXT"),
    ("buckets", "tags", "TEXT"),
    ("buckets", "ownership", "TEXT"),
    ("buckets", "public_access_block", "TEXT"),
    ("completed_uploads", "version_id", "TEXT"),
    ("buckets", "policy", "TEXT"),
    ("buckets", "encryption", "TEXT"),
];

/// Brings a database made by an older version to [`SCHEMA_VERSION`], in
/// one transaction; a database already there costs one read. New tables
/// come from [`SCHEMA`] (`IF NOT EXISTS`); columns added to old tables are
/// added here, each only when missing (a fresh table was created with it).
/// Every added column reads as the old behaviour: private, unversioned,
/// the null version, no CORS rules, no object lock, no lifecycle rules,
/// no bucket tags, no ownership setting or public access block, completions without a
/// version ID, no bucket policy, no default encryption.
fn migrate(conn: &Connection) -> Result<()> {
    let version: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0))?;
    if version >= SCHEMA_VERSION {
        return Ok(());
    }
    let tx = conn.unchecked_transaction()?;
    for (table, column, definition) in ADDED_COLUMNS {
        let has: bool = tx.query_row(
            "SELECT EXISTS (SELECT 1 FROM pragma_table_info(?1) WHERE name = ?2)",
            [table, column],
            |r| r.get(0),
        )?;
        if !has {
            tx.execute_batch(&format!(
                "ALTER TABLE {table} ADD COLUMN {column} {definition}"
            ))?;
        }
    }
    tx.pragma_update(None, "user_version", SCHEMA_VERSION)?;
    tx.commit()?;
    Ok(())
}

/// File work that must follow a commit: staged blobs to move into place,
/// blobs no record references any more, and a reset's switch to a fresh
/// blob directory.
#[derive(Default)]
pub(crate) struct Effects {
    pub publish: Vec<BlobId>,
    pub unlink: Vec<BlobId>,
    /// Set by a reset: `Some(dir)` names the blob directory the database
    /// now names (bodies published after the commit go there, the old one
    /// is swept); `Some(None)` keeps the directory (it held no body file).
    pub reset: Option<Option<String>>,
    /// Staged bodies of jobs committed before a reset in the same batch:
    /// no row names them any more, so they are deleted, not published.
    pub discard: Vec<BlobId>,
}

type Finish = Box<dyn FnOnce(Result<(), &StoreError>) + Send>;
/// A queued write: given the open transaction (or the reason there is none),
/// it runs and returns how to report its result once the commit is settled.
type Job = Box<dyn FnOnce(Result<&Connection, &StoreError>, &mut Effects) -> Finish + Send>;

struct Writer {
    conn: Connection,
    /// Dead blobs whose files were deleted (durably) since the last commit;
    /// their `dead_blobs` rows are dropped in the next transaction.
    unlinked: Vec<BlobId>,
}

/// Queued writes and who leads them.
#[derive(Default)]
struct Queue {
    jobs: Vec<Job>,
    /// A batch is running (or the commit thread has been asked to run one).
    leader: bool,
    /// The commit thread is asked to lead.
    hand_over: bool,
    /// The database is closing: the commit thread ends once nothing is queued.
    closing: bool,
}

/// What the writers and the commit thread share.
struct Shared {
    writer: Mutex<Writer>,
    queue: Mutex<Queue>,
    /// Wakes the commit thread when leadership is handed to it.
    commit_wanted: Condvar,
    blobs: Arc<BlobStore>,
    /// Deletes the blobs commits free once no read can open them.
    reclaim: Arc<Reclaimer>,
}

/// The metadata database of one store.
pub(crate) struct Db {
    shared: Arc<Shared>,
    committer: Option<JoinHandle<()>>,
    /// Read connections (disk only; the memory database has one connection).
    readers: Option<Mutex<Vec<Connection>>>,
    path: Option<std::path::PathBuf>,
    cache_bytes: u64,
}

/// Tells a writer parked in [`Db::write`] that its result is ready.
struct Wake {
    done: AtomicBool,
    thread: Thread,
}

impl Wake {
    fn wake(&self) {
        self.done.store(true, Ordering::Release);
        self.thread.unpark();
    }
}

/// Delivers a job's result exactly once: through [`Reply::send`], or, if
/// the job is dropped unfinished (its batch panicked), as an error.
struct Reply<T>(Option<Box<dyn FnOnce(Result<T>) + Send>>);

impl<T> Reply<T> {
    fn new(f: impl FnOnce(Result<T>) + Send + 'static) -> Self {
        Reply(Some(Box::new(f)))
    }

    fn send(mut self, result: Result<T>) {
        if let Some(f) = self.0.take() {
            f(result);
        }
    }
}

impl<T> Drop for Reply<T> {
    fn drop(&mut self) {
        if let Some(f) = self.0.take() {
            f(Err(StoreError::Io(std::io::Error::other(
                "the write was abandoned: its batch did not finish",
            ))));
        }
    }
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
    // A full disk stays recognisable (`no_space`) through the batch.
    let kind = if e.is_no_space() {
        std::io::ErrorKind::StorageFull
    } else {
        std::io::ErrorKind::Other
    };
    StoreError::Io(std::io::Error::new(kind, format!("commit failed: {e}")))
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
        migrate(&conn)?;
        let shared = Shared::new(conn, blobs);
        Ok(Self {
            committer: Some(spawn_committer(&shared)?),
            shared,
            readers: Some(Mutex::new(Vec::new())),
            path: Some(path.to_path_buf()),
            cache_bytes,
        })
    }

    /// An in-memory database.
    pub fn memory(blobs: Arc<BlobStore>) -> Result<Self> {
        let conn = Connection::open_in_memory()?;
        conn.set_prepared_statement_cache_capacity(64);
        conn.execute_batch(SCHEMA)?;
        migrate(&conn)?;
        let shared = Shared::new(conn, blobs);
        Ok(Self {
            committer: Some(spawn_committer(&shared)?),
            shared,
            readers: None,
            path: None,
            cache_bytes: 0,
        })
    }

    /// Pins the blobs a read about to begin may open: none of them is
    /// deleted while the pin is held (see `blobs::reclaim`). Taken before
    /// [`Db::read`], it covers what that read's snapshot sees.
    pub fn pin(&self) -> ReadPin {
        self.shared.reclaim.pin()
    }

    /// Runs `f` on a consistent snapshot.
    pub fn read<T>(&self, f: impl FnOnce(&Connection) -> Result<T>) -> Result<T> {
        let (Some(pool), Some(path)) = (&self.readers, &self.path) else {
            let w = lock(&self.shared.writer);
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
        let slot: Arc<Mutex<Option<Result<T>>>> = Arc::default();
        let wake = Arc::new(Wake {
            done: AtomicBool::new(false),
            thread: thread::current(),
        });
        let (out, woken) = (Arc::clone(&slot), Arc::clone(&wake));
        let job = job_of(
            f,
            Reply::new(move |result| {
                *lock(&out) = Some(result);
                woken.wake();
            }),
        );
        let mut queue = lock(&self.shared.queue);
        queue.jobs.push(job);
        if queue.leader {
            drop(queue);
        } else {
            // Nobody is committing: lead this batch here, without a handoff.
            queue.leader = true;
            let jobs = std::mem::take(&mut queue.jobs);
            drop(queue);
            let _leading = Leading(&self.shared);
            self.shared.run_batch(jobs);
        }
        while !wake.done.load(Ordering::Acquire) {
            thread::park();
        }
        let result = lock(&slot).take();
        result.unwrap_or_else(|| {
            Err(StoreError::Corrupt(
                "a write finished without a result".into(),
            ))
        })
    }

    /// Queues `f` like [`Db::write`] but returns at once; `done` gets the
    /// result, on the commit thread, once the transaction is durable (or
    /// refused). `done` must not block.
    pub fn submit<T, F>(&self, f: F, done: impl FnOnce(Result<T>) + Send + 'static)
    where
        T: Send + 'static,
        F: FnOnce(&Connection, &mut Effects) -> Result<T> + Send + 'static,
    {
        let job = job_of(f, Reply::new(done));
        let mut queue = lock(&self.shared.queue);
        queue.jobs.push(job);
        if !queue.leader {
            queue.leader = true;
            queue.hand_over = true;
            self.shared.commit_wanted.notify_one();
        }
    }
}

impl Drop for Db {
    fn drop(&mut self) {
        lock(&self.shared.queue).closing = true;
        self.shared.commit_wanted.notify_one();
        if let Some(t) = self.committer.take() {
            if t.join().is_err() {
                tracing::error!("the commit thread panicked");
            }
        }
        // Read connections close first: SQLite checkpoints the WAL into the
        // database and removes it when the last connection closes, which
        // only the read-write writer connection can do.
        if let Some(pool) = &self.readers {
            lock(pool).clear();
        }
    }
}

/// Wraps a write as a queued job that reports through `reply`.
fn job_of<T, F>(f: F, reply: Reply<T>) -> Job
where
    T: Send + 'static,
    F: FnOnce(&Connection, &mut Effects) -> Result<T> + Send + 'static,
{
    Box::new(move |conn, effects| {
        let mut mine = Effects::default();
        let result = conn
            .map_err(commit_error)
            .and_then(|conn| run_in_savepoint(conn, f, &mut mine));
        if result.is_ok() {
            if mine.reset.is_some() {
                // Everything earlier in the batch was emptied with the rest
                // of the store: its bodies are deleted, never published.
                let earlier = std::mem::take(&mut effects.publish);
                effects.discard.extend(earlier);
                effects.discard.append(&mut effects.unlink);
                effects.reset = mine.reset.take();
            }
            effects.publish.append(&mut mine.publish);
            effects.unlink.append(&mut mine.unlink);
        }
        Box::new(move |commit: Result<(), &StoreError>| {
            reply.send(match (result, commit) {
                (Ok(v), Ok(())) => Ok(v),
                (Ok(_), Err(e)) => Err(commit_error(e)),
                (Err(e), _) => Err(e),
            })
        })
    })
}

fn spawn_committer(shared: &Arc<Shared>) -> Result<JoinHandle<()>> {
    let shared = Arc::clone(shared);
    Ok(thread::Builder::new()
        .name("stow-commit".into())
        .spawn(move || shared.commit_loop())?)
}

impl Shared {
    fn new(conn: Connection, blobs: Arc<BlobStore>) -> Arc<Shared> {
        Arc::new(Shared {
            writer: Mutex::new(Writer {
                conn,
                unlinked: Vec::new(),
            }),
            queue: Mutex::new(Queue::default()),
            commit_wanted: Condvar::new(),
            reclaim: Reclaimer::new(Arc::clone(&blobs)),
            blobs,
        })
    }

    /// The commit thread: leads whenever leadership is handed to it, for
    /// as long as writes keep arriving.
    fn commit_loop(&self) {
        let mut queue = lock(&self.queue);
        loop {
            while !queue.hand_over && !queue.closing {
                queue = self
                    .commit_wanted
                    .wait(queue)
                    .unwrap_or_else(|e| e.into_inner());
            }
            if !queue.hand_over {
                // Closing, and no batch is wanted: every write has been answered.
                return;
            }
            queue.hand_over = false;
            loop {
                let jobs = std::mem::take(&mut queue.jobs);
                if jobs.is_empty() {
                    queue.leader = false;
                    break;
                }
                drop(queue);
                // A panicking batch answers its writers with an error (see
                // `Reply`); the thread goes on serving the others.
                let ran =
                    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.run_batch(jobs)));
                if ran.is_err() {
                    tracing::error!("a write batch panicked");
                }
                queue = lock(&self.queue);
            }
        }
    }

    fn run_batch(&self, jobs: Vec<Job>) {
        let mut writer = lock(&self.writer);
        let writer = &mut *writer;
        writer.unlinked.extend(self.reclaim.take_deleted());
        let conn = &writer.conn;
        if !conn.is_autocommit() {
            // A batch panicked mid-transaction: its writers were answered
            // with errors; drop what it left open.
            let _ = conn.execute_batch("ROLLBACK");
        }
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
                if let Some(dir) = effects.reset.take() {
                    crate::blobs::after_commit(&self.blobs, dir.as_deref(), &effects.discard);
                }
                for id in &effects.publish {
                    self.blobs.publish(*id);
                }
                writer.unlinked = self.reclaim.free(&effects.unlink);
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

/// Leadership of the write queue held by a writer running its own batch.
/// Dropping it (also in a panic) hands the queued writes to the commit
/// thread, or ends the leadership when nothing is queued.
struct Leading<'a>(&'a Shared);

impl Drop for Leading<'_> {
    fn drop(&mut self) {
        let mut queue = lock(&self.0.queue);
        if queue.jobs.is_empty() {
            queue.leader = false;
        } else {
            queue.hand_over = true;
            self.0.commit_wanted.notify_one();
        }
    }
}

/// What a job is answered when its batch's transaction is gone: SQLite
/// rolls a whole transaction back on some errors (a full disk, an I/O
/// error, no memory), so an earlier job's failure can end it.
fn transaction_lost() -> StoreError {
    StoreError::Db(rusqlite::Error::SqliteFailure(
        rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_ABORT),
        Some("an earlier write of the batch failed and rolled the transaction back".into()),
    ))
}

fn run_in_savepoint<T>(
    conn: &Connection,
    f: impl FnOnce(&Connection, &mut Effects) -> Result<T>,
    effects: &mut Effects,
) -> Result<T> {
    // Outside a transaction, `SAVEPOINT` would start one of its own and
    // `RELEASE` commit it: this job alone, committed while the batch's
    // `COMMIT` then fails and its caller is told it failed.
    if conn.is_autocommit() {
        return Err(transaction_lost());
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    fn db(dir: &Path) -> Db {
        let blobs = Arc::new(BlobStore::disk(dir).unwrap());
        let db = Db::open(&dir.join("t.db"), blobs, 1 << 20).unwrap();
        db.write(|c, _| Ok(c.execute_batch("CREATE TABLE t (n INTEGER PRIMARY KEY)")?))
            .unwrap();
        db
    }

    fn insert(n: i64) -> impl FnOnce(&Connection, &mut Effects) -> Result<i64> + Send {
        move |c, _| {
            c.execute("INSERT INTO t VALUES (?1)", [n])?;
            Ok(n)
        }
    }

    fn count(db: &Db) -> i64 {
        db.read(|c| Ok(c.query_row("SELECT count(*) FROM t", [], |r| r.get(0))?))
            .unwrap()
    }

    /// Waiting and detached writes from many threads all commit and are
    /// each answered once with their own result; a refused job (duplicate
    /// key) undoes only itself.
    #[test]
    fn waiting_and_detached_writes_are_all_answered() {
        let tmp = tempfile::tempdir().unwrap();
        let db = Arc::new(db(tmp.path()));
        let (tx, rx) = mpsc::channel();
        let threads: Vec<_> = (0..8)
            .map(|t| {
                let (db, tx) = (Arc::clone(&db), tx.clone());
                thread::spawn(move || {
                    for i in 0..50 {
                        let n = t * 1000 + i;
                        if i % 2 == 0 {
                            assert_eq!(db.write(insert(n)).unwrap(), n);
                        } else {
                            let tx = tx.clone();
                            db.submit(insert(n), move |r| tx.send((n, r)).unwrap());
                        }
                    }
                    // Key 0 exists (thread 0 wrote it first): refused.
                    if t == 0 {
                        assert!(db.write(insert(0)).is_err());
                    }
                })
            })
            .collect();
        drop(tx);
        for t in threads {
            t.join().unwrap();
        }
        let detached: Vec<_> = rx.iter().collect();
        assert_eq!(detached.len(), 8 * 25);
        for (n, r) in detached {
            assert_eq!(r.unwrap(), n);
        }
        assert_eq!(count(&db), 8 * 50);
    }

    /// Closing the database answers every detached write first.
    #[test]
    fn closing_answers_queued_writes() {
        let tmp = tempfile::tempdir().unwrap();
        let db = db(tmp.path());
        let (tx, rx) = mpsc::channel();
        for n in 0..200 {
            let tx = tx.clone();
            db.submit(insert(n), move |r| tx.send(r.is_ok()).unwrap());
        }
        drop(db);
        drop(tx);
        assert_eq!(rx.iter().filter(|ok| *ok).count(), 200);
        let db = self::db_reopen(tmp.path());
        assert_eq!(count(&db), 200);
    }

    /// A clean close folds the WAL into the database and removes it, also
    /// when read connections were open: the directory is then one file to
    /// copy.
    #[test]
    fn closing_removes_the_wal() {
        let tmp = tempfile::tempdir().unwrap();
        let db = db(tmp.path());
        db.write(insert(1)).unwrap();
        assert_eq!(count(&db), 1);
        assert!(tmp.path().join("t.db-wal").exists());
        drop(db);
        assert!(!tmp.path().join("t.db-wal").exists(), "WAL left behind");
        assert_eq!(count(&db_reopen(tmp.path())), 1);
    }

    fn db_reopen(dir: &Path) -> Db {
        let blobs = Arc::new(BlobStore::disk(dir).unwrap());
        Db::open(&dir.join("t.db"), blobs, 1 << 20).unwrap()
    }

    /// A job whose failure ends the batch's transaction (as SQLite does on
    /// a full disk) fails the jobs after it: none commits on its own.
    #[test]
    fn a_job_that_loses_the_transaction_fails_the_rest_of_its_batch() {
        let tmp = tempfile::tempdir().unwrap();
        let db = db(tmp.path());
        let (started_tx, started) = mpsc::channel();
        // Holds the commit thread, so the next two queue into one batch.
        let holding = move |_: &Connection, _: &mut Effects| -> Result<i64> {
            started_tx.send(()).unwrap();
            thread::sleep(std::time::Duration::from_millis(300));
            Ok(0)
        };
        let (tx, rx) = mpsc::channel();
        let t0 = tx.clone();
        db.submit(holding, move |r| t0.send(("holding", r.is_ok())).unwrap());
        started.recv().unwrap();
        let losing = |c: &Connection, _: &mut Effects| -> Result<i64> {
            // What SQLite itself does on SQLITE_FULL or SQLITE_IOERR.
            c.execute_batch("ROLLBACK")?;
            Err(StoreError::Corrupt("simulated: the disk is full".into()))
        };
        let t1 = tx.clone();
        db.submit(losing, move |r| t1.send(("losing", r.is_ok())).unwrap());
        db.submit(insert(5), move |r| tx.send(("later", r.is_ok())).unwrap());
        let answers: std::collections::HashMap<_, _> = rx.iter().collect();
        assert_eq!(answers.len(), 3);
        assert!(answers["holding"] && !answers["losing"] && !answers["later"]);
        assert_eq!(count(&db), 0, "the later job committed on its own");
        assert_eq!(db.write(insert(6)).unwrap(), 6);
        assert_eq!(count(&db), 1);
    }

    /// A panicking job answers its batch with errors instead of leaving
    /// them waiting, and later writes still commit.
    #[test]
    fn a_panicking_batch_answers_with_errors() {
        let tmp = tempfile::tempdir().unwrap();
        let db = db(tmp.path());
        let (tx, rx) = mpsc::channel();
        let panicking = |_: &Connection, _: &mut Effects| -> Result<i64> { panic!("job bug") };
        let tx2 = tx.clone();
        db.submit(panicking, move |r| tx2.send(r.is_err()).unwrap());
        assert!(rx.recv().unwrap(), "the panicked write got an error");
        // A waiting writer sees the panic itself when it led its own batch,
        // or an error when the commit thread ran it (it may still be leading).
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| db.write(panicking)));
        assert!(caught.map_or(true, |r| r.is_err()));
        assert_eq!(db.write(insert(7)).unwrap(), 7);
        db.submit(insert(8), move |r| tx.send(r.is_ok()).unwrap());
        assert!(rx.recv().unwrap());
        assert_eq!(count(&db), 2);
    }
}
