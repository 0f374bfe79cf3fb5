//! Cache-line prefetches: hints that fetch a line early and never fault,
//! whatever the address (a stale or wrong one only wastes the fetch).
//!
//! A line the store is about to write (a shard's lock, a key's entry) is
//! fetched for writing (`PREFETCHW`, where the CPU has it): when the other
//! core last wrote it, that is one transfer of ownership instead of a shared
//! copy followed by an upgrade.

/// The prefetches this CPU has (detected once per store).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Prefetch {
    /// Whether the CPU executes `PREFETCHW`.
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    write: bool,
}

impl Prefetch {
    /// What this CPU can prefetch.
    pub(crate) fn detect() -> Self {
        #[cfg(target_arch = "x86_64")]
        {
            use core::arch::x86_64::__cpuid;
            // CPUID 8000_0001h ECX bit 8: PREFETCHW (AMD's 3DNowPrefetch).
            #[allow(unused_unsafe)]
            // SAFETY: every x86_64 CPU has CPUID, and the extended leaves'
            // maximum is checked first.
            let write = unsafe {
                __cpuid(0x8000_0000).eax >= 0x8000_0001 && __cpuid(0x8000_0001).ecx & (1 << 8) != 0
            };
            Prefetch { write }
        }
        #[cfg(not(target_arch = "x86_64"))]
        Prefetch { write: false }
    }

    /// Prefetches the line holding `addr` for reading.
    #[inline]
    pub(crate) fn read(self, addr: usize) {
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
    pub(crate) fn write(self, addr: usize) {
        #[cfg(target_arch = "x86_64")]
        if self.write {
            // SAFETY: the CPU has PREFETCHW (checked by `detect`); a
            // prefetch has no architectural effect and never faults.
            unsafe {
                core::arch::asm!(
                    "prefetchw [{0}]",
                    in(reg) addr,
                    options(nostack, preserves_flags, readonly)
                );
            }
            return;
        }
        self.read(addr);
    }
}
