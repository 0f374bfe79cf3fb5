//! Cache-line prefetches: hints that fetch a line early and never fault,
//! whatever the address (a stale or wrong one only wastes the fetch).
//!
//! A line the store is about to write (a shard's lock, a key's entry) is
//! fetched for writing (`PREFETCHW`, where the CPU has it): when the other
//! core last wrote it, that is one transfer of ownership instead of a shared
//! copy followed by an upgrade.

use std::sync::atomic::{AtomicBool, Ordering};

/// Whether the CPU executes `PREFETCHW` (set by [`init`]).
static WRITE: AtomicBool = AtomicBool::new(false);

/// Detects the CPU's prefetches; stores call it when they are made.
pub(crate) fn init() {
    #[cfg(target_arch = "x86_64")]
    {
        use core::arch::x86_64::__cpuid;
        // CPUID 8000_0001h ECX bit 8: PREFETCHW (AMD's 3DNowPrefetch).
        #[allow(unused_unsafe)]
        // SAFETY: every x86_64 CPU has CPUID and these extended leaves'
        // maximum is checked first.
        let has = unsafe {
            __cpuid(0x8000_0000).eax >= 0x8000_0001 && __cpuid(0x8000_0001).ecx & (1 << 8) != 0
        };
        WRITE.store(has, Ordering::Relaxed);
    }
}

/// Prefetches the line holding `addr` for reading.
#[inline]
pub(crate) fn read(addr: usize) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch has no architectural effect and never faults.
    unsafe {
        use core::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
        _mm_prefetch::<_MM_HINT_T0>(addr as *const i8);
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = addr;
}

/// Prefetches the line holding `addr` for writing (for reading on CPUs
/// without a write prefetch).
#[inline]
pub(crate) fn write(addr: usize) {
    #[cfg(target_arch = "x86_64")]
    if WRITE.load(Ordering::Relaxed) {
        // SAFETY: the CPU has PREFETCHW (checked by `init`); a prefetch
        // has no architectural effect and never faults.
        unsafe {
            core::arch::asm!(
                "prefetchw [{0}]",
                in(reg) addr,
                options(nostack, preserves_flags, readonly)
            );
        }
        return;
    }
    read(addr);
}
