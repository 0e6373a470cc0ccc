//! A transparency-log witness per C2SP tlog-witness: it keeps, for each (origin, log key) it is
//! configured to follow, the latest checkpoint it cosigned, and cosigns a new one only when a
//! consistency proof shows that it extends that one.
//!
//! [`Witness::add_checkpoint`] is the whole `add-checkpoint` call without HTTP: it parses the
//! request body (`old <size>`, up to 63 base64 proof lines, an empty line, the signed
//! checkpoint), applies the spec's checks in its order, and answers the cosignature lines or a
//! [`Refusal`] whose [`Refusal::status`] is the spec's HTTP status (400, 403, 404, 409 with the
//! witness's size, 422). State lives in SQLite (WAL, `synchronous = FULL`: a cosigned
//! checkpoint is on disk before the answer). The check of the old size and the update are
//! atomic: one lock per log serialises its requests, and the update is conditional on the
//! stored size, so two racing requests can never roll a log back.
//!
//! A checkpoint validly signed by the log that contradicts what the witness holds (same size
//! and another root, a consistency proof that fails, a smaller tree than the one cosigned) is
//! evidence of a fork: it is recorded in the `forks` table with both notes ([`Witness::forks`])
//! before the refusal is answered. Not here: the HTTP server (`glassbox witness serve` puts
//! this behind the bounded listener of `glassbox-web`), and the log's side of the protocol
//! ([`crate::cosigning`]).

use std::collections::HashMap;
use std::fmt;
use std::path::Path;
use std::str::FromStr;
use std::sync::{Arc, Mutex};

use base64::Engine as _;
use sqlx::Row;
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};

use crate::checkpoint::{CheckpointError, SignedCheckpoint, VerifierKey};
use crate::cosignature::CosigningKey;
use crate::merkle::{MerkleHash, TreeSize, empty_root, verify_consistency};

const B64: base64::engine::GeneralPurpose = base64::engine::general_purpose::STANDARD;

/// The most consistency proof lines a request may carry (the spec's limit).
pub const MAX_PROOF_LINES: usize = 63;

/// The most bytes of an `add-checkpoint` body: the old size line, 63 proof lines and a
/// checkpoint note of at most 64 KiB (as `ReadLimit::CHECKPOINT`).
pub const MAX_REQUEST_BYTES: usize = 32 + MAX_PROOF_LINES * 46 + 64 * 1024;

/// The witness refuses the request; [`Refusal::status`] is the HTTP status the spec names.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// The body is not an `add-checkpoint` request, or the old size exceeds the new one.
    #[error("bad request: {0}")]
    BadRequest(String),
    /// No log with this origin is configured.
    #[error("unknown log origin {0:?}: this witness is not configured to follow it")]
    UnknownOrigin(String),
    /// No valid signature by a configured key for the origin.
    #[error("checkpoint is not signed by a key this witness trusts for its origin: {0}")]
    Forbidden(String),
    /// The old size is not the size of the checkpoint the witness last cosigned.
    #[error(
        "old size {old} is not the size of the latest checkpoint this witness cosigned for the log, {held}"
    )]
    Conflict {
        /// The old size sent.
        old: u64,
        /// The witness's size (the body of the 409).
        held: u64,
    },
    /// The checkpoint does not extend what the witness holds.
    #[error("{0}")]
    Unprocessable(String),
}

impl Refusal {
    /// The HTTP status C2SP tlog-witness gives this refusal.
    pub fn status(&self) -> u16 {
        match self {
            Refusal::BadRequest(_) => 400,
            Refusal::Forbidden(_) => 403,
            Refusal::UnknownOrigin(_) => 404,
            Refusal::Conflict { .. } => 409,
            Refusal::Unprocessable(_) => 422,
        }
    }

    /// The response body: the witness's size and a newline for a 409 (content type
    /// `text/x.tlog.size`), else the reason as text.
    pub fn body(&self) -> String {
        match self {
            Refusal::Conflict { held, .. } => format!("{held}\n"),
            other => format!("{other}\n"),
        }
    }
}

