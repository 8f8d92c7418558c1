//! The GGUF file a fluency model scores from. llama.cpp's CPU matrix products read Q8_0
//! weights through tiled kernels but Q4_1 ones a row at a time, and scoring perplexity is a
//! prompt-sized pass over every text: a Q4_1 model is scored from a Q8_0 copy made once beside
//! it (`model.q8_0.gguf`). Its weights are the Q4_1 ones to within Q8_0's rounding (1/254 of
//! each block of 32's largest). SmolLM2-135M on 2 Zen 4 cores (`bench llm`): 375 → 574 prompt
//! tokens/s; LASS's `bench cf` spends most of its CPU time there.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result, ensure};
use llama_cpp_sys_2 as sys;

/// The file to score with for the GGUF model at `path`: a Q8_0 copy beside a Q4_1 model (made
/// now when missing or older than the model), else `path` itself. When the copy cannot be
/// written (a read-only cache), the model is scored as it is.
pub fn scoring_copy(path: &Path) -> Result<PathBuf> {
    if file_type(path)? != Some(sys::LLAMA_FTYPE_MOSTLY_Q4_1) {
        return Ok(path.to_path_buf());
    }
    let copy = path.with_extension("q8_0.gguf");
    let modified = |p: &Path| p.metadata().and_then(|m| m.modified()).ok();
    let fresh = modified(&copy) >= modified(path)
        && file_type(&copy).ok().flatten() == Some(sys::LLAMA_FTYPE_MOSTLY_Q8_0);
    if fresh {
        return Ok(copy);
    }
    match requantize_q8_0(path, &copy) {
        Ok(()) => Ok(copy),
        Err(error) => {
            tracing::warn!(
                "scoring with {} as it is (slower): no Q8_0 copy: {error:#}",
                path.display()
            );
            Ok(path.to_path_buf())
        }
    }
}

/// The `general.file_type` of a GGUF file's header (a `llama_ftype`), if it has one.
fn file_type(path: &Path) -> Result<Option<u32>> {
    let name = c_path(path)?;
    let params = sys::gguf_init_params {
        no_alloc: true,
        ctx: std::ptr::null_mut(),
    };
    // SAFETY: `name` is a NUL-terminated path; with `no_alloc` only the header is read, and the
    // context is freed before returning.
    unsafe {
        let context = sys::gguf_init_from_file(name.as_ptr(), params);
        ensure!(!context.is_null(), "{} is not a GGUF file", path.display());
        let key = sys::gguf_find_key(context, c"general.file_type".as_ptr());
        let value = (key >= 0 && sys::gguf_get_kv_type(context, key) == sys::GGUF_TYPE_UINT32)
            .then(|| sys::gguf_get_val_u32(context, key));
        sys::gguf_free(context);
        Ok(value)
    }
}

/// Writes `source` requantized to Q8_0 at `target` (through a temporary file beside it, so
/// that concurrent runs never read a partial copy).
fn requantize_q8_0(source: &Path, target: &Path) -> Result<()> {
    let dir = target.parent().context("a model file has a directory")?;
    let partial = tempfile::Builder::new()
        .prefix(".q8_0-")
        .suffix(".partial")
        .tempfile_in(dir)
        .with_context(|| format!("cannot write in {}", dir.display()))?;
    let (input, output) = (c_path(source)?, c_path(partial.path())?);
    super::local::backend()?;
    // SAFETY: plain-data parameters from llama.cpp's defaults; both paths are NUL-terminated.
    let status = unsafe {
        let mut params = sys::llama_model_quantize_default_params();
        params.ftype = sys::LLAMA_FTYPE_MOSTLY_Q8_0;
        params.allow_requantize = true;
        params.nthread = std::thread::available_parallelism().map_or(1, |n| n.get()) as i32;
        sys::llama_model_quantize(input.as_ptr(), output.as_ptr(), &params)
    };
    ensure!(
        status == 0,
        "llama.cpp could not requantize {}",
        source.display()
    );
    partial
        .persist(target)
        .with_context(|| format!("cannot write {}", target.display()))?;
    Ok(())
}

fn c_path(path: &Path) -> Result<CString> {
    CString::new(path.as_os_str().as_bytes())
        .with_context(|| format!("{} holds a NUL byte", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_that_is_not_gguf_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("model.gguf");
        std::fs::write(&path, b"not a model").unwrap();
        let error = scoring_copy(&path).unwrap_err();
        assert!(error.to_string().contains("is not a GGUF file"), "{error}");
    }
}
