//! The job runner: runs queued generation jobs one at a time (they share the LLM and the CPU)
//! through the same pipeline and batch loop as `flipside generate`, over the models the server
//! loaded once; streams their progress, stores their records in the database and resumes,
//! after a restart, the jobs that were running.
//!
//! A job's JSON-lines file (under the server's data directory) is its checkpoint, written
//! before the database: on resume, records already in it are imported (each item key at most
//! once) and generation continues with the items not yet done.
//!
//! Several server processes may share one database (and one data directory): each job is
//! claimed by one process through a conditional UPDATE, which then beats a heartbeat every few
//! seconds. Another process takes a job over when its claimant stops beating (or, on the same
//! machine, has exited), and stops a job it runs when the database says it was cancelled.

use std::collections::{HashMap, HashSet};
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use anyhow::{Context, Result};
use flipside_shared::api::{Job, JobStatus, MethodId};
use flipside_shared::records::{Counterfactual, FailedAttempt};
use tokio::sync::{Notify, broadcast, mpsc};
use tokio_util::sync::CancellationToken;

use super::AppState;
use super::datasets;
use super::db::{JobClaim, now, now_plus};
use crate::editing::items::{Selection, Unit};
use crate::methods::{self, EditSettings, GenerationPlan};
use crate::pipeline::batch::{BatchRun, Summary, generate};
use crate::pipeline::store::{failures_path, read_repairing};

/// Jobs waiting and running, and the channel their progress is published on.
pub struct JobQueue {
    /// This process, as it claims jobs: `host:pid:random`.
    pub runner: String,
    wake: Notify,
    cancels: Mutex<Cancels>,
    /// Every change of every job.
    pub updates: broadcast::Sender<Job>,
}

/// The cancellation of running jobs, and the queued jobs cancelled before they started: one
/// lock over both, so that a cancel never falls between the runner picking a job and starting
/// it.
#[derive(Default)]
struct Cancels {
    running: HashMap<String, CancellationToken>,
    cancelled_while_queued: HashSet<String>,
}

impl Default for JobQueue {
    fn default() -> Self {
        Self {
            runner: format!(
                "{}:{}:{:08x}",
                hostname(),
                std::process::id(),
                rand::random::<u32>()
            ),
            wake: Notify::new(),
            cancels: Mutex::default(),
            updates: broadcast::channel(1024).0,
        }
    }
}

impl JobQueue {
    /// Tells the runner a job was queued.
    pub fn wake(&self) {
        self.wake.notify_one();
    }

    /// Asks job `id` to stop: a running job stops after the item in progress (true); a job not
    /// running yet is never started (false).
    pub fn cancel(&self, id: &str) -> bool {
        let mut cancels = self.cancels.lock().unwrap();
        match cancels.running.get(id) {
            Some(token) => {
                token.cancel();
                true
            }
            None => {
                cancels.cancelled_while_queued.insert(id.to_string());
                false
            }
        }
    }

    /// Job `id` was queued again: a cancel it got while queued before no longer applies.
    pub fn forget_cancel(&self, id: &str) {
        self.cancels
            .lock()
            .unwrap()
            .cancelled_while_queued
            .remove(id);
    }

    /// Marks job `id` running and returns its cancellation token; `None` when it was
    /// cancelled before it started.
    fn start(&self, id: &str) -> Option<CancellationToken> {
        let mut cancels = self.cancels.lock().unwrap();
        if cancels.cancelled_while_queued.remove(id) {
            return None;
        }
        let token = CancellationToken::new();
        cancels.running.insert(id.to_string(), token.clone());
        Some(token)
    }

    /// Job `id` is no longer running.
    fn finish(&self, id: &str) {
        self.cancels.lock().unwrap().running.remove(id);
    }
}

/// How often a running job's process says it is alive (and reads whether the job was
/// cancelled), and how often an idle runner looks for jobs queued through other processes.
const HEARTBEAT: Duration = Duration::from_secs(3);
/// A claim whose heartbeat is older than this is taken over.
const STALE_SECONDS: i64 = 30;

/// Runs jobs until the server stops: first the ones left unfinished by an earlier run, oldest
/// first, then each new one.
pub async fn run_jobs(state: AppState) {
    // Jobs (new ones, and those a stopped server left) start once the models are loaded.
    if state.preparation.wait().await.is_err() {
        return;
    }
    loop {
        let next = match claim_next(&state).await {
            Ok(id) => id,
            Err(error) => {
                tracing::error!("cannot claim a job: {error:#}");
                None
            }
        };
        match next {
            Some(id) => {
                let result = run_job(&state, &id).await;
                if let Err(error) = &result
                    && is_database_error(error)
                {
                    // The checkpoint holds what was made; the job stays claimed and running,
                    // and resumes here once the database answers again.
                    tracing::warn!("job {id}: the database failed ({error:#}); resuming later");
                    tokio::time::sleep(HEARTBEAT).await;
                } else if let Err(error) = result {
                    tracing::error!("job {id}: {error:#}");
                    if let Ok(Some(mut job)) = state.db.job(&id).await {
                        job.status = JobStatus::Failed;
                        job.error = Some(without_server_paths(&state, &format!("{error:#}")));
                        let _ = publish(&state, &mut job).await;
                    }
                }
            }
            None => {
                let _ = tokio::time::timeout(HEARTBEAT, state.jobs.wake.notified()).await;
            }
        }
    }
}

