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
/// the tiles (it hands their 8 KB of state only to processes that ask). Both are asked once:
/// CPUID leaves a virtual machine for its hypervisor.
fn has_tiles_and(bits: u32) -> bool {
    static EDX_WITH_TILES: OnceLock<Option<u32>> = OnceLock::new();
    let edx = EDX_WITH_TILES.get_or_init(|| {
        let edx = std::arch::x86_64::__cpuid_count(7, 0).edx;
        (edx & (1 << 24) != 0 && request_permission()).then_some(edx)
    });
    edx.is_some_and(|edx| edx & bits == bits)
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

/// A block of 32 × 32 four-byte sums (`i32` or f32) as the kernels keep it in tiles 0–3: its four
/// 16 × 16 quarters (top left, top right, bottom left, bottom right), rows 128 bytes apart.
pub type Sums<T> = [[T; 32]; 32];

/// Bytes from one row of [`Sums`] to the next.
pub const SUMS_PITCH: usize = 32 * 4;

/// Sets tiles 0–3, the sums, to zero.
///
/// # Safety
/// This thread's tiles are configured ([`Tiles`]).
pub unsafe fn zero_sums() {
    // SAFETY: the caller configured the tiles.
    unsafe {
        asm!(
            "tilezero tmm0",
            "tilezero tmm1",
            "tilezero tmm2",
            "tilezero tmm3",
            options(nostack, nomem)
        )
    };
}

/// Loads tiles 0–3 from a 32 × 32 block of four-byte sums whose rows start `pitch` bytes apart
/// at `sums`.
///
/// # Safety
/// This thread's tiles are configured ([`Tiles`]); the 32 rows of 128 bytes are readable.
pub unsafe fn load_sums<T>(sums: *const T, pitch: usize) {
    const { assert!(size_of::<T>() == 4) };
    let c = sums.cast::<u8>();
    // SAFETY: the caller configured the tiles; the four loads read the block's 32 rows.
    unsafe {
        asm!(
            "tileloadd tmm0, [{c} + {pitch}*1]",
            "tileloadd tmm1, [{c1} + {pitch}*1]",
            "tileloadd tmm2, [{c2} + {pitch}*1]",
            "tileloadd tmm3, [{c3} + {pitch}*1]",
            c = in(reg) c,
            c1 = in(reg) c.add(64),
            c2 = in(reg) c.add(16 * pitch),
            c3 = in(reg) c.add(16 * pitch + 64),
            pitch = in(reg) pitch,
            options(nostack, readonly)
        )
    };
}

/// Stores tiles 0–3 into a 32 × 32 block of four-byte sums whose rows start `pitch` bytes apart
/// at `sums` ([`SUMS_PITCH`] for a [`Sums`]).
///
/// # Safety
/// This thread's tiles are configured ([`Tiles`]); the 32 rows of 128 bytes are writable.
pub unsafe fn store_sums<T>(sums: *mut T, pitch: usize) {
    const { assert!(size_of::<T>() == 4) };
    let c = sums.cast::<u8>();
    // SAFETY: the caller configured the tiles; the four stores write the block's 32 rows.
    unsafe {
        asm!(
            "tilestored [{c} + {pitch}*1], tmm0",
            "tilestored [{c1} + {pitch}*1], tmm1",
            "tilestored [{c2} + {pitch}*1], tmm2",
            "tilestored [{c3} + {pitch}*1], tmm3",
            c = in(reg) c,
            c1 = in(reg) c.add(64),
            c2 = in(reg) c.add(16 * pitch),
            c3 = in(reg) c.add(16 * pitch + 64),
            pitch = in(reg) pitch,
            options(nostack)
        )
    };
}
