//! A counterfactual as a diff of its original, with a box to change it by hand; every change is
//! re-scored by the classifier running in the browser once typing pauses. Used by the edit demo
//! and the review queue.

use std::time::Duration;

use leptos::prelude::*;
use leptos::task::spawn_local;

use crate::diff_view::diff_view;
use crate::scoring::{self, Scores, Status};
use crate::ui::{ProbabilityBar, Spinner, format_millis, format_probability};

/// The id of the text box (the review page focuses it with a key).
pub const EDIT_BOX_ID: &str = "demo-hand-edit";

/// How long typing must pause before the browser re-scores the text.
const DEBOUNCE: Duration = Duration::from_millis(250);

/// The edit as a diff of the original, with a box to change it by hand; every change is
/// re-scored in the browser once typing pauses.
#[component]
pub fn LiveEdit(
    original: String,
    /// The text being edited; the caller reads and may reset it.
    draft: RwSignal<String>,
    target: String,
) -> impl IntoView {
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
            <label for=EDIT_BOX_ID>"Change the edit by hand"</label>
            <textarea
                id=EDIT_BOX_ID
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
