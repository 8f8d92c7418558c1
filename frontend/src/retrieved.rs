//! The first two steps of an edit: the helper sentences retrieved for each sentence of the
//! text (with the keywords taken from them highlighted), and the keywords themselves as chips
//! the user can change before asking for the edit again.

use flipside_shared::api::RetrieveResponse;
use flipside_shared::records::Excerpt;
use leptos::prelude::*;

use crate::ui::format_millis;
use flipside_shared::highlight::keyword_segments;

/// The helpers, grouped by the query sentence that found them.
#[component]
pub fn Retrieved(retrieval: RetrieveResponse) -> impl IntoView {
    let keywords = retrieval.keywords.clone();
    let groups: Vec<(String, Vec<Excerpt>)> = retrieval
        .queries
        .iter()
        .enumerate()
        .map(|(i, query)| {
            let excerpts = retrieval
                .excerpts
                .iter()
                .filter(|e| e.query == i)
                .cloned()
                .collect();
            (query.clone(), excerpts)
        })
        .collect();
    let count = retrieval.excerpts.len();
    view! {
        <div class="retrieved" data-testid="demo-retrieved">
            <h3>
                {format!(
                    "1. Helpers with the label “{}” ({count} found in {})",
                    retrieval.target,
                    format_millis(retrieval.millis),
                )}
            </h3>
            {groups
                .into_iter()
                .enumerate()
                .map(|(i, (query, excerpts))| {
                    view! {
                        <div class="query-group" data-testid="retrieved-query">
                            <p class="query">
                                <span class="tag">{format!("query {}", i + 1)}</span>
                                " "
                                {query}
                            </p>
                            <ul class="excerpts">
                                {excerpts
                                    .into_iter()
                                    .map(|e| view! { <ExcerptItem excerpt=e keywords=keywords.clone() /> })
                                    .collect_view()}
                            </ul>
                        </div>
                    }
                })
                .collect_view()}
        </div>
    }
}

/// One helper sentence with its keywords marked, its similarity and its label.
#[component]
fn ExcerptItem(excerpt: Excerpt, keywords: Vec<String>) -> impl IntoView {
    let segments = keyword_segments(&excerpt.text, &keywords);
    view! {
        <li class="excerpt" data-testid="excerpt">
            <span class="excerpt-text">
                {segments
                    .into_iter()
                    .map(|s| {
                        if s.keyword {
                            view! { <mark class="keyword" data-testid="keyword">{s.text}</mark> }
                                .into_any()
                        } else {
                            s.text.into_any()
                        }
                    })
                    .collect_view()}
            </span>
            <span class="excerpt-meta">
                <span class="score" title="cosine similarity to the query">
                    {format!("sim {:.2}", excerpt.score)}
                </span>
                {excerpt.label.map(|label| view! { <span class="tag label-tag">{label}</span> })}
            </span>
        </li>
    }
}

/// The keywords as removable chips, an input to add one, and a button to edit again with them.
#[component]
pub fn KeywordEditor(
    keywords: RwSignal<Vec<String>>,
    /// Asks for the edit again with the chips' keywords.
    rerun: Callback<()>,
    #[prop(into)] pending: Signal<bool>,
) -> impl IntoView {
    let new_keyword = RwSignal::new(String::new());
    let add = move || {
        let keyword = new_keyword.get_untracked().trim().to_string();
        if keyword.is_empty() {
            return;
        }
        keywords.update(|list| {
            if !list.iter().any(|k| k.eq_ignore_ascii_case(&keyword)) {
                list.push(keyword);
            }
        });
        new_keyword.set(String::new());
    };
    view! {
        <div class="keywords">
            <h3>"2. Keywords for the prompt"</h3>
            <div class="chips" data-testid="keyword-chips">
                {move || {
                    keywords
                        .get()
                        .into_iter()
                        .map(|keyword| {
                            let removed = keyword.clone();
                            view! {
                                <span class="chip" data-testid="keyword-chip">
                                    <span class="chip-text">{keyword.clone()}</span>
                                    <button
                                        type="button"
                                        class="chip-remove"
                                        data-testid="keyword-chip-remove"
                                        aria-label=format!("Remove {keyword}")
                                        on:click=move |_| keywords.update(|l| l.retain(|k| *k != removed))
                                    >
                                        "×"
                                    </button>
                                </span>
                            }
                        })
                        .collect_view()
                }}
                <Show when=move || keywords.with(Vec::is_empty)>
                    <span class="muted small">"No keywords: the prompt will have none."</span>
                </Show>
            </div>
            <div class="row keyword-actions">
                <input
                    type="text"
                    data-testid="keyword-input"
                    placeholder="Add a keyword"
                    aria-label="Add a keyword"
                    prop:value=move || new_keyword.get()
                    on:input=move |ev| new_keyword.set(event_target_value(&ev))
                    on:keydown=move |ev| {
                        if ev.key() == "Enter" {
                            ev.prevent_default();
                            add();
                        }
                    }
                />
                <button type="button" data-testid="keyword-add" on:click=move |_| add()>
                    "Add"
                </button>
                <button
                    type="button"
                    class="primary"
                    data-testid="demo-rerun"
                    disabled=move || pending.get()
                    on:click=move |_| rerun.run(())
                >
                    "Re-run with these keywords"
                </button>
            </div>
        </div>
    }
}
