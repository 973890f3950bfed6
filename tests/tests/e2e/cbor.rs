//! CBOR (KEP-4222) through apiagg: `application/cbor` request and response bodies and
//! `application/cbor-seq` watch streams pass through untouched in both directions, and a
//! backend without CBOR has its `415` (and `406`) relayed unchanged, on which clients send JSON.
//! What apiagg answers itself (discovery, its Status errors) comes in CBOR when asked, as
//! kube-apiserver 1.37 answers (kubernetes#139632), and in the same JSON as ever otherwise.
//!
//! The sample backend speaks CBOR as kube-apiserver 1.32+ does with the feature on (tag 55799
//! first, strings as byte strings, sorted keys), or none with `--no-cbor`.

use std::time::Duration;

use apiagg_tests::cbor::{decode, decode_seq, encode};
use apiagg_tests::*;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

const CBOR: &str = "application/cbor";
const CBOR_SEQ: &str = "application/cbor-seq";
/// Bounds each wait; far above what a loaded machine needs.
const LIMIT: Duration = Duration::from_secs(30);

fn content_type(resp: &reqwest::Response) -> String {
    resp.headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string()
}

/// The backend that wrote an answer (`X-Sample-Server`).
fn server(resp: &reqwest::Response) -> String {
    resp.headers()
        .get("x-sample-server")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string()
}

