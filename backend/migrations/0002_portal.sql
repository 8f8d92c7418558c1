-- The team portal: accounts, teams, sessions and API tokens; review queues, their items,
-- leases, verdicts and drafts; the audit log. Portable SQL, as 0001. Secrets are stored as
-- hashes only: argon2id for passwords, SHA-256 for the random session, token and invite
-- secrets (256 bits each, so a fast hash is enough).

CREATE TABLE users (
    id TEXT PRIMARY KEY,
    email TEXT NOT NULL UNIQUE,
    name TEXT NOT NULL,
    password_hash TEXT NOT NULL,
    created_at TEXT NOT NULL
);

CREATE TABLE teams (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL UNIQUE,
    created_at TEXT NOT NULL
);

CREATE TABLE memberships (
    team_id TEXT NOT NULL REFERENCES teams (id) ON DELETE CASCADE,
    user_id TEXT NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    role TEXT NOT NULL,
    PRIMARY KEY (team_id, user_id)
);

CREATE TABLE sessions (
    secret_hash TEXT PRIMARY KEY,
    user_id TEXT NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    csrf TEXT NOT NULL,
    expires_at TEXT NOT NULL,
    created_at TEXT NOT NULL
);

CREATE TABLE api_tokens (
    id TEXT PRIMARY KEY,
    user_id TEXT NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    name TEXT NOT NULL,
    secret_hash TEXT NOT NULL UNIQUE,
    -- JSON list of scopes.
    scopes TEXT NOT NULL,
    created_at TEXT NOT NULL,
    revoked_at TEXT
);

CREATE TABLE invites (
    secret_hash TEXT PRIMARY KEY,
    team_id TEXT NOT NULL REFERENCES teams (id) ON DELETE CASCADE,
    email TEXT NOT NULL,
    role TEXT NOT NULL,
    created_by TEXT NOT NULL REFERENCES users (id),
    expires_at TEXT NOT NULL,
    used_at TEXT
);

-- Failed logins, for throttling (shared by every server process).
CREATE TABLE login_failures (
    email TEXT NOT NULL,
    at TEXT NOT NULL
);

CREATE INDEX login_failures_by_email ON login_failures (email, at);

CREATE TABLE queues (
    id TEXT PRIMARY KEY,
    team_id TEXT NOT NULL REFERENCES teams (id) ON DELETE CASCADE,
    name TEXT NOT NULL,
    overlap BIGINT NOT NULL,
    -- How long a lease lasts.
    lease_seconds BIGINT NOT NULL,
    -- The job its items came from, if any.
    job_id TEXT,
    created_at TEXT NOT NULL
);

CREATE TABLE items (
    id TEXT PRIMARY KEY,
    queue_id TEXT NOT NULL REFERENCES queues (id) ON DELETE CASCADE,
    seq BIGINT NOT NULL,
    original TEXT NOT NULL,
    label TEXT NOT NULL,
    counterfactual TEXT,
    target TEXT NOT NULL,
    method TEXT NOT NULL,
    -- The classifier's verdict on the counterfactual: NULL when not scored.
    flipped BIGINT,
    target_probability DOUBLE PRECISION,
    -- JSON: the full record (Counterfactual) when the item came from a job or a records file.
    record TEXT,
    -- Groups the counterfactuals of one original.
    original_hash TEXT NOT NULL,
    -- Live leases plus first-pass verdicts; 1 in `is_full` once that reaches the queue's overlap.
    claims BIGINT NOT NULL DEFAULT 0,
    is_full BIGINT NOT NULL DEFAULT 0,
    version BIGINT NOT NULL DEFAULT 0,
    -- JSON: the Outcome, once decided.
    outcome TEXT,
    -- 1 once decided (outcome set), 2 once a reviewer confirmed or overturned it.
    stage BIGINT NOT NULL DEFAULT 0
);

CREATE INDEX items_open ON items (queue_id, is_full, seq);
CREATE INDEX items_by_stage ON items (queue_id, stage, seq);
CREATE INDEX items_by_original ON items (queue_id, original_hash);

-- A lease: an item handed to one person. Kept after the verdict (state 'done') so that the
-- same person never gets the item again.
CREATE TABLE assignments (
    id TEXT PRIMARY KEY,
    queue_id TEXT NOT NULL REFERENCES queues (id) ON DELETE CASCADE,
    item_id TEXT NOT NULL REFERENCES items (id) ON DELETE CASCADE,
    user_id TEXT NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    -- 'leased', 'done' or 'skipped'.
    state TEXT NOT NULL,
    expires_at TEXT NOT NULL,
    created_at TEXT NOT NULL,
    UNIQUE (item_id, user_id)
);

CREATE INDEX assignments_live ON assignments (queue_id, state, expires_at);
CREATE INDEX assignments_by_user ON assignments (queue_id, user_id, state);

CREATE TABLE verdicts (
    id TEXT PRIMARY KEY,
    assignment_id TEXT REFERENCES assignments (id) ON DELETE CASCADE,
    queue_id TEXT NOT NULL REFERENCES queues (id) ON DELETE CASCADE,
    item_id TEXT NOT NULL REFERENCES items (id) ON DELETE CASCADE,
    user_id TEXT NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    -- 1: first pass; 2: a reviewer's confirmation or overturn.
    pass BIGINT NOT NULL,
    request_id TEXT NOT NULL,
    verdict TEXT NOT NULL,
    text TEXT,
    label TEXT,
    override_classifier BIGINT NOT NULL,
    -- Set when undone; undone verdicts stay for the audit trail.
    undone_at TEXT,
    created_at TEXT NOT NULL,
    UNIQUE (user_id, request_id)
);

CREATE INDEX verdicts_by_item ON verdicts (item_id, pass);
CREATE INDEX verdicts_by_queue ON verdicts (queue_id, user_id, created_at);

CREATE TABLE drafts (
    item_id TEXT NOT NULL REFERENCES items (id) ON DELETE CASCADE,
    user_id TEXT NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    text TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    PRIMARY KEY (item_id, user_id)
);

-- Append-only: what happened to each item, by whom.
CREATE TABLE audit_log (
    id TEXT PRIMARY KEY,
    team_id TEXT NOT NULL,
    queue_id TEXT,
    item_id TEXT,
    user_id TEXT,
    action TEXT NOT NULL,
    -- JSON.
    detail TEXT NOT NULL,
    at TEXT NOT NULL
);

CREATE INDEX audit_by_item ON audit_log (item_id, at);
