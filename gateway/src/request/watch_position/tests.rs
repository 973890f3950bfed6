use super::*;

/// A watch asked with `query`, whose lifetime ends in `left` seconds.
fn watch(query: &str, left: u64) -> WatchPosition {
    let ends = Instant::now() + Duration::from_secs(left);
    WatchPosition::for_watch(&QueryParams::parse(query), Some(ends))
}

/// A JSON watch event line of `kind` at resourceVersion `rv`.
fn event(kind: &str, name: &str, rv: &str) -> String {
    format!(
        "{{\"type\":\"{kind}\",\"object\":{{\"kind\":\"Deployment\",\"metadata\":{{\"name\":\"{name}\",\"resourceVersion\":\"{rv}\"}},\"spec\":{{\"replicas\":1}}}}}}\n"
    )
}

fn head(status: u16, headers: &[(&str, &str)]) -> http::response::Parts {
    let (mut head, ()) = http::Response::new(()).into_parts();
    head.status = http::StatusCode::from_u16(status).expect("status");
    for (name, value) in headers {
        let name = http::HeaderName::from_bytes(name.as_bytes()).expect("name");
        let value = http::HeaderValue::from_str(value).expect("value");
        head.headers.insert(name, value);
    }
    head
}

#[test]
fn a_watch_from_an_exact_version_may_resume_from_it_and_then_from_each_event() {
    let mut position = watch("watch=1&resourceVersion=7", 60);
    assert_eq!(position.resume_point(), Some("7"));
    position.answered(&head(200, &[("Content-Type", "application/json")]));
    let two = format!(
        "{}{}",
        event("ADDED", "a", "8"),
        event("MODIFIED", "a", "9")
    );
    assert_eq!(position.pass(Bytes::from(two.clone())), two.as_bytes());
    assert_eq!(position.resume_point(), Some("9"));
    let bookmark = event("BOOKMARK", "", "12");
    position.pass(Bytes::from(bookmark));
    assert_eq!(position.resume_point(), Some("12"));
}

#[test]
fn initial_events_are_no_position_until_a_bookmark() {
    for query in [
        "watch=1",
        "watch=1&resourceVersion=0",
        "watch=1&resourceVersion=5&sendInitialEvents=true&resourceVersionMatch=NotOlderThan",
    ] {
        let mut position = watch(query, 60);
        position.pass(Bytes::from(event("ADDED", "b", "3")));
        assert_eq!(position.resume_point(), None, "{query}");
        position.pass(Bytes::from(event("BOOKMARK", "", "10")));
        assert_eq!(position.resume_point(), Some("10"), "{query}");
    }
}

#[test]
fn a_line_split_across_pieces_is_held_back_until_complete() {
    let mut position = watch("resourceVersion=1", 60);
    let line = event("ADDED", "split", "2");
    let (first, second) = line.split_at(20);
    let next = event("ADDED", "next", "3");
    assert!(position.pass(Bytes::from(first.to_string())).is_empty());
    assert_eq!(position.resume_point(), Some("1"));
    let rest = format!("{second}{}", &next[..5]);
    assert_eq!(position.pass(Bytes::from(rest)), line.as_bytes());
    assert_eq!(position.resume_point(), Some("2"));
    // A break now: the part of `next` held back was never sent, and is not sent later.
    position.resume();
    assert!(position.rest().is_none());
    assert!(position.resuming());
}

#[test]
fn a_clean_end_flushes_what_was_held_back() {
    let mut position = watch("resourceVersion=1", 60);
    assert!(position.pass(Bytes::from_static(b"{\"type\":")).is_empty());
    assert_eq!(position.rest().as_deref(), Some(&b"{\"type\":"[..]));
}

#[test]
fn a_line_over_the_bound_turns_resumption_off_and_passes_everything() {
    let mut position = watch("resourceVersion=1", 60);
    let start = Bytes::from_static(b"{\"type\":\"ADDED\",\"object\":{\"data\":\"");
    assert!(position.pass(start.clone()).is_empty());
    let big = Bytes::from(vec![b'x'; MAX_EVENT_LINE]);
    let out = position.pass(big.clone());
    assert_eq!(out.len(), start.len() + big.len());
    assert_eq!(position.resume_point(), None);
    // From now on pieces pass as they come.
    let tail = Bytes::from_static(b"\"}}\n{\"type\":");
    assert_eq!(position.pass(tail.clone()), tail);
}

