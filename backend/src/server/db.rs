//! The server's database: SQLite (one file, WAL) by default, Postgres when given a
//! `postgres://` URL. One set of migrations and one set of portable SQL statements serve both.

use std::path::Path;
use std::str::FromStr;
use std::time::Duration;

use anyhow::{Context, Result};
use flipside_shared::api::{Job, JobRequest, JobStatus};
use sqlx::migrate::{Migration, MigrationType, Migrator};
use sqlx::postgres::{PgPool, PgPoolOptions};
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};
use sqlx::{AssertSqlSafe, SqlSafeStr};

/// The checked-in migrations, in order.
const MIGRATIONS: [(i64, &str, &str); 4] = [
    (1, "init", include_str!("../../migrations/0001_init.sql")),
    (
        2,
        "portal",
        include_str!("../../migrations/0002_portal.sql"),
    ),
    (
        3,
        "team jobs",
        include_str!("../../migrations/0003_team_jobs.sql"),
    ),
    (
        4,
        "sign-in attempts",
        include_str!("../../migrations/0004_sign_in_attempts.sql"),
    ),
];

/// A connection pool to either database.
#[derive(Clone)]
pub enum Db {
    Sqlite(SqlitePool),
    Postgres(PgPool),
}

/// Runs `$body` with `$pool` bound to the concrete pool (the body compiles once per database).
macro_rules! with_pool {
    ($db:expr, |$pool:ident| $body:expr) => {
        match $db {
            $crate::server::db::Db::Sqlite($pool) => $body,
            $crate::server::db::Db::Postgres($pool) => $body,
        }
    };
}
pub(crate) use with_pool;

/// A dataset uploaded to the server.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredDataset {
    pub id: String,
    /// The team that owns it (`None` only for uploads made before accounts existed).
    pub team: Option<String>,
    pub name: String,
    /// The file, relative to the server's data directory.
    pub file: String,
    /// JSON: how to read the file.
    pub read_options: String,
    pub examples: i64,
    pub labels: Vec<String>,
    pub skipped: i64,
    pub created_at: String,
}

type DatasetRow = (
    String,
    Option<String>,
    String,
    String,
    String,
    i64,
    String,
    i64,
    String,
);
const DATASET_COLUMNS: &str =
    "id, team_id, name, file, read_options, examples, labels, skipped, created_at";
type JobRow = (
    String,
    String,
    String,
    i64,
    i64,
    i64,
    i64,
    i64,
    i64,
    Option<String>,
    String,
    String,
);

const JOB_COLUMNS: &str = "id, request, status, total, done, written, flipped, failed_attempts, \
                           given_up, error, created_at, updated_at";

/// An unfinished job and who claimed it, as read before claiming it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobClaim {
    pub id: String,
    /// The process running it ([`crate::server::runner::JobQueue::runner`]), if any.
    pub runner: Option<String>,
    pub heartbeat_at: Option<String>,
}

/// Which records of a job to list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordFilter {
    All,
    Flipped(bool),
}

