//! Hostile rows of security round 2 (the front door's own resources, and the filter chain in
//! kube-apiserver's order: authentication → audit → impersonation → flow control →
//! authorization → the backend's bound → dispatch). Each row is asserted on what the delegate
//! and the backends received, with a control showing the probe could fail:
//! - garbage tokens from some connections never starve a valid token's review;
//! - flow control throttles a flood before it costs SubjectAccessReviews;
//! - a request queued in flow control holds no place in its backend's bound;
//! - a watch gives its seat back when it is handed to the backend, head or not;
//! - `Impersonate-*` carried to the delegate is in the audit event;
//! - anonymous discovery is consistent (the APIService group-version's document as `/apis`).

use std::path::Path;
use std::time::{Duration, Instant};

use apiagg_tests::flow::{level, schema, QUEUE_PER_FLOW, SMALL_SERVER};
use apiagg_tests::trust::{Cluster, REVIEWED_TOKEN};
use apiagg_tests::*;
use futures_util::StreamExt;

const GV: &str = "/apis/wardle.example.com/v1alpha1";
const TOKEN_REVIEWS: &str = "/apis/authentication.k8s.io/v1/tokenreviews";
const REVIEWS: &str = "/apis/authorization.k8s.io/v1/subjectaccessreviews";

/// A client of `c` with a connection pool of one: every client is one connection.
fn one_connection(c: &Cluster) -> reqwest::Client {
    let ca = reqwest::Certificate::from_pem(c.serving_ca.cert_pem.as_bytes()).expect("CA");
    reqwest::Client::builder()
        .add_root_certificate(ca)
        .http1_only()
        .pool_max_idle_per_host(1)
        .timeout(Duration::from_secs(20))
        .build()
        .expect("client")
}

/// Item 1: random tokens from eight HTTP/2 connections, 64 at a time on each, as fast as
/// apiagg answers them for eight seconds; meanwhile three valid tokens the delegate knows (not
/// cached) come from another connection, one after the other. Each is answered 200 within
/// two seconds, and the delegate got no more reviews than the process-wide bound (200 at once,
/// then 100 a second). Before the fair shares, the flood kept the bound empty and the valid
/// tokens got 429.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_tokens_never_starve_a_valid_tokens_review() {
    let c = Cluster::start(true).await;
    // Three more service accounts the delegate knows (its token file is read per review).
    let tokens = c.dir.join("delegate-tokens.csv");
    let mut known = std::fs::read_to_string(&tokens).expect("delegate tokens");
    for i in 1..=3 {
        known.push_str(&format!(
            "valid-{i},system:serviceaccount:default:sa-{i},uid-{i},\"system:serviceaccounts\"\n"
        ));
    }
    std::fs::write(&tokens, known).expect("delegate tokens");
    let before = c.delegate.requests(TOKEN_REVIEWS).await;

    let started = Instant::now();
    let flood_for = Duration::from_secs(8);
    let run = run_id();
    let flooders: Vec<_> = (0..8)
        .map(|connection| {
            let (client, url) = (c.client(None), c.url("/apis"));
            tokio::spawn(async move {
                futures_util::stream::iter(0u64..)
                    .take_while(|_| std::future::ready(started.elapsed() < flood_for))
                    .map(|i| {
                        let token = format!("garbage-{run}-{connection}-{i}");
                        client.get(&url).bearer_auth(token).send()
                    })
                    .buffer_unordered(64)
                    .fold(0u64, |sent, _| std::future::ready(sent + 1))
                    .await
            })
        })
        .collect();

    // The valid tokens come once the flood has spent the bound's burst (200 reviews at once):
    // from then on, each review they need competes with the flood's for the 100 a second.
    wait_until(
        "the flood to spend the review bound's burst (200 reviews at the delegate)",
        flood_for,
        || async { c.delegate.requests(TOKEN_REVIEWS).await - before },
        |reviews| *reviews >= 200,
    )
    .await;
    let valid = one_connection(&c);
    let mut waits = Vec::new();
    for i in 1..=3 {
        let asked = Instant::now();
        let answer = valid
            .get(c.url("/apis"))
            .bearer_auth(format!("valid-{i}"))
            .send()
            .await
            .expect("valid token");
        let waited = asked.elapsed();
        assert_eq!(
            answer.status(),
            200,
            "valid-{i} during the flood, after {waited:?}"
        );
        waits.push(waited);
    }
    let mut garbage = 0;
    for f in flooders {
        garbage += f.await.expect("flooder");
    }
    let seconds = started.elapsed().as_secs_f64();
    let reviews = c.delegate.requests(TOKEN_REVIEWS).await - before;
    eprintln!(
        "{garbage} garbage tokens in {seconds:.1} s ({:.0}/s): {reviews} reviews; valid tokens \
         answered after {waits:?}",
        garbage as f64 / seconds
    );
    for (i, waited) in waits.iter().enumerate() {
        assert!(
            *waited <= Duration::from_secs(2),
            "valid-{} waited {waited:?}",
            i + 1
        );
    }
    let bound = 200.0 + 100.0 * seconds + 5.0;
    assert!(
        (reviews as f64) <= bound,
        "{reviews} reviews in {seconds:.1} s (the bound: {bound:.0})"
    );
    // The control: the flood was far more than the bound lets through.
    assert!(
        garbage as f64 > 3.0 * bound,
        "only {garbage} garbage tokens sent"
    );
}

