//! The server's classifier, run in the browser: its three files are downloaded from
//! `/api/classifier/*` and rebuilt as a [`TextClassifier`] on WebGPU when the browser has an
//! adapter, else on the CPU (burn's flex backend compiled to wasm with SIMD128).
//!
//! On the CPU the encoder's products are int8, with relaxed SIMD where the browser has it
//! ([`crate::relaxed_simd`]), else SIMD128.
//!
//! The URL query `?backend=cpu` or `?backend=webgpu` forces a backend, `?int8=simd128` the
//! SIMD128 kernel. Once loaded, the classifier is also callable from JavaScript (for tests and
//! benchmarks): `window.flipsideScore(text)` resolves to
//! `{probabilities, labels, backend, int8, millis}` (`int8`: the kernel's name or null),
//! `window.flipsideInt8Parity()` returns `{kernel, digest}` (`int8::page_parity_digest` of its
//! int8 kernel, which native computes alike), and
//! `window.flipsideScoringReady` becomes `true` (or `window.flipsideScoringError` is set).

use std::cell::RefCell;
use std::rc::Rc;

use burn::backend::wgpu::{RuntimeOptions, WgpuDevice, graphics, init_setup_async};
use burn::backend::{Flex, WebGpu};
use burn::tensor::backend::Backend;
use flipside_shared::data::Input;
use flipside_shared::models::CheckpointFiles;
use flipside_shared::models::classifier::TextClassifier;
use flipside_shared::ops::int8::{Kernel, page_parity_digest};
use leptos::prelude::*;
use leptos::task::spawn_local;
use serde::Serialize;
use wasm_bindgen::JsValue;
use wasm_bindgen::prelude::Closure;

use crate::{api, relaxed_simd};

/// Where the classifier runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Device {
    WebGpu,
    Cpu,
}

impl Device {
    /// The name shown on the page.
    pub fn label(self) -> &'static str {
        match self {
            Device::WebGpu => "WebGPU",
            Device::Cpu => "CPU wasm, int8",
        }
    }

    /// The name used in `?backend=` and in `window.flipsideScore`'s results.
    pub fn id(self) -> &'static str {
        match self {
            Device::WebGpu => "webgpu",
            Device::Cpu => "cpu",
        }
    }

    fn parse(id: &str) -> Option<Device> {
        [Device::WebGpu, Device::Cpu]
            .into_iter()
            .find(|d| d.id().eq_ignore_ascii_case(id))
    }
}

/// Where loading the classifier is, for the page to show.
#[derive(Debug, Clone, PartialEq)]
pub enum Status {
    NotStarted,
    /// What it is doing now.
    Loading(String),
    Ready(Device),
    Failed(String),
}

/// The label probabilities of one text.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Scores {
    pub labels: Vec<String>,
    pub probabilities: Vec<f32>,
    pub backend: Device,
    /// The int8 kernel of the CPU backend.
    pub int8: Option<Kernel>,
    pub millis: f64,
}

impl Scores {
    /// The probability of `label` (0 when the classifier does not know it).
    pub fn probability(&self, label: &str) -> f32 {
        self.labels
            .iter()
            .position(|l| l == label)
            .map_or(0.0, |i| self.probabilities[i])
    }

    /// The most probable label.
    pub fn predicted(&self) -> Option<&str> {
        let best = (0..self.probabilities.len())
            .max_by(|&a, &b| self.probabilities[a].total_cmp(&self.probabilities[b]))?;
        self.labels.get(best).map(String::as_str)
    }
}

/// The classifier on one of the two backends (boxed: both are large, and of different sizes).
enum Engine {
    Gpu(Box<TextClassifier<WebGpu>>),
    Cpu(Box<TextClassifier<Flex>>),
}

/// A loaded classifier.
pub struct Scorer {
    engine: Engine,
    labels: Vec<String>,
}

impl Scorer {
    /// The backend it runs on.
    pub fn device(&self) -> Device {
        match self.engine {
            Engine::Gpu(_) => Device::WebGpu,
            Engine::Cpu(_) => Device::Cpu,
        }
    }

    /// The int8 kernel the encoder multiplies with (on the CPU).
    pub fn int8_kernel(&self) -> Option<Kernel> {
        match &self.engine {
            Engine::Gpu(_) => None,
            Engine::Cpu(classifier) => classifier.model.bert.int8_kernel(),
        }
    }

