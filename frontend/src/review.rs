//! Reviewing a queue by keyboard: the leased item (original, the counterfactual as a diff, its
//! live score in the browser, how the method made it, the other counterfactuals of the same
//! original), one key per verdict, undo, and writing a counterfactual with retrieved excerpts
//! for an original that has none. Keys never fire while typing in a text box; the text box
//! keeps a draft on the server, so a closed tab loses nothing.

use std::time::Duration;

use flipside_shared::api::{ApiError, RetrieveRequest, RetrieveResponse};
use flipside_shared::portal::{
    Decision, Draft, Lease, QueueStats, ReviewItem, Role, Verdict, VerdictRequest,
};
use flipside_shared::records::{Excerpt, Provenance};
use leptos::prelude::*;
use leptos::task::spawn_local;
use wasm_bindgen::JsCast;

use crate::api;
use crate::live_edit::{EDIT_BOX_ID, LiveEdit};
use crate::route::Route;
use crate::second_pass::{SECOND_PASS_KEYS, SecondPass, SecondPassView};
use crate::ui::{ErrorMessage, Spinner, format_probability};

/// How many items are shown between two refreshes of the dashboard.
const STATS_EVERY: usize = 20;

/// How long typing must pause before the draft is saved on the server.
const DRAFT_DEBOUNCE: Duration = Duration::from_millis(800);

/// The keys, as the page lists them.
const KEYS: [(&str, &str); 10] = [
    ("a", "accept"),
    ("r", "reject"),
    ("f", "fix: edit the text, then Ctrl+Enter"),
    ("l", "relabel: it keeps the original's label"),
    ("g", "flag"),
    ("s", "skip"),
    ("o", "accept over the classifier (reviewers)"),
    ("u", "undo your last verdict"),
    ("e", "find label-flipped excerpts"),
    ("Esc", "leave the text box"),
];

/// What the page is doing for the current item.
#[derive(Debug, Clone, Copy)]
struct ReviewState {
    team: StoredValue<String>,
    queue: StoredValue<String>,
    lease: RwSignal<Option<Lease>>,
    /// Nothing is left for this person.
    finished: RwSignal<bool>,
    busy: RwSignal<bool>,
    error: RwSignal<Option<ApiError>>,
    draft: RwSignal<String>,
    /// Made once per shown item: a repeated key press sends the same request id.
    nonce: StoredValue<String>,
    retrieval: RwSignal<Option<Result<RetrieveResponse, String>>>,
    stats: RwSignal<Option<QueueStats>>,
    /// Items shown so far.
    shown: StoredValue<usize>,
}

impl ReviewState {
    fn show(self, lease: Option<Lease>) {
        // The next item starts with the keys live, not in the text box of the last one.
        blur_active();
        self.finished.set(lease.is_none());
        self.draft.set(lease.as_ref().map_or(String::new(), |l| {
            l.draft
                .clone()
                .or_else(|| l.item.counterfactual.clone())
                .unwrap_or_default()
        }));
        self.nonce
            .set_value(format!("{:016x}", (js_sys::Math::random() * 1e16) as u64));
        self.retrieval.set(None);
        // The dashboard reads the whole queue: refreshed at the start, every
        // STATS_EVERY items and at the end, not after every verdict.
        let shown = self.shown.get_value();
        self.shown.set_value(shown + 1);
        if lease.is_none() || shown.is_multiple_of(STATS_EVERY) {
            self.refresh_stats();
        }
        self.lease.set(lease);
    }

    fn refresh_stats(self) {
        spawn_local(async move {
            if let Ok(stats) =
                api::queue_stats(&self.team.get_value(), &self.queue.get_value()).await
            {
                self.stats.set(Some(stats));
            }
        });
    }

    fn next(self) {
        spawn_local(async move {
            match api::next_item(&self.team.get_value(), &self.queue.get_value()).await {
                Ok(lease) => self.show(lease),
                Err(message) => self.error.set(Some(client_error(message))),
            }
        });
    }

