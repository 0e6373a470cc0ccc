-- Trust (issue 16): the run a reproduction job re-runs, at most one open reproduction per run
-- (a second `/reproduce` while one waits or runs is refused by this index, race or not), and
-- the proposal entries each author caused, for the per-author daily limit.
ALTER TABLE jobs ADD COLUMN reproduces TEXT;
CREATE UNIQUE INDEX jobs_one_reproduction ON jobs (reproduces)
    WHERE kind = 'reproduction' AND state IN ('queued', 'held', 'leased', 'running');
CREATE TABLE proposal_entries (
    author      TEXT   NOT NULL,
    experiment  TEXT   NOT NULL,
    entry       BIGINT NOT NULL,
    created_at  BIGINT NOT NULL
);
CREATE INDEX proposal_entries_author ON proposal_entries (author, created_at);
