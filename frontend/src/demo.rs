//! The edit demo: a labelled text goes to `POST /api/edit`, and the page shows each step of the
//! counterfactual — the helpers retrieved, the keywords taken from them, the edit as a diff and
//! how the classifier scores it, then lets the user change the edit and re-score it in the
//! browser.

use flipside_shared::api::{EditRequest, EditResponse, MethodId, MethodInfo, ServerInfo};
use leptos::prelude::*;
use leptos::task::spawn_local;

use crate::api;
use crate::edit_result::EditResult;
use crate::method_picker::MethodPicker;
use crate::portal;
use crate::retrieved::{KeywordEditor, Retrieved};
use crate::scoring::{self, Status};
use crate::ui::{ErrorMessage, Spinner, WaitingForServer};

/// The demo page: loads what the server edits with, then shows the form.
#[component]
pub fn EditDemo() -> impl IntoView {
    let preparing = RwSignal::new(None::<String>);
    let info =
        LocalResource::new(move || api::info_when_ready(move |status| preparing.set(Some(status))));
    view! {
        {move || match info.get() {
            None => {
                view! {
                    <WaitingForServer
                        preparing=preparing
                        waiting="Asking the server what it edits with…"
                    />
                }
                    .into_any()
            }
            Some(Err(message)) => {
                view! {
                    <section class="card">
                        <ErrorMessage
                            message=format!("Could not load the demo: {message}")
                            testid="demo-error"
                        />
                    </section>
                }
                    .into_any()
            }
            Some(Ok(info)) => {
                portal::unless_private(
                    info.private,
                    move || {
                        // Start downloading the classifier while the user reads the page.
                        scoring::use_scoring();
                        view! { <Demo info=info.clone() /> }.into_any()
                    },
                )
                .into_any()
            }
        }}
    }
}

/// An edit being made, or the last one made.
#[derive(Debug, Clone, Copy)]
struct EditState {
    /// The last request sent.
    request: RwSignal<Option<EditRequest>>,
    /// Its answer, once there is one.
    answer: RwSignal<Option<Result<EditResponse, String>>>,
    pending: RwSignal<bool>,
    /// The keywords shown as chips, which the user may change before re-running.
    keywords: RwSignal<Vec<String>>,
    /// The LLM's reply as it is being written, with its attempt's number.
    written: RwSignal<(usize, String)>,
}

impl EditState {
    fn new() -> Self {
        Self {
            request: RwSignal::new(None),
            answer: RwSignal::new(None),
            pending: RwSignal::new(false),
            keywords: RwSignal::new(Vec::new()),
            written: RwSignal::new((0, String::new())),
        }
    }

    /// Sends `request` to `POST /api/edit/stream`, showing the LLM's reply as it comes.
    fn send(self, request: EditRequest) {
        self.pending.set(true);
        self.request.set(Some(request.clone()));
        self.written.set((0, String::new()));
        spawn_local(async move {
            let written = self.written;
            let answer = api::edit_streaming(&request, move |attempt, piece| {
                written.update(|(shown, text)| {
                    if *shown != attempt {
                        *shown = attempt;
                        text.clear();
                    }
                    text.push_str(piece);
                });
            })
            .await;
            if let Ok(response) = &answer {
                self.keywords.set(response.keywords.clone());
            }
            self.answer.set(Some(answer));
            self.pending.set(false);
        });
    }

    /// The last request again with other keywords (`Some`) and/or the next seed.
    fn resend(self, keywords: Option<Vec<String>>, next_seed: bool) {
        let Some(mut request) = self.request.get_untracked() else {
            return;
        };
        if keywords.is_some() {
            request.keywords = keywords;
        }
        if next_seed {
            // The server tries seed, seed+1 and seed+2: step past them.
            request.seed = Some(request.seed.unwrap_or(0) + 3);
        }
        self.send(request);
    }
}

/// The other label of a binary task (or the first label that is not `label`).
fn other_label(labels: &[String], label: &str) -> String {
    labels
        .iter()
        .find(|l| *l != label)
        .or(labels.first())
        .cloned()
        .unwrap_or_default()
}