/// Differs from run to run, so no run's tokens are in another's caches.
fn run_id() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish()
}

/// apiagg with `authorization.mode: Webhook` at a delegate allowing `system:unauthenticated`
/// everything, anonymous callers in a `Reject` level of one seat, and the wardle backend.
struct Webhooked {
    gw: Apiagg,
    backend: Sample,
    delegate: Sample,
}

fn webhooked(dir: tempfile::TempDir) -> Webhooked {
    let backend = sample(G, "wardle", false);
    let policy = dir.path().join("policy.json");
    std::fs::write(
        &policy,
        r#"{"rules": [
            {"groups": ["system:unauthenticated"], "verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]},
            {"groups": ["system:unauthenticated"], "verbs": ["*"], "nonResourceURLs": ["*"]}
        ]}"#,
    )
    .expect("policy");
    let delegate = kube_delegate(
        false,
        &["--authorization-policy", policy.to_str().expect("utf8")],
    );
    let flow = dir.path().join("flow.yaml");
    let objects = format!(
        "{}{}",
        level("refuser", "{type: Reject}"),
        schema("anonymous", "system:unauthenticated", "refuser")
    );
    std::fs::write(&flow, objects).expect("flow objects");
    let config = format!(
        "authentication: {{anonymous: true}}\nauthorization: {{mode: Webhook}}\n\
         delegate: {{url: \"{}\"}}\n{}",
        delegate.url,
        one_backend("wardle", &backend)
    );
    let flow = flow.to_str().expect("utf8").to_string();
    let args = [&SMALL_SERVER[..], &["--flow-control-config-file", &flow]].concat();
    let gw = Apiagg::start_in(dir, &config, &args, &[]);
    Webhooked {
        gw,
        backend,
        delegate,
    }
}

/// Item 2: one anonymous request holds the anonymous level's only seat; 300 more, each asking
/// for another object (a decision no cache holds), are refused by flow control before any of
/// them costs a review at the delegate. Before, each cost one (authorization ran first). The
/// control: once the seat is free, one new request costs exactly one review.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flow_control_throttles_a_flood_before_it_costs_reviews() {
    let w = webhooked(tempfile::tempdir().expect("tempdir"));
    w.gw.wait_ready().await;
    let c = client();
    let holder = tokio::spawn(c.get(w.gw.url(&format!("{GV}/slow?ms=4000"))).send());
    w.backend
        .wait_requests(&format!("{GV}/slow"), 1, Duration::from_secs(10))
        .await;
    let before = w.delegate.requests(REVIEWS).await;
    let codes: Vec<u16> = futures_util::stream::iter(0..300)
        .map(|i| {
            let url = w.gw.url(&format!("{GV}/flunders/object-{i}"));
            let c = c.clone();
            async move { c.get(url).send().await.map_or(0, |r| r.status().as_u16()) }
        })
        .buffer_unordered(32)
        .collect()
        .await;
    let reviews = w.delegate.requests(REVIEWS).await - before;
    let refused = codes.iter().filter(|&&code| code == 429).count();
    assert_eq!(refused, 300, "flow control refused them all: {codes:?}");
    assert_eq!(reviews, 0, "reviews for requests flow control refused");
    assert_eq!(holder.await.expect("join").expect("slow").status(), 200);
    let answer = c
        .get(w.gw.url(&format!("{GV}/flunders/object-new")))
        .send()
        .await
        .expect("GET");
    assert_eq!(answer.status(), 404, "the backend's answer");
    assert_eq!(w.delegate.requests(REVIEWS).await - before, 1);
}

