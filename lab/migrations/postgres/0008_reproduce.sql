-- Issue 22: independent reproduction and sweeps.
-- A reproduction the lab queues by itself must run elsewhere: never on `avoid_worker` (the
-- worker that made the run), and not on a worker of `avoid_host` while a worker of another
-- host has been seen in the last minute. `automatic` marks the lab's own (policy) jobs.
ALTER TABLE jobs ADD COLUMN avoid_worker TEXT;
ALTER TABLE jobs ADD COLUMN avoid_host TEXT;
ALTER TABLE jobs ADD COLUMN automatic BIGINT NOT NULL DEFAULT 0;
-- Which host each worker runs on, and when it last asked for work.
CREATE TABLE worker_hosts (
    worker   TEXT   PRIMARY KEY,
    host     TEXT   NOT NULL,
    seen_at  BIGINT NOT NULL
);
-- A sweep proposed in one issue: its file's hash (what one approval binds), its `sweep` entry
-- as JSON (children, metric, gate), who approved which hash, and the gate's decision once.
CREATE TABLE sweeps (
    experiment     TEXT   PRIMARY KEY,
    parent_hash    TEXT   NOT NULL,
    body           TEXT   NOT NULL,
    entry          BIGINT NOT NULL,
    approved_hash  TEXT,
    approver       TEXT,
    gate_state     TEXT,
    gate_entry     BIGINT,
    updated_at     BIGINT NOT NULL
);
