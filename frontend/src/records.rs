//! A job's counterfactuals as a paged table (original, edit as a diff, target probability,
//! flipped), filtered by whether the label flipped, with links to the JSONL and Parquet downloads.

use leptos::prelude::*;

use crate::api;
use crate::diff_view::diff_view;
use crate::portal::use_team;
use crate::ui::{ErrorMessage, Spinner, format_probability};

/// Records per page.
const PAGE_SIZE: usize = 10;

/// Which records to show.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Filter {
    All,
    Flipped,
    NotFlipped,
}

impl Filter {
    const ALL: [Filter; 3] = [Filter::All, Filter::Flipped, Filter::NotFlipped];

    fn id(self) -> &'static str {
        match self {
            Filter::All => "all",
            Filter::Flipped => "flipped",
            Filter::NotFlipped => "not-flipped",
        }
    }

    fn label(self) -> &'static str {
        match self {
            Filter::All => "All",
            Filter::Flipped => "Flipped",
            Filter::NotFlipped => "Not flipped",
        }
    }

    /// The `flipped=` query parameter.
    fn flipped(self) -> Option<bool> {
        match self {
            Filter::All => None,
            Filter::Flipped => Some(true),
            Filter::NotFlipped => Some(false),
        }
    }
}

/// The records of job `id`; reloaded whenever `written` (the job's record count) changes.
#[component]
pub fn Records(id: String, #[prop(into)] written: Signal<usize>) -> impl IntoView {
    let filter = RwSignal::new(Filter::All);
    let offset = RwSignal::new(0usize);
    let job_id = id.clone();
    let team = use_team().id();
    let download = api::records_download_url(&team, &id, "jsonl");
    let download_parquet = api::records_download_url(&team, &id, "parquet");
    let page = LocalResource::new(move || {
        let (team, id) = (team.clone(), job_id.clone());
        let flipped = filter.get().flipped();
        let offset = offset.get();
        written.track();
        async move { api::records(&team, &id, flipped, offset, PAGE_SIZE).await }
    });

    view! {
        <div class="records">
            <div class="records-head">
                <h3>"Counterfactuals"</h3>
                <label class="inline">
                    "Show "
                    <select
                        data-testid="records-filter"
                        on:change=move |ev| {
                            let value = event_target_value(&ev);
                            let chosen = Filter::ALL.into_iter().find(|f| f.id() == value);
                            filter.set(chosen.unwrap_or(Filter::All));
                            offset.set(0);
                        }
                    >
                        {Filter::ALL
                            .into_iter()
                            .map(|f| {
                                view! {
                                    <option value=f.id() prop:selected=move || filter.get() == f>
                                        {f.label()}
                                    </option>
                                }
                            })
                            .collect_view()}
                    </select>
                </label>
                <a
                    class="button"
                    data-testid="download-jsonl"
                    href=download
                    download=format!("flipside-{id}.jsonl")
                >
                    "Download JSONL"
                </a>
                <a
                    class="button"
                    data-testid="download-parquet"
                    href=download_parquet
                    download=format!("flipside-{id}.parquet")
                    title="One column per record field: loads in Hugging Face datasets and pandas"
                >
                    "Download Parquet"
                </a>
            </div>
            {move || match page.get() {
                None => view! { <p class="muted"><Spinner />" Loading records…"</p> }.into_any(),
                Some(Err(message)) => {
                    view! { <ErrorMessage message testid="records-error" /> }.into_any()
                }
                Some(Ok(page)) => {
                    let total = page.total;
                    let first = offset.get_untracked();
                    let shown = page.records.len();
                    view! {
                        <div class="table-wrap">
                            <table class="records-table" data-testid="records-table" data-total=total.to_string()>
                                <thead>
                                    <tr>
                                        <th>"Original"</th>
                                        <th>"Edited"</th>
                                        <th>"p(target)"</th>
                                        <th>"Flipped"</th>
                                    </tr>
                                </thead>
                                <tbody>
                                    {page
                                        .records
                                        .into_iter()
                                        .map(|r| {
                                            view! {
                                                <tr data-testid="record-row" data-flipped=r.flipped.to_string()>
                                                    <td data-label="Original">{r.original.clone()}</td>
                                                    <td data-label="Edited" class="diff-cell">
                                                        {diff_view(&r.original, &r.edited)}
                                                    </td>
                                                    <td data-label="p(target)" class="num">
                                                        <span class="small muted">{r.target.clone()}</span>
                                                        " "
                                                        {format_probability(r.target_probability)}
                                                    </td>
                                                    <td data-label="Flipped">
                                                        {if r.flipped {
                                                            view! { <span class="badge badge-ok">"✓ yes"</span> }
                                                        } else {
                                                            view! { <span class="badge badge-bad">"✗ no"</span> }
                                                        }}
                                                    </td>
                                                </tr>
                                            }
                                        })
                                        .collect_view()}
                                </tbody>
                            </table>
                        </div>
                        {(total == 0).then(|| view! { <p class="muted">"No counterfactuals here yet."</p> })}
                        <div class="pager">
                            <button
                                type="button"
                                data-testid="records-prev"
                                disabled={first == 0}
                                on:click=move |_| offset.update(|o| *o = o.saturating_sub(PAGE_SIZE))
                            >
                                "← Previous"
                            </button>
                            <span class="small muted" data-testid="records-range">
                                {if shown == 0 {
                                    format!("0 of {total}")
                                } else {
                                    format!("{}–{} of {total}", first + 1, first + shown)
                                }}
                            </span>
                            <button
                                type="button"
                                data-testid="records-next"
                                disabled={first + shown >= total}
                                on:click=move |_| offset.update(|o| *o += PAGE_SIZE)
                            >
                                "Next →"
                            </button>
                        </div>
                    }
                        .into_any()
                }
            }}
        </div>
    }
}