fn sha256(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Reads `watch` until its bytes hold `count` complete events; all bytes read and the events.
async fn read_events(watch: &mut reqwest::Response, count: usize) -> (Vec<u8>, Vec<Value>) {
    let mut seen = Vec::new();
    loop {
        let events = decode_seq(&seen);
        if events.len() >= count {
            return (seen, events);
        }
        let chunk = tokio::time::timeout(LIMIT, watch.chunk())
            .await
            .unwrap_or_else(|_| panic!("no watch event within {LIMIT:?}; so far {events:?}"))
            .expect("read watch chunk")
            .unwrap_or_else(|| panic!("watch ended after {events:?}"));
        seen.extend_from_slice(&chunk);
    }
}

/// A flunder with a bit of everything CBOR distinguishes: nested maps, non-ASCII text,
/// negative and large integers, a float, booleans, null and an array.
fn flunder(name: &str) -> Value {
    json!({
        "apiVersion": format!("{G}/{V}"),
        "kind": "Flunder",
        "metadata": {"name": name, "labels": {"format": "cbor"}, "annotations": {"note": "grüße ✓"}},
        "spec": {"reference": "ref", "count": -7, "big": 18_446_744_073_709_551_615u64,
            "ratio": 0.25, "on": true, "none": null, "list": [1, "two", 3.5]},
    })
}

async fn watch(c: &reqwest::Client, base: &str) -> reqwest::Response {
    let watch = c
        .get(format!("{base}?watch=true&timeoutSeconds=120"))
        .header("Accept", CBOR)
        .send()
        .await
        .expect("watch");
    assert_eq!(watch.status(), 200);
    assert_eq!(content_type(&watch), CBOR_SEQ);
    watch
}

/// GET `path` with `accept`: status, Content-Type and body.
async fn fetch(c: &reqwest::Client, url: &str, accept: &str) -> (u16, String, Vec<u8>) {
    let resp = c
        .get(url)
        .header("Accept", accept)
        .send()
        .await
        .expect("GET");
    let (code, kind) = (resp.status().as_u16(), content_type(&resp));
    (code, kind, resp.bytes().await.expect("body").to_vec())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discovery_and_errors_apiagg_answers_come_in_cbor_when_asked() {
    let backend = sample(G, "cbor", false);
    let gw = Apiagg::start(&one_backend("cbor", &backend), &[]);
    gw.wait_ready().await;
    let c = client();
    let aggregated = "apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";
    // (path, the JSON Accept, the CBOR Accept, the CBOR Content-Type)
    let legacy_cbor = (CBOR.to_string(), CBOR.to_string());
    let rows = [
        ("/apis", "application/json".to_string(), legacy_cbor.clone()),
        (
            "/apis",
            format!("application/json;g={aggregated}"),
            (
                format!("{CBOR};g={aggregated}"),
                format!("{CBOR};g={aggregated}"),
            ),
        ),
        (
            &*format!("/apis/{G}"),
            "application/json".to_string(),
            legacy_cbor.clone(),
        ),
    ];
    for (path, json_accept, (cbor_accept, cbor_type)) in &rows {
        let url = gw.url(path);
        let (code, json_type, json) = fetch(&c, &url, json_accept).await;
        assert_eq!(code, 200, "{path}");
        assert!(
            json_type.starts_with("application/json"),
            "{path}: {json_type}"
        );
        let (code, kind, cbor) = fetch(&c, &url, cbor_accept).await;
        assert_eq!((code, kind.as_str()), (200, cbor_type.as_str()), "{path}");
        let as_json: Value = serde_json::from_slice(&json).expect("JSON");
        assert_eq!(decode(&cbor), as_json, "{path} {cbor_accept}");
    }
    // kubectl's discovery Accept stays JSON, byte for byte what a JSON-only client gets.
    let kubectl = format!(
        "application/json;g={aggregated},application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json"
    );
    let (_, kind, by_kubectl) = fetch(&c, &gw.url("/apis"), &kubectl).await;
    let (_, _, plain) = fetch(
        &c,
        &gw.url("/apis"),
        &format!("application/json;g={aggregated}"),
    )
    .await;
    assert!(kind.starts_with("application/json"), "{kind}");
    assert_eq!(by_kubectl, plain);

    // apiagg's own Status errors: CBOR when asked, the same object as the JSON.
    let missing = gw.url("/apis/nothing.example.com/v1/things");
    let (code, kind, cbor) = fetch(&c, &missing, CBOR).await;
    assert_eq!((code, kind.as_str()), (404, CBOR));
    let (_, json_kind, json) = fetch(&c, &missing, "application/json").await;
    assert_eq!(json_kind, "application/json");
    let status: Value = serde_json::from_slice(&json).expect("Status JSON");
    assert_eq!(decode(&cbor), status);
    assert_eq!(status["kind"], "Status");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cbor_create_get_and_watch_pass_through_untouched() {
    let backend = sample(G, "cbor", false);
    let gw = Apiagg::start(&one_backend("cbor", &backend), &[]);
    gw.wait_ready().await;
    let c = client();
    let path = format!("/apis/{G}/{V}/flunders");
    let (base, direct) = (gw.url(&path), format!("{}{path}", backend.url));

    // Watches through apiagg and straight at the backend, open before the changes.
    let mut through = watch(&c, &base).await;
    let mut straight = watch(&c, &direct).await;

    // Create with a CBOR body, asking for CBOR back.
    let sent = encode(&flunder("cbor-one"));
    let created = c
        .post(&base)
        .header("Content-Type", CBOR)
        .header("Accept", CBOR)
        .body(sent.clone())
        .send()
        .await
        .expect("create");
    assert_eq!(created.status(), 201);
    assert_eq!(content_type(&created), CBOR);
    let created = decode(&created.bytes().await.expect("body"));
    assert_eq!(created["metadata"]["name"], "cbor-one");
    assert_eq!(created["spec"], flunder("cbor-one")["spec"]);
    assert_eq!(
        created["metadata"]["annotations"],
        flunder("cbor-one")["metadata"]["annotations"]
    );

    // The backend read exactly the bytes the client sent, with their content type.
    let last = json_of(
        c.get(format!("{}/debug/last-body", backend.url))
            .send()
            .await
            .expect("last body"),
    )
    .await;
    assert_eq!(
        last,
        json!({"contentType": CBOR, "length": sent.len(), "sha256": sha256(&sent)})
    );

    // A get as CBOR: the bytes apiagg returns are those the backend writes.
    let get = |url: String, accept: &'static str| {
        let c = c.clone();
        async move {
            let resp = c
                .get(url)
                .header("Accept", accept)
                .send()
                .await
                .expect("get");
            assert_eq!(resp.status(), 200);
            let ct = content_type(&resp);
            (ct, resp.bytes().await.expect("body").to_vec())
        }
    };
    let (ct, got) = get(format!("{base}/cbor-one"), CBOR).await;
    assert_eq!(ct, CBOR);
    let (direct_ct, direct_got) = get(format!("{direct}/cbor-one"), CBOR).await;
    assert_eq!(direct_ct, CBOR);
    assert_eq!(got, direct_got, "apiagg changed the CBOR answer");
    // The same object as the JSON answer, and as created.
    let (_, as_json) = get(format!("{base}/cbor-one"), "application/json").await;
    let as_json: Value = serde_json::from_slice(&as_json).expect("JSON object");
    assert_eq!(decode(&got), as_json);
    assert_eq!(decode(&got), created);

    // A list as CBOR, likewise.
    let (ct, list) = get(base.clone(), CBOR).await;
    assert_eq!(ct, CBOR);
    assert_eq!(list, get(direct.clone(), CBOR).await.1);
    let list = decode(&list);
    assert_eq!(list["kind"], "FlunderList");
    assert_eq!(list["items"], json!([created]));

    // A delete as CBOR, then both watches hold the two events, byte for byte the same.
    let deleted = c
        .delete(format!("{base}/cbor-one"))
        .header("Accept", CBOR)
        .send()
        .await
        .expect("delete");
    assert_eq!(deleted.status(), 200);
    assert_eq!(content_type(&deleted), CBOR);
    let (through_bytes, events) = read_events(&mut through, 2).await;
    let (straight_bytes, _) = read_events(&mut straight, 2).await;
    assert_eq!(
        through_bytes, straight_bytes,
        "apiagg changed the CBOR watch stream"
    );
    let kinds: Vec<&Value> = events.iter().map(|e| &e["type"]).collect();
    assert_eq!(kinds, [&json!("ADDED"), &json!("DELETED")], "{events:?}");
    assert_eq!(events[0]["object"], created);
    assert_eq!(events[1]["object"]["metadata"]["name"], "cbor-one");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backend_without_cbor_has_its_415_relayed_and_json_succeeds() {
    let backend = Sample::start(
        &[
            "--group",
            G,
            "--version",
            V,
            "--name",
            "nocbor",
            "--no-cbor",
        ],
        false,
    );
    let gw = Apiagg::start(&one_backend("nocbor", &backend), &[]);
    gw.wait_ready().await;
    let c = client();
    let path = format!("/apis/{G}/{V}/flunders");
    let (base, direct) = (gw.url(&path), format!("{}{path}", backend.url));

    // client-go's first try: a CBOR body, CBOR preferred in Accept.
    let post_cbor = |url: String| {
        let c = c.clone();
        async move {
            let resp = c
                .post(url)
                .header("Content-Type", CBOR)
                .header("Accept", "application/cbor, application/json")
                .body(encode(&flunder("fallback")))
                .send()
                .await
                .expect("create");
            let code = resp.status().as_u16();
            let (ct, server) = (content_type(&resp), server(&resp));
            (code, ct, server, resp.bytes().await.expect("body").to_vec())
        }
    };
    let (code, ct, from, body) = post_cbor(base.clone()).await;
    let status: Value = serde_json::from_slice(&body).expect("a JSON Status");
    assert_eq!(code, 415, "{status}");
    assert_eq!(ct, "application/json");
    assert_eq!(from, "nocbor", "the 415 is the backend's");
    assert_eq!(status["kind"], "Status");
    assert_eq!(status["reason"], "UnsupportedMediaType");
    assert_eq!(status["code"], 415);
    assert!(
        status["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("the body of the request was in an unknown format")),
        "{status}"
    );
    // Exactly what the backend answers to the same request.
    assert_eq!(
        (code, ct, from, body),
        post_cbor(direct.clone()).await,
        "apiagg changed the backend's 415"
    );
    // The backend read the CBOR body as sent, refused it and stored nothing.
    let last = json_of(
        c.get(format!("{}/debug/last-body", backend.url))
            .send()
            .await
            .expect("last body"),
    )
    .await;
    let sent = encode(&flunder("fallback"));
    assert_eq!(
        last,
        json!({"contentType": CBOR, "length": sent.len(), "sha256": sha256(&sent)})
    );
    let list = json_of(c.get(&base).send().await.expect("list")).await;
    assert_eq!(list["items"], json!([]), "{list}");

    // The JSON retry succeeds through apiagg, as it does after client-go's fallback.
    let created = c
        .post(&base)
        .header("Accept", "application/json")
        .json(&flunder("fallback"))
        .send()
        .await
        .expect("create as JSON");
    assert_eq!(created.status(), 201);
    let created = json_of(created).await;
    assert_eq!(created["spec"], flunder("fallback")["spec"]);
    let got = json_of(c.get(format!("{base}/fallback")).send().await.expect("get")).await;
    assert_eq!(got, created);

    // Asking for CBOR only gets the backend's 406, unchanged; with JSON after it, JSON.
    let get = |url: String, accept: &'static str| {
        let c = c.clone();
        async move {
            let resp = c
                .get(url)
                .header("Accept", accept)
                .send()
                .await
                .expect("get");
            let code = resp.status().as_u16();
            let (ct, server) = (content_type(&resp), server(&resp));
            (code, ct, server, resp.bytes().await.expect("body").to_vec())
        }
    };
    let refused = get(format!("{base}/fallback"), CBOR).await;
    let status: Value = serde_json::from_slice(&refused.3).expect("a JSON Status");
    assert_eq!(
        (refused.0, refused.1.as_str(), refused.2.as_str()),
        (406, "application/json", "nocbor")
    );
    assert_eq!(status["reason"], "NotAcceptable", "{status}");
    assert_eq!(refused, get(format!("{direct}/fallback"), CBOR).await);
    let (code, ct, _, body) = get(
        format!("{base}/fallback"),
        "application/cbor, application/json",
    )
    .await;
    assert_eq!((code, ct.as_str()), (200, "application/json"));
    assert_eq!(
        serde_json::from_slice::<Value>(&body).expect("JSON"),
        created
    );
}

/// The watch reader waits for more bytes on an item cut anywhere, instead of failing.
#[test]
fn a_cut_item_is_left_for_later() {
    let one = encode(&json!({"type": "ADDED", "object": flunder("cut")}));
    for cut in 0..one.len() {
        let bytes = [&one[..], &one[..cut]].concat();
        assert_eq!(decode_seq(&bytes).len(), 1, "cut at {cut}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_apiservice_api_answers_in_cbor_when_asked() {
    use apiagg_tests::api::{object, send_bytes};

    let gw = Apiagg::start("", &[]);
    gw.wait_ready().await;
    let c = client();
    let api = gw.url("/apis/apiregistration.k8s.io/v1/apiservices");
    let body = serde_json::to_vec(&object("v1.one.example.com", "one.example.com")).expect("JSON");
    let (code, _, created, _) =
        send_bytes(reqwest::Method::POST, &api, "application/json", body).await;
    assert_eq!(code, 201, "{created}");

    // An object and a list: the CBOR answer decodes to the JSON answer's object; a client that
    // prefers JSON gets JSON, byte for byte what a client without `Accept` gets. (Once the
    // availability controller wrote its condition: nothing changes it after.)
    let one = format!("{api}/v1.one.example.com");
    wait_until(
        "the APIService's Available condition (its status observed)",
        LIMIT,
        || async {
            let (_, _, json) = fetch(&c, &one, "application/json").await;
            serde_json::from_slice::<Value>(&json).unwrap_or_default()["status"].clone()
        },
        |status| status["conditions"][0]["type"] == "Available",
    )
    .await;
    for url in [&one, &api] {
        let (code, kind, cbor) = fetch(&c, url, CBOR).await;
        assert_eq!((code, kind.as_str()), (200, CBOR), "{url}");
        let (_, json_kind, json) = fetch(&c, url, "application/json").await;
        assert!(json_kind.starts_with("application/json"), "{json_kind}");
        let as_json: Value = serde_json::from_slice(&json).expect("JSON");
        assert_eq!(decode(&cbor), as_json, "{url}");
        let (_, _, preferred) = fetch(&c, url, "application/json, application/cbor").await;
        let (_, _, unasked) = fetch(&c, url, "").await;
        assert_eq!((&preferred, &unasked), (&json, &json), "{url}");
    }

    // kubectl's Table, asked in CBOR.
    let table = "g=meta.k8s.io;v=v1;as=Table";
    let (code, kind, cbor) = fetch(&c, &api, &format!("{CBOR};{table}, {CBOR}")).await;
    assert_eq!((code, kind.as_str()), (200, CBOR));
    let table_cbor = decode(&cbor);
    let (_, _, json) = fetch(&c, &api, &format!("application/json;{table}")).await;
    let table_json: Value = serde_json::from_slice(&json).expect("Table JSON");
    assert_eq!(table_cbor["kind"], "Table");
    assert_eq!(
        table_cbor["columnDefinitions"],
        table_json["columnDefinitions"]
    );
    assert_eq!(
        table_cbor["rows"][0]["cells"][0],
        table_json["rows"][0]["cells"][0]
    );

    // A watch: a CBOR sequence of events, each the JSON event's object.
    let mut events = watch(&c, &api).await;
    let (_, first) = read_events(&mut events, 1).await;
    assert_eq!(first[0]["type"], "ADDED", "{first:?}");
    assert_eq!(first[0]["object"]["metadata"]["name"], "v1.one.example.com");
    let body = serde_json::to_vec(&object("v1.two.example.com", "two.example.com")).expect("JSON");
    let (code, _, two, _) = send_bytes(reqwest::Method::POST, &api, "application/json", body).await;
    assert_eq!(code, 201, "{two}");
    // (The first one's condition was written before the watch: its next event is the new one.)
    let (_, next) = read_events(&mut events, 1).await;
    let added = &next[0];
    assert_eq!(added["type"], "ADDED", "{added}");
    assert_eq!(added["object"]["spec"], two["spec"]);
    assert_eq!(added["object"]["metadata"]["uid"], two["metadata"]["uid"]);

    // An Accept with neither JSON nor CBOR: 406.
    let (code, _, _) = fetch(&c, &api, "application/vnd.kubernetes.protobuf").await;
    assert_eq!(code, 406);
}
