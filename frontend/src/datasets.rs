//! The datasets jobs can run on: the built-in ones and the user's uploads, and the form that
//! uploads a CSV, TSV or JSONL file to `POST /api/datasets`.

use flipside_shared::api::DatasetInfo;
use leptos::html;
use leptos::prelude::*;
use leptos::task::spawn_local;

use crate::api;
use crate::portal::use_team;
use crate::ui::{ErrorMessage, Spinner};

/// The team's datasets, reloaded after an upload or a deletion.
pub type DatasetsResource = LocalResource<Result<Vec<DatasetInfo>, String>>;

/// Datasets listed before "show all".
const SHOWN: usize = 8;
/// Labels listed per dataset before "+N more".
const SHOWN_LABELS: usize = 6;

/// The list of datasets and the upload form.
#[component]
pub fn Datasets(
    datasets: DatasetsResource,
    /// Called with each dataset uploaded.
    on_uploaded: Callback<DatasetInfo>,
) -> impl IntoView {
    view! {
        <section class="card">
            <h2>"Datasets"</h2>
            {move || match datasets.get() {
                None => view! { <p class="muted"><Spinner />" Loading datasets…"</p> }.into_any(),
                Some(Err(message)) => {
                    view! {
                        <ErrorMessage
                            message=format!("Could not list the datasets: {message}")
                            testid="datasets-error"
                        />
                    }
                        .into_any()
                }
                Some(Ok(list)) => view! { <DatasetTable list datasets /> }.into_any(),
            }}
            <UploadForm on_uploaded />
        </section>
    }
}

/// The datasets, the first [`SHOWN`] unless all are asked for; uploads can be deleted.
#[component]
fn DatasetTable(list: Vec<DatasetInfo>, datasets: DatasetsResource) -> impl IntoView {
    if list.is_empty() {
        return view! { <p class="muted">"No datasets yet: upload one below."</p> }.into_any();
    }
    let team = use_team();
    let show_all = RwSignal::new(false);
    let error = RwSignal::new(None::<String>);
    let total = list.len();
    let list = StoredValue::new(list);
    let delete = move |id: String| {
        let team = team.id();
        spawn_local(async move {
            match api::delete_dataset(&team, &id).await {
                Ok(()) => {
                    error.set(None);
                    datasets.refetch();
                }
                Err(message) => error.set(Some(message)),
            }
        });
    };
    view! {
        <ul class="dataset-list" data-testid="dataset-list">
            {move || {
                let shown = if show_all.get() { total } else { SHOWN };
                list.get_value()
                    .into_iter()
                    .take(shown)
                    .map(|d| dataset_row(d, delete))
                    .collect_view()
            }}
        </ul>
        <Show when=move || { total > SHOWN && !show_all.get() }>
            <button type="button" class="link" on:click=move |_| show_all.set(true)>
                {format!("Show all {total}")}
            </button>
        </Show>
        {move || error.get().map(|message| view! { <ErrorMessage message testid="dataset-delete-error" /> })}
    }
    .into_any()
}

fn dataset_row(
    d: DatasetInfo,
    delete: impl Fn(String) + Copy + Send + Sync + 'static,
) -> impl IntoView {
    let examples = d
        .examples
        .map_or("? examples".to_string(), |n| format!("{n} examples"));
    let skipped = (d.skipped > 0).then(|| format!(" · {}", rows_skipped(d.skipped)));
    let more = d.labels.len().saturating_sub(SHOWN_LABELS);
    let labels = d
        .labels
        .iter()
        .take(SHOWN_LABELS)
        .cloned()
        .collect::<Vec<_>>()
        .join(", ")
        + &(if more > 0 {
            format!(" +{more} more")
        } else {
            String::new()
        });
    let id = d.id.clone();
    view! {
        <li class="dataset" data-testid="dataset-item" data-dataset-id=d.id.clone()>
            <span class="dataset-name" title=d.name.clone()>{d.name.clone()}</span>
            <span class="tag">{if d.builtin { "built-in" } else { "uploaded" }}</span>
            <span class="small muted">
                <code>{d.id.clone()}</code>
                {format!(" · {examples} · labels: {labels}")}
                {skipped}
            </span>
            <Show when=move || !d.builtin>
                <button
                    type="button"
                    class="link small"
                    data-testid="dataset-delete"
                    on:click={
                        let id = id.clone();
                        move |_| delete(id.clone())
                    }
                >
                    "Delete"
                </button>
            </Show>
        </li>
    }
}

