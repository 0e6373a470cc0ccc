//! The index database (sqlx): entries, experiments, runs and metric points, for fast queries
//! and charts. SQLite at `<lab>/index.db` by default, PostgreSQL by URL; migrations embedded.
//!
//! The index is derived data: every row comes from a log entry, [`Index::sync`] catches up
//! with the log, [`Index::reindex`] rebuilds from scratch, and [`Index::check`] compares it row
//! by row with the log (by leaf hash). Nothing is written here that the log does not say; the
//! index is never the source of truth. Metric points come from `result` entries' final
//! metrics (step = steps completed) and, with [`Index::sync_with_blobs`], from the metric-chunk
//! blobs that runs record as `artifact` entries (the full curves the dashboard draws), and each
//! finished run's curves are downsampled once into overviews ([`curves`]) for a first view.
//!
//! Connections: this type's methods write through one connection ([`Index::write_pool`]; SQLite
//! allows one writer at a time anyway). Readers that live with their callers (the dashboard's
//! queries) use [`Index::pool`]: for SQLite, [`READ_CONNECTIONS`] more connections with
//! `query_only` set, on a database in WAL mode so they read while the writer commits (each
//! waits up to sqlx's 5 s `busy_timeout` for a lock); for PostgreSQL, the same pool of 4.

use std::borrow::Cow;
use std::future::Future;
use std::pin::Pin;

use glassbox_schemas::metrics::MetricRecord;
use glassbox_schemas::record::EntryBody;
use glassbox_schemas::{BlobHash, EntryKind, LedgerEntry, RefRole};
use sqlx::AnyPool;
use sqlx::Row;
use sqlx::any::AnyPoolOptions;
use sqlx::migrate::{Migration, MigrationSource, MigrationType, Migrator};

use crate::blob::BlobStore;
use crate::error::Error;
use crate::log::LogReader;
use crate::merkle::leaf_hash;
use crate::tiles::TILE_WIDTH;

pub mod curves;
pub mod queries;
pub use curves::{CurveNames, Curves, OVERVIEW_POINTS, Overview};

/// The key of the PostgreSQL advisory lock the index's writers hold for a transaction
/// (arbitrary; ASCII "gbindex" read as a number).
const INDEX_WRITER_LOCK: i64 = 0x0067_6269_6e64_6578;

/// The embedded migrations, in order.
const MIGRATIONS: &[(i64, &str, &str)] = &[
    (1, "index", include_str!("../../migrations/0001_index.sql")),
    (
        2,
        "search",
        include_str!("../../migrations/0002_search.sql"),
    ),
    (
        3,
        "overview",
        include_str!("../../migrations/0003_overview.sql"),
    ),
];

/// Migrations compiled into the binary: `(version, description, SQL)` in order. The index's
/// own, and the lab's queue database's (`glassbox-lab`), without sqlx's `migrate!` macro and
/// the compile-time build of every database driver it brings. The checksum sqlx stores is the
/// SQL's, as the macro's is, so a database migrated either way accepts the other.
#[derive(Debug, Clone, Copy)]
pub struct EmbeddedMigrations(pub &'static [(i64, &'static str, &'static str)]);

impl<'s> MigrationSource<'s> for EmbeddedMigrations {
    fn resolve(
        self,
    ) -> Pin<Box<dyn Future<Output = Result<Vec<Migration>, sqlx::error::BoxDynError>> + Send + 's>>
    {
        Box::pin(async move {
            Ok(self
                .0
                .iter()
                .map(|(v, d, sql)| {
                    Migration::new(
                        *v,
                        Cow::Borrowed(*d),
                        MigrationType::Simple,
                        Cow::Borrowed(*sql),
                        false,
                    )
                })
                .collect())
        })
    }
}

impl EmbeddedMigrations {
    /// Brings the database behind `pool` up to date. Several processes may open a new
    /// database at once (`serve` and a `ledger log` or a worker beside it), and SQLite gives
    /// migrations no lock: the one that loses the race fails on a table the winner just made.
    /// A migration commits together with its row in `_sqlx_migrations`, so running them again
    /// skips what the winner applied; a few tries settle it.
    pub async fn run(self, pool: &AnyPool) -> Result<(), sqlx::migrate::MigrateError> {
        let migrator = Migrator::new(self).await?;
        let mut pause = std::time::Duration::from_millis(20);
        for _ in 0..5 {
            match migrator.run(pool).await {
                Ok(()) => return Ok(()),
                Err(_) => {
                    tokio::time::sleep(pause).await;
                    pause *= 2;
                }
            }
        }
        migrator.run(pool).await
    }
}

/// One row of the entries table.
#[derive(Debug, Clone, PartialEq)]
pub struct IndexedEntry {
    /// Leaf index.
    pub index: u64,
    /// Entry kind.
    pub kind: String,
    /// Experiment, if any.
    pub experiment: Option<String>,
    /// Run, if any.
    pub run: Option<String>,
    /// RFC 3339 time.
    pub time: String,
    /// The canonical entry JSON.
    pub entry: String,
}

impl IndexedEntry {
    /// A row with the entries table's columns (`idx, kind, experiment, run, time, entry`).
    fn from_row(r: &sqlx::any::AnyRow) -> Result<Self, sqlx::Error> {
        Ok(Self {
            index: r.try_get::<i64, _>("idx")? as u64,
            kind: r.try_get("kind")?,
            experiment: r.try_get("experiment")?,
            run: r.try_get("run")?,
            time: r.try_get("time")?,
            entry: r.try_get("entry")?,
        })
    }
}

/// Read-only connections to a SQLite index (in [`Index::pool`]): the dashboard serves many
/// pages at once, and one connection would make every query queue behind the others.
pub const READ_CONNECTIONS: u32 = 4;

/// How much of an SQLite index file each reading connection maps (address space, not
/// memory: pages are shared with the kernel's cache and with the other connections).
const READER_MMAP_PRAGMA: &str = "PRAGMA mmap_size = 1073741824";

/// Connection pools to the index database: one writer, and readers.
#[derive(Debug, Clone)]
pub struct Index {
    /// Every write goes through here: one connection for SQLite.
    writer: AnyPool,
    /// Read-only queries; the same pool as `writer` for PostgreSQL and in-memory SQLite.
    readers: AnyPool,
    url: String,
    is_pg: bool,
}

/// What the index says about itself compared with the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IndexMismatch {
    /// The index holds a prefix of the log, every row matching, and lacks the newest entries
    /// (a derived index not yet caught up; not a sign of tampering).
    Behind {
        /// Entries indexed.
        indexed: u64,
        /// Entries in the log.
        log: u64,
    },
    /// The index has entries the log does not.
    Ahead {
        /// Entries indexed.
        indexed: u64,
        /// Entries in the log.
        log: u64,
    },
    /// A row differs from the log.
    Row {
        /// Its index.
        index: u64,
        /// How.
        reason: String,
    },
}

