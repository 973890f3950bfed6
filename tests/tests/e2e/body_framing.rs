//! Every request body reaches an HTTP/1.1 backend framed exactly once, on pooled keep-alive
//! connections, whatever framing the client used (cloudflare/pingora#935): HTTP/2 bodies
//! without `content-length` ending in an empty END_STREAM DATA frame, the same with a
//! `content-length`, empty HTTP/2 bodies, chunked HTTP/1.1 bodies, interleaved with GETs from
//! other clients. The backend records the exact bytes it receives: any byte that is not part of
//! a request (a second chunked terminator) is a stray, and every caller must get the answer to
//! its own request.

use apiagg_tests::wire::{h2_connect, h2_request, https_client, tls_apiagg_with, RawBackend};
use apiagg_tests::*;
use bytes::Bytes;
use tokio::task::JoinSet;

const GV: &str = "/apis/wardle.example.com/v1alpha1";

/// What a caller got back, or what was wrong with it.
type Outcome = Result<(), String>;

/// Checks that an answer is the backend's answer to this very request.
fn own_answer(id: &str, method: &str, path: &str, body: &str, got: (u16, String)) -> Outcome {
    let expected = format!("{id} {method} {path} {body}");
    match got {
        (200, text) if text == expected => Ok(()),
        (code, text) => Err(format!("{id}: got {code} {text:?}, expected {expected:?}")),
    }
}

