//! Seats and queues through the API: waiting, rejection, time-outs, fairness, cancellation,
//! reconfiguration with seats held, borrowing.

use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use apiagg_requestinfo::RequestInfo;

use super::{objects, poll, rejected, run, Waiting};
use crate::clock::{Clock, ManualClock};
use crate::metrics::Reason;
use crate::queueset::deal;
use crate::{flow_hash, Admission, FlowControl, Request, Settings};

/// A level `lane` (`response` is its limitResponse) and a schema sending users `u-*`… there
/// (by user), other users stay on the built-in levels.
fn lane(response: &str) -> String {
    format!(
        r#"
apiVersion: flowcontrol.apiserver.k8s.io/v1
kind: PriorityLevelConfiguration
metadata: {{name: lane}}
spec: {{type: Limited, limited: {{nominalConcurrencyShares: 5, limitResponse: {response}}}}}
---
apiVersion: flowcontrol.apiserver.k8s.io/v1
kind: FlowSchema
metadata: {{name: lane}}
spec:
  matchingPrecedence: 10
  priorityLevelConfiguration: {{name: lane}}
  distinguisherMethod: {{type: ByUser}}
  rules: [{{subjects: [{{kind: Group, group: {{name: lane-users}}}}], nonResourceRules: [{{verbs: ["*"], nonResourceURLs: ["*"]}}]}}]
"#
    )
}

/// One seat per level (every level with shares gets `ceil(1 × s / Σ) = 1`).
fn one_seat(wait: Duration, clock: Clock, config: &str) -> FlowControl {
    let settings = Settings {
        total_seats: 1,
        request_wait_limit: wait,
    };
    let flow = FlowControl::with_clock(settings, &prometheus::Registry::new(), clock)
        .expect("flow control");
    flow.configure(objects(config)).expect("configure");
    flow
}

fn admit(flow: &FlowControl, user: &str) -> Admission {
    let info = RequestInfo::new("GET", "/version", None).expect("info");
    let groups = vec!["lane-users".to_string(), "system:authenticated".to_string()];
    flow.admit(&Request {
        user,
        groups: &groups,
        info: &info,
    })
}

fn wait(admission: Admission) -> crate::Waiter {
    match admission {
        Admission::Wait(waiter) => waiter,
        other => panic!("expected to wait: {other:?}"),
    }
}

const QUEUE: &str = "{type: Queue, queuing: {queues: 1, handSize: 1, queueLengthLimit: 2}}";

#[tokio::test]
async fn a_second_request_waits_and_runs_after_release() {
    let flow = one_seat(Duration::from_secs(15), Clock::System, &lane(QUEUE));
    let first = run(admit(&flow, "u-1"));
    assert_eq!(first.decision().priority_level(), "lane");
    let mut second: Waiting = Box::pin(wait(admit(&flow, "u-2")).wait());
    assert!(poll(&mut second).is_pending());
    drop(first);
    let seat = match poll(&mut second) {
        Poll::Ready(Ok(seat)) => seat,
        other => panic!("not dispatched: {:?}", other.is_ready()),
    };
    assert_eq!(seat.decision().flow_schema(), "lane");
    drop(seat);
    // Both seats are back: the next one runs at once.
    drop(run(admit(&flow, "u-3")));
}

#[tokio::test]
async fn a_full_queue_and_a_reject_level_refuse() {
    let flow = one_seat(Duration::from_secs(15), Clock::System, &lane(QUEUE));
    let _seat = run(admit(&flow, "u-1"));
    let _w1 = wait(admit(&flow, "u-1"));
    let _w2 = wait(admit(&flow, "u-2"));
    let full = rejected(admit(&flow, "u-3"));
    assert_eq!(full.reason, "queue-full");
    assert_eq!(full.retry_after, 1);
    assert_eq!(full.decision.flow_schema(), "lane");
    assert_eq!(flow.reason_count("lane", Reason::QueueFull), 1);

    let flow = one_seat(
        Duration::from_secs(15),
        Clock::System,
        &lane("{type: Reject}"),
    );
    let _seat = run(admit(&flow, "u-1"));
    let refused = rejected(admit(&flow, "u-2"));
    assert_eq!(refused.reason, "concurrency-limit");
}