impl std::fmt::Display for IndexMismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            IndexMismatch::Behind { indexed, log } => write!(
                f,
                "index has {indexed} entries, the log {log}; run `glassbox ledger reindex`"
            ),
            IndexMismatch::Ahead { indexed, log } => write!(
                f,
                "index has {indexed} entries but the log only {log}: the index does not belong to this log; run `glassbox ledger reindex`"
            ),
            IndexMismatch::Row { index, reason } => write!(
                f,
                "index row for entry {index} {reason}; run `glassbox ledger reindex`"
            ),
        }
    }
}

/// A database URL with its password replaced by `***`, for messages.
pub fn redact(url: &str) -> String {
    match (url.find("://"), url.find('@')) {
        (Some(s), Some(at)) if at > s => format!("{}://***{}", &url[..s], &url[at..]),
        _ => url.to_string(),
    }
}

impl Index {
    /// Connects to `url` (`postgres://...`, `sqlite://PATH`, or a plain file path for SQLite,
    /// created if absent) and runs the embedded migrations.
    pub async fn connect(url: &str) -> Result<Index, Error> {
        sqlx::any::install_default_drivers();
        let is_pg = url.starts_with("postgres://") || url.starts_with("postgresql://");
        let full = if is_pg || url.starts_with("sqlite:") {
            url.to_string()
        } else {
            format!("sqlite://{url}?mode=rwc")
        };
        let shown = redact(url);
        let err = |e: &dyn std::fmt::Display| Error::Index {
            url: shown.clone(),
            reason: e.to_string(),
        };
        let pool = AnyPoolOptions::new()
            .max_connections(if is_pg { 4 } else { 1 })
            // A connection whose commit failed (a full disk: SQLite rolls the transaction back
            // itself, so sqlx's own rollback fails too) still counts itself inside a
            // transaction, and every `BEGIN` on it would be refused: it is closed, not reused.
            .before_acquire(|conn, _meta| {
                Box::pin(async move { Ok(!sqlx::Connection::is_in_transaction(conn)) })
            })
            .connect(&full)
            .await
            .map_err(|e| err(&e))?;
        EmbeddedMigrations(MIGRATIONS)
            .run(&pool)
            .await
            .map_err(|e| err(&e))?;
        let in_memory = full.contains(":memory:") || full.contains("mode=memory");
        let readers = if is_pg || in_memory {
            pool.clone()
        } else {
            // WAL lets readers run while the writer commits. Switching needs a moment with no
            // other connection to the file; when another process holds one, the readers work in
            // the rollback-journal mode the file is in (waiting on the writer's commits), and a
            // later connect switches.
            let _ = sqlx::query("PRAGMA journal_mode = WAL")
                .fetch_optional(&pool)
                .await;
            AnyPoolOptions::new()
                .max_connections(READ_CONNECTIONS)
                // A ping per query is a round trip to the connection's thread; a local file
                // has no connection to lose.
                .test_before_acquire(false)
                .after_connect(|conn, _| {
                    Box::pin(async move {
                        sqlx::query("PRAGMA query_only = ON")
                            .execute(&mut *conn)
                            .await?;
                        // The dashboard reads the same small tables (experiments, runs, their
                        // specs) on every request: mapped, they are read from the page cache
                        // the kernel already holds, not copied in by a `pread` per page into
                        // each connection's own 2 MB cache, which the metric tables evict.
                        sqlx::query(READER_MMAP_PRAGMA)
                            .execute(&mut *conn)
                            .await
                            .map(|_| ())
                    })
                })
                .connect(&full)
                .await
                .map_err(|e| err(&e))?
        };
        Ok(Index {
            writer: pool,
            readers,
            url: shown,
            is_pg,
        })
    }

