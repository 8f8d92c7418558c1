//! The "generate in your browser" page (LASS): reviews pasted or picked by the visitor are
//! rewritten with the target sentiment by the Dis-AE running in the page, each scored by the
//! in-browser classifier, flipped ones highlighted, and the results downloadable as JSON lines.
//! Nothing goes to the server once the two models are loaded.

use flipside_shared::api::{DisAeInfo, ServerInfo};
use leptos::prelude::*;
use leptos::task::spawn_local;
use serde::Serialize;

use crate::api;
use crate::diff_view::diff_view;
use crate::dis_ae;
use crate::portal;
use crate::scoring::{self, Status, yield_to_browser};
use crate::ui::{ErrorMessage, ProgressBar, WaitingForServer, format_millis, format_probability};

/// One generated text and the classifier's verdict, as downloaded.
#[derive(Debug, Clone, Serialize)]
struct Generated {
    original: String,
    edited: String,
    target: String,
    /// The in-browser classifier's probability of the target.
    target_probability: f32,
    flipped: bool,
    method: &'static str,
    model: String,
}

/// The page: waits for the server's info, then shows the form (or why it cannot).
#[component]
pub fn BrowserGeneration() -> impl IntoView {
    let preparing = RwSignal::new(None::<String>);
    let info =
        LocalResource::new(move || api::info_when_ready(move |status| preparing.set(Some(status))));
    view! {
        {move || match info.get() {
            None => view! { <WaitingForServer preparing=preparing waiting="Loading…" /> }.into_any(),
            Some(Err(message)) => view! {
                <section class="card"><ErrorMessage message=message testid="generate-error" /></section>
            }.into_any(),
            Some(Ok(info)) => match info.dis_ae.clone() {
                Some(dis_ae) => portal::unless_private(
                    info.private,
                    move || view! { <Generator info=info.clone() dis_ae=dis_ae.clone() /> }.into_any(),
                )
                .into_any(),
                None => view! {
                    <section class="card" data-testid="no-dis-ae">
                        <h2>"Generate in your browser"</h2>
                        <p>
                            "This server has no Dis-AE to send you. Train one with "
                            <code>"flipside lass train"</code>" and serve it with "
                            <code>"flipside serve --dis-ae DIR"</code>"."
                        </p>
                    </section>
                }.into_any(),
            },
        }}
    }
}

/// The default target: `negative` when the Dis-AE knows it (LASS's direction), else its first
/// label.
fn default_target(labels: &[String]) -> String {
    labels
        .iter()
        .find(|l| *l == "negative")
        .or(labels.first())
        .cloned()
        .unwrap_or_default()
}