impl Db {
    /// Connects to `url` (`postgres://…`, `sqlite://FILE` or a file path; a SQLite file is
    /// created when missing) and brings its schema up to date.
    pub async fn connect(url: &str) -> Result<Self> {
        let db = if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            let pool = PgPoolOptions::new()
                .max_connections(8)
                .acquire_timeout(Duration::from_secs(10))
                .connect(url)
                .await
                .with_context(|| format!("cannot connect to {}", redact(url)))?;
            Db::Postgres(pool)
        } else {
            let path = url.strip_prefix("sqlite://").unwrap_or(url);
            if let Some(parent) = Path::new(path)
                .parent()
                .filter(|p| !p.as_os_str().is_empty())
            {
                std::fs::create_dir_all(parent)
                    .with_context(|| format!("cannot create {}", parent.display()))?;
            }
            let options = SqliteConnectOptions::from_str(&format!("sqlite://{path}"))?
                .create_if_missing(true)
                .journal_mode(SqliteJournalMode::Wal)
                .synchronous(SqliteSynchronous::Normal)
                .foreign_keys(true)
                .busy_timeout(Duration::from_secs(10));
            let pool = SqlitePoolOptions::new()
                .max_connections(4)
                .connect_with(options)
                .await
                .with_context(|| format!("cannot open the SQLite database {path}"))?;
            Db::Sqlite(pool)
        };
        let migrator = Migrator::with_migrations(
            MIGRATIONS
                .iter()
                .map(|(version, name, sql)| {
                    Migration::new(
                        *version,
                        (*name).into(),
                        MigrationType::Simple,
                        sql.into_sql_str(),
                        false,
                    )
                })
                .collect(),
        );
        with_pool!(&db, |pool| migrator.run(pool).await).context("migrating the database")?;
        Ok(db)
    }

    /// Which database this is, for logs.
    pub fn kind(&self) -> &'static str {
        match self {
            Db::Sqlite(_) => "SQLite",
            Db::Postgres(_) => "Postgres",
        }
    }

    pub async fn insert_dataset(&self, d: &StoredDataset) -> Result<()> {
        let labels = serde_json::to_string(&d.labels)?;
        with_pool!(self, |pool| sqlx::query(
            "INSERT INTO datasets (id, name, file, read_options, examples, labels, skipped, \
             created_at, team_id) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)"
        )
        .bind(&d.id)
        .bind(&d.name)
        .bind(&d.file)
        .bind(&d.read_options)
        .bind(d.examples)
        .bind(&labels)
        .bind(d.skipped)
        .bind(&d.created_at)
        .bind(&d.team)
        .execute(pool)
        .await
        .map(drop))?;
        Ok(())
    }

    /// The team's uploaded datasets, newest first.
    pub async fn datasets(&self, team: &str) -> Result<Vec<StoredDataset>> {
        let sql = AssertSqlSafe(format!(
            "SELECT {DATASET_COLUMNS} FROM datasets WHERE team_id = $1 \
             ORDER BY created_at DESC, id"
        ));
        let rows: Vec<DatasetRow> = with_pool!(self, |pool| sqlx::query_as(sql)
            .bind(team)
            .fetch_all(pool)
            .await)?;
        rows.into_iter().map(dataset_from_row).collect()
    }

    pub async fn dataset(&self, id: &str) -> Result<Option<StoredDataset>> {
        let sql = AssertSqlSafe(format!(
            "SELECT {DATASET_COLUMNS} FROM datasets WHERE id = $1"
        ));
        let row: Option<DatasetRow> = with_pool!(self, |pool| sqlx::query_as(sql)
            .bind(id)
            .fetch_optional(pool)
            .await)?;
        row.map(dataset_from_row).transpose()
    }

    /// Uploaded datasets made before `cutoff` (a time as [`now`] writes it), for retention.
    pub async fn datasets_before(&self, cutoff: &str) -> Result<Vec<StoredDataset>> {
        let sql = AssertSqlSafe(format!(
            "SELECT {DATASET_COLUMNS} FROM datasets WHERE created_at < $1 ORDER BY created_at"
        ));
        let rows: Vec<DatasetRow> = with_pool!(self, |pool| sqlx::query_as(sql)
            .bind(cutoff)
            .fetch_all(pool)
            .await)?;
        rows.into_iter().map(dataset_from_row).collect()
    }

    /// Finished jobs last changed before `cutoff`, for retention.
    pub async fn jobs_finished_before(&self, cutoff: &str) -> Result<Vec<String>> {
        let ids: Vec<String> = with_pool!(self, |pool| sqlx::query_scalar(
            "SELECT id FROM jobs WHERE status NOT IN ('queued', 'running') AND updated_at < $1"
        )
        .bind(cutoff)
        .fetch_all(pool)
        .await)?;
        Ok(ids)
    }

    /// Deletes dataset `id`'s row; whether there was one.
    pub async fn delete_dataset(&self, id: &str) -> Result<bool> {
        let deleted = with_pool!(self, |pool| sqlx::query(
            "DELETE FROM datasets WHERE id = $1"
        )
        .bind(id)
        .execute(pool)
        .await
        .map(|r| r.rows_affected()))?;
        Ok(deleted == 1)
    }

    /// Deletes job `id` and its records if it has finished; whether it did.
    pub async fn delete_finished_job(&self, id: &str) -> Result<bool> {
        let deleted = with_pool!(self, |pool| sqlx::query(
            "DELETE FROM jobs WHERE id = $1 AND status NOT IN ('queued', 'running')"
        )
        .bind(id)
        .execute(pool)
        .await
        .map(|r| r.rows_affected()))?;
        Ok(deleted == 1)
    }

    /// Adds a queued job of `team`.
    pub async fn insert_job(
        &self,
        id: &str,
        team: &str,
        request: &JobRequest,
        now: &str,
    ) -> Result<Job> {
        let request_json = serde_json::to_string(request)?;
        with_pool!(self, |pool| sqlx::query(
            "INSERT INTO jobs (id, team_id, request, status, created_at, updated_at) \
             VALUES ($1, $2, $3, $4, $5, $5)"
        )
        .bind(id)
        .bind(team)
        .bind(&request_json)
        .bind(JobStatus::Queued.as_str())
        .bind(now)
        .execute(pool)
        .await
        .map(drop))?;
        self.job(id).await?.context("the job just added is missing")
    }

    /// Job `id`, whoever owns it (for the runner).
    pub async fn job(&self, id: &str) -> Result<Option<Job>> {
        let sql = AssertSqlSafe(format!("SELECT {JOB_COLUMNS} FROM jobs WHERE id = $1"));
        let row: Option<JobRow> = with_pool!(self, |pool| sqlx::query_as(sql)
            .bind(id)
            .fetch_optional(pool)
            .await)?;
        row.map(job_from_row).transpose()
    }

    /// Job `id` if `team` owns it.
    pub async fn team_job(&self, team: &str, id: &str) -> Result<Option<Job>> {
        let sql = AssertSqlSafe(format!(
            "SELECT {JOB_COLUMNS} FROM jobs WHERE id = $1 AND team_id = $2"
        ));
        let row: Option<JobRow> = with_pool!(self, |pool| sqlx::query_as(sql)
            .bind(id)
            .bind(team)
            .fetch_optional(pool)
            .await)?;
        row.map(job_from_row).transpose()
    }

    /// The team's jobs, newest first.
    pub async fn jobs(&self, team: &str) -> Result<Vec<Job>> {
        let sql = AssertSqlSafe(format!(
            "SELECT {JOB_COLUMNS} FROM jobs WHERE team_id = $1 ORDER BY created_at DESC, id DESC"
        ));
        let rows: Vec<JobRow> = with_pool!(self, |pool| sqlx::query_as(sql)
            .bind(team)
            .fetch_all(pool)
            .await)?;
        rows.into_iter().map(job_from_row).collect()
    }

    /// The unfinished jobs (queued, or running) oldest first, each with the process that
    /// claimed it and when that process last said it was alive.
    pub async fn unfinished_jobs(&self) -> Result<Vec<JobClaim>> {
        let rows: Vec<(String, Option<String>, Option<String>)> =
            with_pool!(self, |pool| sqlx::query_as(
                "SELECT id, runner, heartbeat_at FROM jobs WHERE status IN ('queued', 'running') \
                 ORDER BY created_at, id"
            )
            .fetch_all(pool)
            .await)?;
        Ok(rows
            .into_iter()
            .map(|(id, runner, heartbeat_at)| JobClaim {
                id,
                runner,
                heartbeat_at,
            })
            .collect())
    }

    /// Claims an unfinished job for `runner` if it is still as `seen` (one conditional
    /// UPDATE, so of two processes racing for it one wins); true when this one did.
    pub async fn claim_job(&self, seen: &JobClaim, runner: &str) -> Result<bool> {
        let claimed = with_pool!(self, |pool| sqlx::query(
            "UPDATE jobs SET runner = $2, heartbeat_at = $3 WHERE id = $1 \
             AND status IN ('queued', 'running') AND COALESCE(runner, '') = $4 \
             AND COALESCE(heartbeat_at, '') = $5"
        )
        .bind(&seen.id)
        .bind(runner)
        .bind(now())
        .bind(seen.runner.as_deref().unwrap_or_default())
        .bind(seen.heartbeat_at.as_deref().unwrap_or_default())
        .execute(pool)
        .await
        .map(|r| r.rows_affected()))?;
        Ok(claimed == 1)
    }

    /// `runner` is alive and still runs job `id`; returns the job's status (cancelled when
    /// another process cancelled it).
    pub async fn heartbeat(&self, id: &str, runner: &str) -> Result<Option<JobStatus>> {
        let status: Option<String> = with_pool!(self, |pool| sqlx::query_scalar(
            "UPDATE jobs SET heartbeat_at = $3 WHERE id = $1 AND runner = $2 RETURNING status"
        )
        .bind(id)
        .bind(runner)
        .bind(now())
        .fetch_optional(pool)
        .await)?;
        Ok(status.as_deref().and_then(JobStatus::parse))
    }

    /// Cancels job `id` unless it has finished; returns whether it did.
    pub async fn cancel_job(&self, id: &str) -> Result<bool> {
        let cancelled = with_pool!(self, |pool| sqlx::query(
            "UPDATE jobs SET status = 'cancelled', updated_at = $2 WHERE id = $1 \
             AND status IN ('queued', 'running')"
        )
        .bind(id)
        .bind(now())
        .execute(pool)
        .await
        .map(|r| r.rows_affected()))?;
        Ok(cancelled == 1)
    }

    /// Queues a failed or cancelled job `id` again, unclaimed; the job as queued, or `None` if
    /// it was not failed or cancelled (read in the same statement, so a runner claiming it at
    /// once cannot change what is returned).
    pub async fn requeue_job(&self, id: &str) -> Result<Option<Job>> {
        let sql = AssertSqlSafe(format!(
            "UPDATE jobs SET status = 'queued', error = NULL, runner = NULL, \
             heartbeat_at = NULL, updated_at = $2 WHERE id = $1 \
             AND status IN ('failed', 'cancelled') RETURNING {JOB_COLUMNS}"
        ));
        let row: Option<JobRow> = with_pool!(self, |pool| sqlx::query_as(sql)
            .bind(id)
            .bind(now())
            .fetch_optional(pool)
            .await)?;
        row.map(job_from_row).transpose()
    }

    /// Gives `team` the datasets and jobs made before accounts existed; returns how many of
    /// each.
    pub async fn adopt_ownerless(&self, team: &str) -> Result<(u64, u64)> {
        let adopt = |table: &'static str| {
            AssertSqlSafe(format!(
                "UPDATE {table} SET team_id = $1 WHERE team_id IS NULL"
            ))
        };
        let datasets = with_pool!(self, |pool| sqlx::query(adopt("datasets"))
            .bind(team)
            .execute(pool)
            .await
            .map(|r| r.rows_affected()))?;
        let jobs = with_pool!(self, |pool| sqlx::query(adopt("jobs"))
            .bind(team)
            .execute(pool)
            .await
            .map(|r| r.rows_affected()))?;
        Ok((datasets, jobs))
    }

    /// Saves a job's status, counts and error if `runner` holds its claim; a job cancelled in
    /// the database stays cancelled (another process may have cancelled it while this one ran
    /// it).
    pub async fn update_job(&self, job: &Job, runner: &str) -> Result<()> {
        let count = |n: usize| n as i64;
        with_pool!(self, |pool| sqlx::query(
            "UPDATE jobs SET status = $2, total = $3, done = $4, written = $5, flipped = $6, \
             failed_attempts = $7, given_up = $8, error = $9, updated_at = $10 WHERE id = $1 \
             AND runner = $11 AND (status <> 'cancelled' OR $2 = 'cancelled')"
        )
        .bind(&job.id)
        .bind(job.status.as_str())
        .bind(count(job.total))
        .bind(count(job.done))
        .bind(count(job.written))
        .bind(count(job.flipped))
        .bind(count(job.failed_attempts))
        .bind(count(job.given_up))
        .bind(&job.error)
        .bind(&job.updated_at)
        .bind(runner)
        .execute(pool)
        .await
        .map(drop))?;
        Ok(())
    }

    /// Stores a record unless the job already has one for `key`; returns whether it was new.
    pub async fn insert_record(
        &self,
        job: &str,
        key: &str,
        seq: usize,
        flipped: bool,
        record_json: &str,
    ) -> Result<bool> {
        let result = with_pool!(self, |pool| sqlx::query(
            "INSERT INTO job_records (job_id, item_key, seq, flipped, record) \
             VALUES ($1, $2, $3, $4, $5) ON CONFLICT (job_id, item_key) DO NOTHING"
        )
        .bind(job)
        .bind(key)
        .bind(seq as i64)
        .bind(i64::from(flipped))
        .bind(record_json)
        .execute(pool)
        .await
        .map(|r| r.rows_affected()))?;
        Ok(result == 1)
    }

    /// How many records a job has, and how many of them flipped.
    pub async fn record_counts(&self, job: &str) -> Result<(usize, usize)> {
        // COUNT, not SUM: Postgres sums BIGINTs as NUMERIC.
        let (all, flipped): (i64, i64) = with_pool!(self, |pool| sqlx::query_as(
            "SELECT COUNT(*), COUNT(CASE WHEN flipped = 1 THEN 1 END) FROM job_records \
             WHERE job_id = $1"
        )
        .bind(job)
        .fetch_one(pool)
        .await)?;
        Ok((all as usize, flipped as usize))
    }

    /// A page of a job's records (JSON), in the order they were made, and the filter's total.
    pub async fn records(
        &self,
        job: &str,
        filter: RecordFilter,
        offset: usize,
        limit: usize,
    ) -> Result<(Vec<String>, usize)> {
        // flipped is 0 or 1: "flipped BETWEEN lo AND hi" covers all three filters.
        let (lo, hi): (i64, i64) = match filter {
            RecordFilter::All => (0, 1),
            RecordFilter::Flipped(f) => (i64::from(f), i64::from(f)),
        };
        let (records, total): (Vec<String>, i64) = with_pool!(self, |pool| {
            let records = sqlx::query_scalar(
                "SELECT record FROM job_records WHERE job_id = $1 AND flipped BETWEEN $2 AND $3 \
                 ORDER BY seq LIMIT $4 OFFSET $5",
            )
            .bind(job)
            .bind(lo)
            .bind(hi)
            .bind(limit as i64)
            .bind(offset as i64)
            .fetch_all(pool)
            .await?;
            let total = sqlx::query_scalar(
                "SELECT COUNT(*) FROM job_records WHERE job_id = $1 AND flipped BETWEEN $2 AND $3",
            )
            .bind(job)
            .bind(lo)
            .bind(hi)
            .fetch_one(pool)
            .await?;
            Ok::<_, sqlx::Error>((records, total))
        })?;
        Ok((records, total as usize))
    }
}