/// A file input and the optional column names; shows the server's message when it refuses.
#[component]
fn UploadForm(on_uploaded: Callback<DatasetInfo>) -> impl IntoView {
    let team = use_team();
    let file_input = NodeRef::<html::Input>::new();
    let name = RwSignal::new(String::new());
    let text_col = RwSignal::new(String::new());
    let label_col = RwSignal::new(String::new());
    let premise_col = RwSignal::new(String::new());
    let uploading = RwSignal::new(false);
    let outcome = RwSignal::new(None::<Result<DatasetInfo, String>>);

    let submit = move |event: leptos::ev::SubmitEvent| {
        event.prevent_default();
        let file = file_input
            .get_untracked()
            .and_then(|input| input.files())
            .and_then(|files| files.get(0));
        let Some(file) = file else {
            outcome.set(Some(Err("Choose a CSV, TSV or JSONL file first.".into())));
            return;
        };
        let form = match upload_form(&file, name, text_col, label_col, premise_col) {
            Ok(form) => form,
            Err(message) => {
                outcome.set(Some(Err(message)));
                return;
            }
        };
        uploading.set(true);
        outcome.set(None);
        let team = team.id();
        spawn_local(async move {
            let answer = api::upload_dataset(&team, form).await;
            if let Ok(dataset) = &answer {
                on_uploaded.run(dataset.clone());
            }
            outcome.set(Some(answer));
            uploading.set(false);
        });
    };

    let text_field = |label: &'static str, value: RwSignal<String>, placeholder: &'static str| {
        view! {
            <label class="field compact">
                <span>{label}</span>
                <input
                    type="text"
                    placeholder=placeholder
                    prop:value=move || value.get()
                    on:input=move |ev| value.set(event_target_value(&ev))
                />
            </label>
        }
    };

    view! {
        <form class="upload-form" on:submit=submit>
            <h3>"Upload a dataset"</h3>
            <p class="small muted">
                "CSV, TSV, JSONL or Parquet with a text and a label per row (and a premise for NLI). "
                "Empty column names mean “text” and “label”."
            </p>
            <label class="field">
                <span>"File"</span>
                <input
                    type="file"
                    data-testid="upload-file"
                    accept=".csv,.tsv,.jsonl,.json,.txt,.parquet,.arrow"
                    node_ref=file_input
                />
            </label>
            <div class="grid-fields">
                {text_field("Name", name, "my reviews")}
                {text_field("Text column", text_col, "text")}
                {text_field("Label column", label_col, "label")}
                {text_field("Premise column", premise_col, "premise (NLI)")}
            </div>
            <button type="submit" data-testid="upload-submit" disabled=move || uploading.get()>
                {move || {
                    if uploading.get() {
                        view! { <Spinner />" Uploading…" }.into_any()
                    } else {
                        "Upload".into_any()
                    }
                }}
            </button>
            {move || match outcome.get() {
                None => ().into_any(),
                Some(Err(message)) => {
                    view! { <ErrorMessage message testid="upload-error" /> }.into_any()
                }
                Some(Ok(dataset)) => {
                    let examples = dataset.examples.unwrap_or(0);
                    view! {
                        <p class="success" data-testid="upload-result">
                            {format!(
                                "Uploaded “{}”: {examples} examples, {}.",
                                dataset.name,
                                rows_skipped(dataset.skipped),
                            )}
                        </p>
                    }
                        .into_any()
                }
            }}
        </form>
    }
}

/// The multipart body: the file, and each column name the user gave.
fn upload_form(
    file: &web_sys::File,
    name: RwSignal<String>,
    text_col: RwSignal<String>,
    label_col: RwSignal<String>,
    premise_col: RwSignal<String>,
) -> Result<web_sys::FormData, String> {
    let js_error = |e: wasm_bindgen::JsValue| format!("could not build the upload: {e:?}");
    let form = web_sys::FormData::new().map_err(js_error)?;
    form.append_with_blob_and_filename("file", file, &file.name())
        .map_err(js_error)?;
    for (field, value) in [
        ("name", name),
        ("text_col", text_col),
        ("label_col", label_col),
        ("premise_col", premise_col),
    ] {
        let value = value.get_untracked();
        if !value.trim().is_empty() {
            form.append_with_str(field, value.trim())
                .map_err(js_error)?;
        }
    }
    Ok(form)
}

fn rows_skipped(n: usize) -> String {
    match n {
        1 => "1 row skipped".into(),
        n => format!("{n} rows skipped"),
    }
}
