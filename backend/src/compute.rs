//! Which burn backend runs the models: CPU always, CUDA with the `cuda` feature.

use anyhow::{Result, bail};
use burn::tensor::backend::Backend;
use flipside_shared::batching::{BatchExecutor, Sequential};
use rayon::prelude::*;

/// The CPU backend: burn-flex (pure Rust, SIMD `gemm`, multi-threaded with rayon).
pub type Cpu = burn::backend::Flex;

/// NVIDIA GPUs through CubeCL (needs the `cuda` feature, libcuda and NVRTC at run time).
#[cfg(feature = "burn-cuda")]
pub type Cuda = burn::backend::Cuda;

/// The device chosen on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum DeviceChoice {
    #[default]
    Cpu,
    Cuda,
}

impl DeviceChoice {
    /// Errors when the choice needs a feature this binary was built without, or a driver this
    /// machine does not have.
    pub fn check_available(self) -> Result<()> {
        if self == DeviceChoice::Cuda && !cfg!(feature = "burn-cuda") {
            bail!(
                "this flipside binary was built without CUDA support; rebuild with \
                 `cargo build --release --features burn-cuda` (burn's models, no CUDA toolkit \
                 needed) or `--features cuda` (the embedded LLM too; needs nvcc)"
            );
        }
        #[cfg(all(feature = "burn-cuda", target_os = "linux"))]
        if self == DeviceChoice::Cuda && !cuda_driver_loads() {
            bail!(
                "--device cuda: this machine has no NVIDIA driver (libcuda.so.1 cannot be \
                 loaded); use --device cpu"
            );
        }
        Ok(())
    }
}

/// Whether the NVIDIA driver's library loads: without it CubeCL panics in a thread of its own
/// instead of returning an error.
#[cfg(all(feature = "burn-cuda", target_os = "linux"))]
fn cuda_driver_loads() -> bool {
    // SAFETY: a constant C string; the handle is closed before returning.
    unsafe {
        let handle = libc::dlopen(c"libcuda.so.1".as_ptr(), libc::RTLD_LAZY | libc::RTLD_LOCAL);
        if handle.is_null() {
            return false;
        }
        libc::dlclose(handle);
        true
    }
}

/// How independent batches run: in parallel on the CPU (the model's element-wise work is
/// single-threaded, so two batches in flight keep both cores busy), one at a time on a GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Batches {
    Parallel,
    Sequential,
}

impl BatchExecutor for Batches {
    fn map<T: Send>(&self, count: usize, job: &(dyn Fn(usize) -> T + Sync)) -> Vec<T> {
        match self {
            Batches::Parallel => (0..count).into_par_iter().map(job).collect(),
            Batches::Sequential => Sequential.map(count, job),
        }
    }
}

/// A backend's device and the way batches are run on it.
#[derive(Debug, Clone)]
pub struct Compute<B: Backend> {
    pub device: B::Device,
    pub batches: Batches,
}

/// Calls the generic function `$f::<B>(compute, args…)` with the backend `$choice` selects.
#[macro_export]
macro_rules! with_backend {
    ($choice:expr, $($f:ident)::+ ( $($arg:expr),* $(,)? )) => {{
        let choice: $crate::compute::DeviceChoice = $choice;
        choice.check_available().and_then(|()| match choice {
            #[cfg(feature = "burn-cuda")]
            $crate::compute::DeviceChoice::Cuda => {
                $($f)::+::<$crate::compute::Cuda>(
                    $crate::compute::Compute {
                        device: Default::default(),
                        batches: $crate::compute::Batches::Sequential,
                    },
                    $($arg),*
                )
            }
            _ => $($f)::+::<$crate::compute::Cpu>(
                $crate::compute::Compute {
                    device: Default::default(),
                    batches: $crate::compute::Batches::Parallel,
                },
                $($arg),*
            ),
        })
    }};
}

/// Waits until everything queued on `device` has run (a no-op on the CPU). CubeCL prints its
/// kernel profile here when `CUBECL_DEBUG_OPTION=profile` asks for one.
pub fn wait_for<B: Backend>(device: &B::Device) -> Result<()> {
    B::sync(device).map_err(|e| anyhow::anyhow!("the device failed: {e:?}"))
}

/// User and system CPU seconds this process has used, over all its threads (0 where unknown).
#[cfg(target_os = "linux")]
pub fn process_cpu_seconds() -> f64 {
    // SAFETY: `getrusage` fills the struct it is given; all-zero is a valid `rusage`.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        if libc::getrusage(libc::RUSAGE_SELF, &mut usage) != 0 {
            return 0.0;
        }
        usage
    };
    let seconds = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
    seconds(usage.ru_utime) + seconds(usage.ru_stime)
}

#[cfg(not(target_os = "linux"))]
pub fn process_cpu_seconds() -> f64 {
    0.0
}
