//! AMX's tile registers (Intel Sapphire Rapids and later), shared by the int8 kernel
//! ([`super::int8`]) and the bf16 one ([`super::bf16`]): whether this CPU and Linux let the
//! process use them, and their configuration on a thread.

use std::arch::asm;
use std::cell::Cell;
use std::sync::OnceLock;

thread_local! {
    /// Whether this thread's tiles are configured (a [`Tiles`] lives).
    static CONFIGURED: Cell<bool> = const { Cell::new(false) };
}

/// Whether a [`Tiles`] of this thread lives.
pub fn configured() -> bool {
    CONFIGURED.get()
}

/// Whether the CPU has AMX with int8 products (`tdpbusd`) and the OS lets this process use the
/// tiles.
pub fn int8_usable() -> bool {
    // CPUID leaf 7, EDX bit 25: AMX-INT8.
    has_tiles_and(1 << 25)
}

/// Whether the CPU has AMX with bf16 products (`tdpbf16ps`) and the OS lets this process use the
/// tiles.
pub fn bf16_usable() -> bool {
    // CPUID leaf 7, EDX bit 22: AMX-BF16.
    has_tiles_and(1 << 22)
}

/// Whether CPUID leaf 7's EDX has AMX-TILE (bit 24) and `bits`, and Linux lets this process use
/// the tiles (it hands their 8 KB of state only to processes that ask; asked once).
fn has_tiles_and(bits: u32) -> bool {
    static PERMITTED: OnceLock<bool> = OnceLock::new();
    let edx = std::arch::x86_64::__cpuid_count(7, 0).edx;
    edx & (1 << 24) != 0 && edx & bits == bits && *PERMITTED.get_or_init(request_permission)
}

#[cfg(target_os = "linux")]
fn request_permission() -> bool {
    const ARCH_REQ_XCOMP_PERM: libc::c_long = 0x1023;
    const XFEATURE_XTILEDATA: libc::c_long = 18;
    // SAFETY: arch_prctl with these arguments only asks for permission.
    unsafe {
        libc::syscall(
            libc::SYS_arch_prctl,
            ARCH_REQ_XCOMP_PERM,
            XFEATURE_XTILEDATA,
        ) == 0
    }
}

#[cfg(not(target_os = "linux"))]
fn request_permission() -> bool {
    false
}

/// The tile configuration (palette 1): eight tiles of 16 rows × 64 bytes — the kernels keep
/// sums in 0–3, activations in 4–5, weights in 6–7 (the same shape holds 64 int8 or 32 bf16
/// values a row, and 16 `i32` or f32 sums).
#[repr(C, align(64))]
struct Config {
    palette: u8,
    start_row: u8,
    reserved: [u8; 14],
    bytes_per_row: [u16; 16],
    rows: [u8; 16],
    unused: [u8; 16],
}

/// This thread's tiles, configured until dropped (one at a time per thread).
pub struct Tiles(());

impl Tiles {
    /// # Safety
    /// [`int8_usable`] or [`bf16_usable`] must have returned true.
    pub unsafe fn configure() -> Self {
        let mut config = Config {
            palette: 1,
            start_row: 0,
            reserved: [0; 14],
            bytes_per_row: [0; 16],
            rows: [0; 16],
            unused: [0; 16],
        };
        config.bytes_per_row[..8].fill(64);
        config.rows[..8].fill(16);
        // SAFETY: a valid palette-1 configuration of 64 bytes; the CPU has AMX.
        unsafe { asm!("ldtilecfg [{}]", in(reg) &config, options(nostack, readonly)) };
        CONFIGURED.set(true);
        Self(())
    }
}

impl Drop for Tiles {
    fn drop(&mut self) {
        // SAFETY: the tiles were configured by `configure`.
        unsafe { asm!("tilerelease", options(nostack, nomem)) };
        CONFIGURED.set(false);
    }
}
