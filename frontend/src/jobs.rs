//! The jobs page: start a generation job on a dataset, follow the jobs' progress (the selected
//! one live, over Server-Sent Events), cancel one, and browse its counterfactuals.

use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

use flipside_shared::api::{DatasetInfo, Job, JobRequest, JobStatus, MethodId};
use futures::StreamExt;
use gloo_net::eventsource::futures::EventSource;
use leptos::prelude::*;
use leptos::task::spawn_local;
use send_wrapper::SendWrapper;

use crate::api;
use crate::datasets::{Datasets, DatasetsResource};
use crate::method_picker::MethodPicker;
use crate::portal::{CurrentTeam, use_team};
use crate::records::Records;
use crate::route::{Route, navigate};
use crate::ui::{ErrorMessage, ProgressBar, Spinner, format_time};

/// How often the list is reloaded while some job is still queued or running.
const POLL: Duration = Duration::from_secs(3);

/// The jobs the page knows, newest first.
#[derive(Debug, Clone, Copy)]
struct JobList {
    team: CurrentTeam,
    jobs: RwSignal<Vec<Job>>,
    loaded: RwSignal<bool>,
    error: RwSignal<Option<String>>,
}

impl JobList {
    fn new() -> Self {
        Self {
            team: use_team(),
            jobs: RwSignal::new(Vec::new()),
            loaded: RwSignal::new(false),
            error: RwSignal::new(None),
        }
    }

    /// Reloads the team's jobs.
    fn refresh(self) {
        let team = self.team.id();
        spawn_local(async move {
            match api::jobs(&team).await {
                Ok(list) => {
                    self.jobs.set(list);
                    self.error.set(None);
                }
                Err(message) => self.error.set(Some(message)),
            }
            self.loaded.set(true);
        });
    }

    /// Replaces the job with `job`'s id, or adds it first.
    fn upsert(self, job: Job) {
        self.jobs
            .update(|list| match list.iter_mut().find(|j| j.id == job.id) {
                Some(old) => *old = job,
                None => list.insert(0, job),
            });
    }

    fn any_unfinished(self) -> bool {
        self.jobs
            .try_with_untracked(|list| list.iter().any(|j| !j.status.is_finished()))
            .unwrap_or(false)
    }
}

/// The jobs page of `team`; `selected` is the job shown in detail (from the URL,
/// `#/jobs/{id}`).
#[component]
pub fn JobsPage(team: String, #[prop(into)] selected: Signal<Option<String>>) -> impl IntoView {
    CurrentTeam::provide(team.clone());
    let datasets: DatasetsResource = LocalResource::new(move || {
        let team = team.clone();
        async move { api::datasets(&team).await }
    });
    let dataset = RwSignal::new(String::new());
    let jobs = JobList::new();
    jobs.refresh();
    if let Ok(interval) = set_interval_with_handle(
        move || {
            if jobs.any_unfinished() {
                jobs.refresh();
            }
        },
        POLL,
    ) {
        on_cleanup(move || interval.clear());
    }
    let on_uploaded = Callback::new(move |uploaded: DatasetInfo| {
        dataset.set(uploaded.id);
        datasets.refetch();
    });

    view! {
        <div class="jobs-grid">
            <StartJob datasets dataset jobs />
            <Datasets datasets on_uploaded />
        </div>
        <JobsList jobs selected />
        {move || selected.get().map(|id| view! { <JobDetail id jobs /> })}
    }
}

