-- The ledger index: derived from the log, rebuilt by `glassbox ledger reindex`.
-- Portable SQL: the same text runs on SQLite and PostgreSQL.
CREATE TABLE entries (
    idx BIGINT PRIMARY KEY,
    leaf_hash TEXT NOT NULL,
    kind TEXT NOT NULL,
    experiment TEXT,
    run TEXT,
    time TEXT NOT NULL,
    entry TEXT NOT NULL
);
CREATE INDEX entries_kind ON entries (kind, idx);
CREATE INDEX entries_experiment ON entries (experiment, idx);
CREATE INDEX entries_run ON entries (run, idx);

CREATE TABLE experiments (
    id TEXT PRIMARY KEY,
    first_entry BIGINT NOT NULL,
    last_entry BIGINT NOT NULL,
    spec_hash TEXT,
    title TEXT
);

CREATE TABLE runs (
    id TEXT PRIMARY KEY,
    experiment TEXT,
    spec_hash TEXT,
    started_entry BIGINT,
    result_entry BIGINT,
    status TEXT NOT NULL,
    steps BIGINT
);

CREATE TABLE metric_points (
    run TEXT NOT NULL,
    name TEXT NOT NULL,
    step BIGINT NOT NULL,
    value DOUBLE PRECISION NOT NULL,
    entry BIGINT NOT NULL,
    PRIMARY KEY (run, name, step)
);