    /// The read-only connection pool, for queries that live with their callers (the web
    /// crate's dashboard queries). Writes go through this type's methods only; on SQLite these
    /// connections refuse to write (`query_only`).
    pub fn pool(&self) -> &AnyPool {
        &self.readers
    }

    /// The writing connection, for tools and tests that load rows in bulk (the dashboard's
    /// load generator, test fixtures). Everything else writes through this type's methods.
    pub fn write_pool(&self) -> &AnyPool {
        &self.writer
    }

    /// Whether the database is PostgreSQL (else SQLite), for the few queries whose portable
    /// form would lose something (see the web crate's packed metric series).
    pub fn is_postgres(&self) -> bool {
        self.is_pg
    }

    /// The database URL with any password redacted, for messages.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// A transaction that may write. On SQLite it holds the write lock from its first statement
    /// (`BEGIN IMMEDIATE`): a deferred `BEGIN` that reads and then writes fails at once with
    /// `database is locked` when another process (a `ledger log` beside the server) wrote
    /// meanwhile, which no busy timeout can wait out. On PostgreSQL a transaction-scoped
    /// advisory lock does the same for the index's writers (two syncs at once would otherwise
    /// both insert the same entries).
    async fn begin_write(&self) -> Result<sqlx::Transaction<'static, sqlx::Any>, Error> {
        if self.is_pg {
            let mut tx = self.writer.begin().await.map_err(|e| self.err(e))?;
            sqlx::query("SELECT pg_advisory_xact_lock($1)")
                .bind(INDEX_WRITER_LOCK)
                .execute(&mut *tx)
                .await
                .map_err(|e| self.err(e))?;
            Ok(tx)
        } else {
            self.writer
                .begin_with("BEGIN IMMEDIATE")
                .await
                .map_err(|e| self.err(e))
        }
    }

    fn err(&self, e: impl std::fmt::Display) -> Error {
        Error::Index {
            url: self.url.clone(),
            reason: e.to_string(),
        }
    }

    /// Number of indexed entries (one past the highest index).
    pub async fn indexed(&self) -> Result<u64, Error> {
        let row = sqlx::query("SELECT COUNT(*) AS n FROM entries")
            .fetch_one(&self.writer)
            .await
            .map_err(|e| self.err(e))?;
        let n: i64 = row.try_get("n").map_err(|e| self.err(e))?;
        Ok(n as u64)
    }

    /// Indexes entries the log has and the index lacks; returns how many were added. Metric
    /// curves come only from `result` entries' final values; [`Index::sync_with_blobs`] also
    /// reads the metric-chunk blobs that `artifact` entries reference.
    pub async fn sync(&self, log: &LogReader<'_>) -> Result<u64, Error> {
        self.sync_with_blobs(log, None).await
    }

    /// As [`Index::sync`], and for every `artifact` entry with a `metrics` reference ([`RefRole::Metrics`]),
    /// reads that blob (JSON lines: `{"step":N,"scalars":{name:value},"vectors":{name:[..]}}`)
    /// into `metric_points`, vector components as `<name>/<i>`. A chunk blob that is missing or
    /// malformed is an error: the index must not silently show a partial curve.
    pub async fn sync_with_blobs(
        &self,
        log: &LogReader<'_>,
        blobs: Option<&dyn BlobStore>,
    ) -> Result<u64, Error> {
        let from = self.indexed().await?;
        let size = log.size().0;
        if from > size {
            return Err(self.err(IndexMismatch::Ahead {
                indexed: from,
                log: size,
            }));
        }
        // Overviews left to draw (runs indexed before the overview table existed, or rows a
        // bulk loader marked) are drawn before anything new.
        let pending = sqlx::query("SELECT run FROM overview_pending LIMIT 1")
            .fetch_optional(&self.writer)
            .await
            .map_err(|e| self.err(e))?;
        if pending.is_some() {
            let mut tx = self.begin_write().await?;
            curves::refresh_pending(&mut tx, self.is_pg)
                .await
                .map_err(|e| self.err(e))?;
            tx.commit().await.map_err(|e| self.err(e))?;
        }
        let mut i = from;
        let mut added = 0;
        while i < size {
            let t = i / TILE_WIDTH;
            let bundle = log.bundle(t)?;
            let mut tx = self.begin_write().await?;
            // Another process's sync (a `ledger log` beside the server) may have indexed some
            // of these since `from` was read: the count under the write lock is the truth.
            let row = sqlx::query("SELECT COUNT(*) AS n FROM entries")
                .fetch_one(&mut *tx)
                .await
                .map_err(|e| self.err(e))?;
            let have: i64 = row.try_get("n").map_err(|e| self.err(e))?;
            i = i.max(have as u64);
            for (k, bytes) in bundle.iter().enumerate() {
                let idx = t * TILE_WIDTH + k as u64;
                if idx < i || idx >= size {
                    continue;
                }
                added += 1;
                insert_entry(&mut tx, idx, bytes)
                    .await
                    .map_err(|e| self.err(e))?;
                if let Some(store) = blobs {
                    self.insert_metric_chunk(&mut tx, idx, bytes, store).await?;
                    self.insert_spec_fields(&mut tx, bytes, store).await?;
                }
            }
            curves::refresh_pending(&mut tx, self.is_pg)
                .await
                .map_err(|e| self.err(e))?;
            tx.commit().await.map_err(|e| self.err(e))?;
            i = i.max((t + 1) * TILE_WIDTH);
        }
        Ok(added)
    }

    /// Reads the metric chunk an `artifact` entry references, if any, into `metric_points`.
    async fn insert_metric_chunk(
        &self,
        tx: &mut sqlx::Transaction<'_, sqlx::Any>,
        idx: u64,
        bytes: &[u8],
        store: &dyn BlobStore,
    ) -> Result<(), Error> {
        let Ok(entry) = LedgerEntry::from_bytes(bytes) else {
            return Ok(());
        };
        let (EntryBody::Artifact(body), Some(hash)) = (&entry.body, entry.blob(RefRole::Metrics))
        else {
            return Ok(());
        };
        let Some(run) = body.run.as_ref().map(|r| r.0.as_str()) else {
            return Ok(());
        };
        let hash = BlobHash(*hash);
        // Streamed a line at a time and inserted in batches: a chunk is never whole in memory.
        let mut reader = std::io::BufReader::new(store.get(&hash)?);
        let fail = |reason: String| Error::Index {
            url: self.url.clone(),
            reason: format!("entry {idx}: metric chunk {hash}: {reason}"),
        };
        let mut batch: Vec<(String, u64, f64)> = Vec::new();
        let mut line = String::new();
        for n in 1.. {
            line.clear();
            let read = std::io::BufRead::read_line(
                &mut std::io::Read::take(&mut reader, MAX_METRIC_LINE_BYTES + 1),
                &mut line,
            )
            .map_err(|e| fail(format!("cannot read line {n}: {e}")))?;
            if read == 0 {
                break;
            }
            if read as u64 > MAX_METRIC_LINE_BYTES {
                return Err(fail(format!(
                    "line {n} is over {MAX_METRIC_LINE_BYTES} bytes"
                )));
            }
            parse_metric_line(&line, n, &mut batch).map_err(fail)?;
            if batch.len() >= POINTS_PER_BATCH {
                insert_points(tx, run, idx, std::mem::take(&mut batch))
                    .await
                    .map_err(|e| self.err(e))?;
            }
        }
        insert_points(tx, run, idx, batch)
            .await
            .map_err(|e| self.err(e))
    }

    /// Reads the spec blob a `proposal` entry names into `spec_fields`, once per spec hash: every
    /// leaf of its JSON under its dotted path (array elements share their array's path). A spec
    /// blob that is missing, too large or not JSON leaves no fields (the proposal may predate
    /// the blob's upload); the search then finds no spec field of it.
    async fn insert_spec_fields(
        &self,
        tx: &mut sqlx::Transaction<'_, sqlx::Any>,
        bytes: &[u8],
        store: &dyn BlobStore,
    ) -> Result<(), Error> {
        let Ok(entry) = LedgerEntry::from_bytes(bytes) else {
            return Ok(());
        };
        let (EntryBody::Proposal(p), Some(hash)) = (&entry.body, entry.blob(RefRole::Spec)) else {
            return Ok(());
        };
        let spec_hash = p.spec_hash.to_string();
        let known = sqlx::query("SELECT 1 AS one FROM spec_fields WHERE spec_hash = $1 LIMIT 1")
            .bind(spec_hash.clone())
            .fetch_optional(&mut **tx)
            .await
            .map_err(|e| self.err(e))?;
        if known.is_some() {
            return Ok(());
        }
        let limit = MAX_SPEC_BLOB_BYTES;
        let mut text = Vec::new();
        let read = store
            .get(&BlobHash(*hash))
            .map(|r| std::io::Read::read_to_end(&mut std::io::Read::take(r, limit + 1), &mut text));
        if !matches!(read, Ok(Ok(n)) if (n as u64) <= limit) {
            return Ok(());
        }
        // Canonical JSON as the lab stores it, or TOML as written: either way the validated
        // spec with every default, so a left-out field is found by its default.
        let Ok(text) = String::from_utf8(text) else {
            return Ok(());
        };
        let spec = if text.trim_start().starts_with('{') {
            glassbox_schemas::validate::parse_json(&text)
        } else {
            glassbox_schemas::parse_toml(&text)
        };
        let Some(value) = spec.ok().and_then(|s| serde_json::to_value(s).ok()) else {
            return Ok(());
        };
        let mut fields = Vec::new();
        spec_leaves(&value, &mut String::new(), &mut fields);
        fields.truncate(MAX_SPEC_FIELDS);
        for chunk in fields.chunks(200) {
            let mut sql =
                String::from("INSERT INTO spec_fields (spec_hash, path, num, text) VALUES ");
            for k in 0..chunk.len() {
                if k > 0 {
                    sql.push_str(", ");
                }
                let p = 4 * k;
                sql.push_str(&format!("(${}, ${}, ${}, ${})", p + 1, p + 2, p + 3, p + 4));
            }
            let mut q = sqlx::query(&sql);
            for (path, num, text) in chunk {
                q = q
                    .bind(spec_hash.clone())
                    .bind(path.clone())
                    .bind(*num)
                    .bind(text.clone());
            }
            q.execute(&mut **tx).await.map_err(|e| self.err(e))?;
        }
        Ok(())
    }

    /// Deletes every row and indexes the whole log again.
    pub async fn reindex(&self, log: &LogReader<'_>) -> Result<u64, Error> {
        self.reindex_with_blobs(log, None).await
    }

    /// As [`Index::reindex`], metric chunks included ([`Index::sync_with_blobs`]).
    pub async fn reindex_with_blobs(
        &self,
        log: &LogReader<'_>,
        blobs: Option<&dyn BlobStore>,
    ) -> Result<u64, Error> {
        let mut tx = self.begin_write().await?;
        for t in [
            "metric_overview",
            "overview_pending",
            "metric_points",
            "final_metrics",
            "spec_fields",
            "runs",
            "experiments",
            "entries",
        ] {
            sqlx::query(&format!("DELETE FROM {t}"))
                .execute(&mut *tx)
                .await
                .map_err(|e| self.err(e))?;
        }
        tx.commit().await.map_err(|e| self.err(e))?;
        self.sync_with_blobs(log, blobs).await
    }

    /// Compares the index with the log, row by row (leaf hash of the stored entry JSON).
    pub async fn check(&self, log: &LogReader<'_>) -> Result<Result<(), IndexMismatch>, Error> {
        let indexed = self.indexed().await?;
        let size = log.size().0;
        if indexed > size {
            return Ok(Err(IndexMismatch::Ahead { indexed, log: size }));
        }
        for t in 0..size.div_ceil(TILE_WIDTH) {
            let bundle = log.bundle(t)?;
            let lo = t * TILE_WIDTH;
            let rows = sqlx::query("SELECT idx, leaf_hash, entry FROM entries WHERE idx >= $1 AND idx < $2 ORDER BY idx")
                .bind(lo as i64)
                .bind((lo + TILE_WIDTH) as i64)
                .fetch_all(&self.writer)
                .await
                .map_err(|e| self.err(e))?;
            for (k, bytes) in bundle.iter().enumerate() {
                let idx = lo + k as u64;
                let Some(row) = rows.get(k) else {
                    // Behind only when every row it has is a prefix of the log; a hole is a
                    // missing row.
                    return Ok(Err(if idx == indexed {
                        IndexMismatch::Behind { indexed, log: size }
                    } else {
                        IndexMismatch::Row {
                            index: idx,
                            reason: "is missing".into(),
                        }
                    }));
                };
                let got: i64 = row.try_get("idx").map_err(|e| self.err(e))?;
                let lh: String = row.try_get("leaf_hash").map_err(|e| self.err(e))?;
                let entry: String = row.try_get("entry").map_err(|e| self.err(e))?;
                if got as u64 != idx {
                    return Ok(Err(IndexMismatch::Row {
                        index: idx,
                        reason: "is missing".into(),
                    }));
                }
                let want = leaf_hash(bytes).to_hex();
                if lh != want || leaf_hash(entry.as_bytes()).to_hex() != want {
                    return Ok(Err(IndexMismatch::Row {
                        index: idx,
                        reason: "differs from the log entry".into(),
                    }));
                }
            }
        }
        Ok(Ok(()))
    }

    /// Entries, newest last, optionally of one kind.
    pub async fn entries(&self, kind: Option<EntryKind>) -> Result<Vec<IndexedEntry>, Error> {
        let q = match kind {
            Some(_) => {
                "SELECT idx, kind, experiment, run, time, entry FROM entries WHERE kind = $1 ORDER BY idx"
            }
            None => "SELECT idx, kind, experiment, run, time, entry FROM entries ORDER BY idx",
        };
        let mut query = sqlx::query(q);
        if let Some(k) = kind {
            query = query.bind(k.as_str().to_string());
        }
        let rows = query
            .fetch_all(&self.writer)
            .await
            .map_err(|e| self.err(e))?;
        rows.iter()
            .map(IndexedEntry::from_row)
            .collect::<Result<Vec<_>, sqlx::Error>>()
            .map_err(|e| self.err(e))
    }

    /// Metric points of a run, ordered by name then step.
    pub async fn metric_points(&self, run: &str) -> Result<Vec<(String, u64, f64)>, Error> {
        let rows = sqlx::query(
            "SELECT name, step, value FROM metric_points WHERE run = $1 ORDER BY name, step",
        )
        .bind(run.to_string())
        .fetch_all(&self.writer)
        .await
        .map_err(|e| self.err(e))?;
        rows.iter()
            .map(|r| {
                Ok((
                    r.try_get("name")?,
                    r.try_get::<i64, _>("step")? as u64,
                    r.try_get("value")?,
                ))
            })
            .collect::<Result<Vec<_>, sqlx::Error>>()
            .map_err(|e| self.err(e))
    }

    /// The curves of `run` (every metric, one, or those under a prefix) with
    /// `from <= step <= to`, each sorted by step, read through the read-only pool.
    pub async fn curves(
        &self,
        run: &str,
        names: CurveNames<'_>,
        from: u64,
        to: u64,
    ) -> Result<Curves, Error> {
        let mut conn = self.readers.acquire().await.map_err(|e| self.err(e))?;
        curves::read_packed(&mut conn, self.is_pg, run, names, from, to)
            .await
            .map_err(|e| self.err(e))
    }

    /// The overviews of `run`'s curves by metric name ([`Overview`]): empty for a run that has
    /// not ended, has no points, or whose overviews are not drawn yet (the next sync draws them).
    pub async fn overviews(
        &self,
        run: &str,
    ) -> Result<std::collections::BTreeMap<String, Overview>, Error> {
        let mut conn = self.readers.acquire().await.map_err(|e| self.err(e))?;
        curves::read_overviews(&mut conn, run)
            .await
            .map_err(|e| self.err(e))
    }

    /// Draws the overviews of every run that has ended again, from the points now in the
    /// index; returns how many runs. For tools that write `metric_points` directly through
    /// [`Index::write_pool`] (load generators, test fixtures): the indexer's own writes keep
    /// the overviews current by themselves.
    pub async fn rebuild_overviews(&self) -> Result<u64, Error> {
        let mut tx = self.begin_write().await?;
        curves::mark_all_ended(&mut tx)
            .await
            .map_err(|e| self.err(e))?;
        let n = curves::refresh_pending(&mut tx, self.is_pg)
            .await
            .map_err(|e| self.err(e))?;
        tx.commit().await.map_err(|e| self.err(e))?;
        Ok(n)
    }

    /// A run's status and steps.
    pub async fn run_status(&self, run: &str) -> Result<Option<(String, Option<u64>)>, Error> {
        let row = sqlx::query("SELECT status, steps FROM runs WHERE id = $1")
            .bind(run.to_string())
            .fetch_optional(&self.writer)
            .await
            .map_err(|e| self.err(e))?;
        row.map(|r| {
            Ok((
                r.try_get("status")?,
                r.try_get::<Option<i64>, _>("steps")?.map(|s| s as u64),
            ))
        })
        .transpose()
        .map_err(|e: sqlx::Error| self.err(e))
    }

    /// Closes the pools (readers first, so the writer's close checkpoints SQLite's WAL).
    pub async fn close(self) {
        self.readers.close().await;
        self.writer.close().await;
    }
}

