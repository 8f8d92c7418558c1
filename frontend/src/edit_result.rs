//! One edit's outcome: the edit as a diff of the original, the classifier's probabilities
//! before and after, whether the label flipped — and a copy of the edit the user can change by
//! hand, re-scored live by the classifier running in the browser.

use std::time::Duration;

use flipside_shared::api::EditResponse;
use flipside_shared::records::{AutocadProvenance, Provenance};
use leptos::prelude::*;
use leptos::task::spawn_local;

use crate::diff_view::diff_view;
use crate::scoring::{self, Scores, Status};
use crate::ui::{ProbabilityBar, Spinner, format_millis, format_probability};

/// How long typing must pause before the browser re-scores the text.
const DEBOUNCE: Duration = Duration::from_millis(250);

/// The edit, its scores and the hand-editing box.
#[component]
pub fn EditResult(
    response: EditResponse,
    /// Asks for another edit (the next seed).
    try_another: Callback<()>,
    #[prop(into)] pending: Signal<bool>,
    /// The sampling seed the edit was made with.
    seed: u64,
) -> impl IntoView {
    let target_index = response.labels.iter().position(|l| *l == response.target);
    let p_target = |probabilities: &[f32]| target_index.map_or(0.0, |i| probabilities[i]);
    let original_p = p_target(&response.original_probabilities);
    let timing = &response.timing;
    let small_print = format!(
        "retrieval {} · edit {} · classifier {} · model {} · seed {}",
        format_millis(timing.context_ms),
        format_millis(timing.edit_ms),
        format_millis(timing.judge_ms),
        response.model,
        seed,
    );
    let body = match (&response.record, &response.edited_probabilities) {
        (Some(record), Some(probabilities)) => {
            let edited_p = p_target(probabilities);
            view! {
                <div class="scores">
                    <div class="score-main">
                        <span class="score-value" data-testid="demo-flip-probability">
                            {format!(
                                "p({}) = {}",
                                response.target,
                                format_probability(edited_p),
                            )}
                        </span>
                        <ProbabilityBar value=edited_p />
                        <span class="small muted">
                            {format!(
                                "original {} → edited {} (server's classifier)",
                                format_probability(original_p),
                                format_probability(edited_p),
                            )}
                        </span>
                    </div>
                    <FlippedBadge flipped=record.flipped target=response.target.clone() />
                </div>
                {match &record.provenance {
                    Provenance::Autocad(provenance) => Some(view! {
                        <Infilled provenance=provenance.clone() />
                    }),
                    _ => None,
                }}
                <LiveEdit
                    original=response.original.clone()
                    edited=record.edited.clone()
                    target=response.target.clone()
                />
            }
            .into_any()
        }
        _ => {
            let last = response.failures.last();
            let failure = last
                .map(|f| f.reason.clone())
                .unwrap_or_else(|| "the model's reply held no usable edit".into());
            let reply = last.and_then(|f| f.reply.clone()).unwrap_or_default();
            view! {
                <p class="warning" data-testid="demo-failure">
                    {format!("No edit: {failure}")}
                </p>
                <details class="reply">
                    <summary>"The model's reply"</summary>
                    <pre>{reply}</pre>
                </details>
            }
            .into_any()
        }
    };
    view! {
        <section class="card result" data-testid="demo-result">
            <div class="card-head">
                <h2>{format!("Counterfactual: {} → {}", response.label, response.target)}</h2>
                <button
                    type="button"
                    data-testid="demo-try-another"
                    disabled=move || pending.get()
                    on:click=move |_| try_another.run(())
                >
                    "Try another"
                </button>
            </div>
            {body}
            <p class="small muted timings" data-testid="demo-timings">
                {small_print}
            </p>
        </section>
    }
}

/// Whether the classifier gives the edit the target label.
#[component]
fn FlippedBadge(flipped: bool, target: String) -> impl IntoView {
    let (class, text) = if flipped {
        ("badge badge-ok", format!("✓ Flipped to {target}"))
    } else {
        ("badge badge-bad", "✗ Not flipped".to_string())
    };
    view! {
        <span class=class data-testid="demo-flipped" data-flipped=flipped.to_string()>
            {text}
        </span>
    }
}

