-- A sign-in is recorded as a failure before its password is checked (so that guesses sent at
-- once are all counted), under an id of its own, and taken back when the password was right
-- or when the attempt was refused for being over the limits.
ALTER TABLE login_failures ADD COLUMN attempt TEXT;
CREATE INDEX login_failures_by_attempt ON login_failures (attempt);
