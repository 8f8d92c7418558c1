-- Datasets and generation jobs belong to teams; jobs are claimed by one server process at a
-- time. Rows made before accounts existed have no team until `flipside users add` makes the
-- first team, which adopts them.

ALTER TABLE datasets ADD COLUMN team_id TEXT REFERENCES teams (id) ON DELETE CASCADE;
ALTER TABLE jobs ADD COLUMN team_id TEXT REFERENCES teams (id) ON DELETE CASCADE;
-- The server process running the job ('host:pid:random'), and when it last said so.
ALTER TABLE jobs ADD COLUMN runner TEXT;
ALTER TABLE jobs ADD COLUMN heartbeat_at TEXT;

-- Failed sign-ins are also counted per client address (password spraying across emails).
ALTER TABLE login_failures ADD COLUMN address TEXT;
CREATE INDEX login_failures_by_address ON login_failures (address, at);

CREATE INDEX datasets_by_team ON datasets (team_id, created_at);
CREATE INDEX jobs_by_team ON jobs (team_id, created_at);
