//! Auditing end to end (`audit.k8s.io/v1`, as kube-apiserver audits): every kind of request
//! apiagg serves — proxied to a backend, watched, upgraded, handed to the delegate, answered by
//! apiagg itself, the APIService API — and every refusal (401, 403, 429) is read back from the
//! audit log as a JSON consumer reads it, with the levels, stages, IDs and bodies its policy
//! asks for, and the audit ID the caller and the backend got.

use std::path::PathBuf;
use std::time::Duration;

use apiagg_tests::audit::{
    caller, events_of, id_of, note, of, send, wait_complete, wait_for, Answer, Expect, User, AGENT,
    BOTH, LONG,
};
use apiagg_tests::*;
use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};

const ANONYMOUS: User = Some(("system:anonymous", &["system:unauthenticated"]));
const ROOT: User = Some(("root", &["system:masters", "system:authenticated"]));
const FLOODER: User = Some(("flooder", &["flooders", "system:authenticated"]));
const FLUNDERS: &str = "/apis/wardle.example.com/v1alpha1/namespaces/audit/flunders";
const APISERVICES: &str = "/apis/apiregistration.k8s.io/v1/apiservices";
const FLUNDERS_REF: [&str; 6] = ["flunders", "audit", "", G, V, ""];
const DECISION: &str = "authorization.k8s.io/decision";

/// Levels by kind of request; a user and some paths are not audited; APIService writes skip
/// `RequestReceived`. (Health answers come before authentication and are never audited.)
const POLICY: &str = r#"apiVersion: audit.k8s.io/v1
kind: Policy
rules:
- level: None
  users: [quiet]
- level: None
  nonResourceURLs: ["/healthz*", "/livez*", "/readyz*", "/openapi/v3*"]
- level: RequestResponse
  resources: [{group: wardle.example.com, resources: [flunders]}]
- level: Request
  verbs: [create, update, patch, delete, deletecollection]
  resources: [{group: apiregistration.k8s.io, resources: [apiservices]}]
  omitStages: [RequestReceived]
- level: Metadata
"#;

/// `flooder` gets a priority level of a seat or so that rejects what does not fit.
const FLOW: &str = r#"apiVersion: flowcontrol.apiserver.k8s.io/v1
kind: PriorityLevelConfiguration
metadata: {name: audit-tiny}
spec:
  type: Limited
  limited: {nominalConcurrencyShares: 1, lendablePercent: 0, borrowingLimitPercent: 0,
    limitResponse: {type: Reject}}
---
apiVersion: flowcontrol.apiserver.k8s.io/v1
kind: FlowSchema
metadata: {name: audit-flooder}
spec:
  matchingPrecedence: 500
  priorityLevelConfiguration: {name: audit-tiny}
  distinguisherMethod: {type: ByUser}
  rules:
  - subjects: [{kind: User, user: {name: flooder}}]
    resourceRules: [{verbs: ["*"], apiGroups: ["*"], resources: ["*"], clusterScope: true,
      namespaces: ["*"]}]
"#;

const TOKENS: &str = "admin-token,root,uid-root,\"system:masters\"\n\
    quiet-token,quiet,uid-quiet,\"quiet-group\"\n\
    flood-token,flooder,uid-flooder,\"flooders\"\n";

/// apiagg with its secure defaults (only system:masters writes APIServices), a namespaced
/// wardle backend, the delegate, the policy above and the audit log at `log`.
struct Trail {
    gw: Apiagg,
    _backends: [Sample; 2],
    log: PathBuf,
}

async fn start_trail() -> Trail {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = |name: &str| dir.path().join(name).to_str().expect("utf8").to_string();
    std::fs::write(path("tokens.csv"), TOKENS).expect("tokens");
    std::fs::write(path("policy.yaml"), POLICY).expect("policy");
    std::fs::write(path("flow.yaml"), FLOW).expect("flow control");
    let wardle = Sample::wardle(&["--namespaced"]);
    let delegate = kube_delegate(false, &[]);
    let config = format!(
        "authentication: {{anonymous: true, tokenFile: tokens.csv}}\n\
         delegate: {{url: \"{}\"}}\n{}",
        delegate.url,
        one_backend("wardle", &wardle)
    );
    let log = dir.path().join("audit").join("audit.log");
    let (policy, flow, log_arg) = (
        path("policy.yaml"),
        path("flow.yaml"),
        path("audit/audit.log"),
    );
    let args = ["--audit-policy-file", &policy, "--audit-log-path", &log_arg];
    let args = [&args[..], &["--flow-control-config-file", &flow]].concat();
    let gw = Apiagg::start_in_secure(dir, &config, &args);
    gw.wait_ready().await;
    Trail {
        gw,
        _backends: [wardle, delegate],
        log,
    }
}

