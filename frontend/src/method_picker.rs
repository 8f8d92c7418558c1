//! The `<select>` of the server's methods, shared by the edit demo and the jobs page.

use flipside_shared::api::{MethodId, MethodInfo};
use leptos::prelude::*;

/// A `<select>` of `methods` (`GET /api/info`'s, the server's default first). `chosen` stays
/// `None` until the user picks one, and the default is shown selected meanwhile. Methods the
/// server cannot run are disabled, with the reason as their tooltip.
#[component]
pub fn MethodPicker(
    methods: Vec<MethodInfo>,
    chosen: RwSignal<Option<MethodId>>,
    testid: &'static str,
) -> impl IntoView {
    view! {
        <select
            id=testid
            data-testid=testid
            on:change=move |ev| chosen.set(Some(MethodId(event_target_value(&ev))))
        >
            {methods
                .into_iter()
                .enumerate()
                .map(|(i, m)| {
                    let id = m.id.clone();
                    let selected = move || {
                        chosen
                            .with(|chosen| match chosen {
                                Some(chosen) => *chosen == id,
                                None => i == 0,
                            })
                    };
                    let title = m.unavailable.clone().unwrap_or(m.description);
                    view! {
                        <option
                            value=m.id.to_string()
                            title=title
                            disabled=m.unavailable.is_some()
                            prop:selected=selected
                        >
                            {m.label}
                        </option>
                    }
                })
                .collect_view()}
        </select>
    }
}