/// Whether `error` came from the database (rather than from the job itself).
fn is_database_error(error: &anyhow::Error) -> bool {
    error.chain().any(|cause| cause.is::<sqlx::Error>())
}

/// Claims the oldest unfinished job that no live process runs.
async fn claim_next(state: &AppState) -> Result<Option<String>> {
    let stale = now_plus(-STALE_SECONDS);
    for claim in state.db.unfinished_jobs().await? {
        let free = match (&claim.runner, &claim.heartbeat_at) {
            (Some(runner), Some(beat)) => {
                *runner == state.jobs.runner || *beat < stale || exited_here(runner)
            }
            _ => true,
        };
        if free && state.db.claim_job(&claim, &state.jobs.runner).await? {
            if claim.runner.is_some() && claim.runner.as_deref() != Some(&state.jobs.runner) {
                tracing::info!("job {}: taken over from {}", claim.id, describe(&claim));
            }
            return Ok(Some(claim.id));
        }
    }
    Ok(None)
}

fn describe(claim: &JobClaim) -> String {
    format!(
        "{} (last heard of at {})",
        claim.runner.as_deref().unwrap_or("nobody"),
        claim.heartbeat_at.as_deref().unwrap_or("never")
    )
}

/// `message` with the server's data directory and Flipside home written as `<data>` and
/// `<home>`: job errors are shown to the team, the server's layout is not theirs to see.
fn without_server_paths(state: &AppState, message: &str) -> String {
    message
        .replace(&state.data_dir.display().to_string(), "<data>")
        .replace(&state.home.root().display().to_string(), "<home>")
}

/// This machine's name.
fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|name| name.trim().to_string())
        .unwrap_or_else(|_| "localhost".into())
}

/// Whether `runner` names a process of this machine that has exited (so that a restarted
/// server resumes its jobs at once instead of waiting for the claim to go stale). Linux only;
/// elsewhere the claim goes stale.
fn exited_here(runner: &str) -> bool {
    let mut parts = runner.split(':');
    let (Some(host), Some(Ok(pid))) = (parts.next(), parts.next().map(str::parse::<u32>)) else {
        return false;
    };
    cfg!(target_os = "linux") && host == hostname() && !Path::new(&format!("/proc/{pid}")).exists()
}

/// Beats job `id`'s heartbeat until `token` is cancelled, and cancels it when the database
/// says the job was cancelled or another process has taken it over.
async fn keep_claim(state: AppState, id: String, token: CancellationToken) {
    loop {
        tokio::select! {
            _ = token.cancelled() => return,
            _ = tokio::time::sleep(HEARTBEAT) => {}
        }
        match state.db.heartbeat(&id, &state.jobs.runner).await {
            Ok(Some(JobStatus::Cancelled)) => {
                tracing::info!("job {id}: cancelled through another process");
                token.cancel();
            }
            Ok(None) => {
                tracing::warn!("job {id}: another process has taken it over; stopping here");
                token.cancel();
            }
            Ok(Some(_)) => {}
            Err(error) => tracing::warn!("job {id}: heartbeat failed: {error:#}"),
        }
    }
}

/// Saves `job` (stamped now) and sends it to the progress streams.
async fn publish(state: &AppState, job: &mut Job) -> Result<()> {
    job.updated_at = now();
    state.db.update_job(job, &state.jobs.runner).await?;
    let _ = state.jobs.updates.send(job.clone());
    Ok(())
}

/// The job's checkpoint file.
pub fn checkpoint(state: &AppState, id: &str) -> PathBuf {
    state.data_dir.join("jobs").join(format!("{id}.jsonl"))
}

/// What the generation thread reports.
struct Update {
    summary: Summary,
    record: Option<Counterfactual>,
}

async fn run_job(state: &AppState, id: &str) -> Result<()> {
    let mut job = state.db.job(id).await?.context("the job vanished")?;
    let Some(token) = state.jobs.start(id) else {
        // Cancelled while queued (the cancel request may not have saved that yet).
        job.status = JobStatus::Cancelled;
        return publish(state, &mut job).await;
    };
    if job.status.is_finished() {
        state.jobs.finish(id);
        return Ok(());
    }
    let heartbeat = tokio::spawn(keep_claim(state.clone(), id.to_string(), token.clone()));
    let result = generate_for(state, &mut job, &token).await;
    heartbeat.abort();
    state.jobs.finish(id);
    result
}