/// What an AutoCAD edit rewrote: the text with its rationale spans masked, and each span's
/// words beside the infiller's fill.
#[component]
fn Infilled(provenance: AutocadProvenance) -> impl IntoView {
    let rows = provenance
        .spans
        .iter()
        .zip(&provenance.fills)
        .enumerate()
        .map(|(k, (span, fill))| {
            view! {
                <li>
                    <code>{format!("<extra_id_{k}>")}</code>
                    {format!(" {span} → {}", if fill.is_empty() { "(nothing)" } else { fill })}
                </li>
            }
        })
        .collect::<Vec<_>>();
    view! {
        <div class="infilled small" data-testid="demo-infilled">
            <p>
                {format!("Masked ({} rationale): ", provenance.rationales)}
                <code data-testid="demo-masked">{provenance.masked.clone()}</code>
            </p>
            <ul class="fills">{rows}</ul>
        </div>
    }
}

/// The edit as a diff of the original, with a box to change it by hand; every change is
/// re-scored in the browser once typing pauses.
#[component]
fn LiveEdit(original: String, edited: String, target: String) -> impl IntoView {
    let draft = RwSignal::new(edited);
    let score = RwSignal::new(None::<Result<Scores, String>>);
    let status = scoring::use_scoring();
    let timer = StoredValue::new(None::<TimeoutHandle>);
    // Which scoring request is the newest: older answers are dropped.
    let generation = StoredValue::new(0u64);

    Effect::new(move |_| {
        let text = draft.get();
        if !matches!(status.get(), Status::Ready(_)) {
            return;
        }
        if let Some(handle) = timer.get_value() {
            handle.clear();
        }
        generation.update_value(|g| *g += 1);
        let current = generation.get_value();
        let handle = set_timeout_with_handle(
            move || {
                spawn_local(async move {
                    let Some(scorer) = scoring::scorer() else {
                        return;
                    };
                    let result = scorer.score(&text).await;
                    if generation.try_get_value() == Some(current) {
                        score.set(Some(result));
                    }
                });
            },
            DEBOUNCE,
        );
        timer.set_value(handle.ok());
    });
    on_cleanup(move || {
        if let Some(Some(handle)) = timer.try_get_value() {
            handle.clear();
        }
    });

    let original_for_diff = original.clone();
    let target_for_score = target.clone();
    // The score as one line of text (what `browser-score` holds), then its bar and verdict.
    let target_for_bar = target.clone();
    let live_score = move || match (status.get(), score.get()) {
        (Status::Failed(message), _) => view! {
            <span class="error-inline">{format!("Cannot score in the browser: {message}")}</span>
        }
        .into_any(),
        (Status::Ready(_), Some(Ok(scores))) => format!(
            "p({}) = {} — scored in your browser ({}), {}",
            target_for_score,
            format_probability(scores.probability(&target_for_score)),
            scores.backend.label(),
            format_millis(scores.millis),
        )
        .into_any(),
        (Status::Ready(_), Some(Err(message))) => view! {
            <span class="error-inline">{format!("Scoring failed: {message}")}</span>
        }
        .into_any(),
        (Status::Ready(_), None) => view! { <Spinner /> " Scoring…" }.into_any(),
        (Status::Loading(step), _) => view! {
            <Spinner />
            {format!(" Loading the classifier into your browser: {step}")}
        }
        .into_any(),
        (Status::NotStarted, _) => ().into_any(),
    };
    let verdict = move || {
        let scores = score.get()?.ok()?;
        let predicted = scores.predicted().unwrap_or_default().to_string();
        let flipped = predicted == target_for_bar;
        Some(view! {
            <ProbabilityBar value=scores.probability(&target_for_bar) />
            <span class="small muted" data-testid="browser-flipped" data-flipped=flipped.to_string()>
                {format!(
                    "predicted: {predicted} ({})",
                    if flipped { "flipped" } else { "not flipped" },
                )}
            </span>
        })
    };

    view! {
        <div class="edited" data-testid="demo-edited">
            {move || draft.with(|d| diff_view(&original_for_diff, d))}
        </div>
        <div class="field">
            <label for="demo-hand-edit">"Change the edit by hand"</label>
            <textarea
                id="demo-hand-edit"
                data-testid="demo-hand-edit"
                rows="3"
                prop:value=move || draft.get()
                on:input=move |ev| draft.set(event_target_value(&ev))
            ></textarea>
        </div>
        <div class="live-score" aria-live="polite">
            <p class="score-value small-value" data-testid="browser-score">
                {live_score}
            </p>
            {verdict}
        </div>
    }
}
