-- Run search (issue 19): the facts the dashboard's query language filters on, derived from
-- the log like every other row. Portable SQL: the same text runs on SQLite and PostgreSQL.
ALTER TABLE experiments ADD COLUMN author TEXT;
ALTER TABLE experiments ADD COLUMN status TEXT;
ALTER TABLE experiments ADD COLUMN created TEXT;
ALTER TABLE experiments ADD COLUMN updated TEXT;
ALTER TABLE runs ADD COLUMN started TEXT;
ALTER TABLE runs ADD COLUMN ended TEXT;
CREATE INDEX runs_experiment ON runs (experiment);
-- Each leaf of a spec's canonical JSON: `model.moe.n_experts` = 8, `experiment.tags` = "moe"
-- (one row per array element); numbers in `num`, strings and booleans in `text`.
CREATE TABLE spec_fields (
    spec_hash TEXT NOT NULL,
    path TEXT NOT NULL,
    num DOUBLE PRECISION,
    text TEXT
);
CREATE INDEX spec_fields_by_hash ON spec_fields (spec_hash, path);
CREATE INDEX spec_fields_by_path ON spec_fields (path, num);
-- A run's final value of each metric (its `result` entry).
CREATE TABLE final_metrics (
    run TEXT NOT NULL,
    name TEXT NOT NULL,
    value DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (run, name)
);
CREATE INDEX final_metrics_by_name ON final_metrics (name, value);
-- The rows are derived: clear them so the next sync rebuilds them with the new facts.
DELETE FROM metric_points;
DELETE FROM runs;
DELETE FROM experiments;
DELETE FROM entries;
