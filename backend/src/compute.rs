//! Which burn backend runs the models: CPU always, CUDA with the `cuda` feature.

use anyhow::{Result, bail};

/// The CPU backend: burn-flex (pure Rust, SIMD `gemm`, multi-threaded with rayon).
pub type Cpu = burn::backend::Flex;

/// NVIDIA GPUs through CubeCL (needs the `cuda` feature, libcuda and NVRTC at run time).
#[cfg(feature = "cuda")]
pub type Cuda = burn::backend::Cuda;

/// The device chosen on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum DeviceChoice {
    #[default]
    Cpu,
    Cuda,
}

impl DeviceChoice {
    /// Errors when the choice needs a feature this binary was built without.
    pub fn check_available(self) -> Result<()> {
        if self == DeviceChoice::Cuda && !cfg!(feature = "cuda") {
            bail!(
                "this flipside binary was built without CUDA support; rebuild with \
                 `cargo build --release --features cuda`"
            );
        }
        Ok(())
    }
}

/// Calls the generic function `$f::<B>(device, args…)` with the backend `$choice` selects.
#[macro_export]
macro_rules! with_backend {
    ($choice:expr, $($f:ident)::+ ( $($arg:expr),* $(,)? )) => {{
        let choice: $crate::compute::DeviceChoice = $choice;
        choice.check_available().and_then(|()| match choice {
            #[cfg(feature = "cuda")]
            $crate::compute::DeviceChoice::Cuda => {
                $($f)::+::<$crate::compute::Cuda>(Default::default(), $($arg),*)
            }
            _ => $($f)::+::<$crate::compute::Cpu>(Default::default(), $($arg),*),
        })
    }};
}
