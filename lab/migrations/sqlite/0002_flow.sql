-- The flow's state (SQLite): proposals as the lab tracks them, forecasts registered for a spec
-- hash, and the outbox of notifications for the bot. Times are Unix milliseconds.
CREATE TABLE proposals (
    experiment      TEXT    PRIMARY KEY,
    spec_hash       TEXT    NOT NULL,
    author          TEXT    NOT NULL,
    title           TEXT    NOT NULL,
    proposal_entry  INTEGER NOT NULL,
    approved_hash   TEXT,
    approver        TEXT,
    approval_entry  INTEGER,
    rejected_reason TEXT,
    updated_at      INTEGER NOT NULL
);
CREATE TABLE forecasts (
    spec_hash  TEXT    NOT NULL,
    metric     TEXT    NOT NULL,
    value      REAL    NOT NULL,
    tolerance  REAL    NOT NULL,
    entry      INTEGER NOT NULL,
    PRIMARY KEY (spec_hash, entry)
);
CREATE TABLE notifications (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    experiment   TEXT    NOT NULL,
    event        TEXT    NOT NULL,
    created_at   INTEGER NOT NULL,
    delivered_at INTEGER
);
CREATE INDEX notifications_pending ON notifications (delivered_at, id);
ALTER TABLE jobs ADD COLUMN kind TEXT NOT NULL DEFAULT 'run';
