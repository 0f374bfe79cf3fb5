//! Heap allocations the decision service makes per RLS call, counted on
//! its own threads: the service runs on a runtime of its own whose
//! threads are marked, the client on the test's. A steady stream of calls
//! over one HTTP/2 connection, after a warm-up that fills the counters,
//! the pools and the connection's buffers.
//!
//! The bound is today's count with a margin; docs/benchmarks.md records
//! the count itself.
//!
//! The counting allocator serves the whole test binary: each thread's own
//! count is [`on_this_thread`]'s.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};

use floodgate_server::proto::ratelimit::RateLimitDescriptor;
use floodgate_server::proto::ratelimit::rate_limit_descriptor::Entry;
use floodgate_server::proto::rls::RateLimitRequest;
use floodgate_server::proto::rls::rate_limit_service_client::RateLimitServiceClient;

use crate::support::start;

struct Counting;

thread_local! {
    /// This thread is one of the service's.
    static SERVICE: Cell<bool> = const { Cell::new(false) };
    /// Allocations made on this thread.
    static THIS_THREAD: Cell<u64> = const { Cell::new(0) };
}

/// Allocations made on the service's threads.
static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

fn count() {
    let _ = THIS_THREAD.try_with(|n| n.set(n.get() + 1));
    if SERVICE.try_with(Cell::get).unwrap_or(false) {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
    }
}

// SAFETY: every call is forwarded to the system allocator unchanged.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count();
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count();
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count();
        unsafe { System.realloc(ptr, layout, new_size) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
}

/// The allocations made so far on the calling thread.
pub(crate) fn on_this_thread() -> u64 {
    THIS_THREAD.with(Cell::get)
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// The most allocations a call may cost the service: 9.0 measured (the
/// HTTP/2 server's stream task and request headers, the response's
/// headers and trailers, the boxed decision), with a margin for the
/// runtime's own.
const MOST_PER_CALL: f64 = 11.0;

fn request(user: u64) -> RateLimitRequest {
    RateLimitRequest {
        domain: "api".into(),
        descriptors: vec![RateLimitDescriptor {
            entries: vec![Entry {
                key: "user".into(),
                value: format!("u{user}"),
            }],
            ..Default::default()
        }],
        hits_addend: 0,
    }
}

/// Sends `n` calls one after the other, over 1 000 users.
async fn calls(client: &mut RateLimitServiceClient<tonic::transport::Channel>, n: u64) {
    for i in 0..n {
        client.should_rate_limit(request(i % 1_000)).await.unwrap();
    }
}

/// Allocations per call of a service whose `server:` section has
/// `server`, on its own threads, measured over 5 000 calls after 2 000.
fn per_call(server: &str) -> f64 {
    // One measurement at a time: the count is the process's.
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _alone = ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let service_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .on_thread_start(|| SERVICE.with(|s| s.set(true)))
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let service = service_rt.block_on(start(dir.path(), server));
    let client_rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let per_call = client_rt.block_on(async {
        let url = format!("http://127.0.0.1:{}", service.grpc);
        let mut client = RateLimitServiceClient::connect(url).await.unwrap();
        calls(&mut client, 2_000).await;
        let before = ALLOCATIONS.load(Ordering::Relaxed);
        let n = 5_000;
        calls(&mut client, n).await;
        (ALLOCATIONS.load(Ordering::Relaxed) - before) as f64 / n as f64
    });
    service_rt.block_on(service.stop()).unwrap();
    per_call
}

#[test]
fn a_call_costs_the_service_a_bounded_number_of_allocations() {
    let per_call = per_call("");
    eprintln!("allocations per RLS call on the service's threads: {per_call:.2}");
    assert!(
        per_call <= MOST_PER_CALL,
        "{per_call:.2} allocations a call, more than {MOST_PER_CALL}"
    );
}

/// The most allocations a call may cost the service on its own HTTP/2
/// server: none are made per call once warm; the margin is for the
/// runtime's and the metrics' own, now and then.
const MOST_PER_CALL_DIRECT: f64 = 0.1;

#[test]
fn a_call_on_the_services_own_http2_server_allocates_nothing() {
    let per_call = per_call("  grpc_http2: direct\n");
    eprintln!("allocations per RLS call on the service's own HTTP/2 server: {per_call:.3}");
    assert!(
        per_call <= MOST_PER_CALL_DIRECT,
        "{per_call:.3} allocations a call, more than {MOST_PER_CALL_DIRECT}"
    );
}