/// The witness could not do its work (its database failed).
#[derive(Debug, thiserror::Error)]
pub enum WitnessError {
    /// The request was refused as the spec says.
    #[error(transparent)]
    Refused(#[from] Refusal),
    /// The state database failed.
    #[error("witness state database {path}: {reason}")]
    State {
        /// Where.
        path: String,
        /// Why.
        reason: String,
    },
    /// A key could not be used.
    #[error(transparent)]
    Key(#[from] CheckpointError),
}

/// A parsed `add-checkpoint` request body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AddCheckpoint {
    /// The size the log believes the witness holds.
    pub old_size: u64,
    /// The consistency proof from `old_size` to the checkpoint's size.
    pub proof: Vec<MerkleHash>,
    /// The signed checkpoint note.
    pub note: Vec<u8>,
}

impl AddCheckpoint {
    /// The request body, as the log sends it.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = format!("old {}\n", self.old_size);
        for h in &self.proof {
            out.push_str(&h.to_base64());
            out.push('\n');
        }
        out.push('\n');
        let mut out = out.into_bytes();
        out.extend_from_slice(&self.note);
        out
    }

    /// Parses a request body, naming the first line that is wrong.
    pub fn parse(body: &[u8]) -> Result<Self, Refusal> {
        let bad = |s: String| Refusal::BadRequest(s);
        if body.len() > MAX_REQUEST_BYTES {
            return Err(bad(format!(
                "body is {} bytes; the most an add-checkpoint request may be is {MAX_REQUEST_BYTES}",
                body.len()
            )));
        }
        let mut rest = body;
        let mut line = || -> Result<&[u8], Refusal> {
            let nl = rest.iter().position(|&b| b == b'\n').ok_or_else(|| {
                bad("the header ends before its empty line (every line ends in a newline)".into())
            })?;
            let (l, r) = rest.split_at(nl);
            rest = &r[1..];
            Ok(l)
        };
        let first = line()?;
        let size_text = first.strip_prefix(b"old ").ok_or_else(|| {
            bad(format!(
                "first line {:?} is not `old <size>`",
                String::from_utf8_lossy(&first[..first.len().min(40)])
            ))
        })?;
        let old_size = parse_decimal(size_text).ok_or_else(|| {
            bad(format!(
                "old size {:?} is not a decimal number without leading zeroes",
                String::from_utf8_lossy(&size_text[..size_text.len().min(40)])
            ))
        })?;
        let mut proof = Vec::new();
        loop {
            let l = line()?;
            if l.is_empty() {
                break;
            }
            if proof.len() == MAX_PROOF_LINES {
                return Err(bad(format!(
                    "more than {MAX_PROOF_LINES} consistency proof lines"
                )));
            }
            let h = B64
                .decode(l)
                .ok()
                .and_then(|raw| MerkleHash::from_slice(&raw))
                .ok_or_else(|| {
                    bad(format!(
                        "proof line {} is not a base64 32-byte hash",
                        proof.len() + 1
                    ))
                })?;
            proof.push(h);
        }
        Ok(AddCheckpoint {
            old_size,
            proof,
            note: rest.to_vec(),
        })
    }
}

/// `0` or a decimal without leading zeroes that fits a u64.
fn parse_decimal(text: &[u8]) -> Option<u64> {
    if text.is_empty()
        || !text.iter().all(u8::is_ascii_digit)
        || (text.len() > 1 && text[0] == b'0')
    {
        return None;
    }
    std::str::from_utf8(text).ok()?.parse().ok()
}

/// One recorded piece of evidence that a log forked (or tried to roll back).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForkEvidence {
    /// The log's origin.
    pub origin: String,
    /// The log key that signed both.
    pub log_key: String,
    /// When the witness saw it (POSIX seconds).
    pub seen_at: u64,
    /// What contradicts what.
    pub reason: String,
    /// The checkpoint the witness had cosigned.
    pub held_note: String,
    /// The checkpoint submitted.
    pub submitted_note: String,
}

impl fmt::Display for ForkEvidence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} (key {}) at {}: {}\n--- held:\n{}--- submitted:\n{}",
            self.origin,
            self.log_key,
            self.seen_at,
            self.reason,
            self.held_note,
            self.submitted_note
        )
    }
}

/// The latest checkpoint cosigned for one log.
#[derive(Debug, Clone)]
struct Held {
    size: u64,
    root: MerkleHash,
    note: String,
}

/// One lock per (origin, log key).
type LogLocks = HashMap<(String, String), Arc<tokio::sync::Mutex<()>>>;