    /// Scores one text.
    pub async fn score(&self, text: &str) -> Result<Scores, String> {
        let start = now_ms();
        let input = Input::with_premise(None, text);
        let probabilities = match &self.engine {
            Engine::Gpu(classifier) => classifier.predict_batch_async(&[&input]).await,
            Engine::Cpu(classifier) => classifier.predict_batch_async(&[&input]).await,
        }
        .map_err(|e| e.to_string())?;
        Ok(Scores {
            labels: self.labels.clone(),
            probabilities,
            backend: self.device(),
            int8: self.int8_kernel(),
            millis: now_ms() - start,
        })
    }
}

thread_local! {
    static SCORER: RefCell<Option<Rc<Scorer>>> = const { RefCell::new(None) };
}

/// The loading status shared by every page (create it once, at the root, with [`provide`]).
#[derive(Debug, Clone, Copy)]
pub struct ScoringContext {
    pub status: RwSignal<Status>,
}

/// Makes the classifier's status available to the pages below.
pub fn provide() {
    provide_context(ScoringContext {
        status: RwSignal::new(Status::NotStarted),
    });
}

/// The status of the in-browser classifier; starts loading it on first use.
pub fn use_scoring() -> RwSignal<Status> {
    let status = expect_context::<ScoringContext>().status;
    if status.get_untracked() == Status::NotStarted {
        status.set(Status::Loading("Downloading the classifier…".into()));
        spawn_local(async move {
            match load(forced_device(), status).await {
                Ok(scorer) => {
                    let device = scorer.device();
                    SCORER.with(|s| *s.borrow_mut() = Some(Rc::new(scorer)));
                    register_js_hook();
                    status.set(Status::Ready(device));
                }
                Err(message) => {
                    set_window_property("flipsideScoringError", &JsValue::from_str(&message));
                    status.set(Status::Failed(message));
                }
            }
        });
    }
    status
}

/// The loaded classifier, if loading has finished.
pub fn scorer() -> Option<Rc<Scorer>> {
    SCORER.with(|s| s.borrow().clone())
}

/// The value of `name` in the page's URL query, if any.
pub fn query_parameter(name: &str) -> Option<String> {
    let search = window().location().search().ok()?;
    web_sys::UrlSearchParams::new_with_str(&search)
        .ok()?
        .get(name)
}

/// The backend forced with `?backend=cpu|webgpu`, if any.
fn forced_device() -> Option<Device> {
    Device::parse(&query_parameter("backend")?)
}

/// The CPU backend's int8 kernel: the best the page has ([`Kernel::best`]: relaxed SIMD once
/// installed where the browser compiles it), unless `?int8=simd128` asks for SIMD128 (what
/// browsers without relaxed SIMD run).
fn int8_kernel() -> Kernel {
    if query_parameter("int8").is_some_and(|k| k.eq_ignore_ascii_case("simd128")) {
        return Kernel::Simd128;
    }
    relaxed_simd::install();
    Kernel::best().unwrap_or(Kernel::Simd128)
}