#[component]
fn Generator(info: ServerInfo, dis_ae: DisAeInfo) -> impl IntoView {
    let scoring = scoring::use_scoring();
    let reproducer = dis_ae::use_dis_ae();
    let target = RwSignal::new(default_target(&dis_ae.labels));
    let examples = move |target: &str| -> String {
        info.examples
            .iter()
            .filter(|e| e.label != target)
            .map(|e| e.text.clone())
            .collect::<Vec<_>>()
            .join("\n")
    };
    let texts = RwSignal::new(examples(&target.get_untracked()));
    let results = RwSignal::new(Vec::<Generated>::new());
    let total = RwSignal::new(0usize);
    let running = RwSignal::new(false);
    let error = RwSignal::new(None::<String>);
    let millis = RwSignal::new(0.0f64);
    let ready = move || {
        matches!(scoring.get(), Status::Ready(_)) && matches!(reproducer.get(), Status::Ready(_))
    };
    let model = dis_ae.name.clone();

    let generate = move |event: leptos::ev::SubmitEvent| {
        event.prevent_default();
        let lines: Vec<String> = texts
            .get_untracked()
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .map(str::to_string)
            .collect();
        let target = target.get_untracked();
        let model = model.clone();
        results.set(Vec::new());
        total.set(lines.len());
        millis.set(0.0);
        error.set(None);
        running.set(true);
        spawn_local(async move {
            let Some(scorer) = scoring::scorer() else {
                running.set(false);
                return;
            };
            // As many lines at a time as the Dis-AE has workers, so that every core decodes.
            let at_once = dis_ae::workers().max(1);
            'batches: for batch in lines.chunks(at_once) {
                let reproduced = match dis_ae::reproduce(batch, &target).await {
                    Ok((reproduced, ms)) => {
                        millis.update(|m| *m += ms);
                        reproduced
                    }
                    Err(message) => {
                        error.set(Some(message));
                        break;
                    }
                };
                for (line, reproduced) in batch.iter().zip(reproduced) {
                    let edited = reproduced.text;
                    match scorer.score(&edited).await {
                        Ok(scores) => results.update(|r| {
                            r.push(Generated {
                                flipped: scores.predicted() == Some(target.as_str()),
                                original: line.clone(),
                                target_probability: scores.probability(&target),
                                edited,
                                target: target.clone(),
                                method: "lass",
                                model: model.clone(),
                            })
                        }),
                        Err(message) => {
                            error.set(Some(message));
                            break 'batches;
                        }
                    }
                    // Let the page show the row before the classifier takes the thread again.
                    yield_to_browser().await;
                }
            }
            running.set(false);
        });
    };

    let download = move || {
        let jsonl: String = results
            .get()
            .iter()
            .filter_map(|g| serde_json::to_string(g).ok())
            .map(|line| line + "\n")
            .collect();
        format!(
            "data:application/x-ndjson;charset=utf-8,{}",
            js_sys::encode_uri_component(&jsonl)
        )
    };
    let flipped = move || results.with(|r| r.iter().filter(|g| g.flipped).count());
    let labels = dis_ae.labels.clone();

    view! {
        <section class="card">
            <h2>"Generate in your browser"</h2>
            <p class="muted">
                "LASS's Dis-AE ("{dis_ae.name.clone()}", "
                {format!("{:.1}", dis_ae.parameters as f64 / 1e6)}" M parameters, "
                {format!("{:.1}", dis_ae.download_bytes as f64 / 1e6)}" MB) keeps each review's content and gives it the target sentiment, on your machine; the classifier in the page checks each one."
            </p>
            <p class="muted" data-testid="model-status">
                {move || status_line("Dis-AE", reproducer.get())}" · "
                {move || status_line("classifier", scoring.get())}
            </p>
            <form on:submit=generate>
                <label class="field">
                    "Reviews, one per line"
                    <textarea
                        rows="6"
                        data-testid="generate-texts"
                        prop:value=move || texts.get()
                        on:input=move |ev| texts.set(event_target_value(&ev))
                    ></textarea>
                </label>
                <label class="field inline">
                    "Target sentiment "
                    <select
                        data-testid="generate-target"
                        on:change=move |ev| target.set(event_target_value(&ev))
                        prop:value=move || target.get()
                    >
                        {labels.into_iter().map(|l| view! { <option value=l.clone()>{l.clone()}</option> }).collect_view()}
                    </select>
                </label>
                <button
                    type="submit"
                    class="primary"
                    data-testid="generate-button"
                    disabled=move || !ready() || running.get()
                >
                    "Generate in your browser"
                </button>
            </form>
        </section>
        <section class="card" data-testid="generate-results">
            <ProgressBar done=Signal::derive(move || results.with(Vec::len)) total=total testid="generate-progress" />
            {move || error.get().map(|message| view! { <ErrorMessage message testid="generate-run-error" /> })}
            <p class="muted" data-testid="generate-summary">
                {move || {
                    let n = results.with(Vec::len);
                    if n == 0 {
                        String::new()
                    } else {
                        format!(
                            "{} of {n} flipped · {} in the Dis-AE ({:.1} texts/s, CPU wasm, {} worker{})",
                            flipped(),
                            format_millis(millis.get()),
                            1000.0 * n as f64 / millis.get().max(1e-9),
                            dis_ae::workers(),
                            if dis_ae::workers() == 1 { "" } else { "s" },
                        )
                    }
                }}
            </p>
            <table class="records">
                <thead><tr><th>"Original"</th><th>"Generated"</th><th>"p(target)"</th></tr></thead>
                <tbody>
                    {move || results.get().into_iter().map(|g| view! {
                        <tr class:flipped=g.flipped data-testid="generated-row" data-flipped=g.flipped.to_string()>
                            <td>{g.original.clone()}</td>
                            <td data-testid="generated-text">{diff_view(&g.original, &g.edited)}</td>
                            <td>{format_probability(g.target_probability)}</td>
                        </tr>
                    }).collect_view()}
                </tbody>
            </table>
            <Show when=move || !running.get() && results.with(|r| !r.is_empty())>
                <a class="button" data-testid="generate-download" href=download download="flipside-lass.jsonl">
                    "Download JSON lines"
                </a>
            </Show>
        </section>
    }
}

/// `Dis-AE: ready (CPU wasm)`, or what it is doing.
fn status_line(what: &str, status: Status) -> String {
    match status {
        Status::NotStarted => format!("{what}: not loaded"),
        Status::Loading(doing) => format!("{what}: {doing}"),
        Status::Ready(device) => format!("{what}: ready ({})", device.label()),
        Status::Failed(message) => format!("{what}: {message}"),
    }
}