/// The form that starts a job.
#[component]
fn StartJob(datasets: DatasetsResource, dataset: RwSignal<String>, jobs: JobList) -> impl IntoView {
    // The server's methods (the first is its default); the picker is built from them.
    let info = LocalResource::new(|| api::info_when_ready(|_| {}));
    let method = RwSignal::new(None::<MethodId>);
    let limit = RwSignal::new("10".to_string());
    let seed = RwSignal::new("0".to_string());
    let verify = RwSignal::new(false);
    let starting = RwSignal::new(false);
    let error = RwSignal::new(None::<String>);

    // Preselect the first dataset once the list is in.
    Effect::new(move |_| {
        if let Some(Ok(list)) = datasets.get()
            && !list.iter().any(|d| d.id == dataset.get_untracked())
            && let Some(first) = list.first()
        {
            dataset.set(first.id.clone());
        }
    });

    let submit = move |event: leptos::ev::SubmitEvent| {
        event.prevent_default();
        let request = match job_request(
            dataset.get_untracked(),
            method.get_untracked(),
            &limit.get_untracked(),
            &seed.get_untracked(),
            verify.get_untracked(),
        ) {
            Ok(request) => request,
            Err(message) => {
                error.set(Some(message));
                return;
            }
        };
        starting.set(true);
        error.set(None);
        let team = jobs.team.id();
        spawn_local(async move {
            match api::start_job(&team, &request).await {
                Ok(job) => {
                    let route = Route::Jobs {
                        selected: Some(job.id.clone()),
                    };
                    jobs.upsert(job);
                    navigate(&route);
                }
                Err(message) => error.set(Some(message)),
            }
            starting.set(false);
        });
    };

    view! {
        <section class="card">
            <h2>"Start a job"</h2>
            <p class="small muted">
                "Edits the first examples of a dataset (after a seeded shuffle) towards every other label."
            </p>
            <form class="job-form" on:submit=submit>
                <label class="field">
                    <span>"Dataset"</span>
                    <select
                        data-testid="dataset-select"
                        on:change=move |ev| dataset.set(event_target_value(&ev))
                    >
                        {move || match datasets.get() {
                            Some(Ok(list)) => {
                                list.into_iter()
                                    .map(|d| {
                                        let id = d.id.clone();
                                        view! {
                                            <option
                                                value=d.id.clone()
                                                prop:selected=move || dataset.get() == id
                                            >
                                                {format!("{} ({})", d.name, d.id)}
                                            </option>
                                        }
                                    })
                                    .collect_view()
                                    .into_any()
                            }
                            Some(Err(_)) => view! { <option value="">"No datasets"</option> }.into_any(),
                            None => view! { <option value="">"Loading…"</option> }.into_any(),
                        }}
                    </select>
                </label>
                <div class="grid-fields">
                    <label class="field compact">
                        <span>"Method"</span>
                        {move || match info.get() {
                            Some(Ok(info)) => {
                                view! {
                                    <MethodPicker methods=info.methods chosen=method testid="job-method" />
                                }
                                    .into_any()
                            }
                            answer => {
                                // Loading, or no answer: the server's default is used.
                                let text = if answer.is_some() { "Server default" } else { "Loading…" };
                                view! {
                                    <select data-testid="job-method" disabled>
                                        <option value="">{text}</option>
                                    </select>
                                }
                                    .into_any()
                            }
                        }}
                    </label>
                    <label class="field compact">
                        <span>"Examples"</span>
                        <input
                            type="number"
                            min="1"
                            data-testid="job-limit"
                            prop:value=move || limit.get()
                            on:input=move |ev| limit.set(event_target_value(&ev))
                        />
                    </label>
                    <label class="field compact">
                        <span>"Seed"</span>
                        <input
                            type="number"
                            min="0"
                            data-testid="job-seed"
                            prop:value=move || seed.get()
                            on:input=move |ev| seed.set(event_target_value(&ev))
                        />
                    </label>
                    <label class="field compact checkbox">
                        <input
                            type="checkbox"
                            data-testid="job-verify"
                            prop:checked=move || verify.get()
                            on:change=move |ev| verify.set(event_target_checked(&ev))
                        />
                        <span>"Keep only flipped edits (retry others)"</span>
                    </label>
                </div>
                <button
                    type="submit"
                    class="primary"
                    data-testid="job-start"
                    disabled=move || starting.get() || dataset.with(String::is_empty)
                >
                    {move || {
                        if starting.get() {
                            view! { <Spinner />" Starting…" }.into_any()
                        } else {
                            "Start job".into_any()
                        }
                    }}
                </button>
                {move || error.get().map(|message| view! { <ErrorMessage message testid="job-error" /> })}
            </form>
        </section>
    }
}

/// A [`JobRequest`] from the form's fields, or what is wrong with them.
fn job_request(
    dataset: String,
    method: Option<MethodId>,
    limit: &str,
    seed: &str,
    verify: bool,
) -> Result<JobRequest, String> {
    if dataset.is_empty() {
        return Err("Pick a dataset (or upload one).".into());
    }
    let limit = limit
        .trim()
        .parse::<usize>()
        .ok()
        .filter(|&n| n > 0)
        .ok_or("The number of examples must be a whole number above 0.")?;
    let seed = seed
        .trim()
        .parse::<u64>()
        .map_err(|_| "The seed must be a whole number (0 or more).")?;
    Ok(JobRequest {
        dataset,
        method,
        limit,
        // The server's defaults.
        max_words: Some(60),
        seed,
        verify,
        max_attempts: 3,
    })
}