/// A WebSocket `exec` session at `path` with the caller's `Audit-ID: id`: data both ways, then
/// closed; returns the `Audit-ID` of the 101, if any.
async fn exec(port: u16, path: &str, id: &str) -> Option<String> {
    use tokio_tungstenite::tungstenite::{client::IntoClientRequest, Message};
    let url = format!("ws://127.0.0.1:{port}{path}");
    let mut request = url.into_client_request().expect("ws request");
    let headers = [
        ("user-agent", AGENT),
        ("audit-id", id),
        ("sec-websocket-protocol", "v5.channel.k8s.io"),
    ];
    for (name, value) in headers {
        request
            .headers_mut()
            .insert(name, value.parse().expect("header"));
    }
    let (mut ws, upgraded) = tokio_tungstenite::connect_async(request)
        .await
        .expect("upgrade");
    assert_eq!(upgraded.status(), 101);
    ws.send(Message::Binary(b"ls".to_vec()))
        .await
        .expect("send");
    let echoed = tokio::time::timeout(Duration::from_secs(5), ws.next()).await;
    let echoed = echoed.expect("echo in time").expect("open").expect("frame");
    assert_eq!(echoed.into_data().as_slice(), b"ls");
    ws.close(None).await.expect("close");
    let id = upgraded.headers().get("audit-id");
    id.map(|v| v.to_str().unwrap_or("").to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_kind_of_request_gets_the_events_its_policy_asks_for() {
    let t = start_trail().await;
    let (c, url) = (caller(), |p: &str| t.gw.url(p));
    let admin = |r: reqwest::RequestBuilder| r.bearer_auth("admin-token");
    let anon = |uri, verb, level| Expect::new(uri, verb, level, ANONYMOUS);

    // Proxied to the backend at RequestResponse: the bodies both ways.
    let flunder = json!({"apiVersion": "wardle.example.com/v1alpha1", "kind": "Flunder",
        "metadata": {"name": "f1", "namespace": "audit"}, "spec": {"note": "audited"}});
    let created = send(c.post(url(FLUNDERS)).json(&flunder)).await;
    assert_eq!(created.code, 201, "{}", created.body);
    let item = format!("{FLUNDERS}/f1");
    let got = send(c.get(url(&item)).header("X-Forwarded-For", "10.9.8.7")).await;
    assert_eq!(got.code, 200, "{}", got.body);
    // A watch (long-running): ResponseStarted and ResponseComplete, no response body.
    let watch_uri = format!("{FLUNDERS}?watch=true&timeoutSeconds=1");
    let watched = send(c.get(url(&watch_uri))).await;
    assert!(
        watched.code == 200 && watched.body.contains("ADDED"),
        "{}",
        watched.body
    );
    // An upgrade (exec over WebSocket) with the caller's own audit ID.
    let exec_uri = format!("{FLUNDERS}/f1/exec");
    let upgrade_id = exec(t.gw.port, &exec_uri, "e2e-exec-0001").await;
    // The backend and the delegate receive the audit ID the caller got (generated or its own).
    let echo_uri = format!("/apis/{G}/{V}/echo");
    let echo = send(c.get(url(&echo_uri))).await;
    let own = send(c.get(url(&echo_uri)).header("Audit-ID", "e2e-trace-0001")).await;
    assert_eq!(own.id, "e2e-trace-0001", "the caller's Audit-ID is kept");
    let delegated = send(c.get(url("/apis/apps/v1/echo"))).await;
    for answer in [&echo, &own, &delegated] {
        assert_eq!(answer.code, 200, "{}", answer.body);
        let received = &answer.json()["headers"]["audit-id"];
        assert_eq!(received, &json!([answer.id]), "{}", answer.body);
    }
    // Not audited: OpenAPI v3 (nonResourceURLs), the quiet user, health (answered before
    // authentication); the audited requests after them show their events would be in by then.
    let unaudited = [
        send(c.get(url("/openapi/v3"))).await,
        send(c.get(url(FLUNDERS)).bearer_auth("quiet-token")).await,
        send(c.get(url("/healthz")).header("Audit-ID", "e2e-health-0001")).await,
    ];
    // apiagg's own answers.
    let apis = send(c.get(url("/apis")).header("Accept", "application/json")).await;
    let openapi = send(
        c.get(url("/openapi/v2"))
            .header("Accept", "application/json"),
    )
    .await;
    let metrics = send(admin(c.get(url("/metrics")))).await;
    for answer in unaudited.iter().chain([&apis, &openapi, &metrics]) {
        assert_eq!(answer.code, 200, "{}", answer.body);
    }

    let answers = [
        &created, &got, &echo, &own, &delegated, &apis, &openapi, &metrics,
    ];
    let ids: Vec<&str> = answers
        .iter()
        .map(|a| a.id.as_str())
        .chain(["e2e-exec-0001"])
        .collect();
    let events = wait_complete(&t.log, &ids).await;

    let e = events_of(
        &events,
        &created,
        anon(FLUNDERS, "create", "RequestResponse").object(FLUNDERS_REF),
        BOTH,
    );
    assert!(
        e[0].get("annotations").is_none(),
        "nothing is decided at RequestReceived: {}",
        e[0]
    );
    assert_eq!(e[1]["requestObject"], flunder, "{}", e[1]);
    assert_eq!(e[1]["responseObject"], created.json(), "{}", e[1]);
    assert_eq!(note(e[1], DECISION), Some("allow"), "{}", e[1]);
    assert!(
        note(e[1], "apf_pl").is_some_and(|p| !p.is_empty()),
        "{}",
        e[1]
    );
    assert!(
        note(e[1], "apf_fs").is_some_and(|f| !f.is_empty()),
        "{}",
        e[1]
    );

    let forwarded = anon(&item, "get", "RequestResponse").sources(&["10.9.8.7", "127.0.0.1"]);
    let e = events_of(
        &events,
        &got,
        forwarded.object(["flunders", "audit", "f1", G, V, ""]),
        BOTH,
    );
    assert_eq!(e[1]["responseObject"], got.json(), "{}", e[1]);
    assert!(
        e[1].get("requestObject").is_none(),
        "a GET has no body: {}",
        e[1]
    );

    let want = anon(&watch_uri, "watch", "RequestResponse").object(FLUNDERS_REF);
    let e = events_of(&events, &watched, want, LONG);
    assert_eq!(e[1]["responseStatus"]["code"], 200, "{}", e[1]);
    assert!(
        e.iter().all(|e| e.get("responseObject").is_none()),
        "a watch has no body: {e:?}"
    );

    // `flunders` does not match `flunders/exec`: the exec is audited at Metadata; it is not
    // subject to flow control.
    let exec = Answer {
        code: 101,
        id: "e2e-exec-0001".into(),
        body: String::new(),
    };
    let want = anon(&exec_uri, "get", "Metadata").object(["flunders", "audit", "f1", G, V, "exec"]);
    let e = events_of(&events, &exec, want, LONG);
    assert_eq!(e[1]["responseStatus"]["code"], 101, "{}", e[1]);
    assert!(note(e[2], "apf_pl").is_none(), "{}", e[2]);
    // Upstream does not promise an Audit-ID on a proxied 101 (the backend's head goes out as
    // it came); one that is there must be the request's.
    if let Some(id) = &upgrade_id {
        assert_eq!(id, "e2e-exec-0001", "the 101's Audit-ID");
    }

    for answer in [&echo, &own] {
        let want = anon(&echo_uri, "list", "Metadata").object(["echo", "", "", G, V, ""]);
        let e = events_of(&events, answer, want, BOTH);
        assert!(e[1].get("responseObject").is_none() && e[1].get("requestObject").is_none());
    }
    let want = anon("/apis/apps/v1/echo", "list", "Metadata");
    events_of(
        &events,
        &delegated,
        want.object(["echo", "", "", "apps", "v1", ""]),
        BOTH,
    );

    events_of(&events, &apis, anon("/apis", "get", "Metadata"), BOTH);
    events_of(
        &events,
        &openapi,
        anon("/openapi/v2", "get", "Metadata"),
        BOTH,
    );
    let want = Expect::new("/metrics", "get", "Metadata", ROOT);
    let e = events_of(&events, &metrics, want, BOTH);
    let apf = (note(e[1], "apf_pl"), note(e[1], "apf_fs"));
    assert_eq!(apf, (Some("exempt"), Some("exempt")), "{}", e[1]);

    for answer in &unaudited[..2] {
        assert!(!answer.id.is_empty(), "no Audit-ID header");
        assert!(
            of(&events, &answer.id).is_empty(),
            "{:?}",
            of(&events, &answer.id)
        );
    }
    assert!(of(&events, "e2e-health-0001").is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_apiservice_api_is_audited_at_its_own_levels() {
    let t = start_trail().await;
    let (c, url) = (caller(), |p: &str| t.gw.url(p));
    let admin = |r: reqwest::RequestBuilder| r.bearer_auth("admin-token");
    // Writes at Request without RequestReceived (a conflict too), reads at Metadata.
    let apiservice = api::object("v1.audit.example.com", "audit.example.com");
    let registered = send(admin(c.post(url(APISERVICES))).json(&apiservice)).await;
    assert_eq!(registered.code, 201, "{}", registered.body);
    let conflict = send(admin(c.post(url(APISERVICES))).json(&apiservice)).await;
    assert_eq!(conflict.code, 409, "{}", conflict.body);
    let listed = send(admin(c.get(url(APISERVICES)))).await;
    let removed_uri = format!("{APISERVICES}/v1.audit.example.com");
    let removed = send(admin(c.delete(url(&removed_uri)))).await;
    assert_eq!((listed.code, removed.code), (200, 200), "{}", removed.body);

    // The events are found by what they say (URI, verb, order), then held to the answers.
    let done = |events: &[Value]| {
        let n = |uri: &str, verb: &str| {
            let complete = events.iter().filter(|e| e["stage"] == "ResponseComplete");
            complete
                .filter(|e| e["requestURI"] == uri && e["verb"] == verb)
                .count()
        };
        n(APISERVICES, "create") == 2
            && n(APISERVICES, "list") == 1
            && n(&removed_uri, "delete") == 1
    };
    let events = wait_for(&t.log, done).await;
    let second = events
        .iter()
        .filter(|e| e["stage"] == "ResponseComplete" && e["verb"] == "create");
    let second = second
        .filter_map(|e| e["auditID"].as_str())
        .nth(1)
        .unwrap_or_default();
    let logged = [
        (
            &registered,
            id_of(&events, APISERVICES, "create").unwrap_or_default(),
        ),
        (&conflict, second),
        (
            &listed,
            id_of(&events, APISERVICES, "list").unwrap_or_default(),
        ),
        (
            &removed,
            id_of(&events, &removed_uri, "delete").unwrap_or_default(),
        ),
    ];
    let as_logged = |i: usize| {
        let (answer, id) = logged[i];
        Answer {
            code: answer.code,
            id: id.to_string(),
            body: String::new(),
        }
    };
    let object = |name| ["apiservices", "", name, "apiregistration.k8s.io", "v1", ""];
    let write = Expect::new(APISERVICES, "create", "Request", ROOT).object(object(""));
    let e = events_of(&events, &as_logged(0), write, &["ResponseComplete"]);
    assert!(
        e[0].get("responseObject").is_none(),
        "Request level: {}",
        e[0]
    );
    assert_eq!(note(e[0], DECISION), Some("allow"), "{}", e[0]);
    let request_object = e[0].get("requestObject").cloned();
    let e = events_of(&events, &as_logged(1), write, &["ResponseComplete"]);
    let conflict_status = e[0]["responseStatus"].clone();
    let read = Expect::new(APISERVICES, "list", "Metadata", ROOT).object(object(""));
    events_of(&events, &as_logged(2), read, BOTH);
    let delete = Expect::new(&removed_uri, "delete", "Request", ROOT);
    let e = events_of(
        &events,
        &as_logged(3),
        delete.object(object("v1.audit.example.com")),
        &["ResponseComplete"],
    );
    assert!(e[0].get("requestObject").is_none() && e[0].get("responseObject").is_none());

    // What the APIService API's answers and events must also say, as every other answer's do.
    let mut broken = Vec::new();
    if request_object.as_ref() != Some(&apiservice) {
        broken.push(format!(
            "create at Request: requestObject is {request_object:?}"
        ));
    }
    if conflict_status["reason"] != "AlreadyExists" || conflict_status["status"] != "Failure" {
        broken.push(format!(
            "409: responseStatus {conflict_status} lacks status/reason"
        ));
    }
    for (answer, id) in &logged {
        if answer.id != *id {
            broken.push(format!(
                "{}: Audit-ID header {:?}, event {id}",
                answer.code, answer.id
            ));
        }
    }
    let broken = broken.join("\n");
    assert!(
        broken.is_empty(),
        "the APIService API is audited apart from the request path:\n{broken}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_are_audited_with_their_status() {
    let t = start_trail().await;
    let (c, url) = (caller(), |p: &str| t.gw.url(p));

    // 401: no user in the events; the policy still applies (flunders at RequestResponse).
    let unknown = send(c.get(url(FLUNDERS)).bearer_auth("not-a-token")).await;
    assert_eq!(unknown.code, 401, "{}", unknown.body);
    // 403: apiagg's built-in rule refuses an anonymous APIService write.
    let apiservice = api::object("v1.evil.example.com", "evil.example.com");
    let forbidden = send(c.post(url(APISERVICES)).json(&apiservice)).await;
    assert_eq!(forbidden.code, 403, "{}", forbidden.body);
    // 429: flooder's priority level holds a seat or so and rejects the rest.
    let slow_uri = format!("/apis/{G}/{V}/slow?ms=2000");
    let flood =
        (0..8).map(|_| tokio::spawn(send(c.get(url(&slow_uri)).bearer_auth("flood-token"))));
    let mut answers = Vec::new();
    for task in flood.collect::<Vec<_>>() {
        answers.push(task.await.expect("join"));
    }
    let codes: Vec<u16> = answers.iter().map(|a| a.code).collect();
    assert!(codes.contains(&429) && codes.contains(&200), "{codes:?}");
    assert!(codes.iter().all(|c| *c == 200 || *c == 429), "{codes:?}");

    let mut ids: Vec<&str> = answers.iter().map(|a| a.id.as_str()).collect();
    ids.extend([unknown.id.as_str(), forbidden.id.as_str()]);
    let events = wait_complete(&t.log, &ids).await;

    let want = Expect::new(FLUNDERS, "list", "RequestResponse", None).object(FLUNDERS_REF);
    let e = events_of(&events, &unknown, want, BOTH);
    assert_eq!(e[1]["responseStatus"]["reason"], "Unauthorized", "{}", e[1]);
    assert!(note(e[1], DECISION).is_none(), "never authorized: {}", e[1]);

    let object = ["apiservices", "", "", "apiregistration.k8s.io", "v1", ""];
    let want = Expect::new(APISERVICES, "create", "Request", ANONYMOUS).object(object);
    let e = events_of(&events, &forbidden, want, &["ResponseComplete"]);
    assert_eq!(e[0]["responseStatus"]["status"], "Failure", "{}", e[0]);
    assert_eq!(e[0]["responseStatus"]["reason"], "Forbidden", "{}", e[0]);
    assert_eq!(note(e[0], DECISION), Some("forbid"), "{}", e[0]);
    assert!(
        e[0].get("requestObject").is_none(),
        "the refused body is never read: {}",
        e[0]
    );

    for answer in &answers {
        let want = Expect::new(&slow_uri, "list", "Metadata", FLOODER);
        let e = events_of(
            &events,
            answer,
            want.object(["slow", "", "", G, V, ""]),
            BOTH,
        );
        assert_eq!(note(e[1], "apf_pl"), Some("audit-tiny"), "{}", e[1]);
        assert_eq!(note(e[1], "apf_fs"), Some("audit-flooder"), "{}", e[1]);
        if answer.code == 429 {
            assert_eq!(
                e[1]["responseStatus"]["reason"], "TooManyRequests",
                "{}",
                e[1]
            );
            // Flow control refused it before authorization (kube-apiserver's order): no
            // decision was made.
            assert_eq!(note(e[1], DECISION), None, "{}", e[1]);
        } else {
            assert_eq!(note(e[1], DECISION), Some("allow"), "{}", e[1]);
        }
    }
}
