//! The reflector's step, as a table: each case feeds what the loop saw, in order, and names the
//! step expected after each, then the version the next watch would start from.

use std::time::Duration;

use serde_json::{json, Value};

use super::step::{Next, Reflector, Report, Seen, Step, MAX_DELAY};
use super::Change;
use crate::backends::FetchError;

const PATH: &str = "/api/v1/services?watch=1";

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn list() -> Step {
    go(Next::List)
}

fn watch(from: &str) -> Step {
    go(Next::Watch { from: from.into() })
}

fn go(next: Next) -> Step {
    Step { next, report: None }
}

fn reported(next: Next, report: Report) -> Step {
    Step {
        next,
        report: Some(report),
    }
}

fn failing(delay: Duration, why: &str) -> Step {
    reported(Next::Backoff(delay), Report::Failing(why.into()))
}

fn object(rv: &str) -> Value {
    json!({"metadata": {"name": "a", "resourceVersion": rv}})
}

fn event(kind: &str, object: Value) -> Seen<'static> {
    Seen::Event {
        path: PATH,
        event: json!({"type": kind, "object": object}),
    }
}

fn apply(rv: &str, deleted: bool) -> Step {
    go(Next::Apply(Change {
        object: object(rv),
        deleted,
    }))
}

fn status(code: u16) -> Seen<'static> {
    Seen::Failed(FetchError::Status {
        url: "/api/v1/services".into(),
        code,
    })
}

fn closed(after: Duration) -> Seen<'static> {
    Seen::Closed {
        path: PATH,
        lasted: after,
    }
}

fn gone_event() -> Seen<'static> {
    event(
        "ERROR",
        json!({"kind": "Status", "code": 410, "reason": "Expired",
               "message": "too old resource version: 5 (10)"}),
    )
}

const STATUS_500: &str = "/api/v1/services: status 500";
const ENDED_AT_ONCE: &str = "/api/v1/services?watch=1: invalid document: the watch ended at once";

