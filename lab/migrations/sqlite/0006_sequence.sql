-- The ledger's sequencer (issue 21): every entry is first inserted here, in the same
-- transaction as the operational change it records (a job's end, an approval's enqueue), and
-- gets its index in the log then, in commit order and without gaps: `ledger_head` is one row
-- that every sequencing transaction updates first, so they take turns and a rolled-back one
-- gives its indices back. The integrator then writes the entries to the log in index order and
-- moves `ledger_integrated.size` to the size of the checkpoint it published (a row of its own,
-- so the integrator never queues behind the sequencers for the head's row lock). The table keeps every entry
-- (the lab's log was copied in when the sequencer was first set up), so a process without the
-- log's files reads entries here.
CREATE TABLE ledger_head (
    id          INTEGER PRIMARY KEY CHECK (id = 1),
    next        BIGINT NOT NULL
);
CREATE TABLE ledger_integrated (
    id          INTEGER PRIMARY KEY CHECK (id = 1),
    size        BIGINT NOT NULL
);
CREATE TABLE ledger_entries (
    idx           BIGINT PRIMARY KEY,
    entry         BLOB   NOT NULL,
    sequenced_at  BIGINT NOT NULL
);
