//! The Dis-AE's side of a page worker: each of [`crate::dis_ae`]'s workers runs this app's own
//! wasm module (posted to it by the page, so it is compiled once) and answers two messages, one
//! at a time, in order:
//! - `{kind: "load", config, vocabulary, weights}` (the downloaded files' bytes) builds the
//!   [`Reproducer`] and answers `{ok: true}`;
//! - `{kind: "reproduce", request}` (a [`ReproduceRequest`] as JSON) answers `{ok: true,
//!   outputs}`, the texts' LASS reproductions (beam 4) as JSON: the texts cross between the
//!   page and the worker as one string each way rather than as objects built field by field.
//!
//! Every failure answers `{error: "…"}`.

use std::cell::RefCell;

use burn::backend::Flex;
use flipside_shared::models::dis_ae::reproduce::{Reproducer, TargetSentiment, lass_decoding};
use serde::{Deserialize, Serialize};
use wasm_bindgen::JsCast;
use wasm_bindgen::prelude::*;
use web_sys::{DedicatedWorkerGlobalScope, MessageEvent};

/// A reproduced text, as the worker sends it and JavaScript sees it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Reproduced {
    pub text: String,
    pub tokens: usize,
    pub log_prob: f64,
    pub finished: bool,
}

/// What a `reproduce` message asks for.
#[derive(Debug, Serialize, Deserialize)]
pub struct ReproduceRequest {
    pub texts: Vec<String>,
    pub label: String,
}

thread_local! {
    static REPRODUCER: RefCell<Option<Reproducer<Flex>>> = const { RefCell::new(None) };
}

/// Turns the current worker into a Dis-AE worker (called by its start script once the module
/// is instantiated).
#[wasm_bindgen]
pub fn dis_ae_worker_start() {
    let scope: DedicatedWorkerGlobalScope = js_sys::global().unchecked_into();
    let replies = scope.clone();
    let on_message = Closure::<dyn Fn(MessageEvent)>::new(move |event: MessageEvent| {
        let reply = match answer(&event.data()) {
            Ok(reply) => reply,
            Err(message) => object_with("error", &JsValue::from_str(&message)),
        };
        // Posting a plain object to the page cannot fail.
        let _ = replies.post_message(&reply);
    });
    scope.set_onmessage(Some(on_message.as_ref().unchecked_ref()));
    // The handler lives as long as the worker.
    on_message.forget();
}

fn answer(message: &JsValue) -> Result<JsValue, String> {
    let get = |name: &str| js_sys::Reflect::get(message, &JsValue::from_str(name)).ok();
    let kind = get("kind").and_then(|k| k.as_string()).unwrap_or_default();
    let bytes = |name: &str| {
        get(name)
            .and_then(|b| b.dyn_into::<js_sys::Uint8Array>().ok())
            .map(|b| b.to_vec())
            .ok_or_else(|| format!("the load message has no {name}"))
    };
    match kind.as_str() {
        "load" => {
            let reproducer = Reproducer::from_files(
                &bytes("config")?,
                bytes("weights")?,
                &bytes("vocabulary")?,
                &Default::default(),
            )
            .map_err(|e| format!("could not load the Dis-AE: {e}"))?;
            REPRODUCER.with(|r| *r.borrow_mut() = Some(reproducer));
            Ok(object_with("ok", &JsValue::TRUE))
        }
        "reproduce" => {
            let request = get("request")
                .and_then(|r| r.as_string())
                .ok_or("the reproduce message has no request")?;
            let request: ReproduceRequest =
                serde_json::from_str(&request).map_err(|e| e.to_string())?;
            let outputs = REPRODUCER.with(|r| {
                let reproducer = r.borrow();
                let reproducer = reproducer.as_ref().ok_or("the Dis-AE is not loaded")?;
                let texts: Vec<&str> = request.texts.iter().map(String::as_str).collect();
                reproducer
                    .reproduce(
                        &texts,
                        TargetSentiment::Label(&request.label),
                        &lass_decoding(),
                    )
                    .map_err(|e| e.to_string())
            })?;
            let outputs: Vec<Reproduced> = outputs
                .into_iter()
                .map(|r| Reproduced {
                    text: r.text,
                    tokens: r.tokens,
                    log_prob: r.log_prob,
                    finished: r.finished,
                })
                .collect();
            let json = serde_json::to_string(&outputs).map_err(|e| e.to_string())?;
            let reply = object_with("ok", &JsValue::TRUE);
            let _ = js_sys::Reflect::set(&reply, &"outputs".into(), &json.into());
            Ok(reply)
        }
        other => Err(format!("unknown message {other:?}")),
    }
}

/// A plain object `{name: value}`.
pub fn object_with(name: &str, value: &JsValue) -> JsValue {
    let object = js_sys::Object::new();
    // Setting a property on a new plain object cannot fail.
    let _ = js_sys::Reflect::set(&object, &JsValue::from_str(name), value);
    object.into()
}