fn dataset_from_row(row: DatasetRow) -> Result<StoredDataset> {
    let (id, team, name, file, read_options, examples, labels, skipped, created_at) = row;
    Ok(StoredDataset {
        team,
        labels: serde_json::from_str(&labels).context("a dataset's labels in the database")?,
        id,
        name,
        file,
        read_options,
        examples,
        skipped,
        created_at,
    })
}

fn job_from_row(row: JobRow) -> Result<Job> {
    let (
        id,
        request,
        status,
        total,
        done,
        written,
        flipped,
        failed,
        given_up,
        error,
        created,
        updated,
    ) = row;
    let count = |n: i64| n.max(0) as usize;
    Ok(Job {
        request: serde_json::from_str(&request)
            .with_context(|| format!("job {id}'s request in the database"))?,
        status: JobStatus::parse(&status)
            .with_context(|| format!("job {id} has the unknown status {status:?}"))?,
        id,
        total: count(total),
        done: count(done),
        written: count(written),
        flipped: count(flipped),
        failed_attempts: count(failed),
        given_up: count(given_up),
        error,
        created_at: created,
        updated_at: updated,
    })
}

/// `url` without its password, for messages.
pub fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            let credentials = &url[scheme + 3..at];
            match credentials.split_once(':') {
                Some((user, _)) => format!("{}{user}:***{}", &url[..scheme + 3], &url[at..]),
                None => url.to_string(),
            }
        }
        _ => url.to_string(),
    }
}