#[tokio::test]
async fn waiting_past_the_wait_limit_times_out() {
    let flow = one_seat(Duration::from_millis(20), Clock::System, &lane(QUEUE));
    let _seat = run(admit(&flow, "u-1"));
    let waiter = wait(admit(&flow, "u-2"));
    let refused = waiter.wait().await.expect_err("timed out");
    assert_eq!(refused.reason, "time-out");
    assert!(refused.retry_after >= 1);
    assert_eq!(flow.reason_count("lane", Reason::TimeOut), 1);
    // It left its queue: two more fit again.
    let _w1 = wait(admit(&flow, "u-3"));
    let _w2 = wait(admit(&flow, "u-4"));
}

#[tokio::test]
async fn a_dropped_waiter_leaves_its_place_and_frees_nothing_else() {
    let flow = one_seat(Duration::from_secs(15), Clock::System, &lane(QUEUE));
    let seat = run(admit(&flow, "u-1"));
    let gone = wait(admit(&flow, "u-2"));
    let mut kept: Waiting = Box::pin(wait(admit(&flow, "u-3")).wait());
    assert!(poll(&mut kept).is_pending());
    assert_eq!(rejected(admit(&flow, "u-4")).reason, "queue-full");
    drop(gone);
    assert_eq!(flow.reason_count("lane", Reason::Cancelled), 1);
    // Its place is free, the seat is still taken.
    let mut late: Waiting = Box::pin(wait(admit(&flow, "u-5")).wait());
    assert!(poll(&mut kept).is_pending());
    drop(seat);
    let next = match poll(&mut kept) {
        Poll::Ready(Ok(seat)) => seat,
        _ => panic!("the kept waiter should run"),
    };
    assert!(poll(&mut late).is_pending());
    drop(next);
    assert!(matches!(poll(&mut late), Poll::Ready(Ok(_))));
}

/// Two users whose flows land in different queues of a 64-queue, hand-of-one level.
fn two_flows() -> (String, String) {
    let queue = |user: &str| {
        let mut q = 0;
        deal(flow_hash("lane", user), 64, 1, |c| q = c);
        q
    };
    let a = "u-a".to_string();
    let b = (0..)
        .map(|i| format!("u-b{i}"))
        .find(|b| queue(b) != queue(&a))
        .unwrap_or_default();
    (a, b)
}

#[tokio::test]
async fn two_flooding_flows_get_equal_turns() {
    let clock = Arc::new(ManualClock::new());
    let queuing = "{type: Queue, queuing: {queues: 64, handSize: 1, queueLengthLimit: 1000}}";
    let flow = one_seat(
        Duration::from_secs(60),
        Clock::Manual(clock.clone()),
        &lane(queuing),
    );
    let (a, b) = two_flows();
    let mut seat = run(admit(&flow, &a));
    // Flow a floods first, then flow b.
    let mut waiting: Vec<(bool, Waiting)> = Vec::new();
    for user in [&a, &b] {
        for _ in 0..100 {
            let fut: Waiting = Box::pin(wait(admit(&flow, user)).wait());
            waiting.push((user == &a, fut));
        }
    }
    let mut turns = (0u32, 0u32);
    for _ in 0..100 {
        clock.advance(Duration::from_millis(5));
        drop(seat);
        let mut next = None;
        for (i, (_, fut)) in waiting.iter_mut().enumerate() {
            if let Poll::Ready(result) = poll(fut) {
                next = Some((i, result.expect("a seat")));
                break;
            }
        }
        let (ready, granted) = next.expect("one waiter dispatched");
        let (from_a, _) = waiting.remove(ready);
        seat = granted;
        if from_a {
            turns.0 += 1;
        } else {
            turns.1 += 1;
        }
    }
    let (ta, tb) = turns;
    assert!(ta.abs_diff(tb) <= 10, "unfair: a {ta}, b {tb}");
}