/// A job's method as shown in lists: its id, or the server's default.
fn method_name(method: &Option<MethodId>) -> String {
    method
        .as_ref()
        .map_or_else(|| "default method".to_string(), MethodId::to_string)
}

/// Every job, newest first, with its status and progress.
#[component]
fn JobsList(jobs: JobList, #[prop(into)] selected: Signal<Option<String>>) -> impl IntoView {
    view! {
        <section class="card">
            <h2>"Jobs"</h2>
            {move || jobs.error.get().map(|message| view! { <ErrorMessage message testid="jobs-error" /> })}
            {move || {
                if !jobs.loaded.get() {
                    return view! { <p class="muted"><Spinner />" Loading jobs…"</p> }.into_any();
                }
                let list = jobs.jobs.get();
                if list.is_empty() {
                    if jobs.error.with(Option::is_some) {
                        return ().into_any();
                    }
                    return view! { <p class="muted">"No jobs yet: start one above."</p> }.into_any();
                }
                view! {
                    <ul class="job-list">
                        {list.into_iter().map(|job| view! { <JobRow job selected /> }).collect_view()}
                    </ul>
                }
                    .into_any()
            }}
        </section>
    }
}

/// One job in the list; a link to its details.
#[component]
fn JobRow(job: Job, selected: Signal<Option<String>>) -> impl IntoView {
    let id = job.id.clone();
    let is_selected = move || selected.with(|s| s.as_deref() == Some(id.as_str()));
    let status = job.status.as_str();
    let href = Route::Jobs {
        selected: Some(job.id.clone()),
    }
    .href();
    view! {
        <li>
            <a
                class="job-row"
                class:selected=is_selected
                href=href
                data-testid="job-row"
                data-status=status
                data-job-id=job.id.clone()
            >
                <span class=format!("badge status status-{status}")>{status}</span>
                <span class="job-title">
                    <strong>{job.request.dataset.clone()}</strong>
                    {format!(" · {} · {} examples", method_name(&job.request.method), job.request.limit)}
                </span>
                <span class="small muted job-time">{format_time(&job.created_at)}</span>
                <ProgressBar done=job.done total=job.total />
                <span class="small job-flipped">{format!("{} flipped", job.flipped)}</span>
            </a>
        </li>
    }
}

