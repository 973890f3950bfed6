//! Requests of several seats through the API: widths, fair sharing by seat-time, wide
//! requests on a small or idle level, lingering final seats, reconfiguration.

mod linger;

use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use apiagg_requestinfo::RequestInfo;

use super::{objects, poll, rejected, run, Waiting};
use crate::clock::{Clock, ManualClock};
use crate::queueset::deal;
use crate::{flow_hash, Admission, FlowControl, Request, RequestShape, Seat, Settings};

/// Total seats that give the `lane` level (5 shares of 250) a nominal limit of 40, and so
/// a per-request cap of 6 seats (15%) when it queues with a hand of one.
const TOTAL: u32 = 2000;
const QUEUE: &str = "{type: Queue, queuing: {queues: 64, handSize: 1, queueLengthLimit: 1000}}";
const MB: u64 = 1_000_000;

/// A level `lane` with `shares` shares and limit response `response`, and a schema sending
/// every request of group `lane-users` there, one flow per user.
fn lane(shares: u32, response: &str) -> String {
    format!(
        r#"
apiVersion: flowcontrol.apiserver.k8s.io/v1
kind: PriorityLevelConfiguration
metadata: {{name: lane}}
spec: {{type: Limited, limited: {{nominalConcurrencyShares: {shares}, limitResponse: {response}}}}}
---
apiVersion: flowcontrol.apiserver.k8s.io/v1
kind: FlowSchema
metadata: {{name: lane}}
spec:
  matchingPrecedence: 10
  priorityLevelConfiguration: {{name: lane}}
  distinguisherMethod: {{type: ByUser}}
  rules:
  - subjects: [{{kind: Group, group: {{name: lane-users}}}}]
    resourceRules: [{{verbs: ["*"], apiGroups: ["*"], resources: ["*"], clusterScope: true, namespaces: ["*"]}}]
    nonResourceRules: [{{verbs: ["*"], nonResourceURLs: ["*"]}}]
"#
    )
}

/// Flow control with its clock and registry.
struct Harness {
    flow: FlowControl,
    clock: Arc<ManualClock>,
    registry: prometheus::Registry,
}

impl Harness {
    fn new(total_seats: u32, config: &str) -> Harness {
        let clock = Arc::new(ManualClock::new());
        Harness::with_clock(total_seats, config, Clock::Manual(clock.clone()), clock)
    }

    fn with_clock(total: u32, config: &str, clock: Clock, manual: Arc<ManualClock>) -> Harness {
        let settings = Settings {
            total_seats: total,
            request_wait_limit: Duration::from_secs(600),
        };
        let registry = prometheus::Registry::new();
        let flow = FlowControl::with_clock(settings, &registry, clock).expect("flow control");
        flow.configure(objects(config)).expect("configure");
        Harness {
            flow,
            clock: manual,
            registry,
        }
    }

    /// Admits `method url` from `user` with the estimator's estimate.
    fn admit(&self, user: &str, method: &str, url: &str) -> Admission {
        let (path, query) = match url.split_once('?') {
            Some((p, q)) => (p, Some(q)),
            None => (url, None),
        };
        let info = RequestInfo::new(method, path, query).expect("info");
        let estimate = self
            .flow
            .estimator()
            .estimate(&RequestShape::from_info(&info));
        let groups = ["lane-users".to_string(), "system:authenticated".to_string()];
        let request = Request {
            user,
            groups: &groups,
            info: &info,
        };
        self.flow.admit_estimated(&request, &estimate)
    }

    /// Teaches the estimator that `url` lists `bytes` in `items` objects.
    fn learn(&self, url: &str, bytes: u64, items: u64) {
        let info = RequestInfo::new("GET", url, None).expect("info");
        let shape = RequestShape::from_info(&info);
        self.flow
            .estimator()
            .observe_list(&shape, bytes, Some(items));
    }

    /// `(seats taken, seats asked for by waiters)` of `lane`.
    fn usage(&self) -> (u32, u32) {
        self.flow.level("lane").expect("lane").usage()
    }

    /// The value of the sample `series` (`name{labels}`) in the text exposition.
    fn metric(&self, series: &str) -> f64 {
        let mut text = Vec::new();
        let families = self.registry.gather();
        prometheus::Encoder::encode(&prometheus::TextEncoder::new(), &families, &mut text)
            .expect("encode");
        let text = String::from_utf8(text).expect("utf-8");
        let line = text.lines().find(|l| l.starts_with(&format!("{series} ")));
        let value = line.and_then(|l| l.rsplit(' ').next());
        value.and_then(|v| v.parse().ok()).unwrap_or(f64::NAN)
    }
}

/// The waiter's future, polled by hand (outside tokio's cooperative budget, which would make
/// a test that polls hundreds of futures in one task see ready ones as pending).
fn wait(admission: Admission) -> Waiting {
    match admission {
        Admission::Wait(waiter) => Box::pin(tokio::task::unconstrained(waiter.wait())),
        other => panic!("expected to wait: {other:?}"),
    }
}

