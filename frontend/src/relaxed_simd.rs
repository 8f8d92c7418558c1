//! The page's int8 products with WebAssembly's relaxed SIMD, where the browser has it: the
//! kernel is a module of its own (`int8_relaxed.wat`, assembled by `build.rs`), because a module
//! that uses relaxed SIMD does not compile in a browser without it. [`install`] compiles it
//! with the app's memory as its own and hands it to the shared int8 layers
//! ([`Kernel::RelaxedSimd`](flipside_shared::ops::int8::Kernel::RelaxedSimd)); where the
//! browser refuses it, the layers keep SIMD128's kernel.

#[cfg(target_arch = "wasm32")]
use flipside_shared::ops::int8::{RelaxedProducts, install_relaxed_products};
#[cfg(target_arch = "wasm32")]
use wasm_bindgen::prelude::*;

/// The assembled kernel module.
#[cfg(target_arch = "wasm32")]
const MODULE: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/int8_relaxed.wasm"));

#[cfg(target_arch = "wasm32")]
#[wasm_bindgen(inline_js = r#"
let products = null;
export function load_relaxed_products(bytes, memory) {
  if (!WebAssembly.validate(bytes)) return false;
  try {
    const module = new WebAssembly.Module(bytes);
    products = new WebAssembly.Instance(module, { env: { memory } }).exports.products;
    return true;
  } catch (error) {
    console.warn('relaxed SIMD kernel not loaded, using SIMD128:', error);
    return false;
  }
}
export function relaxed_products(rows, width, pairs, weights, panels, sums) {
  products(rows, width, pairs, weights, panels, sums);
}
"#)]
extern "C" {
    /// Compiles the kernel module with `memory` (false where the browser has no relaxed SIMD or
    /// could not instantiate it).
    fn load_relaxed_products(bytes: &[u8], memory: &JsValue) -> bool;
    /// The module's `products` on addresses in the app's memory.
    fn relaxed_products(rows: u32, width: u32, pairs: u32, weights: u32, panels: u32, sums: u32);
}

/// Installs the relaxed-SIMD kernel where the browser compiles it (then
/// [`Kernel::best`](flipside_shared::ops::int8::Kernel::best) gives it).
pub fn install() {
    #[cfg(target_arch = "wasm32")]
    if load_relaxed_products(MODULE, &wasm_bindgen::memory()) {
        install_relaxed_products(multiply);
    }
}

/// Runs the module on one task's rows and panels (the shapes `RelaxedProducts` documents).
#[cfg(target_arch = "wasm32")]
fn multiply(task: RelaxedProducts<'_>) {
    let row_bytes = task.width;
    let pairs = task.rows.len() / (2 * row_bytes);
    let panels = task.weights.len() / (row_bytes / 4 * 128);
    assert!(row_bytes.is_multiple_of(4) && pairs * 2 * row_bytes == task.rows.len());
    assert_eq!(panels * row_bytes / 4 * 128, task.weights.len());
    assert_eq!(task.sums.len(), pairs * 2 * panels * 32);
    // Addresses in the app's memory (wasm32's pointers), which the module shares.
    let address = |pointer: *const u8| pointer as u32;
    relaxed_products(
        address(task.rows.as_ptr()),
        row_bytes as u32,
        pairs as u32,
        address(task.weights.as_ptr().cast()),
        panels as u32,
        address(task.sums.as_mut_ptr().cast()),
    );
}