/// A witness: its key, the logs it follows, and its state.
pub struct Witness {
    key: CosigningKey,
    /// Origin -> the keys trusted for it.
    logs: HashMap<String, Vec<VerifierKey>>,
    db: SqlitePool,
    db_path: String,
    /// One lock per (origin, log key): the check of the old size and the update are atomic.
    locks: Mutex<LogLocks>,
}

impl fmt::Debug for Witness {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Witness")
            .field("key", &self.key.verifier_key().to_string())
            .field("logs", &self.logs.keys().collect::<Vec<_>>())
            .field("db", &self.db_path)
            .finish()
    }
}

const SCHEMA: &[&str] = &[
    "CREATE TABLE IF NOT EXISTS logs (
        origin TEXT NOT NULL,
        log_key TEXT NOT NULL,
        size INTEGER NOT NULL,
        root BLOB NOT NULL,
        note TEXT NOT NULL,
        updated_at INTEGER NOT NULL,
        PRIMARY KEY (origin, log_key))",
    "CREATE TABLE IF NOT EXISTS forks (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        origin TEXT NOT NULL,
        log_key TEXT NOT NULL,
        seen_at INTEGER NOT NULL,
        reason TEXT NOT NULL,
        held_note TEXT NOT NULL,
        submitted_note TEXT NOT NULL)",
];

/// The current time as POSIX seconds.
pub fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(1)
}

