//! The server's Dis-AE (LASS), run in the browser: its files are downloaded from
//! `/api/dis-ae/*` and rebuilt as a [`Reproducer`] on burn's CPU backend (flex compiled to
//! wasm with SIMD128), which then reproduces texts with another sentiment on the visitor's
//! machine — the same [`Reproducer::reproduce`] that `flipside generate --method lass` calls.
//!
//! It always runs on the CPU: beam search reads the decoder's logits back after every token,
//! which WebGPU in a browser can only do asynchronously, and a model of a few million
//! parameters decoding one token at a time gains nothing from a GPU.
//!
//! Once loaded it is also callable from JavaScript (for tests and benchmarks):
//! `window.flipsideReproduce(texts, label)` returns `[{text, tokens, log_prob, finished}]`
//! (beam 4, as natively), and `window.flipsideReproducerReady` becomes `true` (or
//! `window.flipsideReproducerError` is set).

use std::cell::RefCell;
use std::rc::Rc;

use burn::backend::Flex;
use flipside_shared::models::dis_ae::reproduce::{
    Reproducer, Reproduction, TargetSentiment, lass_decoding,
};
use leptos::prelude::*;
use leptos::task::spawn_local;
use serde::Serialize;
use wasm_bindgen::JsValue;
use wasm_bindgen::prelude::Closure;

use crate::api;
use crate::scoring::{Device, Status, now_ms, set_window_property, yield_to_browser};

/// A reproduced text as JavaScript sees it.
#[derive(Debug, Clone, Serialize)]
pub struct Reproduced {
    pub text: String,
    pub tokens: usize,
    pub log_prob: f64,
    pub finished: bool,
}

impl From<Reproduction> for Reproduced {
    fn from(r: Reproduction) -> Self {
        Self {
            text: r.text,
            tokens: r.tokens,
            log_prob: r.log_prob,
            finished: r.finished,
        }
    }
}

thread_local! {
    static REPRODUCER: RefCell<Option<Rc<Reproducer<Flex>>>> = const { RefCell::new(None) };
}

/// The loading status (create it once, at the root, with [`provide`]).
#[derive(Debug, Clone, Copy)]
struct DisAeContext {
    status: RwSignal<Status>,
}

/// Makes the Dis-AE's status available to the pages below.
pub fn provide() {
    provide_context(DisAeContext {
        status: RwSignal::new(Status::NotStarted),
    });
}

/// The status of the in-browser Dis-AE; starts loading it on first use.
pub fn use_dis_ae() -> RwSignal<Status> {
    let status = expect_context::<DisAeContext>().status;
    if status.get_untracked() == Status::NotStarted {
        status.set(Status::Loading("Downloading the Dis-AE…".into()));
        spawn_local(async move {
            match load(status).await {
                Ok(reproducer) => {
                    REPRODUCER.with(|r| *r.borrow_mut() = Some(Rc::new(reproducer)));
                    register_js_hook();
                    status.set(Status::Ready(Device::Cpu));
                }
                Err(message) => {
                    set_window_property("flipsideReproducerError", &JsValue::from_str(&message));
                    status.set(Status::Failed(message));
                }
            }
        });
    }
    status
}

async fn load(status: RwSignal<Status>) -> Result<Reproducer<Flex>, String> {
    let files = api::info_when_ready(|_| {})
        .await
        .ok()
        .and_then(|info| info.dis_ae)
        .map(|dis_ae| dis_ae.files)
        .unwrap_or_default();
    let plain = [
        api::DIS_AE_CONFIG,
        api::DIS_AE_VOCABULARY,
        api::DIS_AE_WEIGHTS,
    ];
    let (config, tokenizer, weights) = api::get_model_files(&files, plain)
        .await
        .map_err(|e| format!("could not download the Dis-AE: {e}"))?;
    status.set(Status::Loading(format!(
        "Building the Dis-AE ({:.1} MB of weights)…",
        weights.len() as f64 / 1e6
    )));
    yield_to_browser().await;
    Reproducer::from_files(&config, weights, &tokenizer, &Default::default())
        .map_err(|e| format!("could not load the Dis-AE: {e}"))
}

/// Reproduces each of `texts` with `label`'s sentiment (LASS's beam search), with the time it
/// took in milliseconds.
pub fn reproduce(texts: &[&str], label: &str) -> Result<(Vec<Reproduced>, f64), String> {
    let reproducer = REPRODUCER
        .with(|r| r.borrow().clone())
        .ok_or("the Dis-AE is not loaded")?;
    let start = now_ms();
    let reproduced = reproducer
        .reproduce(texts, TargetSentiment::Label(label), &lass_decoding())
        .map_err(|e| e.to_string())?;
    Ok((
        reproduced.into_iter().map(Reproduced::from).collect(),
        now_ms() - start,
    ))
}

/// Sets `window.flipsideReproduce` and `window.flipsideReproducerReady = true`.
fn register_js_hook() {
    let hook = Closure::<dyn Fn(js_sys::Array, String) -> Result<JsValue, JsValue>>::new(
        |texts: js_sys::Array, label: String| {
            let texts: Vec<String> = texts.iter().filter_map(|t| t.as_string()).collect();
            let texts: Vec<&str> = texts.iter().map(String::as_str).collect();
            let (reproduced, _) = reproduce(&texts, &label).map_err(JsValue::from)?;
            let json = serde_json::to_string(&reproduced).map_err(|e| e.to_string())?;
            js_sys::JSON::parse(&json)
        },
    );
    set_window_property("flipsideReproduce", hook.as_ref());
    // The hook lives as long as the page.
    hook.forget();
    set_window_property("flipsideReproducerReady", &JsValue::TRUE);
}
