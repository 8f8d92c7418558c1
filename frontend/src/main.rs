//! Flipside's browser app, served by `flipside serve`: an edit demo (retrieve helpers, edit
//! with the LLM, score the edit again in the browser) and a jobs page (datasets, generation
//! jobs with live progress, their counterfactuals).
//!
//! One module per concept: [`api`] talks to the server, [`scoring`] runs the classifier in the
//! browser, [`demo`] and [`jobs`] are the two pages.

mod api;
mod datasets;
mod demo;
mod diff_view;
mod edit_result;
mod jobs;
mod method_picker;
mod records;
mod retrieved;
mod route;
mod scoring;
mod ui;

use leptos::prelude::*;

use crate::demo::EditDemo;
use crate::jobs::JobsPage;
use crate::route::Route;

fn main() {
    console_error_panic_hook::set_once();
    if let Some(boot) = document().get_element_by_id("boot") {
        boot.remove();
    }
    leptos::mount::mount_to_body(App);
}

/// The page frame: header with the two tabs, and the current page.
#[component]
fn App() -> impl IntoView {
    scoring::provide();
    let route = route::use_route();
    let on_jobs = Memo::new(move |_| matches!(route.get(), Route::Jobs { .. }));
    let selected_job = Memo::new(move |_| match route.get() {
        Route::Jobs { selected } => selected,
        Route::Demo => None,
    });
    view! {
        <header class="topbar">
            <div class="topbar-inner">
                <a class="brand" href="#/">
                    <span class="brand-mark" aria-hidden="true">"⇄"</span>
                    "Flipside"
                </a>
                <nav class="tabs" aria-label="Pages">
                    <a
                        href="#/"
                        class="tab"
                        class:active=move || !on_jobs.get()
                        data-testid="tab-demo"
                    >
                        "Edit demo"
                    </a>
                    <a
                        href="#/jobs"
                        class="tab"
                        class:active=move || on_jobs.get()
                        data-testid="tab-jobs"
                    >
                        "Jobs"
                    </a>
                </nav>
            </div>
        </header>
        <main class="page">
            {move || {
                if on_jobs.get() {
                    view! { <JobsPage selected=selected_job /> }.into_any()
                } else {
                    view! { <EditDemo /> }.into_any()
                }
            }}
        </main>
        <footer class="footer">
            "Flipside — counterfactual training data: minimal edits of labelled text that flip the label."
        </footer>
    }
}
