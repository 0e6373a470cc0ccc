-- The job queue (SQLite). Times are Unix milliseconds (i64) written by the lab, so the same
-- queries run on SQLite and PostgreSQL.
CREATE TABLE jobs (
    id               INTEGER PRIMARY KEY AUTOINCREMENT,
    experiment       TEXT    NOT NULL,
    spec_hash        TEXT    NOT NULL,
    author           TEXT    NOT NULL,
    proposal_entry   BIGINT,
    approval_entry   BIGINT,
    priority         BIGINT  NOT NULL DEFAULT 0,
    state            TEXT    NOT NULL,
    attempts         BIGINT  NOT NULL DEFAULT 0,
    max_attempts     BIGINT  NOT NULL,
    lease_owner      TEXT,
    lease_expires_at BIGINT,
    cancel_requested BIGINT  NOT NULL DEFAULT 0,
    checkpoint_step  BIGINT,
    checkpoint_blob  TEXT,
    run_id           TEXT,
    reason           TEXT,
    created_at       BIGINT  NOT NULL,
    updated_at       BIGINT  NOT NULL
);
CREATE INDEX jobs_pick ON jobs (state, priority DESC, id);
CREATE INDEX jobs_author ON jobs (author, state);
