-- The flow's state (PostgreSQL): proposals as the lab tracks them, forecasts registered for a
-- spec hash, and the outbox of notifications for the bot. Times are Unix milliseconds.
CREATE TABLE proposals (
    experiment      TEXT   PRIMARY KEY,
    spec_hash       TEXT   NOT NULL,
    author          TEXT   NOT NULL,
    title           TEXT   NOT NULL,
    proposal_entry  BIGINT NOT NULL,
    approved_hash   TEXT,
    approver        TEXT,
    approval_entry  BIGINT,
    rejected_reason TEXT,
    updated_at      BIGINT NOT NULL
);
CREATE TABLE forecasts (
    spec_hash  TEXT             NOT NULL,
    metric     TEXT             NOT NULL,
    value      DOUBLE PRECISION NOT NULL,
    tolerance  DOUBLE PRECISION NOT NULL,
    entry      BIGINT           NOT NULL,
    PRIMARY KEY (spec_hash, entry)
);
CREATE TABLE notifications (
    id           BIGSERIAL PRIMARY KEY,
    experiment   TEXT   NOT NULL,
    event        TEXT   NOT NULL,
    created_at   BIGINT NOT NULL,
    delivered_at BIGINT
);
CREATE INDEX notifications_pending ON notifications (delivered_at, id);
ALTER TABLE jobs ADD COLUMN kind TEXT NOT NULL DEFAULT 'run';
