//! The server's Dis-AE (LASS), run in the browser: its files are downloaded from
//! `/api/dis-ae/*` once and handed to one Web Worker per core (at most [`MAX_WORKERS`];
//! `?workers=N` in the page's URL asks for N), each
//! running this app's own module ([`crate::dis_ae_worker`]) with a [`Reproducer`] on burn's
//! CPU backend (flex compiled to wasm with SIMD128) — the same [`Reproducer::reproduce`] that
//! `flipside generate --method lass` calls. A batch of texts is split between the workers, so
//! generation uses every core and the page stays responsive while it runs.
//!
//! It always runs on the CPU: beam search reads the decoder's logits back after every token,
//! which WebGPU in a browser can only do asynchronously, and a model of a few million
//! parameters decoding one token at a time gains nothing from a GPU.
//!
//! Once loaded it is also callable from JavaScript (for tests and benchmarks):
//! `await window.flipsideReproduce(texts, label)` gives `[{text, tokens, log_prob, finished}]`
//! (beam 4, as natively), `window.flipsideReproducerWorkers` is the number of workers, and
//! `window.flipsideReproducerReady` becomes `true` (or `window.flipsideReproducerError` is set).

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use futures::lock::Mutex;
use leptos::prelude::*;
use leptos::task::spawn_local;
use wasm_bindgen::JsCast;
use wasm_bindgen::JsValue;
use wasm_bindgen::prelude::Closure;
use wasm_bindgen_futures::JsFuture;
use web_sys::{Blob, BlobPropertyBag, ErrorEvent, Event, MessageEvent, Url, Worker, WorkerOptions};

use crate::api;
pub use crate::dis_ae_worker::Reproduced;
use crate::dis_ae_worker::{ReproduceRequest, object_with};
use crate::scoring::{Device, Status, now_ms, query_parameter, set_window_property};

/// The most workers the page starts, whatever the number of cores.
const MAX_WORKERS: usize = 4;

thread_local! {
    static POOL: RefCell<Option<Rc<Pool>>> = const { RefCell::new(None) };
}

