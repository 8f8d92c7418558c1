//! The pipeline over many items, resumably: each failed attempt goes to a [`RecordStore`] as it
//! happens and each counterfactual as soon as it is made; an item with a record is never redone,
//! and an item's failed attempts count toward its limit across runs. `flipside generate` and the
//! server's jobs both run [`generate`].

use std::ops::ControlFlow;
use std::path::PathBuf;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use anyhow::Result;
use flipside_shared::records::{Counterfactual, FailedAttempt};

use super::store::RecordStore;
use super::{Item, Pipeline};

/// A batch of items to edit with one pipeline.
pub struct BatchRun<'a> {
    pub pipeline: &'a Pipeline,
    pub items: Vec<Item>,
    /// The run's seed; each attempt's seed derives from it ([`super::attempt_seed`]).
    pub seed: u64,
    /// Items edited at once.
    pub concurrency: usize,
    /// The JSON-lines output (its failures go beside it).
    pub output: PathBuf,
}

/// What a run did.
#[derive(Debug, Default, Clone, PartialEq, serde::Serialize)]
pub struct Summary {
    pub items: usize,
    /// Items with a counterfactual before this run started.
    pub already_done: usize,
    pub written: usize,
    pub flipped: usize,
    pub failed_attempts: usize,
    /// Items that used up their attempts without a counterfactual.
    pub given_up: usize,
    /// The caller stopped the run before every item was tried.
    pub stopped: bool,
}

/// What [`generate`] tells its caller after each finished item.
pub struct Progress<'a> {
    /// The run so far.
    pub summary: &'a Summary,
    /// The item's counterfactual; `None` when it was given up.
    pub record: Option<&'a Counterfactual>,
}

/// Runs `run`. `on_item` is called after each finished item; when it breaks, items in progress
/// finish and no new one starts (a later run resumes).
pub fn generate(
    run: &BatchRun<'_>,
    on_item: &(dyn Fn(Progress<'_>) -> ControlFlow<()> + Sync),
) -> Result<Summary> {
    let max_attempts = run.pipeline.max_attempts;
    anyhow::ensure!(max_attempts >= 1, "--max-attempts must be at least 1");
    let mut store = RecordStore::open(&run.output)?;
    let mut summary = Summary {
        items: run.items.len(),
        ..Default::default()
    };
    let pending: Vec<(&Item, usize)> = run
        .items
        .iter()
        .filter_map(|item| {
            let key = item.key();
            if store.done.contains(&key) {
                summary.already_done += 1;
                return None;
            }
            let tried = store.failed.get(&key).copied().unwrap_or(0);
            (tried < max_attempts).then_some((item, tried + 1))
        })
        .collect();
    summary.given_up = run.items.len() - summary.already_done - pending.len();
    if pending.is_empty() {
        return Ok(summary);
    }
    run.pipeline
        .check(&pending.iter().map(|(item, _)| *item).collect::<Vec<_>>())?;

    let store = Mutex::new(&mut store);
    let summary = Mutex::new(summary);
    let next = AtomicUsize::new(0);
    let stop = AtomicBool::new(false);
    let outcome: Mutex<Result<()>> = Mutex::new(Ok(()));
    let edit = |&(item, first_attempt): &(&Item, usize)| -> Result<Option<Counterfactual>> {
        let context = run.pipeline.context_for(item)?;
        let mut save_failure = |failure: &FailedAttempt| {
            store.lock().unwrap().add_failure(failure)?;
            summary.lock().unwrap().failed_attempts += 1;
            Ok(())
        };
        let edited = run.pipeline.edit_in_context(
            item,
            context,
            run.seed,
            first_attempt,
            &mut save_failure,
        )?;
        if let Some(record) = &edited.record {
            store.lock().unwrap().add(record)?;
        }
        let mut summary = summary.lock().unwrap();
        match &edited.record {
            Some(record) => {
                summary.written += 1;
                summary.flipped += usize::from(record.flipped);
            }
            None => summary.given_up += 1,
        }
        Ok(edited.record)
    };
    std::thread::scope(|scope| {
        for _ in 0..run.concurrency.max(1) {
            scope.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::SeqCst);
                    if i >= pending.len()
                        || stop.load(Ordering::SeqCst)
                        || outcome.lock().unwrap().is_err()
                    {
                        break;
                    }
                    let record = match edit(&pending[i]) {
                        Ok(record) => record,
                        Err(error) => {
                            *outcome.lock().unwrap() = Err(error);
                            break;
                        }
                    };
                    let summary = summary.lock().unwrap().clone();
                    let progress = Progress {
                        summary: &summary,
                        record: record.as_ref(),
                    };
                    if on_item(progress).is_break() {
                        stop.store(true, Ordering::SeqCst);
                    }
                }
            });
        }
    });
    outcome.into_inner().unwrap()?;
    let mut summary = summary.into_inner().unwrap();
    summary.stopped = stop.into_inner();
    Ok(summary)
}