const TOKENS: &str = "tok-admin,admin,1,\"system:masters\"\n\
tok-alice,alice,2,\"flooders\"\n\
tok-carol,carol,3,\n";

/// apiagg with users from a token file, `flooders` in a queuing level of one seat, and
/// `extra` flags; the wardle backend.
fn queued(dir: &Path, extra: &[&str]) -> (Apiagg, Sample) {
    let backend = sample(G, "wardle", false);
    std::fs::write(dir.join("tokens.csv"), TOKENS).expect("tokens");
    let flow = dir.join("flow.yaml");
    let objects = format!(
        "{}{}",
        level("tiny", QUEUE_PER_FLOW),
        schema("flooders", "flooders", "tiny")
    );
    std::fs::write(&flow, objects).expect("flow objects");
    let config = format!(
        "authentication: {{anonymous: true, tokenFile: {}}}\n{}",
        dir.join("tokens.csv").display(),
        one_backend("wardle", &backend)
    );
    let flow = flow.to_str().expect("utf8").to_string();
    let args = [
        &SMALL_SERVER[..],
        &["--flow-control-config-file", &flow],
        extra,
    ]
    .concat();
    (Apiagg::start(&config, &args), backend)
}

/// Item 4: alice's 20 slow requests run one at a time in her level (one seat) while the
/// APIService's bound is 5. The 19 waiting in her queue hold no place in the bound, so
/// `system:masters` and carol are served by the backend meanwhile. Before, the bound was
/// taken before flow control: alice's queue held all five places and the others got 429.
/// The control: alice's requests were queued (they took turns) and all were served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_queued_in_flow_control_hold_no_place_at_the_backend() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (gw, backend) = queued(dir.path(), &["--max-requests-inflight-per-apiservice", "5"]);
    gw.wait_ready().await;
    let c = client();
    let started = Instant::now();
    let alice: Vec<_> = (0..20)
        .map(|_| {
            let req = c.get(gw.url(&format!("{GV}/slow?ms=300")));
            tokio::spawn(req.bearer_auth("tok-alice").send())
        })
        .collect();
    backend
        .wait_requests(&format!("{GV}/slow"), 1, Duration::from_secs(10))
        .await;
    for token in ["tok-admin", "tok-carol"] {
        let answer = c
            .get(gw.url(&format!("{GV}/flunders")))
            .bearer_auth(token)
            .send()
            .await
            .expect("GET");
        assert_eq!(answer.status(), 200, "{token} while alice's requests queue");
    }
    assert_eq!(backend.requests(&format!("{GV}/flunders")).await, 2);
    for a in alice {
        let answer = a.await.expect("join").expect("alice");
        assert_eq!(answer.status(), 200, "alice's queued request");
    }
    // One seat: twenty requests of 300 ms took turns.
    assert!(started.elapsed() >= Duration::from_millis(20 * 300));
    assert_eq!(backend.requests(&format!("{GV}/slow")).await, 20);
}

