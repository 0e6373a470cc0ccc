-- Community debugging (issue 19): notes written through `/note` (for the per-author rate limit
-- and to find the note an edited comment supersedes), the anomalies workers flagged (the
-- `/metrics` counter by kind), and the alerts raised, at most one per (run, kind): the
-- primary key makes a second alert of a kind for a run a no-op, race or not. A stalled run's
-- alert is cleared (`cleared_at`) when the run steps again; the stalled-runs gauge counts the
-- uncleared ones of running jobs.
CREATE TABLE annotations (
    entry       BIGINT PRIMARY KEY,
    author      TEXT   NOT NULL,
    experiment  TEXT   NOT NULL,
    run         TEXT   NOT NULL,
    url         TEXT   NOT NULL,
    created_at  BIGINT NOT NULL
);
CREATE INDEX annotations_author ON annotations (author, created_at);
CREATE INDEX annotations_url ON annotations (url, entry);
CREATE TABLE anomalies (
    entry       BIGINT PRIMARY KEY,
    run         TEXT   NOT NULL,
    kind        TEXT   NOT NULL,
    step        BIGINT NOT NULL,
    created_at  BIGINT NOT NULL
);
CREATE INDEX anomalies_kind ON anomalies (kind);
CREATE TABLE run_alerts (
    run         TEXT   NOT NULL,
    kind        TEXT   NOT NULL,
    experiment  TEXT   NOT NULL,
    created_at  BIGINT NOT NULL,
    cleared_at  BIGINT,
    PRIMARY KEY (run, kind)
);
