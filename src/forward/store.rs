//! The persistent forward queue's store (`exporter.queue.persistent`): accepted requests in a
//! redb database (the `redb` crate), `<exporter.queue.directory>/queue.redb`, one row per
//! request keyed by a sequence number (arrival order), value `(spans, request bytes)`.
//!
//! Modelled on the Collector's `file_storage`-backed sending queue: a request is written
//! before it is acknowledged and deleted once it left the forwarder, and what is left at
//! start-up is re-queued in arrival order.
//!
//! fsync policy: an append is a write transaction committed with `Durability::Immediate`
//! (fsync before `commit` returns), so an acknowledged request survives kill -9 and power
//! loss. Appends that arrive while a commit is under way are committed together by the next
//! one (group commit: one fsync for all of them, each caller still returns only once its
//! own request is on disk). A removal is committed with `Durability::None` (no fsync): it becomes durable with
//! the next append, so a crash can bring back requests that were already delivered — they
//! are delivered again (at-least-once), never lost.
//!
//! Healing (issue 31 item 3): once a write fails (disk full, I/O error), redb refuses every
//! later write until the database is opened again. The store then reports itself faulty
//! ([`DiskQueue::fault`]: `/readyz` 503, appends refused retryably at once) and
//! [`DiskQueue::heal`] — called every [`HEAL_INTERVAL`] by the forwarder, and by an append
//! when the last attempt is that old — reopens the file (redb repairs it), proves a write
//! of [`PROBE_BYTES`] goes through, deletes the removals that failed meanwhile, and clears
//! the fault. Nothing acknowledged is lost: a request is acknowledged only after its commit
//! succeeded, and a reopen keeps every committed row.
//!
//! All calls block on disk I/O; callers on the async runtime go through `blocking`.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock, PoisonError, RwLock};
use std::time::{Duration, Instant};

use bytes::Bytes;
use redb::{
    Database, Durability, ReadableDatabase, ReadableTable, ReadableTableMetadata, TableDefinition,
};

/// Sequence number → (spans, encoded `ExportTraceServiceRequest`).
const REQUESTS: TableDefinition<u64, (u64, &[u8])> = TableDefinition::new("requests");

/// Written then deleted by [`DiskQueue::heal`] to prove the disk has room again.
const PROBE: TableDefinition<u64, &[u8]> = TableDefinition::new("heal_probe");

/// File name of the database inside `exporter.queue.directory`.
pub const FILE_NAME: &str = "queue.redb";

/// How often a faulty store tries to heal.
pub const HEAL_INTERVAL: Duration = Duration::from_secs(1);

/// Bytes a heal writes (and deletes) to prove the disk has room again: 256 KiB.
pub const PROBE_BYTES: usize = 256 * 1024;

/// The store could not be opened, read or written.
#[derive(Debug, thiserror::Error)]
#[error("persistent queue {path}: {message}")]
pub struct StoreError {
    /// The database file.
    pub path: PathBuf,
    /// What failed (the I/O or database error).
    pub message: String,
}

/// One request found in the store at start-up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredRequest {
    /// Its key (arrival order).
    pub key: u64,
    /// Spans it holds.
    pub spans: u64,
    /// The encoded request, as it was acknowledged.
    pub bytes: Bytes,
}

/// The open store. One process per directory: redb locks the file, and a second
/// `open` of the same file fails.
pub struct DiskQueue {
    /// `None` only while a heal reopens it (or could not).
    db: RwLock<Option<Database>>,
    path: PathBuf,
    group: Mutex<Group>,
    committed: Condvar,
    health: Health,
}

/// Whether the store can write, and what a heal has to finish.
#[derive(Debug, Default)]
struct Health {
    /// Why the last write failed, until a heal succeeds.
    fault: Mutex<Option<String>>,
    /// When a heal was last tried.
    last_heal: Mutex<Option<Instant>>,
    /// Keys whose removal failed: deleted by the next heal.
    unremoved: Mutex<Vec<u64>>,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Appends waiting for the next commit (group commit).
struct Group {
    next_key: u64,
    rows: Vec<(u64, u64, Bytes)>,
    /// Set once the commit carrying `rows` ended; shared by their callers.
    outcome: Arc<OnceLock<Result<(), String>>>,
    /// A caller is committing now.
    writing: bool,
}

impl std::fmt::Debug for DiskQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DiskQueue")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl DiskQueue {
    /// Opens (creating the directory and the file if missing) the store in `directory` and
    /// returns it with every request it holds, oldest first. Compacts the file first when it
    /// holds nothing.
    ///
    /// # Errors
    /// [`StoreError`] naming the file when the directory cannot be created or written, the
    /// file is not a redb database, or another process holds it.
    pub fn open(directory: &Path) -> Result<(Self, Vec<StoredRequest>), StoreError> {
        let path = directory.join(FILE_NAME);
        let fail = |message: String| StoreError {
            path: path.clone(),
            message,
        };
        std::fs::create_dir_all(directory)
            .map_err(|e| fail(format!("cannot create the directory: {e}")))?;
        let mut db = Database::create(&path).map_err(|e| fail(e.to_string()))?;
        // Creates the table, and proves the file is writable now rather than at the first
        // acknowledged request.
        let txn = db.begin_write().map_err(|e| fail(e.to_string()))?;
        txn.open_table(REQUESTS).map_err(|e| fail(e.to_string()))?;
        txn.commit().map_err(|e| fail(e.to_string()))?;
        let stored = Self::read_all(&db).map_err(fail)?;
        if stored.is_empty() {
            db.compact().map_err(|e| fail(e.to_string()))?;
        }
        let next_key = stored.last().map_or(0, |r| r.key + 1);
        let queue = Self {
            db: RwLock::new(Some(db)),
            path,
            group: Mutex::new(Group {
                next_key,
                rows: Vec::new(),
                outcome: Arc::default(),
                writing: false,
            }),
            committed: Condvar::new(),
            health: Health::default(),
        };
        Ok((queue, stored))
    }