#[tokio::test]
async fn seats_held_across_a_reconfiguration_are_released_to_their_level() {
    let config = lane(QUEUE);
    let flow = one_seat(Duration::from_secs(15), Clock::System, &config);
    let seat = run(admit(&flow, "u-1"));
    // The same level again: the seat still counts.
    flow.configure(objects(&config)).expect("again");
    let mut waiter: Waiting = Box::pin(wait(admit(&flow, "u-2")).wait());
    // Now the level goes away: its holder and waiter stay with it.
    flow.configure(Vec::new()).expect("without the lane");
    assert!(flow.dump_priority_levels().contains("\nlane,"));
    let moved = super::classify(
        &flow,
        "u-3",
        &["lane-users", "system:authenticated"],
        "GET",
        "/x",
    );
    assert_eq!(moved.1, "global-default");
    drop(seat);
    let second = match poll(&mut waiter) {
        Poll::Ready(Ok(seat)) => seat,
        _ => panic!("the waiter of the removed level should run"),
    };
    assert_eq!(second.decision().priority_level(), "lane");
    drop(second);
    drop(waiter);
    assert!(!flow.dump_priority_levels().contains("\nlane,"));
    // A new lane starts empty.
    flow.configure(objects(&config)).expect("back");
    drop(run(admit(&flow, "u-4")));
}

#[tokio::test]
async fn a_level_turning_exempt_lets_its_waiters_run() {
    let config = lane(QUEUE);
    let flow = one_seat(Duration::from_secs(15), Clock::System, &config);
    let _seat = run(admit(&flow, "u-1"));
    let mut waiter: Waiting = Box::pin(wait(admit(&flow, "u-2")).wait());
    let exempt = config.replace(
        "{type: Limited, limited: {nominalConcurrencyShares: 5, limitResponse: {type: Queue, queuing: {queues: 1, handSize: 1, queueLengthLimit: 2}}}}",
        "{type: Exempt}",
    );
    assert_ne!(exempt, config);
    flow.configure(objects(&exempt)).expect("exempt");
    assert!(matches!(poll(&mut waiter), Poll::Ready(Ok(_))));
    assert!(matches!(admit(&flow, "u-3"), Admission::Exempt(_)));
}

#[tokio::test]
async fn a_busy_level_borrows_idle_seats() {
    let flow = super::builtin(600);
    let info = RequestInfo::new("GET", "/api/v1/namespaces/default/pods", None).expect("info");
    let groups = vec![
        "system:serviceaccounts".to_string(),
        "system:authenticated".to_string(),
    ];
    let users: Vec<String> = (0..345)
        .map(|i| format!("system:serviceaccount:app:sa{i}"))
        .collect();
    let mut seats = Vec::new();
    let mut waiters = Vec::new();
    for user in &users {
        let request = Request {
            user,
            groups: &groups,
            info: &info,
        };
        match flow.admit(&request) {
            Admission::Run(seat) => seats.push(seat),
            Admission::Wait(waiter) => waiters.push(Box::pin(waiter.wait()) as Waiting),
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(seats.len(), 245);
    for _ in 0..5 {
        flow.sample_demand();
    }
    flow.adjust_borrowing();
    let limit = flow.current_limit("workload-low").expect("workload-low");
    assert!((345..=368).contains(&limit), "{limit}");
    // The idle levels keep at least nominal − lendable.
    assert!(flow.current_limit("global-default") >= Some(24));
    assert!(flow.current_limit("catch-all") >= Some(13));
    // The new seats went to the waiters at once.
    let ready = waiters.iter_mut().map(poll).filter(Poll::is_ready).count();
    assert_eq!(ready, 100);
}