/// Now, as an RFC 3339 UTC timestamp with milliseconds (sorts as text).
pub fn now() -> String {
    timestamp(time::OffsetDateTime::now_utc())
}

/// Now moved by `seconds` (negative: in the past), as [`now`] writes it.
pub fn now_plus(seconds: i64) -> String {
    timestamp(time::OffsetDateTime::now_utc() + time::Duration::seconds(seconds))
}

fn timestamp(t: time::OffsetDateTime) -> String {
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z",
        t.year(),
        u8::from(t.month()),
        t.day(),
        t.hour(),
        t.minute(),
        t.second(),
        t.millisecond()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_are_redacted_from_urls() {
        assert_eq!(
            redact("postgres://flip:secret@localhost:5432/db"),
            "postgres://flip:***@localhost:5432/db"
        );
        assert_eq!(redact("postgres://localhost/db"), "postgres://localhost/db");
    }

    #[tokio::test]
    async fn sqlite_stores_jobs_and_records_once() {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::connect(dir.path().join("db.sqlite").to_str().unwrap())
            .await
            .unwrap();
        let request: JobRequest = serde_json::from_str(r#"{"dataset": "imdb:test"}"#).unwrap();
        sqlx_team(&db).await;
        let mut job = db.insert_job("j1", "t1", &request, &now()).await.unwrap();
        assert_eq!(job.status, JobStatus::Queued);
        assert_eq!(job.request.limit, 20);
        let claims = db.unfinished_jobs().await.unwrap();
        assert_eq!(claims.len(), 1);
        assert!(db.claim_job(&claims[0], "a").await.unwrap());
        // The second process read the same row but lost the race, and cannot write the job.
        assert!(!db.claim_job(&claims[0], "b").await.unwrap());
        job.status = JobStatus::Running;
        job.total = 3;
        db.update_job(&job, "b").await.unwrap();
        assert_eq!(db.job("j1").await.unwrap().unwrap().total, 0);
        db.update_job(&job, "a").await.unwrap();
        assert_eq!(
            db.heartbeat("j1", "a").await.unwrap(),
            Some(JobStatus::Running)
        );
        assert_eq!(db.heartbeat("j1", "b").await.unwrap(), None);
        assert!(db.insert_record("j1", "a→b", 0, true, "{}").await.unwrap());
        assert!(!db.insert_record("j1", "a→b", 0, true, "{}").await.unwrap());
        assert!(
            db.insert_record("j1", "c→d", 1, false, "{\"x\":1}")
                .await
                .unwrap()
        );
        assert_eq!(db.record_counts("j1").await.unwrap(), (2, 1));
        let (page, total) = db
            .records("j1", RecordFilter::Flipped(false), 0, 10)
            .await
            .unwrap();
        assert_eq!((page, total), (vec!["{\"x\":1}".to_string()], 1));
        assert_eq!(
            db.records("j1", RecordFilter::All, 1, 10).await.unwrap().1,
            2
        );
        let stored = db.job("j1").await.unwrap().unwrap();
        assert_eq!((stored.status, stored.total), (JobStatus::Running, 3));
        // Reopening finds the schema in place (migrations are not re-applied).
        drop(db);
        let again = Db::connect(dir.path().join("db.sqlite").to_str().unwrap())
            .await
            .unwrap();
        assert_eq!(again.jobs("t1").await.unwrap().len(), 1);
        assert!(again.jobs("t2").await.unwrap().is_empty());
        assert!(again.team_job("t2", "j1").await.unwrap().is_none());
        // A cancel from another process sticks: the runner's progress does not undo it.
        assert!(again.cancel_job("j1").await.unwrap());
        again.update_job(&stored, "a").await.unwrap();
        let after = again.job("j1").await.unwrap().unwrap();
        assert_eq!(after.status, JobStatus::Cancelled);
        assert!(!again.cancel_job("j1").await.unwrap());
    }

    async fn sqlx_team(db: &Db) {
        with_pool!(db, |pool| sqlx::query(
            "INSERT INTO teams (id, name, created_at) VALUES ('t1', 'one', '')"
        )
        .execute(pool)
        .await
        .map(drop))
        .unwrap();
    }
}