/// The form and the result of the last edit.
#[component]
fn Demo(info: ServerInfo) -> impl IntoView {
    let labels = info.classifier.labels.clone();
    let first = info.examples.first();
    let text = RwSignal::new(first.map(|e| e.text.clone()).unwrap_or_default());
    let label = RwSignal::new(
        first
            .map(|e| e.label.clone())
            .or_else(|| labels.first().cloned())
            .unwrap_or_default(),
    );
    let target = RwSignal::new(other_label(&labels, &label.get_untracked()));
    let method = RwSignal::new(None::<MethodId>);
    let edit = EditState::new();

    let submit = move |event: leptos::ev::SubmitEvent| {
        event.prevent_default();
        edit.send(EditRequest {
            text: text.get_untracked(),
            label: label.get_untracked(),
            target: Some(target.get_untracked()),
            method: method.get_untracked(),
            keywords: None,
            seed: Some(0),
        });
    };
    let labels_for_label = labels.clone();
    let on_label = move |value: String| {
        if target.get_untracked() == value {
            target.set(other_label(&labels_for_label, &value));
        }
        label.set(value);
    };
    let examples = info.examples.clone();
    let labels_for_example = labels.clone();
    let on_example = move |value: String| {
        let Some(example) = value.parse::<usize>().ok().and_then(|i| examples.get(i)) else {
            return;
        };
        text.set(example.text.clone());
        target.set(other_label(&labels_for_example, &example.label));
        label.set(example.label.clone());
    };
    let can_submit = move || !edit.pending.get() && !text.with(|t| t.trim().is_empty());
    let methods = info.methods.clone();

    view! {
        <section class="card">
            <h2>"Flip a label with a minimal edit"</h2>
            <p class="muted" data-testid="demo-method-description">
                {move || method_description(&methods, method.get())} ". The classifier "
                {info.classifier.name.clone()}
                " checks that the edit gets the target label; the LLM is "
                <strong>{info.model.clone()}</strong>
                ", the helpers come from "
                {info.corpus.name.clone()}
                "."
            </p>
            <form class="edit-form" on:submit=submit>
                <div class="field">
                    <div class="field-head">
                        <label for="demo-text">"Text"</label>
                        <select
                            class="example-picker"
                            data-testid="demo-example"
                            aria-label="Pick an example"
                            on:change=move |ev| on_example(event_target_value(&ev))
                        >
                            <option value="">"Pick an example…"</option>
                            {info
                                .examples
                                .iter()
                                .enumerate()
                                .map(|(i, example)| {
                                    view! {
                                        <option value=i.to_string()>
                                            {format!("[{}] {}", example.label, preview(&example.text))}
                                        </option>
                                    }
                                })
                                .collect_view()}
                        </select>
                    </div>
                    <textarea
                        id="demo-text"
                        data-testid="demo-text"
                        rows="4"
                        placeholder="A labelled text, e.g. “The acting was superb.”"
                        prop:value=move || text.get()
                        on:input=move |ev| text.set(event_target_value(&ev))
                    ></textarea>
                </div>
                <div class="row">
                    <div class="field">
                        <label for="demo-label">"Its label"</label>
                        <LabelSelect
                            id="demo-label"
                            labels=labels.clone()
                            value=label
                            on_change=Callback::new(on_label)
                        />
                    </div>
                    <span class="arrow" aria-hidden="true">"→"</span>
                    <div class="field">
                        <label for="demo-target">"Target label"</label>
                        <LabelSelect
                            id="demo-target"
                            labels=labels.clone()
                            value=target
                            on_change=Callback::new(move |value| target.set(value))
                        />
                    </div>
                    <div class="field">
                        <label for="demo-method">"Method"</label>
                        <MethodPicker methods=info.methods.clone() chosen=method testid="demo-method" />
                    </div>
                    <button
                        type="submit"
                        class="primary"
                        data-testid="demo-submit"
                        disabled=move || !can_submit()
                    >
                        {move || {
                            if edit.pending.get() {
                                view! {
                                    <Spinner />
                                    " Editing…"
                                }
                                    .into_any()
                            } else {
                                "Make counterfactual".into_any()
                            }
                        }}
                    </button>
                </div>
            </form>
            <ScoringStatus />
        </section>
        <EditOutcome edit />
    }
}