/// The selected job: live progress, cancel, and its records.
#[component]
fn JobDetail(id: String, jobs: JobList) -> impl IntoView {
    let job_id = id.clone();
    let records_id = id.clone();
    let job = Memo::new(move |_| {
        jobs.jobs
            .with(|list| list.iter().find(|j| j.id == job_id).cloned())
    });
    let live_error = RwSignal::new(None::<String>);
    follow_progress(id.clone(), jobs, live_error);

    // Cancel while it runs; resume once it failed or was cancelled.
    let acting = RwSignal::new(false);
    let action_error = RwSignal::new(None::<String>);
    let action_id = id.clone();
    let team = jobs.team;
    let act = move |resume: bool| {
        let id = action_id.clone();
        acting.set(true);
        spawn_local(async move {
            let answer = if resume {
                api::resume_job(&team.id(), &id).await
            } else {
                api::cancel_job(&team.id(), &id).await
            };
            match answer {
                Ok(job) => {
                    jobs.upsert(job);
                    action_error.set(None);
                    if resume {
                        follow_progress(id, jobs, live_error);
                    }
                }
                Err(message) => action_error.set(Some(message)),
            }
            acting.set(false);
        });
    };
    let cancel = {
        let act = act.clone();
        move |_| act(false)
    };
    let resume = move |_| act(true);

    let field =
        move |f: fn(&Job) -> usize| Signal::derive(move || job.with(|j| j.as_ref().map_or(0, f)));
    let status = move || job.with(|j| j.as_ref().map(|j| j.status));
    let running = move || status().is_some_and(|s| !s.is_finished());
    let resumable =
        move || status().is_some_and(|s| matches!(s, JobStatus::Failed | JobStatus::Cancelled));
    let status_name = move || status().map_or("loading", |s| s.as_str());

    view! {
        <section class="card job-detail" data-testid="job-detail" data-job-id=id.clone()>
            <div class="card-head">
                <h2>"Job " <code>{id.clone()}</code></h2>
                <span
                    class=move || format!("badge status status-{}", status_name())
                    data-testid="job-status"
                    data-status=status_name
                >
                    {status_name}
                </span>
                <Show when=running>
                    <button
                        type="button"
                        class="danger"
                        data-testid="job-cancel"
                        disabled=move || acting.get()
                        on:click=cancel.clone()
                    >
                        {move || if acting.get() { "Cancelling…" } else { "Cancel" }}
                    </button>
                </Show>
                <Show when=resumable>
                    <button
                        type="button"
                        data-testid="job-resume"
                        title="Edit the items it has not done yet; its records are kept"
                        disabled=move || acting.get()
                        on:click=resume.clone()
                    >
                        {move || if acting.get() { "Resuming…" } else { "Resume" }}
                    </button>
                </Show>
            </div>
            <Show
                when=move || job.with(Option::is_some)
                fallback=move || match live_error.get() {
                    Some(message) => view! { <ErrorMessage message testid="job-missing" /> }.into_any(),
                    None => view! { <p class="muted"><Spinner />" Loading the job…"</p> }.into_any(),
                }
            >
            {move || {
                job.get()
                    .map(|j| {
                        let r = &j.request;
                        view! {
                            <p class="small muted">
                                {format!(
                                    "{} · {} · {} examples · seed {}{} · started {}",
                                    r.dataset,
                                    method_name(&r.method),
                                    r.limit,
                                    r.seed,
                                    if r.verify { " · verified" } else { "" },
                                    format_time(&j.created_at),
                                )}
                            </p>
                        }
                    })
            }}
            <ProgressBar done=field(|j| j.done) total=field(|j| j.total) testid="job-progress" />
            <dl class="counts">
                <div><dt>"written"</dt><dd data-testid="job-written">{field(|j| j.written)}</dd></div>
                <div><dt>"flipped"</dt><dd data-testid="job-flipped">{field(|j| j.flipped)}</dd></div>
                <div><dt>"failed attempts"</dt><dd>{field(|j| j.failed_attempts)}</dd></div>
                <div><dt>"given up"</dt><dd>{field(|j| j.given_up)}</dd></div>
            </dl>
            {move || job.get().and_then(|j| j.error).map(|message| view! { <ErrorMessage message=format!("The job failed: {message}") testid="job-failure" /> })}
            {move || action_error.get().map(|message| view! { <ErrorMessage message /> })}
            {move || live_error.get().map(|message| view! { <p class="warning small">{message}</p> })}
            <Records id=records_id.clone() written=field(|j| j.written) />
            </Show>
        </section>
    }
}

/// Follows job `id` over `GET …/jobs/{id}/events` until it finishes (or the page moves on),
/// putting every `progress` event into `jobs`.
fn follow_progress(id: String, jobs: JobList, live_error: RwSignal<Option<String>>) {
    let team = jobs.team.id();
    let mut source = match EventSource::new(&api::job_events_url(&team, &id)) {
        Ok(source) => source,
        Err(e) => {
            live_error.set(Some(format!("No live progress: {e}")));
            return;
        }
    };
    let mut events = match source.subscribe("progress") {
        Ok(events) => events,
        Err(e) => {
            live_error.set(Some(format!("No live progress: {e}")));
            return;
        }
    };
    // Dropping the EventSource closes it: on leaving the page, or once the job has finished
    // (else the browser would reconnect to the ended stream forever).
    let source = Rc::new(RefCell::new(Some(source)));
    let closer = SendWrapper::new(source.clone());
    on_cleanup(move || drop(closer.borrow_mut().take()));

    spawn_local(async move {
        while let Some(event) = events.next().await {
            match event {
                Ok((_, message)) => {
                    let data = message.data().as_string().unwrap_or_default();
                    match serde_json::from_str::<Job>(&data) {
                        Ok(job) => {
                            let finished = job.status.is_finished();
                            jobs.upsert(job);
                            if finished {
                                drop(source.borrow_mut().take());
                                return;
                            }
                        }
                        Err(e) => live_error.set(Some(format!("Unreadable progress event: {e}"))),
                    }
                }
                Err(_) => {
                    if source.borrow().is_none() {
                        // Closed by us.
                        return;
                    }
                    drop(source.borrow_mut().take());
                    // The stream failed for good (the browser retries by itself otherwise):
                    // show where the job is now.
                    match api::job(&team, &id).await {
                        Ok(job) => {
                            let finished = job.status.is_finished();
                            jobs.upsert(job);
                            if !finished {
                                live_error.set(Some(
                                    "Live progress was interrupted; reload the page to follow the job again."
                                        .into(),
                                ));
                            }
                        }
                        Err(message) => live_error.set(Some(message)),
                    }
                    return;
                }
            }
        }
    });
}
