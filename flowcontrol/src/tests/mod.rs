//! Tests of the flow-control crate through its API.

mod classify;
mod configure;
mod estimate;
mod queueing;
mod wide;

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use apiagg_requestinfo::RequestInfo;

use super::{Admission, Decision, FlowControl, Rejection, Request, Seat, Settings};

/// The seat of an admission that runs.
pub fn run(admission: Admission) -> Seat {
    match admission {
        Admission::Run(seat) => seat,
        other => panic!("expected to run: {other:?}"),
    }
}

/// The refusal of an admission that is rejected.
pub fn rejected(admission: Admission) -> Rejection {
    match admission {
        Admission::Rejected(r) => r,
        other => panic!("expected a rejection: {other:?}"),
    }
}

/// A waiter's future, polled by hand.
pub type Waiting = Pin<Box<dyn Future<Output = Result<Seat, Rejection>> + Send>>;

/// Polls once without waiting.
pub fn poll(fut: &mut Waiting) -> Poll<Result<Seat, Rejection>> {
    fut.as_mut().poll(&mut Context::from_waker(Waker::noop()))
}

/// A request's classification: `(flow schema, priority level)`.
pub fn classify(
    flow: &FlowControl,
    user: &str,
    groups: &[&str],
    method: &str,
    path: &str,
) -> (String, String) {
    let decision = decide(flow, user, groups, method, path);
    (
        decision.flow_schema().to_string(),
        decision.priority_level().to_string(),
    )
}

/// The decision for a request.
pub fn decide(
    flow: &FlowControl,
    user: &str,
    groups: &[&str],
    method: &str,
    path: &str,
) -> Decision {
    let (path, query) = match path.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (path, None),
    };
    let info = RequestInfo::new(method, path, query).expect("request info");
    let groups: Vec<String> = groups.iter().map(|g| g.to_string()).collect();
    let request = Request {
        user,
        groups: &groups,
        info: &info,
    };
    flow.classify(&request)
}

/// Flow control with the built-in configuration and its own registry.
pub fn builtin(total_seats: u32) -> FlowControl {
    let settings = Settings {
        total_seats,
        request_wait_limit: Duration::from_secs(15),
    };
    FlowControl::new(settings, &prometheus::Registry::new()).expect("flow control")
}

/// Parses YAML objects for a test.
pub fn objects(yaml: &str) -> Vec<super::Object> {
    super::parse_objects(yaml).expect("objects")
}

/// Counts the allocations of the current thread (the request path must not allocate).
mod allocations {
    use std::alloc::{GlobalAlloc, Layout, System};
    use std::cell::Cell;

    thread_local! {
        static COUNT: Cell<u64> = const { Cell::new(0) };
    }

    struct Counting;

    // SAFETY: every call is forwarded to the system allocator unchanged.
    unsafe impl GlobalAlloc for Counting {
        unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
            let _ = COUNT.try_with(|c| c.set(c.get() + 1));
            // SAFETY: the caller's contract is passed on.
            unsafe { System.alloc(layout) }
        }

        unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
            // SAFETY: the caller's contract is passed on.
            unsafe { System.dealloc(ptr, layout) }
        }

        unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, size: usize) -> *mut u8 {
            let _ = COUNT.try_with(|c| c.set(c.get() + 1));
            // SAFETY: the caller's contract is passed on.
            unsafe { System.realloc(ptr, layout, size) }
        }
    }

    #[global_allocator]
    static GLOBAL: Counting = Counting;

    /// Allocations made by this thread so far.
    pub fn count() -> u64 {
        COUNT.with(Cell::get)
    }
}

#[test]
fn admitting_on_a_free_level_allocates_nothing() {
    let flow = builtin(600);
    let info = RequestInfo::new("GET", "/api/v1/namespaces/default/pods", None).expect("info");
    let groups = vec!["system:authenticated".to_string()];
    let request = Request {
        user: "alice",
        groups: &groups,
        info: &info,
    };
    drop(flow.admit(&request));
    let before = allocations::count();
    let started = std::time::Instant::now();
    for _ in 0..10_000 {
        match flow.admit(&request) {
            super::Admission::Run(seat) => drop(seat),
            other => panic!("{other:?}"),
        }
    }
    let elapsed = started.elapsed();
    assert_eq!(allocations::count() - before, 0, "the fast path allocated");
    // So does a wider request whose seats are free.
    let wide = super::WorkEstimate {
        initial_seats: 3,
        ..super::WorkEstimate::ONE
    };
    let before = allocations::count();
    for _ in 0..1000 {
        match flow.admit_estimated(&request, &wide) {
            super::Admission::Run(seat) => assert_eq!(seat.seats(), 3),
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(
        allocations::count() - before,
        0,
        "the wide fast path allocated"
    );
    eprintln!(
        "admit + release: {:?} per request (unoptimised build)",
        elapsed / 10_000
    );
}

#[test]
fn the_api_types_cross_threads() {
    fn send_sync<T: Send + Sync>() {}
    fn send<T: Send>(_: &T) {}
    send_sync::<FlowControl>();
    send_sync::<Decision>();
    send_sync::<super::Seat>();
    send_sync::<super::Rejection>();
    send_sync::<super::Waiter>();
    send_sync::<super::WorkEstimator>();
    send_sync::<super::WatchGuard>();
    let flow = builtin(1);
    if let super::Admission::Wait(w) = flow.admit(&Request {
        user: "u",
        groups: &[],
        info: &RequestInfo::new("GET", "/", None).expect("info"),
    }) {
        send(&w.wait());
    }
}