/// The description of the `chosen` method, or of the server's default (the first).
fn method_description(methods: &[MethodInfo], chosen: Option<MethodId>) -> String {
    methods
        .iter()
        .find(|m| Some(&m.id) == chosen.as_ref())
        .or(methods.first())
        .map(|m| m.description.clone())
        .unwrap_or_default()
}

/// A `<select>` of the classifier's labels.
#[component]
fn LabelSelect(
    id: &'static str,
    labels: Vec<String>,
    value: RwSignal<String>,
    on_change: Callback<String>,
) -> impl IntoView {
    view! {
        <select id=id data-testid=id on:change=move |ev| on_change.run(event_target_value(&ev))>
            {labels
                .into_iter()
                .map(|l| {
                    let selected = l.clone();
                    let option_value = l.clone();
                    view! {
                        <option value=option_value prop:selected=move || value.get() == selected>
                            {l}
                        </option>
                    }
                })
                .collect_view()}
        </select>
    }
}

/// What became of the last edit: pending, failed, or its steps.
#[component]
fn EditOutcome(edit: EditState) -> impl IntoView {
    let rerun = Callback::new(move |()| edit.resend(Some(edit.keywords.get_untracked()), false));
    let try_another = Callback::new(move |()| edit.resend(None, true));
    let pending = Signal::derive(move || edit.pending.get());
    view! {
        <Show when=move || edit.pending.get()>
            <p class="status-line" data-testid="demo-pending">
                <Spinner />
                " Editing… the models run on the server's CPU, so this takes a few seconds."
            </p>
            <Show when=move || edit.written.with(|(_, text)| !text.is_empty())>
                <div class="card written">
                    <p class="small muted">
                        {move || format!("The LLM is writing (attempt {}):", edit.written.with(|(n, _)| *n))}
                    </p>
                    <pre data-testid="demo-written">{move || edit.written.with(|(_, text)| text.clone())}</pre>
                </div>
            </Show>
        </Show>
        {move || match edit.answer.get() {
            None => ().into_any(),
            Some(Err(message)) => {
                view! {
                    <section class="card">
                        <ErrorMessage message testid="demo-error" />
                    </section>
                }
                    .into_any()
            }
            Some(Ok(response)) => {
                let retrieval = response.retrieval.clone().map(|retrieval| view! { <Retrieved retrieval /> });
                let seed = edit
                    .request
                    .with_untracked(|r| r.as_ref().and_then(|r| r.seed).unwrap_or(0));
                view! {
                    <div class="outcome" class:stale=move || edit.pending.get()>
                        <EditResult response try_another pending seed />
                        {retrieval
                            .map(|retrieval| {
                                view! {
                                    <section class="card">
                                        <h2>"How it was made"</h2>
                                        {retrieval}
                                        <KeywordEditor keywords=edit.keywords rerun pending />
                                    </section>
                                }
                            })}
                    </div>
                }
                    .into_any()
            }
        }}
    }
}

/// Where the in-browser classifier is: loading, ready on which backend, or failed.
#[component]
fn ScoringStatus() -> impl IntoView {
    let status = scoring::use_scoring();
    view! {
        <p class="scoring-status small">
            "In-browser classifier: "
            {move || match status.get() {
                Status::NotStarted => view! { <span data-testid="browser-backend">"—"</span> }.into_any(),
                Status::Loading(step) => {
                    view! {
                        <span data-testid="browser-backend" data-state="loading">
                            <Spinner />
                            " "
                            {step}
                        </span>
                    }
                        .into_any()
                }
                Status::Ready(device) => {
                    view! {
                        <span
                            class="backend-badge"
                            data-testid="browser-backend"
                            data-state="ready"
                            data-backend=device.id()
                        >
                            {device.label()}
                        </span>
                        " ready"
                    }
                        .into_any()
                }
                Status::Failed(message) => {
                    view! {
                        <span class="error-inline" data-testid="browser-backend" data-state="failed">
                            "unavailable ("
                            {message}
                            ")"
                        </span>
                    }
                        .into_any()
                }
            }}
        </p>
    }
}

/// The start of a long text, for the example picker.
fn preview(text: &str) -> String {
    const MAX: usize = 70;
    match text.char_indices().nth(MAX) {
        Some((end, _)) => format!("{}…", &text[..end]),
        None => text.to_string(),
    }
}
