use super::*;

fn query(raw: &str) -> QueryParams<'_> {
    QueryParams::parse(raw)
}

#[test]
fn only_watches_with_send_initial_events_are_streaming_lists() {
    let path = "/apis/wardle.example.com/v1alpha1/flunders";
    let info = |q| RequestInfo::new("GET", path, Some(q)).expect("info");
    assert!(asked(&info("watch=true&sendInitialEvents=true")));
    assert!(asked(&info("watch=1&sendInitialEvents=1")));
    assert!(!asked(&info("watch=true&sendInitialEvents=false")));
    assert!(!asked(&info("watch=true")));
    assert!(!asked(&info("sendInitialEvents=true")));
}

#[test]
fn events_are_written_in_json_for_every_client_that_takes_it() {
    for json in [
        None,
        Some(""),
        Some("application/json"),
        Some("application/vnd.kubernetes.protobuf, application/json"),
        Some("application/cbor, application/json;q=0.9"),
        Some("*/*"),
    ] {
        assert_eq!(encoding(json), Encoding::Json, "{json:?}");
    }
    let table = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json";
    assert_eq!(encoding(Some(table)), Encoding::PassThrough);
    for refused in [
        "application/vnd.kubernetes.protobuf;stream=watch",
        "application/cbor",
        "application/json;q=0, application/cbor",
    ] {
        assert_eq!(
            encoding(Some(refused)),
            Encoding::NotAcceptable,
            "{refused}"
        );
    }
}

#[test]
fn list_pages_keep_the_selectors_and_read_consistently() {
    let q = query(
        "watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&resourceVersion=\
         &allowWatchBookmarks=true&labelSelector=app%3Dweb&fieldSelector=metadata.name%21%3Dx\
         &timeoutSeconds=30",
    );
    assert_eq!(
        list_query(&q, None),
        "labelSelector=app%3Dweb&fieldSelector=metadata.name%21%3Dx&limit=500"
    );
    assert_eq!(
        list_query(&q, Some("eyJ2Ijo=")),
        "labelSelector=app%3Dweb&fieldSelector=metadata.name%21%3Dx&limit=500&continue=eyJ2Ijo%3D"
    );
    let at = query(
        "watch=1&sendInitialEvents=true&resourceVersion=42&resourceVersionMatch=NotOlderThan",
    );
    assert_eq!(
        list_query(&at, None),
        "limit=500&resourceVersion=42&resourceVersionMatch=NotOlderThan"
    );
}

#[test]
fn every_option_the_emulation_does_not_set_is_carried_as_sent() {
    // 1.36's shardSelector (KEP-5866), a repeated selector and an unknown option: as sent,
    // in order; the emulation's own parameters never come from the client.
    let q = query(
        "shardSelector=shardRange(object.metadata.uid%2C%270x0%27%2C%270x8%27)&watch=true\
         &sendInitialEvents=true&limit=7&continue=x&timeout=1s&labelSelector=a%3Db\
         &labelSelector=c%3Dd&futureOption=1&allowWatchBookmarks=true&resourceVersion=5\
         &resourceVersionMatch=NotOlderThan&timeoutSeconds=9&%6Cimit=8",
    );
    let carried = "shardSelector=shardRange(object.metadata.uid%2C%270x0%27%2C%270x8%27)\
                   &labelSelector=a%3Db&labelSelector=c%3Dd&futureOption=1";
    assert_eq!(
        list_query(&q, None),
        format!("{carried}&limit=500&resourceVersion=5&resourceVersionMatch=NotOlderThan")
    );
    assert_eq!(
        watch_query(&q, "17", None),
        format!(
            "watch=true&resourceVersion=17&allowWatchBookmarks=true&{carried}&timeoutSeconds=9"
        )
    );
}

