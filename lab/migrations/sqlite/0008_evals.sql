-- Evaluation jobs: `evaluates` is what one evaluates (a run's snapshot on a suite version, as
-- JSON: run, step, snapshot, suite, suite_hash); `eval_key` is that target in one string, and
-- at most one job per target waits or runs at a time.
ALTER TABLE jobs ADD COLUMN evaluates TEXT;
ALTER TABLE jobs ADD COLUMN eval_key TEXT;
CREATE UNIQUE INDEX jobs_one_eval ON jobs (eval_key)
    WHERE eval_key IS NOT NULL AND state IN ('queued', 'held', 'leased', 'running');
