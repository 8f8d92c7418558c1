-- Flipside's server database. Portable SQL: the same file runs on SQLite and Postgres (TEXT ids
-- made by the server, BIGINT counts, JSON and RFC 3339 timestamps as TEXT).

CREATE TABLE datasets (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    -- The uploaded file, relative to the server's data directory.
    file TEXT NOT NULL,
    -- JSON: how to read it (format and columns).
    read_options TEXT NOT NULL,
    examples BIGINT NOT NULL,
    -- JSON list of label names.
    labels TEXT NOT NULL,
    skipped BIGINT NOT NULL,
    created_at TEXT NOT NULL
);

CREATE TABLE jobs (
    id TEXT PRIMARY KEY,
    -- JSON: the JobRequest.
    request TEXT NOT NULL,
    status TEXT NOT NULL,
    total BIGINT NOT NULL DEFAULT 0,
    done BIGINT NOT NULL DEFAULT 0,
    written BIGINT NOT NULL DEFAULT 0,
    flipped BIGINT NOT NULL DEFAULT 0,
    failed_attempts BIGINT NOT NULL DEFAULT 0,
    given_up BIGINT NOT NULL DEFAULT 0,
    error TEXT,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL
);

CREATE INDEX jobs_by_status ON jobs (status, created_at);

-- The counterfactuals a job made: one row per item and target, never two.
CREATE TABLE job_records (
    job_id TEXT NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    item_key TEXT NOT NULL,
    -- The record's line number in the job's JSON-lines checkpoint: the order it was made in.
    seq BIGINT NOT NULL,
    flipped BIGINT NOT NULL,
    -- JSON: the full record, as `flipside generate` writes it.
    record TEXT NOT NULL,
    PRIMARY KEY (job_id, item_key)
);

CREATE INDEX job_records_by_seq ON job_records (job_id, flipped, seq);
