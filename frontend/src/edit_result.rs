//! One edit's outcome: the edit as a diff of the original, the classifier's probabilities
//! before and after, whether the label flipped — and a copy of the edit the user can change by
//! hand, re-scored live by the classifier running in the browser.

use flipside_shared::api::EditResponse;
use flipside_shared::records::{AutocadProvenance, Provenance};
use leptos::prelude::*;

use crate::live_edit::LiveEdit;
use crate::ui::{ProbabilityBar, format_millis, format_probability};

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
                    draft=RwSignal::new(record.edited.clone())
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
                {format!("Masked (rationale: {}): ", provenance.rationale_rule())}
                <code data-testid="demo-masked">{provenance.masked.clone()}</code>
            </p>
            <ul class="fills">{rows}</ul>
        </div>
    }
}
