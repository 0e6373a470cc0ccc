//! The ledger's sequencer tables: `ledger_head` (the next index to hand out),
//! `ledger_integrated` (the size the integrator last published) and `ledger_entries` (every
//! entry's canonical bytes at its index).
//!
//! Sequencing is one `UPDATE ... RETURNING` on the head row, then the inserts, inside the
//! caller's transaction: concurrent sequencers take turns on that row (PostgreSQL's row lock,
//! SQLite's single writer), so indices are handed out in commit order, and a transaction that
//! rolls back hands its indices back — the sequence has no gaps. A committed index therefore
//! implies every lower one is committed too, which is what lets the integrator read
//! `idx >= size` in order. Not here: integrating into the log (`crate::recorder`), or deciding
//! what is recorded.

use sqlx::{Any, Executor, Row};

use crate::error::QueueError;

/// The sequencer's head.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Head {
    /// The index the next sequenced entry gets (= the entries sequenced so far).
    pub next: u64,
    /// The size of the latest checkpoint the integrator published.
    pub integrated: u64,
}

/// Rows per `INSERT` (well under both engines' bound-parameter limits).
const INSERT_ROWS: usize = 200;

/// The head, or `None` before the sequencer is set up.
pub(crate) async fn head<'e>(
    db: impl Executor<'e, Database = Any>,
) -> Result<Option<Head>, QueueError> {
    let row = sqlx::query(
        "SELECT h.next, i.size FROM ledger_head h, ledger_integrated i WHERE h.id = 1 AND i.id = 1",
    )
    .fetch_optional(db)
    .await?;
    Ok(match row {
        Some(r) => Some(Head {
            next: r.try_get::<i64, _>(0)? as u64,
            integrated: r.try_get::<i64, _>(1)? as u64,
        }),
        None => None,
    })
}

/// Sets the sequencer up over a log of `entries` (indices `0..entries.len()`): copies them in
/// and makes the head `(len, len)`. Does nothing when the head exists already (another process
/// set it up first); returns whether this call did it.
pub(crate) async fn set_up(
    tx: &mut sqlx::AnyConnection,
    entries: &[Vec<u8>],
    now: i64,
) -> Result<bool, QueueError> {
    let n = entries.len() as i64;
    let inserted = sqlx::query(
        "INSERT INTO ledger_head (id, next) VALUES (1, $1) ON CONFLICT (id) DO NOTHING",
    )
    .bind(n)
    .execute(&mut *tx)
    .await?
    .rows_affected();
    sqlx::query(
        "INSERT INTO ledger_integrated (id, size) VALUES (1, $1) ON CONFLICT (id) DO NOTHING",
    )
    .bind(n)
    .execute(&mut *tx)
    .await?;
    if inserted == 0 {
        return Ok(false);
    }
    insert_rows(tx, 0, entries, now).await?;
    Ok(true)
}

/// Sequences `entries` in the caller's transaction; returns the first one's index. The head
/// row stays locked until the transaction ends, so keep it short after this call.
pub(crate) async fn sequence(
    tx: &mut sqlx::AnyConnection,
    entries: &[Vec<u8>],
    now: i64,
) -> Result<u64, QueueError> {
    let n = entries.len() as i64;
    let row = sqlx::query("UPDATE ledger_head SET next = next + $1 WHERE id = 1 RETURNING next")
        .bind(n)
        .fetch_optional(&mut *tx)
        .await?
        .ok_or(QueueError::NotSequencing)?;
    let first = (row.try_get::<i64, _>(0)? - n) as u64;
    insert_rows(tx, first, entries, now).await?;
    Ok(first)
}

async fn insert_rows(
    tx: &mut sqlx::AnyConnection,
    first: u64,
    entries: &[Vec<u8>],
    now: i64,
) -> Result<(), QueueError> {
    for (c, chunk) in entries.chunks(INSERT_ROWS).enumerate() {
        let mut sql = String::from("INSERT INTO ledger_entries (idx, entry, sequenced_at) VALUES ");
        for i in 0..chunk.len() {
            if i > 0 {
                sql.push_str(", ");
            }
            sql.push_str(&format!("(${}, ${}, ${})", 3 * i + 1, 3 * i + 2, 3 * i + 3));
        }
        let mut q = sqlx::query(&sql);
        for (i, e) in chunk.iter().enumerate() {
            let idx = first + (c * INSERT_ROWS + i) as u64;
            q = q.bind(idx as i64).bind(e.clone()).bind(now);
        }
        q.execute(&mut *tx).await?;
    }
    Ok(())
}

/// The entries at `from..` in index order, at most `limit` of them.
pub(crate) async fn entries_from<'e>(
    db: impl Executor<'e, Database = Any>,
    from: u64,
    limit: u32,
) -> Result<Vec<(u64, Vec<u8>)>, QueueError> {
    let rows =
        sqlx::query("SELECT idx, entry FROM ledger_entries WHERE idx >= $1 ORDER BY idx LIMIT $2")
            .bind(from as i64)
            .bind(i64::from(limit))
            .fetch_all(db)
            .await?;
    let mut out = Vec::with_capacity(rows.len());
    for r in rows {
        out.push((r.try_get::<i64, _>(0)? as u64, r.try_get::<Vec<u8>, _>(1)?));
    }
    Ok(out)
}

/// The entry at `idx`, if sequenced.
pub(crate) async fn entry<'e>(
    db: impl Executor<'e, Database = Any>,
    idx: u64,
) -> Result<Option<Vec<u8>>, QueueError> {
    let row = sqlx::query("SELECT entry FROM ledger_entries WHERE idx = $1")
        .bind(idx as i64)
        .fetch_optional(db)
        .await?;
    Ok(match row {
        Some(r) => Some(r.try_get::<Vec<u8>, _>(0)?),
        None => None,
    })
}

/// Records that the log's checkpoint now covers `size` entries (never moves back).
pub(crate) async fn set_integrated<'e>(
    db: impl Executor<'e, Database = Any>,
    size: u64,
) -> Result<(), QueueError> {
    sqlx::query("UPDATE ledger_integrated SET size = $1 WHERE id = 1 AND size < $2")
        .bind(size as i64)
        .bind(size as i64)
        .execute(db)
        .await?;
    Ok(())
}