    fn decide(self, verdict: Verdict, override_classifier: bool) {
        let Some(lease) = self.lease.get_untracked() else {
            return;
        };
        if self.busy.get_untracked() {
            return;
        }
        let item = &lease.item;
        let draft = self.draft.get_untracked();
        let text = match verdict {
            Verdict::Fix => Some(draft),
            Verdict::Accept if item.counterfactual.is_none() => Some(draft),
            _ => None,
        };
        let excerpts: Vec<Excerpt> = self
            .retrieval
            .get_untracked()
            .and_then(Result::ok)
            .map(|r| r.excerpts)
            .unwrap_or_default();
        let request = VerdictRequest {
            lease: lease.id.clone(),
            request_id: format!("{}-{}", self.nonce.get_value(), verdict.as_str()),
            decision: Decision {
                verdict,
                text,
                label: (verdict == Verdict::Relabel).then(|| item.label.clone()),
                override_classifier,
            },
            excerpts,
        };
        self.busy.set(true);
        spawn_local(async move {
            let result =
                api::decide(&self.team.get_value(), &self.queue.get_value(), &request).await;
            self.busy.set(false);
            match result {
                Ok(_) => {
                    self.error.set(None);
                    self.next();
                }
                Err(error) => {
                    // A lease that ran out: the item went to someone else; go on.
                    let gone = error.code == "conflict" && error.message.contains("ran out");
                    self.error.set(Some(error));
                    if gone {
                        self.next();
                    }
                }
            }
        });
    }

    fn undo(self) {
        spawn_local(async move {
            match api::undo(&self.team.get_value(), &self.queue.get_value()).await {
                Ok(lease) => {
                    self.error.set(None);
                    self.show(Some(lease));
                }
                Err(message) => self.error.set(Some(client_error(message))),
            }
        });
    }

    fn find_excerpts(self) {
        let Some(lease) = self.lease.get_untracked() else {
            return;
        };
        let request = RetrieveRequest {
            text: lease.item.original.clone(),
            label: lease.item.label.clone(),
            target: Some(lease.item.target.clone()),
            k: None,
        };
        self.retrieval.set(Some(Err("searching…".into())));
        spawn_local(async move {
            self.retrieval.set(Some(api::retrieve(&request).await));
        });
    }
}

fn client_error(message: String) -> ApiError {
    ApiError {
        code: "client".into(),
        message,
    }
}

/// Whether a key event comes from a place where people type.
fn typing(ev: &leptos::ev::KeyboardEvent) -> bool {
    ev.target()
        .and_then(|t| t.dyn_into::<web_sys::Element>().ok())
        .is_some_and(|e| {
            matches!(e.tag_name().as_str(), "TEXTAREA" | "INPUT" | "SELECT")
                || e.get_attribute("contenteditable").is_some()
        })
}

