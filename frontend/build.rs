//! Assembles the page's relaxed-SIMD int8 kernel (`src/int8_relaxed.wat`) into a WebAssembly
//! module that `relaxed_simd.rs` embeds.

use std::path::PathBuf;

fn main() {
    let source = "src/int8_relaxed.wat";
    println!("cargo::rerun-if-changed={source}");
    let module = wat::parse_file(source).unwrap_or_else(|e| panic!("{source}: {e}"));
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    std::fs::write(out.join("int8_relaxed.wasm"), module).expect("OUT_DIR is writable");
}
