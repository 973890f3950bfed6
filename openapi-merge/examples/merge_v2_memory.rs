//! Allocation and peak-memory measurement of one `merge_v2` call (the criterion benches measure
//! time). Counts bytes and allocations per merge (comparable to Go's `B/op` and `allocs/op`) and
//! the peak of live heap above what the loaded inputs already hold.
//!
//! `cargo run --release --example merge_v2_memory` (same env vars as the benches).

#[path = "../benches/support/inputs.rs"]
mod inputs;

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::time::Instant;

use apiagg_openapi_merge::{merge_v2, LocalSpec, PreparedV2, RemoteSpec};

struct Counting;
static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);
static TOTAL: AtomicUsize = AtomicUsize::new(0);
static COUNT: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards to the system allocator; only adds counters.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let live = LIVE.fetch_add(layout.size(), Relaxed) + layout.size();
        PEAK.fetch_max(live, Relaxed);
        TOTAL.fetch_add(layout.size(), Relaxed);
        COUNT.fetch_add(1, Relaxed);
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size(), Relaxed);
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if new_size > layout.size() {
            let grow = new_size - layout.size();
            let live = LIVE.fetch_add(grow, Relaxed) + grow;
            PEAK.fetch_max(live, Relaxed);
            TOTAL.fetch_add(grow, Relaxed);
        } else {
            LIVE.fetch_sub(layout.size() - new_size, Relaxed);
        }
        COUNT.fetch_add(1, Relaxed);
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// One full rebuild: prepare every input from its parsed document, merge, render, hash.
fn rebuild(locals: &[LocalSpec], remotes: &[RemoteSpec], prepare: bool) -> Option<usize> {
    if prepare {
        let (locals, remotes) = inputs::reprepare(locals, remotes);
        merge_v2(&locals, &remotes).map(|m| m.json.len())
    } else {
        merge_v2(locals, remotes).map(|m| m.json.len())
    }
}

fn measure(name: &str, locals: &[LocalSpec], remotes: &[RemoteSpec], prepare: bool) {
    let name = if prepare {
        format!("{name} (prepare+merge)")
    } else {
        format!("{name} (merge)")
    };
    let out_len = rebuild(locals, remotes, prepare).unwrap_or(0);
    let base = LIVE.load(Relaxed);
    PEAK.store(base, Relaxed);
    let (total, count) = (TOTAL.load(Relaxed), COUNT.load(Relaxed));
    std::hint::black_box(rebuild(locals, remotes, prepare));
    let (total, count) = (TOTAL.load(Relaxed) - total, COUNT.load(Relaxed) - count);
    let peak = PEAK.load(Relaxed) - base;
    let runs = 20;
    let start = Instant::now();
    for _ in 0..runs {
        std::hint::black_box(rebuild(locals, remotes, prepare));
    }
    let per_op = start.elapsed() / runs;
    println!(
        "{name}: output {:.2} MB, {:.2} ms/op, {:.1} MB allocated/op, {count} allocs/op, peak live +{:.1} MB",
        out_len as f64 / 1e6,
        per_op.as_secs_f64() * 1e3,
        total as f64 / 1e6,
        peak as f64 / 1e6,
    );
}

fn main() {
    let before = LIVE.load(Relaxed);
    match inputs::kube_openapi_inputs() {
        Ok(locals) => {
            println!(
                "inputs parsed: {:.1} MB live",
                (LIVE.load(Relaxed) - before) as f64 / 1e6
            );
            measure("kube_openapi_testdata", &locals, &[], false);
            measure("kube_openapi_testdata", &locals, &[], true);
        }
        Err(dir) => println!(
            "skipping kube_openapi_testdata: not found in {}",
            dir.display()
        ),
    }
    let before = LIVE.load(Relaxed);
    match inputs::realistic_inputs(&inputs::fixtures()) {
        Ok((locals, remotes)) => {
            println!(
                "inputs parsed: {:.1} MB live",
                (LIVE.load(Relaxed) - before) as f64 / 1e6
            );
            measure("realistic", &locals, &remotes, false);
            measure("realistic", &locals, &remotes, true);
        }
        Err(missing) => panic!("missing fixture {}", missing.display()),
    }
}