#[test]
fn the_watch_follows_the_list_with_the_clients_options() {
    let q = query("watch=true&sendInitialEvents=true&allowWatchBookmarks=true&labelSelector=a%3Db&timeoutSeconds=30");
    assert_eq!(
        watch_query(&q, "17", Some(1800)),
        "watch=true&resourceVersion=17&allowWatchBookmarks=true&labelSelector=a%3Db&timeoutSeconds=30"
    );
    let unbounded = query("watch=true&sendInitialEvents=true&allowWatchBookmarks=true");
    assert_eq!(
        watch_query(&unbounded, "17", Some(1800)),
        "watch=true&resourceVersion=17&allowWatchBookmarks=true&timeoutSeconds=1800"
    );
}

#[test]
fn list_items_become_added_events_with_their_type() {
    let body = br#"{"kind":"FlunderList","apiVersion":"wardle.example.com/v1alpha1",
        "metadata":{"resourceVersion":"12","continue":"next"},
        "items":[{"metadata":{"name":"a"}},
                 {"kind":"Flunder","apiVersion":"wardle.example.com/v1alpha1","metadata":{"name":"b"}},
                 {}]}"#;
    let page = Page::parse(body).expect("page");
    assert_eq!(page.resource_version(), "12");
    assert_eq!(page.next(), Some("next"));
    let item = page.item_type("ignored/v1");
    assert_eq!(item.kind, "Flunder");
    assert_eq!(item.api_version, "wardle.example.com/v1alpha1");
    let mut out = Vec::new();
    page.added_events(&item, &mut out);
    let lines: Vec<Value> = out
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .map(|l| serde_json::from_slice(l).expect("event"))
        .collect();
    assert_eq!(lines.len(), 3);
    for event in &lines {
        assert_eq!(event["type"], "ADDED");
        assert_eq!(event["object"]["kind"], "Flunder");
        assert_eq!(event["object"]["apiVersion"], "wardle.example.com/v1alpha1");
    }
    assert_eq!(lines[0]["object"]["metadata"]["name"], "a");
    assert_eq!(lines[1]["object"]["metadata"]["name"], "b");
}

#[test]
fn an_empty_list_has_no_events_and_its_type_comes_from_the_request() {
    let page = Page::parse(br#"{"kind":"List","metadata":{"resourceVersion":"3"},"items":null}"#)
        .expect("page");
    let mut out = Vec::new();
    page.added_events(&page.item_type("g/v1"), &mut out);
    assert!(out.is_empty());
    assert_eq!(page.item_type("g/v1").api_version, "g/v1");
    assert_eq!(page.next(), None);
}

#[test]
fn the_bookmark_ends_the_initial_events() {
    let item = ItemType {
        kind: "Flunder".into(),
        api_version: "wardle.example.com/v1alpha1".into(),
    };
    let line = initial_events_end(&item, "12");
    assert!(ends_initial_events(&line));
    let event: Value = serde_json::from_slice(&line).expect("event");
    assert_eq!(event["object"]["metadata"]["resourceVersion"], "12");
    let plain = br#"{"type":"BOOKMARK","object":{"metadata":{"resourceVersion":"3"}}}"#;
    assert!(!ends_initial_events(plain));
    assert!(!ends_initial_events(b"{\"type\":\"ADDED\"}"));
}

#[test]
fn failures_become_error_events_with_the_backends_status() {
    let expired = br#"{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Expired","code":410,"message":"too old resource version: 1 (5)"}"#;
    let event: Value =
        serde_json::from_slice(&error_event(410, expired, "watching")).expect("event");
    assert_eq!(event["type"], "ERROR");
    assert_eq!(event["object"]["reason"], "Expired");
    assert_eq!(
        event["object"]["message"],
        "too old resource version: 1 (5)"
    );
    let made: Value =
        serde_json::from_slice(&error_event(410, b"gone", "watching")).expect("event");
    assert_eq!(made["object"]["kind"], "Status");
    assert_eq!(made["object"]["code"], 410);
    assert_eq!(made["object"]["reason"], "Expired");
}