#[test]
fn an_error_event_or_an_unreadable_line_turns_resumption_off() {
    let mut position = watch("resourceVersion=1", 60);
    let error = "{\"type\":\"ERROR\",\"object\":{\"kind\":\"Status\",\"code\":410}}\n";
    position.pass(Bytes::from(error));
    assert_eq!(position.resume_point(), None);
    let mut position = watch("resourceVersion=1", 60);
    position.pass(Bytes::from_static(b"not json\n"));
    assert_eq!(position.resume_point(), None);
}

#[test]
fn only_uncompressed_json_answers_may_resume() {
    let refused: [(u16, &[(&str, &str)]); 4] = [
        (
            200,
            &[(
                "Content-Type",
                "application/vnd.kubernetes.protobuf;stream=watch",
            )],
        ),
        (200, &[("Content-Type", "application/cbor-seq")]),
        (
            200,
            &[
                ("Content-Type", "application/json"),
                ("Content-Encoding", "gzip"),
            ],
        ),
        (403, &[("Content-Type", "application/json")]),
    ];
    for (status, headers) in refused {
        let mut position = watch("resourceVersion=1", 60);
        position.answered(&head(status, headers));
        assert_eq!(position.resume_point(), None, "{status} {headers:?}");
    }
    let mut position = watch("resourceVersion=1", 60);
    position.answered(&head(
        200,
        &[("Content-Type", "application/json; charset=utf-8")],
    ));
    assert_eq!(position.resume_point(), Some("1"));
}

#[test]
fn the_resumed_target_starts_at_the_last_version_without_initial_events() {
    let mut position = watch("resourceVersion=0&sendInitialEvents=true", 90);
    position.pass(Bytes::from(event("BOOKMARK", "", "41/a b")));
    let uri: http::Uri = "/apis/apps/v1/deployments?watch=1&resource%56ersion=0&labelSelector=app%3Dx\
        &sendInitialEvents=true&resourceVersionMatch=NotOlderThan&timeoutSeconds=90&allowWatchBookmarks=true"
        .parse()
        .expect("uri");
    let target = position.resumed_target(&uri, Instant::now());
    let (path, query) = target.split_once('?').expect("query");
    assert_eq!(path, "/apis/apps/v1/deployments");
    let pairs: Vec<&str> = query.split('&').collect();
    assert_eq!(pairs[0], "resourceVersion=41%2Fa%20b");
    let timeout: u64 = pairs[1]
        .strip_prefix("timeoutSeconds=")
        .and_then(|t| t.parse().ok())
        .expect("timeoutSeconds");
    assert!((88..=90).contains(&timeout), "{timeout}");
    assert_eq!(
        &pairs[2..],
        [
            "watch=1",
            "labelSelector=app%3Dx",
            "allowWatchBookmarks=true"
        ]
    );
}

#[test]
fn a_410_answer_becomes_the_error_event_kube_apiserver_sends() {
    let position = watch("resourceVersion=5", 60);
    let status = r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"too old resource version: 5 (9)","reason":"Expired","code":410}"#;
    let line = position.expired_event(status.as_bytes());
    assert!(line.ends_with(b"\n"));
    let event: serde_json::Value = serde_json::from_slice(&line).expect("event");
    assert_eq!(event["type"], "ERROR");
    assert_eq!(
        event["object"]["message"],
        "too old resource version: 5 (9)"
    );
    // Not a Status: one is made.
    let event: serde_json::Value =
        serde_json::from_slice(&position.expired_event(b"gone")).expect("event");
    assert_eq!(event["object"]["reason"], "Expired");
    assert_eq!(event["object"]["code"], 410);
    assert_eq!(event["object"]["message"], "too old resource version: 5");
}