/// One row: a name, what the loop saw with the step expected after it, and the version left.
type Case = (
    &'static str,
    Vec<(Seen<'static>, Step)>,
    Option<&'static str>,
);

fn cases() -> Vec<Case> {
    let listed = |rv: &str| (Seen::Listed(rv.into()), watch(rv));
    vec![
        (
            "the first read is a list",
            vec![(Seen::Ready, list())],
            None,
        ),
        (
            "a list is watched from its resourceVersion",
            vec![(Seen::Ready, list()), listed("10")],
            Some("10"),
        ),
        (
            "an empty list version is watched as it is",
            vec![listed("")],
            Some(""),
        ),
        (
            "changes are applied and advance the version",
            vec![
                listed("10"),
                (event("ADDED", object("11")), apply("11", false)),
                (event("MODIFIED", object("12")), apply("12", false)),
                (event("DELETED", object("13")), apply("13", true)),
            ],
            Some("13"),
        ),
        (
            "a bookmark only advances the version",
            vec![
                listed("10"),
                (event("BOOKMARK", object("20")), go(Next::ReadOn)),
            ],
            Some("20"),
        ),
        (
            "an unknown event type is read past, its version kept",
            vec![
                listed("10"),
                (event("SOMETHING", object("21")), go(Next::ReadOn)),
            ],
            Some("21"),
        ),
        (
            "an object without a version leaves the version",
            vec![
                listed("10"),
                (
                    event("ADDED", json!({"metadata": {"name": "a"}})),
                    go(Next::Apply(Change {
                        object: json!({"metadata": {"name": "a"}}),
                        deleted: false,
                    })),
                ),
            ],
            Some("10"),
        ),
        (
            "a watch that ends normally is watched again from the last version",
            vec![
                listed("10"),
                (event("BOOKMARK", object("15")), go(Next::ReadOn)),
                (closed(Duration::from_secs(300)), watch("15")),
                (closed(Duration::from_secs(1)), watch("15")),
            ],
            Some("15"),
        ),
        (
            "a silent watch is watched again from the last version",
            vec![
                listed("10"),
                (event("ADDED", object("16")), apply("16", false)),
                (Seen::Silent, watch("16")),
            ],
            Some("16"),
        ),
        (
            "410 Gone at the watch's start lists again",
            vec![listed("10"), (Seen::Gone, list())],
            None,
        ),
        (
            "an ERROR event 410 (too old resource version) lists again",
            vec![listed("10"), (gone_event(), list())],
            None,
        ),
        (
            "another ERROR event is a failure; the watch resumes from the version",
            vec![
                listed("10"),
                (event("ADDED", object("12")), apply("12", false)),
                (
                    event("ERROR", json!({"code": 500, "message": "etcd is away"})),
                    failing(
                        ms(200),
                        "/api/v1/services?watch=1: invalid document: etcd is away",
                    ),
                ),
                (Seen::Ready, watch("12")),
            ],
            Some("12"),
        ),
        (
            "an ERROR event without a message is a watch error",
            vec![
                listed("10"),
                (
                    event("ERROR", json!({})),
                    failing(
                        ms(200),
                        "/api/v1/services?watch=1: invalid document: watch error",
                    ),
                ),
            ],
            Some("10"),
        ),
        (
            "a watch that ends at once is a failure, not a busy loop",
            vec![
                listed("10"),
                (closed(ms(10)), failing(ms(200), ENDED_AT_ONCE)),
                (Seen::Ready, watch("10")),
                (closed(ms(999)), go(Next::Backoff(ms(400)))),
            ],
            Some("10"),
        ),
        (
            "a failed list is listed again after the backoff",
            vec![
                (Seen::Ready, list()),
                (status(500), failing(ms(200), STATUS_500)),
                (Seen::Ready, list()),
            ],
            None,
        ),
        (
            "failures back off, doubling up to the cap, reported when the reason changes",
            vec![
                (status(500), failing(ms(200), STATUS_500)),
                (status(500), go(Next::Backoff(ms(400)))),
                (status(500), go(Next::Backoff(ms(800)))),
                (
                    status(503),
                    failing(ms(1600), "/api/v1/services: status 503"),
                ),
                (status(500), failing(ms(3200), STATUS_500)),
                (status(500), go(Next::Backoff(ms(6400)))),
                (status(500), go(Next::Backoff(ms(12800)))),
                (status(500), go(Next::Backoff(ms(25600)))),
                (status(500), go(Next::Backoff(MAX_DELAY))),
                (status(500), go(Next::Backoff(MAX_DELAY))),
            ],
            None,
        ),
        (
            "a list after failures recovers and resets the backoff",
            vec![
                (status(500), failing(ms(200), STATUS_500)),
                (status(500), go(Next::Backoff(ms(400)))),
                (
                    Seen::Listed("30".into()),
                    reported(Next::Watch { from: "30".into() }, Report::Recovered),
                ),
                (status(500), failing(ms(200), STATUS_500)),
            ],
            Some("30"),
        ),
        (
            "a watch that ends normally after failures recovers and resets the backoff",
            vec![
                listed("10"),
                (status(500), failing(ms(200), STATUS_500)),
                (Seen::Ready, watch("10")),
                (
                    closed(Duration::from_secs(60)),
                    reported(Next::Watch { from: "10".into() }, Report::Recovered),
                ),
                (status(500), failing(ms(200), STATUS_500)),
            ],
            Some("10"),
        ),
        (
            "410 neither recovers nor resets the backoff: only a list does",
            vec![
                listed("10"),
                (status(500), failing(ms(200), STATUS_500)),
                (Seen::Ready, watch("10")),
                (Seen::Gone, list()),
                (status(500), go(Next::Backoff(ms(400)))),
                (Seen::Ready, list()),
                (
                    Seen::Listed("40".into()),
                    reported(Next::Watch { from: "40".into() }, Report::Recovered),
                ),
            ],
            Some("40"),
        ),
        (
            "events do not count as recovery until the watch ends well",
            vec![
                listed("10"),
                (status(500), failing(ms(200), STATUS_500)),
                (Seen::Ready, watch("10")),
                (event("ADDED", object("11")), apply("11", false)),
                (status(500), go(Next::Backoff(ms(400)))),
                (Seen::Ready, watch("11")),
            ],
            Some("11"),
        ),
    ]
}

#[test]
fn the_step_decides_as_the_table_says() {
    let mut failures = Vec::new();
    for (name, rows, version) in cases() {
        let mut reflector = Reflector::default();
        for (at, (seen, expected)) in rows.into_iter().enumerate() {
            let described = format!("{seen:?}");
            let step = reflector.step(seen);
            if step != expected {
                failures.push(format!(
                    "{name}: row {at} ({described}): got {step:?}, want {expected:?}"
                ));
            }
        }
        if reflector.version() != version {
            failures.push(format!(
                "{name}: version {:?}, want {version:?}",
                reflector.version()
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