/// Largest spec blob read for search fields (a spec is at most 1 MiB of TOML; its JSON is no
/// larger than a few times that).
const MAX_SPEC_BLOB_BYTES: u64 = 4 << 20;

/// Most search fields kept of one spec.
const MAX_SPEC_FIELDS: usize = 4000;

/// Every leaf of `v` under `path` as `(path, number, text)`: numbers in the second place,
/// strings and booleans in the third; array elements take their array's path.
fn spec_leaves(
    v: &serde_json::Value,
    path: &mut String,
    out: &mut Vec<(String, Option<f64>, Option<String>)>,
) {
    use serde_json::Value;
    match v {
        Value::Object(map) => {
            for (k, child) in map {
                let len = path.len();
                if !path.is_empty() {
                    path.push('.');
                }
                path.push_str(k);
                spec_leaves(child, path, out);
                path.truncate(len);
            }
        }
        Value::Array(items) => {
            for item in items {
                spec_leaves(item, path, out);
            }
        }
        Value::Number(n) => out.push((path.clone(), n.as_f64(), None)),
        Value::String(s) => out.push((path.clone(), None, Some(s.clone()))),
        Value::Bool(b) => out.push((path.clone(), None, Some(b.to_string()))),
        Value::Null => {}
    }
}

/// The longest line of a metric chunk the index reads (one step's scalars and expert loads).
const MAX_METRIC_LINE_BYTES: u64 = 16 << 20;

