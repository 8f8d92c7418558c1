//! Flipside's browser app, served by `flipside serve`: an edit demo (retrieve helpers, edit
//! with the LLM, score the edit again in the browser), generation in the browser (LASS's
//! Dis-AE), a jobs page (datasets, generation jobs with live progress, their
//! counterfactuals) and the team portal (sign-in, invitations, review queues by keyboard).
//!
//! One module per concept: [`api`] talks to the server, [`scoring`] runs the classifier and
//! [`dis_ae`] the Dis-AE in the browser's workers ([`dis_ae_worker`]), [`demo`],
//! [`browser_generation`], [`jobs`], [`portal`] and [`review`] are the pages.
//!
//! How the parts fit together, and what they measure: the book in `docs/` (`mdbook build docs`;
//! start at `docs/src/introduction.md`, the architecture at `docs/src/architecture.md`).

mod api;
mod browser_generation;
mod datasets;
mod demo;
mod diff_view;
mod dis_ae;
mod dis_ae_worker;
mod edit_result;
mod jobs;
mod live_edit;
mod method_picker;
mod portal;
mod records;
mod relaxed_simd;
mod retrieved;
mod review;
mod route;
mod scoring;
mod second_pass;
mod ui;

use leptos::prelude::*;

use crate::browser_generation::BrowserGeneration;
use crate::demo::EditDemo;
use crate::jobs::JobsPage;
use crate::portal::{AcceptInvitation, PortalPage};
use crate::route::Route;

fn main() {
    console_error_panic_hook::set_once();
    // In a Dis-AE worker (`dis_ae_worker`) the module runs without a page.
    if web_sys::window().is_none() {
        return;
    }
    if let Some(boot) = document().get_element_by_id("boot") {
        boot.remove();
    }
    leptos::mount::mount_to_body(App);
}

/// The page frame: header with the two tabs, and the current page.
#[component]
fn App() -> impl IntoView {
    scoring::provide();
    portal::provide();
    dis_ae::provide();
    let route = route::use_route();
    let on_jobs = Memo::new(move |_| matches!(route.get(), Route::Jobs { .. }));
    let on_generate = Memo::new(move |_| route.get() == Route::Generate);
    let on_portal =
        Memo::new(move |_| matches!(route.get(), Route::Portal { .. } | Route::Invite(_)));
    let open_queue = Memo::new(move |_| match route.get() {
        Route::Portal { queue } => queue,
        _ => None,
    });
    let selected_job = Memo::new(move |_| match route.get() {
        Route::Jobs { selected } => selected,
        _ => None,
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
                        class:active=move || {
                            !on_jobs.get() && !on_generate.get() && !on_portal.get()
                        }
                        data-testid="tab-demo"
                    >
                        "Edit demo"
                    </a>
                    <a
                        href="#/generate"
                        class="tab"
                        class:active=move || on_generate.get()
                        data-testid="tab-generate"
                    >
                        "Generate in your browser"
                    </a>
                    <a
                        href="#/jobs"
                        class="tab"
                        class:active=move || on_jobs.get()
                        data-testid="tab-jobs"
                    >
                        "Jobs"
                    </a>
                    <a
                        href="#/review"
                        class="tab"
                        class:active=move || on_portal.get()
                        data-testid="tab-review"
                    >
                        "Review"
                    </a>
                </nav>
            </div>
        </header>
        <main class="page">
            {move || {
                if let Route::Invite(token) = route.get() {
                    view! { <AcceptInvitation token /> }.into_any()
                } else if on_portal.get() {
                    view! { <PortalPage queue=open_queue /> }.into_any()
                } else if on_jobs.get() {
                    portal::team_page(
                        "Sign in to run generation jobs",
                        move |team| view! { <JobsPage team=team.id selected=selected_job /> }.into_any(),
                    )
                    .into_any()
                } else if on_generate.get() {
                    view! { <BrowserGeneration /> }.into_any()
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
