//! The second pass (reviewers and admins): a decided item with the first-pass verdicts behind
//! it, confirmed or overturned by one key. The save carries the item's version: if someone
//! else reviewed it meanwhile, the server refuses it and the page says so.

use flipside_shared::api::ApiError;
use flipside_shared::portal::{Decision, ReviewRequest, ReviewTask, Verdict};
use leptos::prelude::*;
use leptos::task::spawn_local;

use crate::api;
use crate::diff_view::diff_view;
use crate::ui::{ErrorMessage, Spinner};

/// The keys of the second pass.
pub const SECOND_PASS_KEYS: [(&str, &str); 6] = [
    ("a", "accept"),
    ("r", "reject"),
    ("l", "relabel"),
    ("g", "flag"),
    ("o", "accept over the classifier"),
    ("n", "next without deciding"),
];

/// The item under review and where the pass is.
#[derive(Debug, Clone, Copy)]
pub struct SecondPass {
    team: StoredValue<String>,
    queue: StoredValue<String>,
    task: RwSignal<Option<ReviewTask>>,
    finished: RwSignal<bool>,
    error: RwSignal<Option<ApiError>>,
}

impl SecondPass {
    pub fn new(team: &str, queue: &str) -> Self {
        Self {
            team: StoredValue::new(team.to_string()),
            queue: StoredValue::new(queue.to_string()),
            task: RwSignal::new(None),
            finished: RwSignal::new(false),
            error: RwSignal::new(None),
        }
    }

    /// Loads the next decided item after `after` (from the start when `None`).
    pub fn load(self, after: Option<usize>) {
        spawn_local(async move {
            let next =
                api::next_to_review(&self.team.get_value(), &self.queue.get_value(), after).await;
            match next {
                Ok(task) => {
                    self.finished.set(task.is_none());
                    self.task.set(task);
                }
                Err(message) => self.error.set(Some(ApiError {
                    code: "client".into(),
                    message,
                })),
            }
        });
    }

    /// Handles a key; returns whether it was one of the pass's.
    pub fn key(self, key: &str) -> bool {
        let verdict = match key {
            "a" | "o" => Verdict::Accept,
            "r" => Verdict::Reject,
            "l" => Verdict::Relabel,
            "g" => Verdict::Flag,
            "n" => {
                let after = self.task.get_untracked().map(|t| t.item.seq);
                self.load(after);
                return true;
            }
            _ => return false,
        };
        self.decide(verdict, key == "o");
        true
    }

    fn decide(self, verdict: Verdict, override_classifier: bool) {
        let Some(task) = self.task.get_untracked() else {
            return;
        };
        let item = task.item;
        let request = ReviewRequest {
            version: item.version,
            decision: Decision {
                verdict,
                text: None,
                label: (verdict == Verdict::Relabel).then(|| item.label.clone()),
                override_classifier,
            },
        };
        spawn_local(async move {
            let (team, queue) = (self.team.get_value(), self.queue.get_value());
            match api::review_item(&team, &queue, &item.id, &request).await {
                Ok(_) => {
                    self.error.set(None);
                    self.load(Some(item.seq));
                }
                Err(error) => self.error.set(Some(error)),
            }
        });
    }
}

/// The item under review.
#[component]
pub fn SecondPassView(pass: SecondPass) -> impl IntoView {
    view! {
        {move || pass.error.get().map(|e| view! {
            <ErrorMessage message=e.message testid="second-pass-error" />
        })}
        {move || {
            if pass.finished.get() {
                return view! {
                    <section class="card" data-testid="second-pass-finished">
                        <p>"No decided item is waiting for a review."</p>
                    </section>
                }
                .into_any();
            }
            let Some(task) = pass.task.get() else {
                return view! { <p><Spinner />" Loading…"</p> }.into_any();
            };
            let item = task.item;
            let counterfactual = item.counterfactual.clone().unwrap_or_default();
            let outcome = item.outcome.clone().map_or(String::new(), |o| {
                format!("Outcome so far: {} (label “{}”)", o.verdict.as_str(), o.label)
            });
            view! {
                <section class="card review-item" data-testid="second-pass-item"
                    data-item-id=item.id.clone()>
                    <p class="small muted">
                        {format!("Item {} · {} → {}", item.seq + 1, item.label, item.target)}
                    </p>
                    <p class="original">{item.original.clone()}</p>
                    <div class="edited">{diff_view(&item.original, &counterfactual)}</div>
                    <p data-testid="second-pass-outcome"><strong>{outcome}</strong></p>
                    <ul class="small">
                        {task.verdicts.into_iter().map(|v| view! {
                            <li>{format!(
                                "{}: {}{}{}",
                                v.user,
                                v.verdict.as_str(),
                                v.text.map(|t| format!(" — “{t}”")).unwrap_or_default(),
                                if v.override_classifier { " (over the classifier)" } else { "" },
                            )}</li>
                        }).collect::<Vec<_>>()}
                    </ul>
                </section>
            }
            .into_any()
        }}
    }
}