impl Witness {
    /// Opens (or creates) the witness state at `path` (a SQLite file); `logs` are the logs'
    /// verifier keys, each log's origin being its key's name.
    pub async fn open(
        path: &Path,
        key: CosigningKey,
        logs: Vec<VerifierKey>,
    ) -> Result<Self, WitnessError> {
        let db_path = path.display().to_string();
        let err = |e: sqlx::Error| WitnessError::State {
            path: db_path.clone(),
            reason: e.to_string(),
        };
        let opts = SqliteConnectOptions::from_str(&format!("sqlite://{db_path}"))
            .map_err(err)?
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Full);
        let db = SqlitePoolOptions::new()
            .max_connections(1)
            .connect_with(opts)
            .await
            .map_err(err)?;
        for stmt in SCHEMA {
            sqlx::query(stmt).execute(&db).await.map_err(err)?;
        }
        let mut by_origin: HashMap<String, Vec<VerifierKey>> = HashMap::new();
        for k in logs {
            by_origin.entry(k.name.clone()).or_default().push(k);
        }
        Ok(Self {
            key,
            logs: by_origin,
            db,
            db_path,
            locks: Mutex::new(HashMap::new()),
        })
    }

    fn state_err(&self, e: sqlx::Error) -> WitnessError {
        WitnessError::State {
            path: self.db_path.clone(),
            reason: e.to_string(),
        }
    }

    /// The witness's public key.
    pub fn verifier_key(&self) -> crate::cosignature::CosignerKey {
        self.key.verifier_key()
    }

    /// `add-checkpoint` at the current time: the cosignature lines to answer with.
    pub async fn add_checkpoint(&self, body: &[u8]) -> Result<Vec<u8>, WitnessError> {
        self.add_checkpoint_at(body, unix_now()).await
    }

    /// `add-checkpoint`, cosigning with timestamp `now` (POSIX seconds).
    pub async fn add_checkpoint_at(&self, body: &[u8], now: u64) -> Result<Vec<u8>, WitnessError> {
        let req = AddCheckpoint::parse(body)?;
        let signed = SignedCheckpoint::parse(&req.note)
            .map_err(|e| Refusal::BadRequest(format!("the checkpoint: {e}")))?;
        let cp = &signed.checkpoint;
        let keys = self
            .logs
            .get(&cp.origin)
            .ok_or_else(|| Refusal::UnknownOrigin(cp.origin.clone()))?;
        let log_key = trusted_signer(keys, &req.note)?;
        if req.old_size > cp.size.0 {
            return Err(Refusal::BadRequest(format!(
                "old size {} is larger than the checkpoint's size {}",
                req.old_size, cp.size.0
            ))
            .into());
        }
        if cp.size.0 == 0 && cp.root != empty_root() {
            return Err(Refusal::Unprocessable(
                "a checkpoint of size 0 must have the empty tree's root".into(),
            )
            .into());
        }

        let lock = {
            let mut locks = self.locks.lock().unwrap_or_else(|p| p.into_inner());
            locks
                .entry((cp.origin.clone(), log_key.clone()))
                .or_default()
                .clone()
        };
        let _guard = lock.lock().await;
        let held = self.held(&cp.origin, &log_key).await?;
        let held_size = held.as_ref().map_or(0, |h| h.size);
        let submitted = String::from_utf8_lossy(&req.note).into_owned();

        // A signed checkpoint that contradicts the cosigned one is evidence, whatever old size
        // the request names: same size and another root, or a smaller tree.
        if let Some(h) = &held
            && cp.size.0 == h.size
            && cp.root != h.root
        {
            let reason = format!(
                "fork: a checkpoint of size {} with root {} was cosigned, this one has root {}",
                h.size,
                h.root.to_base64(),
                cp.root.to_base64()
            );
            self.record_fork(&cp.origin, &log_key, now, &reason, &h.note, &submitted)
                .await?;
            if req.old_size != h.size {
                return Err(Refusal::Conflict {
                    old: req.old_size,
                    held: h.size,
                }
                .into());
            }
            return Err(Refusal::Unprocessable(reason).into());
        }
        if req.old_size != held_size {
            if let Some(h) = &held
                && cp.size.0 < h.size
            {
                let reason = format!(
                    "rollback: size {} was cosigned, this checkpoint has size {}",
                    h.size, cp.size.0
                );
                self.record_fork(&cp.origin, &log_key, now, &reason, &h.note, &submitted)
                    .await?;
            }
            return Err(Refusal::Conflict {
                old: req.old_size,
                held: held_size,
            }
            .into());
        }
        let held_root = held.as_ref().map_or_else(empty_root, |h| h.root);
        if req.old_size == 0 && !req.proof.is_empty() {
            return Err(Refusal::Unprocessable(
                "old size is 0, so the consistency proof must be empty".into(),
            )
            .into());
        }
        if let Err(e) = verify_consistency(
            TreeSize(req.old_size),
            cp.size,
            &held_root,
            &cp.root,
            &req.proof,
        ) {
            let reason = format!(
                "the consistency proof from size {} to {} does not verify: {e}",
                req.old_size, cp.size.0
            );
            if let Some(h) = &held {
                self.record_fork(&cp.origin, &log_key, now, &reason, &h.note, &submitted)
                    .await?;
            }
            return Err(Refusal::Unprocessable(reason).into());
        }

        let line = self.key.cosign(&signed.text, now.max(1));
        let mut with_ours = signed.clone();
        with_ours
            .signatures
            .retain(|s| !(s.name == line.name && s.key_id == line.key_id));
        with_ours.signatures.push(line.clone());
        let stored_note = String::from_utf8_lossy(&with_ours.to_bytes()).into_owned();
        let updated = match &held {
            Some(h) => sqlx::query(
                "UPDATE logs SET size = ?, root = ?, note = ?, updated_at = ? \
                 WHERE origin = ? AND log_key = ? AND size = ?",
            )
            .bind(cp.size.0 as i64)
            .bind(cp.root.0.to_vec())
            .bind(&stored_note)
            .bind(now as i64)
            .bind(&cp.origin)
            .bind(&log_key)
            .bind(h.size as i64)
            .execute(&self.db)
            .await
            .map_err(|e| self.state_err(e))?
            .rows_affected(),
            None => sqlx::query(
                "INSERT INTO logs (origin, log_key, size, root, note, updated_at) \
                 VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
            )
            .bind(&cp.origin)
            .bind(&log_key)
            .bind(cp.size.0 as i64)
            .bind(cp.root.0.to_vec())
            .bind(&stored_note)
            .bind(now as i64)
            .execute(&self.db)
            .await
            .map_err(|e| self.state_err(e))?
            .rows_affected(),
        };
        if updated != 1 {
            // Another process changed the state under us: answer with what it holds now.
            let now_held = self.held(&cp.origin, &log_key).await?.map_or(0, |h| h.size);
            return Err(Refusal::Conflict {
                old: req.old_size,
                held: now_held,
            }
            .into());
        }
        Ok(line.to_line().into_bytes())
    }

    async fn held(&self, origin: &str, log_key: &str) -> Result<Option<Held>, WitnessError> {
        let row = sqlx::query("SELECT size, root, note FROM logs WHERE origin = ? AND log_key = ?")
            .bind(origin)
            .bind(log_key)
            .fetch_optional(&self.db)
            .await
            .map_err(|e| self.state_err(e))?;
        let Some(row) = row else { return Ok(None) };
        let size: i64 = row.get(0);
        let root: Vec<u8> = row.get(1);
        let note: String = row.get(2);
        let root = MerkleHash::from_slice(&root).ok_or_else(|| WitnessError::State {
            path: self.db_path.clone(),
            reason: format!(
                "the stored root of {origin} is {} bytes, not 32",
                root.len()
            ),
        })?;
        Ok(Some(Held {
            size: size as u64,
            root,
            note,
        }))
    }

    async fn record_fork(
        &self,
        origin: &str,
        log_key: &str,
        now: u64,
        reason: &str,
        held_note: &str,
        submitted_note: &str,
    ) -> Result<(), WitnessError> {
        sqlx::query(
            "INSERT INTO forks (origin, log_key, seen_at, reason, held_note, submitted_note) \
             VALUES (?, ?, ?, ?, ?, ?)",
        )
        .bind(origin)
        .bind(log_key)
        .bind(now as i64)
        .bind(reason)
        .bind(held_note)
        .bind(submitted_note)
        .execute(&self.db)
        .await
        .map_err(|e| self.state_err(e))?;
        Ok(())
    }

    /// Every fork recorded, oldest first.
    pub async fn forks(&self) -> Result<Vec<ForkEvidence>, WitnessError> {
        read_forks(&self.db).await.map_err(|e| self.state_err(e))
    }

    /// The latest checkpoint cosigned for the log whose origin hashes to `origin_hash`
    /// (lowercase hex SHA-256 of the origin line), with the log's and this witness's
    /// signatures: the monitoring API's `GET <prefix>/<origin hash>/checkpoint`.
    pub async fn latest(&self, origin_hash: &str) -> Result<Option<String>, WitnessError> {
        use sha2::Digest as _;
        let Some(origin) = self
            .logs
            .keys()
            .find(|o| hex::encode(sha2::Sha256::digest(o.as_bytes())) == origin_hash)
        else {
            return Ok(None);
        };
        let row =
            sqlx::query("SELECT note FROM logs WHERE origin = ? ORDER BY updated_at DESC LIMIT 1")
                .bind(origin)
                .fetch_optional(&self.db)
                .await
                .map_err(|e| self.state_err(e))?;
        Ok(row.map(|r| r.get(0)))
    }

    /// Closes the database.
    pub async fn close(&self) {
        self.db.close().await;
    }
}