/// Points held before they are written while a chunk streams in.
const POINTS_PER_BATCH: usize = 50_000;

/// One line (number `n`) of a metric chunk (a [`MetricRecord`]) as `(name, step, value)` points,
/// appended to `out`; non-finite values (a diverged run's NaN) are skipped, since a chart
/// cannot place them.
fn parse_metric_line(
    line: &str,
    n: usize,
    out: &mut Vec<(String, u64, f64)>,
) -> Result<(), String> {
    if line.trim().is_empty() {
        return Ok(());
    }
    let record: MetricRecord = serde_json::from_str(line).map_err(|e| format!("line {n}: {e}"))?;
    out.extend(
        record
            .points()
            .map(|(name, value)| (name, record.step, value)),
    );
    Ok(())
}

impl IndexedEntry {
    /// The row of the log's entry `idx`, whose bytes are `bytes`: what the index stores, and
    /// what [`entries_from_log`] lists when there is no index to ask. An entry that does not
    /// parse is kind `unknown`.
    pub fn from_log(idx: u64, bytes: &[u8]) -> (Self, Option<LedgerEntry>) {
        let entry = LedgerEntry::from_bytes(bytes).ok();
        let row = IndexedEntry {
            index: idx,
            kind: entry
                .as_ref()
                .map(|e| e.kind().as_str())
                .unwrap_or("unknown")
                .to_string(),
            experiment: entry
                .as_ref()
                .and_then(|e| e.experiment.as_ref())
                .map(|x| x.0.clone()),
            run: entry
                .as_ref()
                .and_then(|e| e.body.run())
                .map(|r| r.0.clone()),
            time: entry
                .as_ref()
                .and_then(|e| {
                    e.time
                        .format(&time::format_description::well_known::Rfc3339)
                        .ok()
                })
                .unwrap_or_default(),
            entry: String::from_utf8_lossy(bytes).to_string(),
        };
        (row, entry)
    }
}

