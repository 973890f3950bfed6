//! Final seats of writes: held for their additional latency after the request ends, then
//! given back (by the next event on the manual clock, by a timer on the runtime).

use std::sync::Arc;
use std::time::Duration;

use apiagg_requestinfo::RequestInfo;

use super::{lane, wait, Harness, GET, QUEUE, TOTAL};
use crate::clock::{Clock, ManualClock};
use crate::tests::{poll, run};
use crate::{RequestShape, WatchGuard};

const WRITE: &str = "/api/v1/namespaces/a/configmaps";

/// Opens `count` cluster-wide watches of configmaps.
fn watches(h: &Harness, count: usize) -> Vec<WatchGuard> {
    let info = RequestInfo::new("GET", "/api/v1/configmaps", Some("watch=1")).expect("info");
    let shape = RequestShape::from_info(&info);
    (0..count)
        .map(|_| h.flow.estimator().watches().opened(&shape))
        .collect()
}

#[tokio::test]
async fn final_seats_are_held_for_the_additional_latency_then_released() {
    let h = Harness::new(TOTAL, &lane(5, QUEUE));
    let level = h.flow.level("lane").expect("lane");
    let _watches = watches(&h, 25);
    // 25 watchers: one seat to run, three for 5 ms after.
    let write = run(h.admit("u-a", "POST", WRITE));
    assert_eq!((write.seats(), h.usage()), (3, (3, 0)));
    drop(write);
    let pair = r#"{flow_schema="lane",priority_level="lane"}"#;
    let seats = format!("apiserver_flowcontrol_current_executing_seats{pair}");
    let requests = format!("apiserver_flowcontrol_current_executing_requests{pair}");
    assert_eq!(
        (level.lingering(), h.metric(&seats), h.metric(&requests)),
        (3, 3.0, 0.0)
    );
    h.clock.advance(Duration::from_millis(4));
    h.flow.sample_demand();
    assert_eq!(h.usage(), (3, 0));
    h.clock.advance(Duration::from_millis(1));
    h.flow.sample_demand();
    assert_eq!((h.usage(), h.metric(&seats)), ((0, 0), 0.0));

    // Lingering seats hold back waiters until they are due.
    let gets: Vec<_> = (0..37).map(|_| run(h.admit("u-b", "GET", GET))).collect();
    drop(run(h.admit("u-a", "POST", WRITE)));
    let mut waiting = wait(h.admit("u-c", "GET", GET));
    assert!(poll(&mut waiting).is_pending());
    h.clock.advance(Duration::from_millis(5));
    // The next arrival gives them back first: the waiter runs, then the newcomer.
    let newcomer = run(h.admit("u-d", "GET", GET));
    assert!(matches!(poll(&mut waiting), std::task::Poll::Ready(Ok(_))));
    drop((gets, newcomer));

    // 1000 watchers: 10 seats for 50 ms, reshaped to the level's cap of 6 for 83.3 ms.
    let _more = watches(&h, 975);
    let write = run(h.admit("u-a", "POST", WRITE));
    assert_eq!(write.seats(), 6);
    drop(write);
    h.clock.advance(Duration::from_millis(83));
    h.flow.sample_demand();
    assert_eq!(level.lingering(), 6);
    h.clock.advance(Duration::from_millis(1));
    h.flow.sample_demand();
    assert_eq!((level.lingering(), h.usage()), (0, (0, 0)));
}

#[tokio::test]
async fn lingering_seats_survive_a_reconfiguration_and_go_back_to_their_level() {
    let h = Harness::new(TOTAL, &lane(5, QUEUE));
    let level = h.flow.level("lane").expect("lane");
    let _watches = watches(&h, 25);
    let write = run(h.admit("u-a", "POST", WRITE));
    h.flow.configure(Vec::new()).expect("without the lane");
    drop(write);
    assert_eq!(level.usage(), (3, 0));
    h.clock.advance(Duration::from_millis(5));
    h.flow.sample_demand();
    assert_eq!(level.usage(), (0, 0));
}

#[tokio::test]
async fn on_the_runtime_a_timer_gives_lingering_seats_back() {
    // One seat in the lane: the write's three final seats are cut to one for 15 ms.
    let manual = Arc::new(ManualClock::new());
    let h = Harness::with_clock(50, &lane(5, QUEUE), Clock::System, manual);
    let _watches = watches(&h, 25);
    drop(run(h.admit("u-a", "POST", WRITE)));
    assert_eq!(h.usage(), (1, 0));
    let waiting = wait(h.admit("u-b", "GET", GET));
    let seat = tokio::time::timeout(Duration::from_secs(10), waiting)
        .await
        .expect("released by the timer")
        .expect("a seat");
    assert_eq!(seat.seats(), 1);
}

#[test]
fn without_a_runtime_final_seats_go_back_at_once() {
    let manual = Arc::new(ManualClock::new());
    let h = Harness::with_clock(TOTAL, &lane(5, "{type: Reject}"), Clock::System, manual);
    let _watches = watches(&h, 25);
    let write = run(h.admit("u-a", "POST", WRITE));
    assert_eq!(write.seats(), 3);
    drop(write);
    assert_eq!(h.usage(), (0, 0));
}