async fn read_forks(db: &SqlitePool) -> Result<Vec<ForkEvidence>, sqlx::Error> {
    let rows = sqlx::query(
        "SELECT origin, log_key, seen_at, reason, held_note, submitted_note FROM forks ORDER BY id",
    )
    .fetch_all(db)
    .await?;
    Ok(rows
        .iter()
        .map(|r| ForkEvidence {
            origin: r.get(0),
            log_key: r.get(1),
            seen_at: r.get::<i64, _>(2) as u64,
            reason: r.get(3),
            held_note: r.get(4),
            submitted_note: r.get(5),
        })
        .collect())
}

/// The forks recorded in the witness state at `path`, oldest first, read without the
/// witness's key (`glassbox witness forks`).
pub async fn recorded_forks(path: &Path) -> Result<Vec<ForkEvidence>, WitnessError> {
    let shown = path.display().to_string();
    let err = |e: sqlx::Error| WitnessError::State {
        path: shown.clone(),
        reason: e.to_string(),
    };
    let opts = SqliteConnectOptions::from_str(&format!("sqlite://{shown}"))
        .map_err(err)?
        .read_only(true);
    let db = SqlitePoolOptions::new()
        .max_connections(1)
        .connect_with(opts)
        .await
        .map_err(err)?;
    let forks = read_forks(&db).await.map_err(err);
    db.close().await;
    forks
}

/// The configured key that validly signed `note`, as text; `Forbidden` when none did or one
/// that matches by name and id fails (signed-note says such a note is malformed).
fn trusted_signer(keys: &[VerifierKey], note: &[u8]) -> Result<String, Refusal> {
    let mut signer = None;
    let mut reasons = Vec::new();
    for k in keys {
        match k.verify(note) {
            Ok(_) => {
                signer.get_or_insert_with(|| k.to_string());
            }
            Err(e @ CheckpointError::Unsigned { .. }) => reasons.push(e.to_string()),
            Err(e) => return Err(Refusal::Forbidden(e.to_string())),
        }
    }
    signer.ok_or_else(|| Refusal::Forbidden(reasons.join("; ")))
}