async fn generate_for(state: &AppState, job: &mut Job, token: &CancellationToken) -> Result<()> {
    let id = job.id.clone();
    let id = id.as_str();
    let resumed = job.status == JobStatus::Running;
    job.status = JobStatus::Running;
    job.error = None;
    publish(state, job).await?;
    let method = methods::method(job_method(&job.request.method).as_str())?;
    tracing::info!(
        "job {id}: {} {} on {} (limit {})",
        if resumed { "resuming" } else { "starting" },
        method.id(),
        job.request.dataset,
        job.request.limit
    );

    let dataset = datasets::load(state, &job.request.dataset).await?;
    let output = checkpoint(state, id);
    // Records a killed run wrote to the checkpoint but not to the database.
    let import = output.clone();
    let earlier: Vec<Counterfactual> =
        tokio::task::spawn_blocking(move || read_repairing(&import)).await??;
    for (seq, record) in earlier.iter().enumerate() {
        let json = serde_json::to_string(record)?;
        state
            .db
            .insert_record(id, &record.key, seq, record.flipped, &json)
            .await?;
    }
    let (_, base_flipped) = state.db.record_counts(id).await?;
    let failures = failures_path(&output);
    let base_failed =
        tokio::task::spawn_blocking(move || read_repairing::<FailedAttempt>(&failures))
            .await??
            .len();
    let count = |job: &mut Job, s: &Summary| {
        job.total = s.items;
        job.written = s.already_done + s.written;
        job.flipped = base_flipped + s.flipped;
        job.failed_attempts = base_failed + s.failed_attempts;
        job.given_up = s.given_up;
        job.done = job.written + job.given_up;
    };

    let (sender, mut updates) = mpsc::unbounded_channel::<Update>();
    let generation = {
        let state = state.clone();
        let request = job.request.clone();
        let token = token.clone();
        let output = output.clone();
        tokio::task::spawn_blocking(move || -> Result<Summary> {
            super::priority::lower_this_thread();
            let resources = state.resources().map_err(|e| anyhow::anyhow!(e.message))?;
            let selection = Selection {
                target: "flip".into(),
                limit: Some(request.limit),
                max_words: request.max_words,
                unit: Unit::Text,
                seed: request.seed,
            };
            let settings = EditSettings {
                max_attempts: request.max_attempts,
                verify: request.verify,
                ..resources.settings.clone()
            };
            let plan = GenerationPlan::new(
                method,
                &dataset,
                &selection,
                &resources.models.lexicons,
                settings,
            )
            .with_context(|| request.dataset.clone())?;
            let pipeline = plan.pipeline(&resources.models)?;
            let run = BatchRun {
                pipeline: &pipeline,
                items: plan.items,
                seed: request.seed,
                concurrency: 1,
                output,
            };
            // The total is known before the first item finishes.
            let _ = sender.send(Update {
                summary: Summary {
                    items: run.items.len(),
                    ..Summary::default()
                },
                record: None,
            });
            generate(&run, &|progress| {
                let _ = sender.send(Update {
                    summary: progress.summary.clone(),
                    record: progress.record.cloned(),
                });
                if token.is_cancelled() {
                    ControlFlow::Break(())
                } else {
                    ControlFlow::Continue(())
                }
            })
        })
    };

    let mut seq = earlier.len();
    let saved = async {
        while let Some(update) = updates.recv().await {
            if let Some(record) = &update.record {
                let json = serde_json::to_string(record)?;
                if state
                    .db
                    .insert_record(id, &record.key, seq, record.flipped, &json)
                    .await?
                {
                    seq += 1;
                }
            }
            count(job, &update.summary);
            publish(state, job).await?;
        }
        anyhow::Ok(())
    }
    .await;
    if let Err(error) = saved {
        // Generation stops before this returns: a resumed run must not write the checkpoint
        // beside it.
        token.cancel();
        let _ = generation.await;
        return Err(error);
    }
    let outcome = generation.await.context("the generation thread panicked")?;
    match outcome {
        Ok(summary) => {
            job.status = if summary.stopped {
                JobStatus::Cancelled
            } else {
                JobStatus::Done
            };
            // A run with nothing left to do reports its counts only here.
            count(job, &summary);
        }
        Err(error) => {
            job.status = JobStatus::Failed;
            job.error = Some(without_server_paths(state, &format!("{error:#}")));
        }
    }
    tracing::info!(
        "job {id}: {} ({} of {} done, {} flipped)",
        job.status.as_str(),
        job.done,
        job.total,
        job.flipped
    );
    publish(state, job).await
}

/// The method a job asked for, or the default one.
pub fn job_method(method: &Option<MethodId>) -> MethodId {
    method
        .clone()
        .unwrap_or_else(|| MethodId::from(methods::METHODS[0].id()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_job_cancelled_before_it_starts_never_starts() {
        let queue = JobQueue::default();
        assert!(!queue.cancel("job-1"), "not running yet");
        assert!(queue.start("job-1").is_none());
        // Another job starts, and a cancel reaches it while it runs.
        let token = queue.start("job-2").unwrap();
        assert!(queue.cancel("job-2"));
        assert!(token.is_cancelled());
        queue.finish("job-2");
        assert!(!queue.cancel("job-2"), "a finished job is not running");
    }
}