/// Every entry of the log of `kind` (all when `None`), read from the log itself rather than the
/// index: for a reader whose index cannot catch up (its database is locked, full or gone).
pub fn entries_from_log(
    log: &LogReader<'_>,
    kind: Option<EntryKind>,
) -> Result<Vec<IndexedEntry>, Error> {
    let mut out = Vec::new();
    let size = log.size().0;
    let mut i = 0;
    while i < size {
        let t = i / TILE_WIDTH;
        for (k, bytes) in log.bundle(t)?.iter().enumerate() {
            let idx = t * TILE_WIDTH + k as u64;
            if idx >= size {
                break;
            }
            let (row, _) = IndexedEntry::from_log(idx, bytes);
            if kind.is_none_or(|k| k.as_str() == row.kind) {
                out.push(row);
            }
        }
        i = (t + 1) * TILE_WIDTH;
    }
    Ok(out)
}

async fn insert_entry(
    tx: &mut sqlx::Transaction<'_, sqlx::Any>,
    idx: u64,
    bytes: &[u8],
) -> Result<(), sqlx::Error> {
    let (row, entry) = IndexedEntry::from_log(idx, bytes);
    let IndexedEntry {
        kind,
        experiment,
        run,
        time,
        entry: text,
        ..
    } = row;
    let i = idx as i64;
    sqlx::query("INSERT INTO entries (idx, leaf_hash, kind, experiment, run, time, entry) VALUES ($1, $2, $3, $4, $5, $6, $7)")
        .bind(i)
        .bind(leaf_hash(bytes).to_hex())
        .bind(kind.clone())
        .bind(experiment.clone())
        .bind(run.clone())
        .bind(time.clone())
        .bind(text)
        .execute(&mut **tx)
        .await?;
    let Some(entry) = entry else { return Ok(()) };
    if let Some(exp) = &experiment {
        let (spec, title) = match &entry.body {
            EntryBody::Proposal(p) => (Some(p.spec_hash.to_string()), Some(p.title.clone())),
            _ => (None, None),
        };
        if let Some(h) = &spec {
            // A new spec voids an approval of the old one (as the catalog folds it).
            sqlx::query(
                "UPDATE experiments SET status = 'proposed' WHERE id = $1 AND status = 'approved' \
                 AND (spec_hash IS NULL OR spec_hash <> $2)",
            )
            .bind(exp.clone())
            .bind(h.clone())
            .execute(&mut **tx)
            .await?;
        }
        sqlx::query(
            "INSERT INTO experiments (id, first_entry, last_entry, spec_hash, title, created, updated) VALUES ($1, $2, $2, $3, $4, $5, $5) \
             ON CONFLICT (id) DO UPDATE SET last_entry = excluded.last_entry, updated = excluded.updated, \
             spec_hash = COALESCE(excluded.spec_hash, experiments.spec_hash), title = COALESCE(excluded.title, experiments.title)",
        )
        .bind(exp.clone())
        .bind(i)
        .bind(spec)
        .bind(title)
        .bind(time.clone())
        .execute(&mut **tx)
        .await?;
        // The experiment's own status, for search rows without a run: proposed, approved or
        // rejected (a rejection stands until a run; a run's status is the run's).
        let status = match &entry.body {
            EntryBody::Proposal(p) => Some((
                "UPDATE experiments SET author = $2, status = COALESCE(status, 'proposed') WHERE id = $1",
                Some(p.author.clone()),
            )),
            EntryBody::Approval(_) => Some((
                "UPDATE experiments SET status = 'approved' WHERE id = $1 AND (status IS NULL OR status = 'proposed')",
                None,
            )),
            EntryBody::Rejection(_) => Some((
                "UPDATE experiments SET status = 'rejected' WHERE id = $1 AND (status IS NULL OR status IN ('proposed', 'approved'))",
                None,
            )),
            _ => None,
        };
        if let Some((sql, author)) = status {
            let mut q = sqlx::query(sql).bind(exp.clone());
            if let Some(a) = author {
                q = q.bind(a);
            }
            q.execute(&mut **tx).await?;
        }
    }
    match entry.body {
        EntryBody::RunStarted(b) => {
            sqlx::query(
                    "INSERT INTO runs (id, experiment, spec_hash, started_entry, status, started) VALUES ($1, $2, $3, $4, 'running', $5) \
                     ON CONFLICT (id) DO UPDATE SET started_entry = excluded.started_entry, started = excluded.started",
                )
                .bind(b.run.0)
                .bind(experiment)
                .bind(b.spec_hash.to_string())
                .bind(i)
                .bind(time.clone())
                .execute(&mut **tx)
                .await?;
        }
        EntryBody::Result(b) => {
            sqlx::query(
                    "INSERT INTO runs (id, experiment, spec_hash, result_entry, status, steps, ended) VALUES ($1, $2, $3, $4, $5, $6, $7) \
                     ON CONFLICT (id) DO UPDATE SET result_entry = excluded.result_entry, status = excluded.status, steps = excluded.steps, ended = excluded.ended",
                )
                .bind(b.run.0.clone())
                .bind(experiment)
                .bind(b.spec_hash.to_string())
                .bind(i)
                .bind(b.ending.status.as_str().to_string())
                .bind(b.ending.steps as i64)
                .bind(time.clone())
                .execute(&mut **tx)
                .await?;
            for (name, value) in &b.ending.final_metrics {
                if !value.is_finite() {
                    continue;
                }
                sqlx::query(
                    "INSERT INTO final_metrics (run, name, value) VALUES ($1, $2, $3) \
                     ON CONFLICT (run, name) DO UPDATE SET value = excluded.value",
                )
                .bind(b.run.0.clone())
                .bind(name.clone())
                .bind(*value)
                .execute(&mut **tx)
                .await?;
            }
            let points = b
                .ending
                .final_metrics
                .iter()
                .map(|(name, value)| (name.clone(), b.ending.steps, *value))
                .collect();
            insert_points(tx, &b.run.0, i as u64, points).await?;
        }
        _ => {}
    }
    Ok(())
}