/// `count` users whose flows land in different queues of a 64-queue, hand-of-one lane.
fn users(count: usize) -> Vec<String> {
    let queue = |user: &str| {
        let mut q = 0;
        deal(flow_hash("lane", user), 64, 1, |c| q = c);
        q
    };
    let mut chosen: Vec<String> = Vec::new();
    for i in 0.. {
        let user = format!("u-{i}");
        if chosen.iter().all(|c| queue(c) != queue(&user)) {
            chosen.push(user);
        }
        if chosen.len() == count {
            break;
        }
    }
    chosen
}

const LIST: &str = "/api/v1/pods";
const GET: &str = "/api/v1/namespaces/a/pods/p";

/// Requests that each run one 10 ms tick, by flow.
struct Sim {
    clock: Arc<ManualClock>,
    running: Vec<(usize, Seat)>,
    waiting: Vec<(usize, Waiting)>,
}

impl Sim {
    fn new(clock: Arc<ManualClock>) -> Sim {
        Sim {
            clock,
            running: Vec::new(),
            waiting: Vec::new(),
        }
    }

    fn add(&mut self, flow: usize, admission: Admission) {
        match admission {
            Admission::Run(seat) => self.running.push((flow, seat)),
            other => self.waiting.push((flow, wait(other))),
        }
    }

    /// One tick: every running request ends (which dispatches waiters), then the dispatched
    /// ones run. Returns the seats each flow started with this tick.
    fn tick(&mut self, flows: usize) -> Vec<(u32, u32)> {
        self.clock.advance(Duration::from_millis(10));
        let Sim {
            running, waiting, ..
        } = self;
        running.clear();
        let mut started = vec![(0, 0); flows];
        waiting.retain_mut(|(flow, fut)| match poll(fut) {
            Poll::Ready(Ok(seat)) => {
                started[*flow].0 += 1;
                started[*flow].1 += seat.seats();
                running.push((*flow, seat));
                false
            }
            Poll::Ready(Err(e)) => panic!("rejected: {e:?}"),
            Poll::Pending => true,
        });
        started
    }
}