/// Item 5 (the compromised backend): it withholds the head of alice's watches. Each watch gives
/// its seat back when it is handed to the backend, so alice's next request is served at once;
/// before, every withheld watch kept its seat for its whole life. The control: the watches did
/// reach the backend and get their heads once it lets them go.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_gives_its_seat_back_when_handed_to_the_backend() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (gw, backend) = queued(dir.path(), &[]);
    gw.wait_ready().await;
    let c = client();
    c.post(format!("{}/debug/hold-watches", backend.url))
        .send()
        .await
        .expect("hold watches");
    let watches: Vec<_> = (0..3)
        .map(|_| {
            let url = gw.url(&format!("{GV}/flunders?watch=true&timeoutSeconds=30"));
            tokio::spawn(c.get(url).bearer_auth("tok-alice").send())
        })
        .collect();
    backend
        .wait_requests(&format!("{GV}/flunders"), 3, Duration::from_secs(10))
        .await;
    let asked = Instant::now();
    let answer = tokio::time::timeout(
        Duration::from_secs(5),
        c.get(gw.url(&format!("{GV}/flunders")))
            .bearer_auth("tok-alice")
            .send(),
    )
    .await
    .expect("alice's GET waited behind her withheld watches")
    .expect("GET");
    assert_eq!(answer.status(), 200);
    assert!(
        asked.elapsed() < Duration::from_secs(2),
        "{:?}",
        asked.elapsed()
    );
    c.post(format!("{}/debug/release-watches", backend.url))
        .send()
        .await
        .expect("release watches");
    for w in watches {
        let head = tokio::time::timeout(Duration::from_secs(10), w)
            .await
            .expect("the watch's head once released")
            .expect("join")
            .expect("watch");
        assert_eq!(head.status(), 200);
    }
}

/// Item 8: with the built-in rule (no authorizer) a caller the delegate authenticates keeps its
/// `Impersonate-*`, and the delegate acts as the impersonated user; the audit event says whom
/// (`impersonatedUser`). The control: a request without the header has none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn impersonation_carried_to_the_delegate_is_audited() {
    let c = Cluster::start_audited(true).await;
    let plain = c.client(None);
    let bearer = format!("Bearer {REVIEWED_TOKEN}");
    let (code, seen) = c
        .get(
            &plain,
            "/debug/whoami",
            &[
                ("Authorization", &bearer),
                ("Impersonate-User", "bob"),
                ("Impersonate-Group", "ops"),
                ("Audit-ID", "impersonating-1"),
            ],
        )
        .await;
    assert_eq!(code, 200, "{seen}");
    assert_eq!(seen["user"], "bob", "the delegate acted as bob: {seen}");
    let (code, _) = c
        .get(
            &plain,
            "/debug/whoami",
            &[("Authorization", &bearer), ("Audit-ID", "plain-1")],
        )
        .await;
    assert_eq!(code, 200);
    let events = audit::wait_complete(&c.audit_log(), &["impersonating-1", "plain-1"]).await;
    let complete = |id: &str| {
        audit::of(&events, id)
            .into_iter()
            .find(|e| e["stage"] == "ResponseComplete")
            .cloned()
            .expect("ResponseComplete")
    };
    let event = complete("impersonating-1");
    assert_eq!(
        event["user"]["username"], "system:serviceaccount:default:app",
        "{event}"
    );
    assert_eq!(event["impersonatedUser"]["username"], "bob", "{event}");
    let groups = event["impersonatedUser"]["groups"].to_string();
    assert!(groups.contains("ops"), "{event}");
    let plain_event = complete("plain-1");
    assert!(
        plain_event.get("impersonatedUser").is_none(),
        "{plain_event}"
    );
}

/// Suspicion: anonymous callers got `/apis` but 403 on the APIService group-version's
/// discovery document. Both are discovery now; the APIService objects stay closed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anonymous_discovery_is_consistent() {
    let backend = sample(G, "wardle", false);
    let gw = Apiagg::start_secure(
        &format!(
            "authentication: {{anonymous: true}}\n{}",
            one_backend("wardle", &backend)
        ),
        &[],
    );
    gw.wait_ready().await;
    for path in ["/apis", "/apis/apiregistration.k8s.io/v1"] {
        assert_eq!(status_code(&gw.url(path)).await, 200, "{path}");
    }
    let list = gw.url("/apis/apiregistration.k8s.io/v1/apiservices");
    assert_eq!(status_code(&list).await, 403);
}