/// One queue, reviewed by keyboard.
#[component]
pub fn ReviewQueue(team: String, queue: String, role: Role) -> impl IntoView {
    let state = ReviewState {
        team: StoredValue::new(team),
        queue: StoredValue::new(queue),
        lease: RwSignal::new(None),
        finished: RwSignal::new(false),
        busy: RwSignal::new(false),
        error: RwSignal::new(None),
        draft: RwSignal::new(String::new()),
        nonce: StoredValue::new(String::new()),
        retrieval: RwSignal::new(None),
        stats: RwSignal::new(None),
        shown: StoredValue::new(0),
    };
    state.next();
    let may_override = role >= Role::Reviewer;

    let second = RwSignal::new(false);
    let pass = SecondPass::new(&state.team.get_value(), &state.queue.get_value());
    let keys = window_event_listener(leptos::ev::keydown, move |ev| {
        if ev.alt_key() || (ev.meta_key() && ev.key() != "Enter") {
            return;
        }
        if second.get_untracked() {
            if !typing(&ev) && !ev.ctrl_key() && pass.key(&ev.key()) {
                ev.prevent_default();
            }
            return;
        }
        if typing(&ev) {
            if ev.key() == "Enter" && (ev.ctrl_key() || ev.meta_key()) {
                ev.prevent_default();
                let written = state
                    .lease
                    .get_untracked()
                    .is_some_and(|l| l.item.counterfactual.is_none());
                state.decide(
                    if written {
                        Verdict::Accept
                    } else {
                        Verdict::Fix
                    },
                    false,
                );
            } else if ev.key() == "Escape" {
                blur_active();
            }
            return;
        }
        if ev.ctrl_key() {
            return;
        }
        let handled = match ev.key().as_str() {
            "a" => {
                state.decide(Verdict::Accept, false);
                true
            }
            "r" => {
                state.decide(Verdict::Reject, false);
                true
            }
            "l" => {
                state.decide(Verdict::Relabel, false);
                true
            }
            "g" => {
                state.decide(Verdict::Flag, false);
                true
            }
            "s" => {
                state.decide(Verdict::Skip, false);
                true
            }
            "o" if may_override => {
                state.decide(Verdict::Accept, true);
                true
            }
            "u" => {
                state.undo();
                true
            }
            "e" => {
                state.find_excerpts();
                true
            }
            "f" => {
                focus_edit_box();
                true
            }
            _ => false,
        };
        if handled {
            ev.prevent_default();
        }
    });
    on_cleanup(move || keys.remove());

    // Keep what is typed as a draft on the server.
    let timer = StoredValue::new(None::<TimeoutHandle>);
    Effect::new(move |_| {
        let text = state.draft.get();
        let Some(lease) = state.lease.get_untracked() else {
            return;
        };
        let unchanged = lease
            .draft
            .as_deref()
            .or(lease.item.counterfactual.as_deref())
            == Some(text.as_str())
            || (lease.draft.is_none() && lease.item.counterfactual.is_none() && text.is_empty());
        if unchanged {
            return;
        }
        if let Some(handle) = timer.get_value() {
            handle.clear();
        }
        let handle = set_timeout_with_handle(
            move || {
                spawn_local(async move {
                    let draft = Draft { text };
                    let _ = api::save_draft(
                        &state.team.get_value(),
                        &state.queue.get_value(),
                        &lease.id,
                        &draft,
                    )
                    .await;
                });
            },
            DRAFT_DEBOUNCE,
        );
        timer.set_value(handle.ok());
    });

    let toggle = move |_| {
        let on = !second.get_untracked();
        second.set(on);
        if on {
            pass.load(None);
        } else {
            state.refresh_stats();
        }
    };
    let keys_shown = move || {
        let keys: &[(&str, &str)] = if second.get() {
            &SECOND_PASS_KEYS
        } else {
            &KEYS
        };
        keys.iter()
            .map(|(key, what)| view! { <li><kbd>{*key}</kbd>" "{*what}</li> })
            .collect::<Vec<_>>()
    };
    view! {
        <section class="card">
            <div class="card-head">
                <h2>{move || if second.get() { "Second pass" } else { "Review" }}</h2>
                {may_override.then(|| view! {
                    <button type="button" on:click=toggle data-testid="second-pass-toggle">
                        {move || if second.get() { "Back to deciding" } else { "Second pass" }}
                    </button>
                })}
                <a href=Route::Portal { queue: None }.href() class="small">"All queues"</a>
            </div>
            <QueueProgress stats=state.stats />
            <ul class="keys small" data-testid="review-keys">{keys_shown}</ul>
        </section>
        {move || second.get().then(|| view! { <SecondPassView pass /> })}
        {move || (!second.get()).then(|| state.error.get()).flatten().map(|e| view! {
            <ErrorMessage message=e.message testid="review-error" />
        })}
        {move || {
            if second.get() {
                return ().into_any();
            }
            if state.finished.get() {
                return view! {
                    <section class="card" data-testid="review-finished">
                        <p>"Nothing left for you in this queue. Press " <kbd>"u"</kbd>
                           " to take back your last verdict."</p>
                    </section>
                }.into_any();
            }
            match state.lease.get() {
                None => view! { <p><Spinner />" Loading the next item…"</p> }.into_any(),
                Some(lease) => view! { <ItemView lease state /> }.into_any(),
            }
        }}
    }
}

/// The queue's dashboard: progress, acceptance, flip share, agreement, and each person's work.
#[component]
fn QueueProgress(stats: RwSignal<Option<QueueStats>>) -> impl IntoView {
    move || {
        stats.get().map(|s| {
            let agreement = match (s.cohen_kappa, s.krippendorff_alpha) {
                (Some(k), _) => format!(" · Cohen's κ {k:.2}"),
                (None, Some(a)) => format!(" · Krippendorff's α {a:.2}"),
                _ => String::new(),
            };
            let people = s.people.clone();
            view! {
                <p class="small muted" data-testid="review-stats">
                    {format!(
                        "{} of {} decided · {} reviewed · {} kept ({:.0}%) · the classifier flips \
                         {:.0}% · {} leased now · {} overrides{}",
                        s.decided,
                        s.items,
                        s.reviewed,
                        s.kept,
                        100.0 * s.acceptance_rate,
                        100.0 * s.flip_share,
                        s.leased,
                        s.overrides,
                        agreement,
                    )}
                </p>
                <details class="small">
                    <summary>"Who did what"</summary>
                    <table class="queues" data-testid="review-people">
                        <thead><tr><th>"Person"</th><th>"Verdicts"</th><th>"Per hour"</th><th>"Kept"</th></tr></thead>
                        <tbody>
                            {people.into_iter().map(|p| view! {
                                <tr>
                                    <td>{p.name}</td>
                                    <td>{p.verdicts}</td>
                                    <td>{p.per_hour.map_or("—".to_string(), |r| format!("{r:.0}"))}</td>
                                    <td>{format!("{:.0}%", 100.0 * p.acceptance)}</td>
                                </tr>
                            }).collect::<Vec<_>>()}
                        </tbody>
                    </table>
                </details>
            }
        })
    }
}

fn focus_edit_box() {
    if let Some(element) = document().get_element_by_id(EDIT_BOX_ID)
        && let Ok(element) = element.dyn_into::<web_sys::HtmlElement>()
    {
        let _ = element.focus();
    }
}

