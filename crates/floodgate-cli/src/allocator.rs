//! The binary's allocator: mimalloc, with its arenas committed as they
//! are used.

/// mimalloc: the proxy and the service allocate and free small buffers on
/// every request (HTTP/2 frames, headers, futures), where it is measurably
/// cheaper than the system allocator (docs/benchmarks.md). Its stable v2
/// line: v3's path for Rust's (aligned) allocations cost the gateway about
/// 200 more instructions per request.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// mimalloc's `mi_option_arena_eager_commit` (`mimalloc.h`, v2), which
/// its Rust bindings do not name.
const MI_OPTION_ARENA_EAGER_COMMIT: libmimalloc_sys::mi_option_t = 4;

/// Set before the first allocation: mimalloc reserves its first arena on
/// the first one, before `main`.
#[used]
#[unsafe(link_section = ".init_array")]
static COMMIT_ARENAS_LAZILY: extern "C" fn() = commit_arenas_lazily;

/// Commits mimalloc's arenas as they are used rather than whole: by
/// default (on Linux) the pages of a committed arena that a reload or a
/// burst of connections freed stay resident, and the service's resident
/// size is 11 MB higher idle and about 400 bytes a rule higher after a
/// reload (docs/benchmarks.md, *Memory per rule*).
/// `MIMALLOC_ARENA_EAGER_COMMIT` in the environment still decides.
extern "C" fn commit_arenas_lazily() {
    // SAFETY: getenv reads the environment, set up before constructors
    // run, without allocating; mi_option_set sets an option mimalloc
    // reads when it reserves an arena and touches no allocation.
    unsafe {
        if libc::getenv(c"MIMALLOC_ARENA_EAGER_COMMIT".as_ptr()).is_null() {
            libmimalloc_sys::mi_option_set(MI_OPTION_ARENA_EAGER_COMMIT, 0);
        }
    }
}