/// Rows per multi-row `INSERT` of metric points (5 parameters each: well under SQLite's 32,766
/// and PostgreSQL's 65,535 bound parameters per statement).
const POINTS_PER_STATEMENT: usize = 500;

/// Upserts one run's metric points from entry `idx`, many rows per statement: one statement per
/// point costs a round trip through the driver each, which made indexing a chunk of router
/// telemetry (thousands of points) take longer than the steps that produced it. A point
/// repeated within the batch keeps its last value (PostgreSQL refuses to upsert one row twice in
/// one statement).
async fn insert_points(
    tx: &mut sqlx::Transaction<'_, sqlx::Any>,
    run: &str,
    idx: u64,
    points: Vec<(String, u64, f64)>,
) -> Result<(), sqlx::Error> {
    let mut last: std::collections::BTreeMap<(String, u64), f64> = Default::default();
    for (name, step, value) in points {
        last.insert((name, step), value);
    }
    let rows: Vec<((String, u64), f64)> = last.into_iter().collect();
    if !rows.is_empty() {
        curves::mark(tx, run).await?;
    }
    // PostgreSQL numbers its parameters; SQLite gets anonymous `?`s, because the driver maps
    // each numbered one by name, a scan of every name per parameter (quadratic per statement).
    let numbered = (**tx).backend_name() == "PostgreSQL";
    for batch in rows.chunks(POINTS_PER_STATEMENT) {
        let mut sql =
            String::from("INSERT INTO metric_points (run, name, step, value, entry) VALUES ");
        for k in 0..batch.len() {
            if k > 0 {
                sql.push_str(", ");
            }
            if numbered {
                let p = 5 * k;
                sql.push_str(&format!(
                    "(${}, ${}, ${}, ${}, ${})",
                    p + 1,
                    p + 2,
                    p + 3,
                    p + 4,
                    p + 5
                ));
            } else {
                sql.push_str("(?, ?, ?, ?, ?)");
            }
        }
        sql.push_str(
            " ON CONFLICT (run, name, step) DO UPDATE SET value = excluded.value, entry = excluded.entry",
        );
        let mut q = sqlx::query(&sql);
        for ((name, step), value) in batch {
            q = q
                .bind(run.to_string())
                .bind(name.clone())
                .bind(*step as i64)
                .bind(*value)
                .bind(idx as i64);
        }
        q.execute(&mut **tx).await?;
    }
    Ok(())
}