#[tokio::test]
async fn a_big_list_and_a_get_take_seats_in_upstreams_ratio() {
    let h = Harness::new(TOTAL, &lane(5, QUEUE));
    h.learn(LIST, 50 * MB, 10_000);
    let [a, b, c]: [String; 3] = users(3).try_into().expect("three users");
    let list = run(h.admit(&a, "GET", LIST));
    let get = run(h.admit(&b, "GET", GET));
    // 100 seats estimated, cut to the level's 15% (6 of 40); a get takes one.
    assert_eq!((list.seats(), get.seats()), (6, 1));
    assert_eq!(h.usage(), (7, 0));
    let pair = r#"{flow_schema="lane",priority_level="lane"}"#;
    assert_eq!(
        h.metric(&format!(
            "apiserver_flowcontrol_current_executing_seats{pair}"
        )),
        7.0
    );
    assert_eq!(
        h.metric(&format!(
            "apiserver_flowcontrol_request_concurrency_in_use{pair}"
        )),
        7.0
    );
    assert_eq!(
        h.metric(&format!(
            "apiserver_flowcontrol_current_executing_requests{pair}"
        )),
        2.0
    );
    let le = |bucket: &str| {
        let labels = format!(r#"{{flow_schema="lane",priority_level="lane",le="{bucket}"}}"#);
        h.metric(&format!(
            "apiserver_flowcontrol_work_estimated_seats_bucket{labels}"
        ))
    };
    assert_eq!((le("1"), le("4"), le("10")), (1.0, 1.0, 2.0));
    drop((list, get));

    // Both flows flood; a third holds every seat until they are queued.
    let mut sim = Sim::new(h.clock.clone());
    for _ in 0..40 {
        sim.add(2, h.admit(&c, "GET", GET));
    }
    for _ in 0..150 {
        sim.add(0, h.admit(&a, "GET", LIST));
    }
    for _ in 0..800 {
        sim.add(1, h.admit(&b, "GET", GET));
    }
    let inqueue = format!("apiserver_flowcontrol_current_inqueue_seats{pair}");
    assert_eq!(h.metric(&inqueue), 150.0 * 6.0 + 800.0);
    let mut totals = [(0u32, 0u32); 2];
    for _ in 0..20 {
        for (flow, (requests, seats)) in sim.tick(3).into_iter().take(2).enumerate() {
            totals[flow].0 += requests;
            totals[flow].1 += seats;
        }
    }
    // Equal seat-time: a list (6 seats) per six gets.
    let ((lists, list_seats), (gets, get_seats)) = (totals[0], totals[1]);
    assert!(
        list_seats.abs_diff(get_seats) * 10 <= list_seats + get_seats,
        "{totals:?}"
    );
    assert!((5..=7).contains(&(gets / lists.max(1))), "{totals:?}");
    // Every tick used the level's 40 seats (upstream keeps seats idle only to let a wide
    // request in).
    assert!(list_seats + get_seats >= 20 * 40 - 20 * 5, "{totals:?}");
    let blocked = format!("apiserver_flowcontrol_request_dispatch_no_accommodation_total{pair}");
    assert!(h.metric(&blocked) > 0.0);
}

#[tokio::test]
async fn a_flood_of_wide_lists_cannot_starve_another_flows_gets() {
    let h = Harness::new(TOTAL, &lane(5, QUEUE));
    h.learn(LIST, 50 * MB, 10_000);
    let [a, b, c]: [String; 3] = users(3).try_into().expect("three users");
    let mut sim = Sim::new(h.clock.clone());
    for _ in 0..40 {
        sim.add(2, h.admit(&c, "GET", GET));
    }
    for _ in 0..100 {
        sim.add(0, h.admit(&a, "GET", LIST));
    }
    for _ in 0..20 {
        sim.add(1, h.admit(&b, "GET", GET));
    }
    // In FIFO order the gets would wait 15 ticks behind 600 seats of lists.
    let mut gets = 0;
    for _ in 0..2 {
        gets += sim.tick(3)[1].0;
    }
    assert_eq!(gets, 20);

    // And the other way round: one list behind a flood of gets runs at once.
    let h = Harness::new(TOTAL, &lane(5, QUEUE));
    h.learn(LIST, 50 * MB, 10_000);
    let mut sim = Sim::new(h.clock.clone());
    for _ in 0..40 {
        sim.add(2, h.admit(&c, "GET", GET));
    }
    for _ in 0..500 {
        sim.add(1, h.admit(&b, "GET", GET));
    }
    sim.add(0, h.admit(&a, "GET", LIST));
    assert_eq!(sim.tick(3)[0], (1, 6));
}

#[tokio::test]
async fn a_request_wider_than_the_limit_runs_when_the_level_is_idle() {
    // A rejecting level has no per-request cap: the list asks for 100 of its 40 seats.
    let h = Harness::new(TOTAL, &lane(5, "{type: Reject}"));
    h.learn(LIST, 50 * MB, 10_000);
    let list = run(h.admit("u-a", "GET", LIST));
    assert_eq!((list.seats(), h.usage()), (100, (100, 0)));
    assert_eq!(
        rejected(h.admit("u-b", "GET", GET)).reason,
        "concurrency-limit"
    );
    drop(list);
    let get = run(h.admit("u-b", "GET", GET));
    assert_eq!(
        rejected(h.admit("u-a", "GET", LIST)).reason,
        "concurrency-limit"
    );
    drop(get);

    // A queuing level whose limit fell below a request's width: it waits until the level
    // is idle (counted as a dispatch without accommodation), then runs alone.
    let h = Harness::new(TOTAL, &lane(5, QUEUE));
    h.learn(LIST, 50 * MB, 10_000);
    let [a, b]: [String; 2] = users(2).try_into().expect("two users");
    h.flow.level("lane").expect("lane").set_limit(3);
    let get = run(h.admit(&b, "GET", GET));
    let mut list = wait(h.admit(&a, "GET", LIST));
    assert!(poll(&mut list).is_pending());
    let pair = r#"{flow_schema="lane",priority_level="lane"}"#;
    let blocked = format!("apiserver_flowcontrol_request_dispatch_no_accommodation_total{pair}");
    assert_eq!(h.metric(&blocked), 1.0);
    assert_eq!(h.usage(), (1, 6));
    drop(get);
    let list = match poll(&mut list) {
        Poll::Ready(Ok(seat)) => seat,
        _ => panic!("the wide list should run on the idle level"),
    };
    assert_eq!((list.seats(), h.usage()), (6, (6, 0)));
    let mut get = wait(h.admit(&b, "GET", GET));
    drop(list);
    assert!(matches!(poll(&mut get), Poll::Ready(Ok(_))));
}

#[tokio::test]
async fn seats_go_back_exactly_after_a_reconfiguration() {
    let h = Harness::new(TOTAL, &lane(5, QUEUE));
    h.learn(LIST, 50 * MB, 10_000);
    let level = h.flow.level("lane").expect("lane");
    let list = run(h.admit("u-a", "GET", LIST));
    assert_eq!(list.seats(), 6);
    // More shares: a limit of 79 and a cap of 12; the held seats stay six.
    h.flow
        .configure(objects(&lane(10, QUEUE)))
        .expect("more shares");
    assert_eq!(h.flow.current_limit("lane"), Some(79));
    assert_eq!(run(h.admit("u-b", "GET", LIST)).seats(), 12);
    drop(list);
    assert_eq!(level.usage(), (0, 0));
    // Every one of the 79 seats is free again: 79 gets run, the 80th waits.
    let gets: Vec<Seat> = (0..79).map(|_| run(h.admit("u-c", "GET", GET))).collect();
    let mut last = wait(h.admit("u-d", "GET", GET));
    drop(gets);
    assert!(matches!(poll(&mut last), Poll::Ready(Ok(_))));

    // A removed level gets its seats back too.
    let list = run(h.admit("u-a", "GET", LIST));
    h.flow.configure(Vec::new()).expect("without the lane");
    assert_eq!(level.usage(), (12, 0));
    drop(list);
    assert_eq!(level.usage(), (0, 0));
}