async fn load(forced: Option<Device>, status: RwSignal<Status>) -> Result<Scorer, String> {
    let files = api::info_when_ready(|_| {})
        .await
        .map(|info| info.classifier.files)
        .unwrap_or_default();
    let plain = [
        api::CLASSIFIER_CONFIG,
        api::CLASSIFIER_TOKENIZER,
        api::CLASSIFIER_WEIGHTS,
    ];
    let (config, tokenizer, weights) = api::get_model_files(&files, plain)
        .await
        .map_err(|e| format!("could not download the classifier: {e}"))?;
    let files = CheckpointFiles {
        config,
        tokenizer,
        weights,
    };

    let has_webgpu = webgpu_available().await;
    let device = match forced {
        Some(Device::WebGpu) if !has_webgpu => {
            return Err(
                "WebGPU was asked for (?backend=webgpu), but this browser offers no \
                        WebGPU adapter"
                    .into(),
            );
        }
        Some(device) => device,
        None if has_webgpu => Device::WebGpu,
        None => Device::Cpu,
    };
    status.set(Status::Loading(format!(
        "Building the model ({}, {:.0} MB of weights)…",
        device.label(),
        files.weights.len() as f64 / 1e6
    )));
    // Let the page show that before the (blocking) weight loading starts.
    yield_to_browser().await;

    let engine = match device {
        Device::WebGpu => {
            let device = WgpuDevice::default();
            // Must run before any tensor op: burn's synchronous setup panics in the browser.
            init_setup_async::<graphics::WebGpu>(&device, RuntimeOptions::default()).await;
            Engine::Gpu(Box::new(build(files, &device)?))
        }
        // The encoder's products in int8 (the weights came as int8 rows anyway): SIMD128's
        // 16-bit dot products do twice as many multiply-adds per instruction as its f32 ones,
        // relaxed SIMD's byte dot products four times.
        Device::Cpu => Engine::Cpu(Box::new(
            build(files, &Default::default())?.with_int8_copies(int8_kernel()),
        )),
    };
    let labels = match &engine {
        Engine::Gpu(classifier) => classifier.config.labels.clone(),
        Engine::Cpu(classifier) => classifier.config.labels.clone(),
    };
    let scorer = Scorer { engine, labels };
    // A first prediction compiles WebGPU's shaders, so that the user's first one is fast.
    status.set(Status::Loading(format!(
        "Warming up ({})…",
        scorer.device().label()
    )));
    yield_to_browser().await;
    scorer.score("warm up").await?;
    Ok(scorer)
}

fn build<B: Backend>(
    files: CheckpointFiles,
    device: &B::Device,
) -> Result<TextClassifier<B>, String> {
    TextClassifier::from_files(files, device)
        .map_err(|e| format!("could not load the classifier: {e}"))
}

/// Whether the browser can give WebGPU an adapter (burn's setup panics when it cannot, and a
/// panic kills the whole app, so this is asked first).
async fn webgpu_available() -> bool {
    #[cfg(target_arch = "wasm32")]
    {
        wgpu::util::is_browser_webgpu_supported().await
    }
    #[cfg(not(target_arch = "wasm32"))]
    {
        false
    }
}

/// Sets `window.flipsideScore` and `window.flipsideScoringReady = true`.
fn register_js_hook() {
    let score = Closure::<dyn Fn(String) -> js_sys::Promise>::new(|text: String| {
        wasm_bindgen_futures::future_to_promise(async move {
            let scorer =
                scorer().ok_or_else(|| JsValue::from_str("the classifier is not loaded"))?;
            let scores = scorer.score(&text).await.map_err(JsValue::from)?;
            let json = serde_json::to_string(&scores).map_err(|e| e.to_string())?;
            js_sys::JSON::parse(&json)
        })
    });
    set_window_property("flipsideScore", score.as_ref());
    // The hook lives as long as the page.
    score.forget();
    let parity = Closure::<dyn Fn() -> JsValue>::new(|| {
        let kernel = scorer().and_then(|scorer| scorer.int8_kernel());
        let digest = kernel.and_then(page_parity_digest);
        let json = serde_json::json!({ "kernel": kernel, "digest": digest });
        js_sys::JSON::parse(&json.to_string()).unwrap_or(JsValue::NULL)
    });
    set_window_property("flipsideInt8Parity", parity.as_ref());
    parity.forget();
    set_window_property("flipsideScoringReady", &JsValue::TRUE);
}

pub fn set_window_property(name: &str, value: &JsValue) {
    // Setting a property on `window` cannot fail.
    let _ = js_sys::Reflect::set(&window(), &JsValue::from_str(name), value);
}

/// Milliseconds from the page's time origin.
pub fn now_ms() -> f64 {
    window().performance().map_or(0.0, |p| p.now())
}

/// Returns after the browser has had a chance to render.
pub async fn yield_to_browser() {
    sleep_ms(0).await;
}

/// Returns after `ms` milliseconds, leaving the browser to its work meanwhile.
pub async fn sleep_ms(ms: i32) {
    let promise = js_sys::Promise::new(&mut |resolve, _| {
        let _ = window().set_timeout_with_callback_and_timeout_and_arguments_0(&resolve, ms);
    });
    let _ = wasm_bindgen_futures::JsFuture::from(promise).await;
}
