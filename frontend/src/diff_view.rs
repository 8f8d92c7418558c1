//! An edit shown as a word-level diff of the original: removed words struck through in red,
//! added words in green (computed by [`flipside_shared::diff::word_diff`]).

use flipside_shared::diff::{Change, word_diff};
use leptos::prelude::*;

/// The words of `original` and `edited` as kept, removed and added runs.
pub fn diff_view(original: &str, edited: &str) -> impl IntoView + use<> {
    word_diff(original, edited)
        .into_iter()
        .enumerate()
        .map(|(i, run)| {
            let space = if i == 0 { "" } else { " " };
            let run = match run.change {
                Change::Kept => view! { <span class="diff-kept">{run.text}</span> }.into_any(),
                Change::Removed => {
                    view! { <del class="diff-removed" data-testid="diff-removed">{run.text}</del> }
                        .into_any()
                }
                Change::Added => {
                    view! { <ins class="diff-added" data-testid="diff-added">{run.text}</ins> }
                        .into_any()
                }
            };
            view! {
                {space}
                {run}
            }
        })
        .collect_view()
}
