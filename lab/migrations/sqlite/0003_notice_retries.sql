-- Notices are retried independently (SQLite): a failed one waits `next_attempt_at` (Unix ms)
-- with its `attempts` and `last_error`, while the others go out; one GitHub refuses is given up
-- (`gave_up_at`) instead of blocking the outbox.
ALTER TABLE notifications ADD COLUMN attempts INTEGER NOT NULL DEFAULT 0;
ALTER TABLE notifications ADD COLUMN next_attempt_at INTEGER NOT NULL DEFAULT 0;
ALTER TABLE notifications ADD COLUMN last_error TEXT;
ALTER TABLE notifications ADD COLUMN gave_up_at INTEGER;
