//! Flipside's browser app. For now one page: what Flipside is, and a preview of how a text is
//! split into the words an edit may change (computed by the shared core, compiled to wasm).

use flipside_shared::tokenize::whitespace_words;
use leptos::prelude::*;

fn main() {
    console_error_panic_hook::set_once();
    leptos::mount::mount_to_body(App);
}

/// The page.
#[component]
fn App() -> impl IntoView {
    view! {
        <header>
            <h1>"Flipside"</h1>
            <p class="tagline">
                "Counterfactual training data: minimal edits of labelled text that flip the label."
            </p>
        </header>
        <main>
            <WordPreview />
            <p class="note">
                "The editing demo (retrieve, edit, score in the browser) arrives with "
                <code>"flipside serve"</code>
                ". Until then, use the command line: "
                <code>"flipside quickstart"</code>
                "."
            </p>
        </main>
    }
}

/// A text box whose words are shown as the units a counterfactual edit works on.
#[component]
fn WordPreview() -> impl IntoView {
    let (text, set_text) = signal(String::from("The acting was superb."));
    let words = move || {
        let text = text.get();
        whitespace_words(&text)
            .into_iter()
            .map(|w| text[w.start..w.end].to_string())
            .collect::<Vec<_>>()
    };
    view! {
        <section class="card">
            <label for="text">"Text"</label>
            <textarea
                id="text"
                rows="3"
                prop:value=text
                on:input=move |event| set_text.set(event_target_value(&event))
            ></textarea>
            <p class="count">{move || format!("{} words", words().len())}</p>
            <ul class="words">
                {move || words().into_iter().map(|w| view! { <li>{w}</li> }).collect_view()}
            </ul>
        </section>
    }
}