    fn read_all(db: &Database) -> Result<Vec<StoredRequest>, String> {
        let txn = db.begin_read().map_err(|e| e.to_string())?;
        let table = txn.open_table(REQUESTS).map_err(|e| e.to_string())?;
        let mut stored = Vec::new();
        for row in table.iter().map_err(|e| e.to_string())? {
            let (key, value) = row.map_err(|e| e.to_string())?;
            let (spans, bytes) = value.value();
            stored.push(StoredRequest {
                key: key.value(),
                spans,
                bytes: Bytes::copy_from_slice(bytes),
            });
        }
        Ok(stored)
    }

    /// Writes one request holding `spans` spans and fsyncs; returns its key (keys follow
    /// the order of the calls). Blocks until the request is on disk: call before
    /// acknowledging it. Concurrent calls share commits (see the module docs).
    ///
    /// # Errors
    /// [`StoreError`] when the write or the fsync failed (disk full, I/O error): the
    /// request is not stored and must be refused.
    pub fn append(&self, spans: u64, request: Bytes) -> Result<u64, StoreError> {
        if let Some(fault) = self.fault() {
            let healed = self.heal_due() && self.heal().is_ok();
            if !healed {
                return Err(self.error(format!("cannot write since: {fault}")));
            }
        }
        let mut group = self.lock();
        let key = group.next_key;
        group.next_key += 1;
        group.rows.push((key, spans, request));
        let mine = Arc::clone(&group.outcome);
        loop {
            if let Some(outcome) = mine.get() {
                return outcome.clone().map(|()| key).map_err(|message| StoreError {
                    path: self.path.clone(),
                    message,
                });
            }
            if group.writing {
                group = self
                    .committed
                    .wait(group)
                    .unwrap_or_else(PoisonError::into_inner);
                continue;
            }
            // Lead the next commit: everything waiting goes in it, ours included.
            group.writing = true;
            let rows = std::mem::take(&mut group.rows);
            let outcome = std::mem::take(&mut group.outcome);
            drop(group);
            let written = self.write(Durability::Immediate, |table| {
                rows.iter().try_for_each(|(key, spans, bytes)| {
                    table.insert(*key, (*spans, &bytes[..])).map(drop)
                })
            });
            let _ = outcome.set(written.map_err(|e| e.message));
            group = self.lock();
            group.writing = false;
            self.committed.notify_all();
        }
    }

    fn lock(&self) -> MutexGuard<'_, Group> {
        self.group.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Deletes delivered (or given-up) requests, without fsync (see the module docs).
    ///
    /// # Errors
    /// [`StoreError`] when the write failed; the requests stay and are re-sent at the next
    /// start (duplicates, not losses).
    pub fn remove(&self, keys: &[u64]) -> Result<(), StoreError> {
        if keys.is_empty() {
            return Ok(());
        }
        let removed = self.write(Durability::None, |table| {
            keys.iter().try_for_each(|k| table.remove(k).map(drop))
        });
        if removed.is_err() {
            lock(&self.health.unremoved).extend_from_slice(keys);
        }
        removed
    }

    /// Why the store cannot write now (`None`: it can, or no write failed yet).
    pub fn fault(&self) -> Option<String> {
        lock(&self.health.fault).clone()
    }

    /// Whether a heal is due: the store is faulty and none was tried for [`HEAL_INTERVAL`].
    pub fn heal_due(&self) -> bool {
        self.fault().is_some()
            && lock(&self.health.last_heal).is_none_or(|at| at.elapsed() >= HEAL_INTERVAL)
    }