fn blur_active() {
    if let Some(element) = document().active_element()
        && let Ok(element) = element.dyn_into::<web_sys::HtmlElement>()
    {
        let _ = element.blur();
    }
}

/// The leased item.
#[component]
fn ItemView(lease: Lease, state: ReviewState) -> impl IntoView {
    let item = lease.item.clone();
    let id = item.id.clone();
    let authoring = item.counterfactual.is_none();
    let machine = match (item.target_probability, item.flipped) {
        (Some(p), Some(flipped)) => format!(
            "{} · server's classifier: p({}) = {} ({})",
            item.method,
            item.target,
            format_probability(p),
            if flipped { "flips" } else { "does not flip" }
        ),
        _ => format!("{} · not scored by the server", item.method),
    };
    let previous = lease
        .previous
        .map(|v| format!("Taken back: your verdict was “{}”.", v.as_str()));
    view! {
        <section class="card review-item" data-testid="review-item" data-item-id=id>
            {previous.map(|p| view! { <p class="small warn" data-testid="review-previous">{p}</p> })}
            <p class="small muted">
                {format!("Item {} · {} → {}", item.seq + 1, item.label, item.target)}
            </p>
            <h3>{format!("Original ({})", item.label)}</h3>
            <p class="original" data-testid="review-original">{item.original.clone()}</p>
            <h3>
                {if authoring {
                    format!("Write a counterfactual with the label “{}”", item.target)
                } else {
                    format!("Counterfactual, meant to be “{}”", item.target)
                }}
            </h3>
            <LiveEdit original=item.original.clone() draft=state.draft target=item.target.clone() />
            <p class="small muted" data-testid="review-machine">{machine}</p>
            <HowItWasMade item=item.clone() />
            <Excerpts state />
            <Siblings item />
        </section>
    }
}

/// The method's provenance: retrieved excerpts and keywords, rationale spans, LASS parents.
#[component]
fn HowItWasMade(item: ReviewItem) -> impl IntoView {
    let Some(provenance) = item.provenance else {
        return ().into_any();
    };
    let body = match provenance {
        Provenance::Core(core) => view! {
            <p class="small">{format!("Keywords: {}", core.keywords.join(", "))}</p>
            <ul class="small excerpts">
                {core.retrieved.into_iter().map(|e| view! { <li>{e.text}</li> }).collect::<Vec<_>>()}
            </ul>
        }
        .into_any(),
        Provenance::Autocad(autocad) => view! {
            <p class="small">{format!("Rationales ({}): {}", autocad.rationale_rule(), autocad.spans.join(" · "))}</p>
            <p class="small">{format!("Filled with: {}", autocad.fills.join(" · "))}</p>
        }
        .into_any(),
        Provenance::Lass(lass) => view! {
            <p class="small">
                {format!("Sentiment parent: {}", lass.sentiment_parent.unwrap_or_else(|| "the label's vector".into()))}
            </p>
        }
        .into_any(),
    };
    view! {
        <details class="provenance" data-testid="review-provenance">
            <summary class="small">"How it was made"</summary>
            {body}
        </details>
    }
    .into_any()
}

/// Label-flipped excerpts retrieved for the original (key e), as inspiration; the ones shown
/// when the verdict is given are stored with it.
#[component]
fn Excerpts(state: ReviewState) -> impl IntoView {
    move || {
        state.retrieval.get().map(|found| match found {
            Ok(retrieval) => view! {
                <div class="excerpts-found" data-testid="review-excerpts">
                    <h3>{format!("Excerpts with the label “{}”", retrieval.target)}</h3>
                    <p class="small">{format!("Keywords: {}", retrieval.keywords.join(", "))}</p>
                    <ul class="small">
                        {retrieval.excerpts.into_iter().map(|e| view! {
                            <li data-testid="review-excerpt">{e.text}</li>
                        }).collect::<Vec<_>>()}
                    </ul>
                </div>
            }
            .into_any(),
            Err(message) => view! { <p class="small muted">{message}</p> }.into_any(),
        })
    }
}

/// The other counterfactuals of the same original in the queue.
#[component]
fn Siblings(item: ReviewItem) -> impl IntoView {
    (!item.siblings.is_empty()).then(|| {
        view! {
            <h3>"Other counterfactuals of this original"</h3>
            <ul class="small siblings" data-testid="review-siblings">
                {item.siblings.into_iter().map(|s| view! {
                    <li>
                        {s.counterfactual.unwrap_or_else(|| "(none written yet)".into())}
                        {s.outcome.map(|o| format!(" — {}", o.as_str()))}
                    </li>
                }).collect::<Vec<_>>()}
            </ul>
        }
    })
}
