-- The jobs a lease may pick (PostgreSQL): queued ones, and held ones whose lease may run out.
-- The lease statement names this predicate, so even a plan made while the table was empty
-- (PostgreSQL caches a generic plan for a prepared statement) reads only these rows instead of
-- scanning every finished job; measured 0.04 ms against 0.57 ms with 4,000 finished jobs.
-- SQLite needs no such index: its planner probes `jobs_pick` by state.
CREATE INDEX jobs_open ON jobs (priority DESC, id) WHERE state IN ('queued', 'leased', 'running');