/// The raw backend as APIService `v1alpha1.wardle.example.com` behind apiagg serving TLS with
/// `extra` arguments, once available: the backend, apiagg, its CA, its base URL and an HTTPS
/// client.
async fn raw_backend_behind_apiagg(
    extra: &[&str],
) -> (RawBackend, Apiagg, String, String, reqwest::Client) {
    let backend = RawBackend::start(GV).await;
    let config = format!(
        "services:\n{}apiServices:\n{}",
        service("raw", &backend.url()),
        apiservice(G, V, "raw", ""),
    );
    let (gw, ca) = tls_apiagg_with(&config, extra).await;
    let base = format!("https://127.0.0.1:{}", gw.port);
    let h1 = https_client(&ca);
    wait_until(
        "the raw backend's APIService to be available",
        std::time::Duration::from_secs(20),
        || answer_code(h1.get(format!("{base}{GV}/ping"))),
        |code| *code == 200,
    )
    .await;
    (backend, gw, ca, base, h1)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_request_body_reaches_an_http1_backend_framed_once() {
    // A burst of 460 requests from one anonymous flow to one backend: the front-door bounds
    // (flow control, the backend's bound) would refuse part of it, and this test is about
    // framing.
    let unbounded = [
        "--enable-priority-and-fairness=false",
        "--max-requests-inflight-per-apiservice",
        "1000",
        "--max-requests-inflight-per-endpoint",
        "1000",
    ];
    let (backend, gw, ca, base, h1) = raw_backend_behind_apiagg(&unbounded).await;

    let path = format!("{GV}/namespaces/default/flunders");
    let mut tasks: JoinSet<Outcome> = JoinSet::new();
    let mut ids: Vec<(String, String)> = Vec::new();
    // HTTP/2: 4 connections × 50 POSTs, each body ending in an empty END_STREAM DATA frame;
    // every 5th with a matching content-length, every 10th with no body bytes at all.
    for c in 0..4 {
        let h2 = h2_connect(gw.port, &ca).await;
        for i in 0..50 {
            let id = format!("h2-{c}-{i}");
            let body = if i % 10 == 9 {
                String::new()
            } else {
                format!("{{\"body\":\"{id}\"}}")
            };
            ids.push((id.clone(), body.clone()));
            let (h2, path) = (h2.clone(), path.clone());
            tasks.spawn(async move {
                let length = body.len().to_string();
                let mut headers = vec![("x-test-id", id.as_str())];
                if i % 5 == 0 {
                    headers.push(("content-length", length.as_str()));
                }
                let got = h2_request(&h2, "POST", &path, &headers, body.as_bytes())
                    .await
                    .map_err(|e| format!("{id}: {e}"))?;
                own_answer(&id, "POST", &path, &body, got)
            });
        }
    }
    // Chunked HTTP/1.1 bodies (a streamed reqwest body), 60 of them.
    for i in 0..60 {
        let id = format!("chunked-{i}");
        let body = format!("{{\"body\":\"{id}\"}}");
        ids.push((id.clone(), body.clone()));
        let (client, url, path) = (h1.clone(), format!("{base}{path}"), path.clone());
        tasks.spawn(async move {
            let piece: Result<Bytes, std::io::Error> = Ok(Bytes::from(body.clone()));
            let stream = futures_util::stream::iter(vec![piece]);
            let response = client
                .post(url)
                .header("x-test-id", &id)
                .body(reqwest::Body::wrap_stream(stream))
                .send()
                .await
                .map_err(|e| format!("{id}: {e}"))?;
            let code = response.status().as_u16();
            let text = response.text().await.map_err(|e| format!("{id}: {e}"))?;
            own_answer(&id, "POST", &path, &body, (code, text))
        });
    }
    // GETs from other clients, meanwhile: each must get its own answer.
    for i in 0..200 {
        let id = format!("get-{i}");
        ids.push((id.clone(), String::new()));
        let client = if i % 2 == 0 {
            h1.clone()
        } else {
            https_client(&ca)
        };
        let get_path = format!("{GV}/namespaces/default/flunders/f{i}");
        let url = format!("{base}{get_path}");
        tasks.spawn(async move {
            let response = client
                .get(url)
                .header("x-test-id", &id)
                .send()
                .await
                .map_err(|e| format!("{id}: {e}"))?;
            let code = response.status().as_u16();
            let text = response.text().await.map_err(|e| format!("{id}: {e}"))?;
            own_answer(&id, "GET", &get_path, "", (code, text))
        });
    }
    let mut failures = Vec::new();
    while let Some(outcome) = tasks.join_next().await {
        if let Err(e) = outcome.expect("task") {
            failures.push(e);
        }
    }
    assert!(failures.is_empty(), "wrong answers: {failures:#?}");

    // The backend saw each body exactly once, and nothing else.
    let strays = backend.strays();
    assert!(
        strays.is_empty(),
        "bytes outside any request: {strays:?}\n{}",
        backend.raw()
    );
    for (id, body) in &ids {
        let seen = backend.with_id(id);
        assert_eq!(
            seen.len(),
            1,
            "{id} reached the backend {} times",
            seen.len()
        );
        assert_eq!(String::from_utf8_lossy(&seen[0].body), *body, "{id}");
    }
    // Requests following one another on a pooled connection, where a stray terminator of the
    // previous body would be read as the next request. Concurrent bursts open as many upstream
    // connections as the scheduler happens to need, so pooling is checked on a sequential run:
    // one client at a time, each framing in turn, every request after the first must reuse.
    let h2 = h2_connect(gw.port, &ca).await;
    let mut sequential = Vec::new();
    for i in 0..30 {
        let id = format!("seq-{i}");
        let body = if i % 3 == 2 {
            String::new()
        } else {
            format!("{{\"body\":\"{id}\"}}")
        };
        let got = if i % 2 == 0 {
            h2_request(
                &h2,
                "POST",
                &path,
                &[("x-test-id", id.as_str())],
                body.as_bytes(),
            )
            .await
            .expect("sequential h2 POST")
        } else {
            let piece: Result<Bytes, std::io::Error> = Ok(Bytes::from(body.clone()));
            let response = h1
                .post(format!("{base}{path}"))
                .header("x-test-id", &id)
                .body(reqwest::Body::wrap_stream(futures_util::stream::iter(
                    vec![piece],
                )))
                .send()
                .await
                .expect("sequential chunked POST");
            let code = response.status().as_u16();
            (code, response.text().await.expect("body"))
        };
        own_answer(&id, "POST", &path, &body, got).expect("sequential answer");
        sequential.push((id, body));
    }
    // The pool holds the burst's idle connections, so a request may take any of them; what
    // matters is that it came on a connection that had already carried a request.
    let requests = backend.requests();
    let mut reused = 0;
    for (id, body) in &sequential {
        let seen = backend.with_id(id);
        assert_eq!(
            seen.len(),
            1,
            "{id} reached the backend {} times",
            seen.len()
        );
        assert_eq!(String::from_utf8_lossy(&seen[0].body), *body, "{id}");
        let at = requests
            .iter()
            .position(|r| r.id.as_deref() == Some(id.as_str()))
            .expect("logged");
        if requests[..at]
            .iter()
            .any(|r| r.connection == seen[0].connection)
        {
            reused += 1;
        }
    }
    assert!(
        reused > sequential.len() / 2,
        "only {reused} of 30 sequential requests came on a pooled connection"
    );
    assert!(backend.strays().is_empty(), "{}", backend.raw());
}

/// A backend that breaks HTTP/1.1 framing reaches no other request: an answer followed by a
/// second one nobody asked for gives its caller the first, and the connection is not pooled
/// (the next callers get their own answers, never the smuggled one); two different
/// `Content-Length`s are refused with a Status, and the next callers are served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backend_that_breaks_framing_reaches_no_other_request() {
    let (_backend, _gw, _ca, base, h1) = raw_backend_behind_apiagg(&[]).await;
    let get = |path: String| {
        let h1 = h1.clone();
        async move {
            let r = h1.get(path).header("x-test-id", "next").send().await;
            let r = r.expect("answer");
            (r.status().as_u16(), r.text().await.expect("body"))
        }
    };
    for round in 0..5 {
        let got = get(format!("{base}{GV}/flunders/smuggle")).await;
        assert_eq!(got, (200, "first".to_string()), "round {round}");
        let got = get(format!("{base}{GV}/flunders/two-lengths")).await;
        assert_eq!(got.0, 503, "round {round}: {got:?}");
        assert!(!got.1.contains("smuggled"), "round {round}: {got:?}");
        for _ in 0..3 {
            let got = get(format!("{base}{GV}/flunders/next")).await;
            let own = format!("next GET {GV}/flunders/next ");
            assert_eq!(
                got,
                (200, own),
                "round {round}: a smuggled answer was served"
            );
        }
    }
}
