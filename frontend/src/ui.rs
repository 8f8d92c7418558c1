//! Small building blocks shared by the pages: spinner, error message, probability bar,
//! progress bar.

use leptos::prelude::*;

/// A small spinning circle for work in progress.
#[component]
pub fn Spinner() -> impl IntoView {
    view! { <span class="spinner" aria-hidden="true"></span> }
}

/// Waiting for the server's info: what the server is preparing (its first run) when it says,
/// else `waiting`.
#[component]
pub fn WaitingForServer(
    preparing: RwSignal<Option<String>>,
    waiting: &'static str,
) -> impl IntoView {
    view! {
        <section class="card">
            <p class="muted" data-testid="server-preparing">
                <Spinner />
                " "
                {move || match preparing.get() {
                    Some(message) => format!(
                        "The server is getting its models ready: {message}. This page goes on by \
                         itself when they are."
                    ),
                    None => waiting.to_string(),
                }}
            </p>
        </section>
    }
}

/// An error, shown where the failed action was.
#[component]
pub fn ErrorMessage(
    #[prop(into)] message: String,
    /// The `data-testid` for browser tests.
    #[prop(optional)]
    testid: Option<&'static str>,
) -> impl IntoView {
    view! {
        <p class="error" role="alert" data-testid=testid>
            {message}
        </p>
    }
}

/// A probability as a horizontal bar, 0 to 1.
#[component]
pub fn ProbabilityBar(#[prop(into)] value: Signal<f32>) -> impl IntoView {
    let width = move || format!("width: {:.1}%", 100.0 * value.get().clamp(0.0, 1.0));
    view! {
        <div class="prob-track" aria-hidden="true">
            <div class="prob-fill" style=width></div>
        </div>
    }
}

/// `done` of `total` as a bar with the counts beside it.
#[component]
pub fn ProgressBar(
    #[prop(into)] done: Signal<usize>,
    #[prop(into)] total: Signal<usize>,
    #[prop(optional)] testid: Option<&'static str>,
) -> impl IntoView {
    let percent = move || {
        let total = total.get();
        if total == 0 {
            0.0
        } else {
            100.0 * done.get().min(total) as f64 / total as f64
        }
    };
    view! {
        <div
            class="progress"
            data-testid=testid
            role="progressbar"
            aria-valuemin="0"
            aria-valuemax="100"
            aria-valuenow=move || format!("{:.0}", percent())
            data-done=move || done.get().to_string()
            data-total=move || total.get().to_string()
        >
            <div class="progress-track">
                <div class="progress-fill" style=move || format!("width: {:.1}%", percent())></div>
            </div>
            <span class="progress-text">
                {move || {
                    let total = total.get();
                    if total == 0 {
                        "–".to_string()
                    } else {
                        format!("{} / {}", done.get(), total)
                    }
                }}
            </span>
        </div>
    }
}

/// A probability with three decimals, as `0.873`.
pub fn format_probability(p: f32) -> String {
    format!("{p:.3}")
}

/// Milliseconds as `850 ms` or `4.2 s`.
pub fn format_millis(ms: f64) -> String {
    if ms < 1000.0 {
        format!("{ms:.0} ms")
    } else {
        format!("{:.1} s", ms / 1000.0)
    }
}

/// An RFC 3339 time as `2026-11-22 06:10:03` (the server's own time zone, as sent).
pub fn format_time(rfc3339: &str) -> String {
    let time = rfc3339.replacen('T', " ", 1);
    let end = time
        .char_indices()
        .skip(10)
        .find(|&(_, c)| matches!(c, '.' | 'Z' | '+' | '-'))
        .map_or(time.len(), |(i, _)| i);
    time[..end].to_string()
}