    /// Heals a faulty store (see the module docs): reopens the file, writes and deletes
    /// [`PROBE_BYTES`] with fsync, deletes the rows whose removal failed, and clears the
    /// fault. Does nothing on a store that is not faulty.
    ///
    /// # Errors
    /// [`StoreError`] when the file cannot be reopened or the probe cannot be written: the
    /// store stays faulty (with this error) and is tried again later.
    pub fn heal(&self) -> Result<(), StoreError> {
        if self.fault().is_none() {
            return Ok(());
        }
        *lock(&self.health.last_heal) = Some(Instant::now());
        let healed = self.reopen().and_then(|()| {
            self.write_unchecked(Durability::Immediate, |txn| {
                let mut probe = txn.open_table(PROBE)?;
                probe.insert(0, &vec![0u8; PROBE_BYTES][..])?;
                probe.remove(0)?;
                Ok(())
            })
        });
        match healed {
            Ok(()) => {
                let unremoved = std::mem::take(&mut *lock(&self.health.unremoved));
                *lock(&self.health.fault) = None;
                if self.remove(&unremoved).is_err() {
                    tracing::warn!(requests = unremoved.len(), "persistent queue healed but could not delete delivered requests; they will be sent again after a restart");
                }
                tracing::info!(path = %self.path.display(), "persistent queue writable again; requests are accepted");
                Ok(())
            }
            Err(error) => {
                *lock(&self.health.fault) = Some(error.message.clone());
                Err(error)
            }
        }
    }

    /// Closes and opens the database again (redb refuses every write after an I/O error
    /// until then, and repairs the file on open).
    fn reopen(&self) -> Result<(), StoreError> {
        let mut db = self.db.write().unwrap_or_else(PoisonError::into_inner);
        // Dropping it tries a last commit, which may fail again: the reopen repairs.
        drop(db.take());
        *db = Some(Database::create(&self.path).map_err(|e| self.error(e.to_string()))?);
        Ok(())
    }

    fn error(&self, message: String) -> StoreError {
        StoreError {
            path: self.path.clone(),
            message,
        }
    }

    /// Makes every earlier removal durable (an empty commit with fsync): at shutdown, so
    /// a clean restart does not deliver again what was delivered.
    ///
    /// # Errors
    /// [`StoreError`] when the commit failed.
    pub fn sync(&self) -> Result<(), StoreError> {
        self.write(Durability::Immediate, |_| Ok(()))
    }

    /// One write transaction on the requests table; a failure makes the store faulty.
    fn write(
        &self,
        durability: Durability,
        change: impl FnOnce(&mut redb::Table<'_, u64, (u64, &[u8])>) -> Result<(), redb::StorageError>,
    ) -> Result<(), StoreError> {
        let written = self.write_unchecked(durability, |txn| {
            let mut table = txn.open_table(REQUESTS)?;
            change(&mut table)?;
            Ok(())
        });
        if let Err(error) = &written {
            let mut fault = lock(&self.health.fault);
            if fault.is_none() {
                *fault = Some(error.message.clone());
            }
        }
        written
    }

    /// One write transaction running `change`, committed with `durability`.
    fn write_unchecked(
        &self,
        durability: Durability,
        change: impl FnOnce(&redb::WriteTransaction) -> Result<(), redb::Error>,
    ) -> Result<(), StoreError> {
        let fail = |e: &dyn std::fmt::Display| self.error(e.to_string());
        let db = self.db.read().unwrap_or_else(PoisonError::into_inner);
        let db = db
            .as_ref()
            .ok_or_else(|| self.error("the database is being reopened".to_owned()))?;
        let mut txn = db.begin_write().map_err(|e| fail(&e))?;
        txn.set_durability(durability).map_err(|e| fail(&e))?;
        change(&txn).map_err(|e| fail(&e))?;
        txn.commit().map_err(|e| fail(&e))
    }

    /// Requests in the store now (for tests and start-up logs).
    ///
    /// # Errors
    /// [`StoreError`] when the file cannot be read.
    pub fn len(&self) -> Result<u64, StoreError> {
        let fail = |e: &dyn std::fmt::Display| self.error(e.to_string());
        let db = self.db.read().unwrap_or_else(PoisonError::into_inner);
        let db = db
            .as_ref()
            .ok_or_else(|| self.error("the database is being reopened".to_owned()))?;
        let txn = db.begin_read().map_err(|e| fail(&e))?;
        let table = txn.open_table(REQUESTS).map_err(|e| fail(&e))?;
        table.len().map_err(|e| fail(&e))
    }

    /// True when the store holds no request.
    ///
    /// # Errors
    /// As [`DiskQueue::len`].
    pub fn is_empty(&self) -> Result<bool, StoreError> {
        self.len().map(|n| n == 0)
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// Runs blocking disk I/O from async code: on a multi-thread runtime through
/// `block_in_place` (the worker thread hands its other tasks over first), elsewhere inline.
pub(crate) fn blocking<T>(f: impl FnOnce() -> T) -> T {
    match tokio::runtime::Handle::try_current() {
        Ok(h) if h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(f)
        }
        _ => f(),
    }
}

#[cfg(test)]
mod tests;
