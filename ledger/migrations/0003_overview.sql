-- Dashboard overviews (issue 20): each finished run's curves, downsampled once when the run's
-- `result` is indexed (LTTB, at most 2,000 points; a shorter curve whole), so the first view
-- of a run reads a few thousand points per chart and not its whole series. `points` is
-- `step:value;step:value;...` with each value in its shortest exact form; `total` counts the
-- curve's points (equal to the overview's when the overview is the whole curve).
-- Portable SQL: the same text runs on SQLite and PostgreSQL.
CREATE TABLE metric_overview (
    run TEXT NOT NULL,
    name TEXT NOT NULL,
    total BIGINT NOT NULL,
    points TEXT NOT NULL,
    PRIMARY KEY (run, name)
);
-- Runs whose points changed since their overview was drawn. The indexer marks a run here when
-- it writes a point of it and draws the overviews of the finished ones before it commits.
CREATE TABLE overview_pending (
    run TEXT PRIMARY KEY
);
-- Runs indexed before this migration get their overviews at the next sync.
INSERT INTO overview_pending (run) SELECT id FROM runs WHERE result_entry IS NOT NULL;