/// The loaded Dis-AE's workers.
struct Pool {
    /// The workers' number, readable while a batch holds the lock.
    count: usize,
    /// Locked by one batch at a time: each worker answers its messages in turn.
    workers: Mutex<Vec<DisAeWorker>>,
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
                Ok(workers) => {
                    let count = workers.len();
                    let pool = Pool {
                        count,
                        workers: Mutex::new(workers),
                    };
                    POOL.with(|p| *p.borrow_mut() = Some(Rc::new(pool)));
                    register_js_hook(count);
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

/// The number of workers the loaded Dis-AE runs in (0 before it is loaded).
pub fn workers() -> usize {
    POOL.with(|p| p.borrow().as_ref().map_or(0, |pool| pool.count))
}

async fn load(status: RwSignal<Status>) -> Result<Vec<DisAeWorker>, String> {
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
    let (config, vocabulary, weights) = api::get_model_files(&files, plain)
        .await
        .map_err(|e| format!("could not download the Dis-AE: {e}"))?;
    let count = query_parameter("workers")
        .and_then(|n| n.parse::<usize>().ok())
        .unwrap_or(window().navigator().hardware_concurrency() as usize)
        .clamp(1, MAX_WORKERS);
    status.set(Status::Loading(format!(
        "Building the Dis-AE ({:.1} MB of weights) in {count} worker{}…",
        weights.len() as f64 / 1e6,
        if count == 1 { "" } else { "s" }
    )));
    let app = app_module_url()?;
    let load = object_with("kind", &"load".into());
    for (name, bytes) in [
        ("config", &config),
        ("vocabulary", &vocabulary),
        ("weights", &weights),
    ] {
        let array = js_sys::Uint8Array::from(bytes.as_slice());
        let _ = js_sys::Reflect::set(&load, &name.into(), &array);
    }
    let starts = (0..count).map(|_| DisAeWorker::start(&app, &load));
    futures::future::try_join_all(starts).await
}

/// The address of the app's JavaScript module (wasm-bindgen's), which Trunk's page preloads
/// beside the modules of its snippets.
fn app_module_url() -> Result<String, String> {
    document()
        .query_selector("link[rel=modulepreload]:not([href*='/snippets/'])")
        .ok()
        .flatten()
        .and_then(|link| js_sys::Reflect::get(&link, &"href".into()).ok())
        .and_then(|href| href.as_string())
        .ok_or_else(|| "the page does not name the app's module, so no worker can run it".into())
}

/// Reproduces each of `texts` with `label`'s sentiment (LASS's beam search), split between the
/// workers, with the time it took in milliseconds.
pub async fn reproduce(texts: &[String], label: &str) -> Result<(Vec<Reproduced>, f64), String> {
    let pool = POOL
        .with(|p| p.borrow().clone())
        .ok_or("the Dis-AE is not loaded")?;
    let workers = pool.workers.lock().await;
    let start = now_ms();
    let per_worker = texts.len().div_ceil(workers.len()).max(1);
    let requests = texts
        .chunks(per_worker)
        .zip(workers.iter())
        .map(|(texts, worker)| worker.reproduce(texts, label));
    // Every worker's answer, failed or not, before the next batch may ask them anything.
    let outputs = futures::future::join_all(requests).await;
    let outputs: Vec<Vec<Reproduced>> = outputs.into_iter().collect::<Result<_, _>>()?;
    Ok((outputs.into_iter().flatten().collect(), now_ms() - start))
}

/// Sets `window.flipsideReproduce`, `window.flipsideReproducerWorkers` and
/// `window.flipsideReproducerReady = true`.
fn register_js_hook(workers: usize) {
    let hook = Closure::<dyn Fn(js_sys::Array, String) -> js_sys::Promise>::new(
        |texts: js_sys::Array, label: String| {
            let texts: Vec<String> = texts.iter().filter_map(|t| t.as_string()).collect();
            wasm_bindgen_futures::future_to_promise(async move {
                let (reproduced, _) = reproduce(&texts, &label).await.map_err(JsValue::from)?;
                let json = serde_json::to_string(&reproduced).map_err(|e| e.to_string())?;
                js_sys::JSON::parse(&json)
            })
        },
    );
    set_window_property("flipsideReproduce", hook.as_ref());
    // The hook lives as long as the page.
    hook.forget();
    set_window_property("flipsideReproducerWorkers", &JsValue::from(workers as u32));
    set_window_property("flipsideReproducerReady", &JsValue::TRUE);
}

/// The script a worker starts with: it imports the app's module, instantiates it with the
/// compiled module the page posts first, and hands the worker to [`crate::dis_ae_worker`].
fn start_script(app: &str) -> String {
    const SCRIPT: &str = r#"import init, { dis_ae_worker_start } from APP;
self.onmessageerror = () => self.postMessage({ error: 'the worker could not read the app module the page sent' });
self.onmessage = async (event) => {
  try {
    await init({ module_or_path: event.data });
    dis_ae_worker_start();
    self.postMessage({ ok: true });
  } catch (error) {
    self.postMessage({ error: `the worker could not start the app: ${error}` });
  }
};
"#;
    SCRIPT.replace(
        "APP",
        &serde_json::to_string(app).expect("a string serialises"),
    )
}

/// The request a worker is answering: its promise's resolve and reject.
type Pending = Rc<RefCell<Option<(js_sys::Function, js_sys::Function)>>>;

/// One Web Worker running the Dis-AE, asked one thing at a time.
struct DisAeWorker {
    worker: Worker,
    pending: Pending,
    /// Set when the worker threw (a panic leaves its module's state unknown): it is asked
    /// nothing more.
    failed: Rc<Cell<bool>>,
    _on_message: Closure<dyn Fn(MessageEvent)>,
    _on_error: Closure<dyn Fn(Event)>,
}

impl DisAeWorker {
    /// Starts a worker on the app's module at `app` and loads the Dis-AE into it (`load`: the
    /// load message with the files).
    async fn start(app: &str, load: &JsValue) -> Result<Self, String> {
        let parts = js_sys::Array::of1(&JsValue::from_str(&start_script(app)));
        let options = BlobPropertyBag::new();
        options.set_type("text/javascript");
        let blob = Blob::new_with_str_sequence_and_options(&parts, &options).map_err(js_error)?;
        let script = Url::create_object_url_with_blob(&blob).map_err(js_error)?;
        let options = WorkerOptions::new();
        options.set_type(web_sys::WorkerType::Module);
        let worker = Worker::new_with_options(&script, &options).map_err(js_error)?;
        let pending: Pending = Rc::default();
        let answered = pending.clone();
        let on_message = Closure::<dyn Fn(MessageEvent)>::new(move |event: MessageEvent| {
            if let Some((resolve, _)) = answered.borrow_mut().take() {
                let _ = resolve.call1(&JsValue::NULL, &event.data());
            }
        });
        let waiting = pending.clone();
        let failed: Rc<Cell<bool>> = Rc::default();
        let threw = failed.clone();
        let on_error = Closure::<dyn Fn(Event)>::new(move |event: Event| {
            threw.set(true);
            let message = event
                .dyn_ref::<ErrorEvent>()
                .map(ErrorEvent::message)
                .filter(|m| !m.is_empty())
                .unwrap_or_else(|| "the Dis-AE's worker failed".into());
            if let Some((_, reject)) = waiting.borrow_mut().take() {
                let _ = reject.call1(&JsValue::NULL, &JsValue::from_str(&message));
            }
        });
        worker.set_onmessage(Some(on_message.as_ref().unchecked_ref()));
        worker.set_onerror(Some(on_error.as_ref().unchecked_ref()));
        let worker = Self {
            worker,
            pending,
            failed,
            _on_message: on_message,
            _on_error: on_error,
        };
        // The compiled module, shared rather than compiled again.
        let started = worker.ask(&wasm_bindgen::module()).await;
        let _ = Url::revoke_object_url(&script);
        started?;
        worker.ask(load).await?;
        Ok(worker)
    }

    /// Posts `message` and waits for the worker's answer (an `{error}` answer is an error).
    async fn ask(&self, message: &JsValue) -> Result<JsValue, String> {
        if self.failed.get() {
            return Err("a worker of the Dis-AE stopped with an error: reload the page".into());
        }
        let pending = self.pending.clone();
        let answer = js_sys::Promise::new(&mut |resolve, reject| {
            *pending.borrow_mut() = Some((resolve, reject));
        });
        self.worker.post_message(message).map_err(js_error)?;
        let reply = JsFuture::from(answer).await.map_err(js_error)?;
        match js_sys::Reflect::get(&reply, &"error".into())
            .ok()
            .and_then(|e| e.as_string())
        {
            Some(error) => Err(error),
            None => Ok(reply),
        }
    }

    /// Reproduces `texts` with `label`'s sentiment in this worker.
    async fn reproduce(&self, texts: &[String], label: &str) -> Result<Vec<Reproduced>, String> {
        let request = ReproduceRequest {
            texts: texts.to_vec(),
            label: label.to_string(),
        };
        let message = object_with("kind", &"reproduce".into());
        let request = serde_json::to_string(&request).map_err(|e| e.to_string())?;
        let _ = js_sys::Reflect::set(&message, &"request".into(), &request.into());
        let reply = self.ask(&message).await?;
        let outputs = js_sys::Reflect::get(&reply, &"outputs".into())
            .ok()
            .and_then(|o| o.as_string())
            .ok_or("the Dis-AE's worker answered without outputs")?;
        serde_json::from_str(&outputs).map_err(|e| e.to_string())
    }
}

impl Drop for DisAeWorker {
    fn drop(&mut self) {
        // No handler may run once its closure is dropped.
        self.worker.set_onmessage(None);
        self.worker.set_onerror(None);
        self.worker.terminate();
    }
}

/// A JavaScript error's message.
fn js_error(error: JsValue) -> String {
    error
        .as_string()
        .or_else(|| {
            error
                .dyn_ref::<js_sys::Error>()
                .map(|e| String::from(e.message()))
        })
        .unwrap_or_else(|| format!("{error:?}"))
}
