//! Loops over a buffer in chunks: on rayon's threads natively (as burn's CPU kernels run), one
//! chunk after another in the page (WebAssembly without threads).

/// Calls `f(i, chunk)` for the `i`-th chunk of `chunk` values of `values` (the last may be
/// shorter).
pub fn for_each_chunk_mut<T, F>(values: &mut [T], chunk: usize, f: F)
where
    T: Send,
    F: Fn(usize, &mut [T]) + Send + Sync,
{
    let chunk = chunk.max(1);
    #[cfg(not(target_arch = "wasm32"))]
    {
        use rayon::prelude::*;
        values
            .par_chunks_mut(chunk)
            .enumerate()
            .for_each(|(i, values)| f(i, values));
    }
    #[cfg(target_arch = "wasm32")]
    for (i, values) in values.chunks_mut(chunk).enumerate() {
        f(i, values);
    }
}
