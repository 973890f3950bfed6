//! Gzipped streaming lists (kube-apiserver 1.37's `WatchListCompression`, on by default): a
//! client that sends `Accept-Encoding: gzip`, as every Go client does, gets its streaming list
//! gzipped, each event flushed. What the client reads here is the raw wire: a client with
//! decompression off, the gzip stream decoded piece by piece as it arrives.

use std::io::Write;
use std::time::{Duration, Instant};

use apiagg_tests::streaming::*;
use apiagg_tests::*;
use serde_json::{json, Value};

/// Bounds each wait; far above what a loaded machine needs.
const LIMIT: Duration = Duration::from_secs(30);

/// A client that leaves the answer's encoding alone.
fn raw_client() -> reqwest::Client {
    reqwest::Client::builder()
        .no_gzip()
        .timeout(Duration::from_secs(60))
        .build()
        .expect("client")
}

/// The events of a gzipped watch, decoded as the pieces arrive.
struct Gunzip {
    response: reqwest::Response,
    decoder: flate2::write::GzDecoder<Vec<u8>>,
    read: usize,
}

impl Gunzip {
    fn new(response: reqwest::Response) -> Gunzip {
        Gunzip {
            response,
            decoder: flate2::write::GzDecoder::new(Vec::new()),
            read: 0,
        }
    }

    /// The next event, from what arrived so far and then from the next pieces.
    async fn next(&mut self) -> Option<Value> {
        loop {
            let decoded = &self.decoder.get_ref()[self.read..];
            if let Some(at) = decoded.iter().position(|&b| b == b'\n') {
                let line = &decoded[..at];
                self.read += at + 1;
                return Some(serde_json::from_slice(line).expect("an event of JSON"));
            }
            let piece = tokio::time::timeout(LIMIT, self.response.chunk())
                .await
                .expect("the next piece in time")
                .expect("read the watch")?;
            self.decoder.write_all(&piece).expect("gzip");
            self.decoder.flush().expect("gzip flush");
        }
    }

    /// Events up to the one `done` says is the last.
    async fn until(&mut self, done: impl Fn(&Value) -> bool) -> Vec<Value> {
        let mut events = Vec::new();
        loop {
            let event = self.next().await.expect("the stream goes on");
            let last = done(&event);
            events.push(event);
            if last {
                return events;
            }
        }
    }
}

/// Opens a streaming list of `backend`'s flunders through `gw`, accepting gzip.
async fn open_gzipped(gw: &Apiagg, backend: &Backend) -> reqwest::Response {
    let url = gw.url(&format!("{}?{}", backend.path(), streaming_list("")));
    raw_client()
        .get(url)
        .header("Accept-Encoding", "gzip")
        .send()
        .await
        .expect("streaming list")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_emulated_streaming_list_is_gzipped_and_each_event_arrives_at_once() {
    let backend = Backend::start("wardle.example.com", "ignores", &[]);
    let gw = gateway(&[&backend]);
    gw.wait_ready().await;
    for name in ["a", "b"] {
        backend.create(name, json!({})).await;
    }
    let response = open_gzipped(&gw, &backend).await;
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-encoding"], "gzip");
    assert_eq!(response.headers()["content-type"], "application/json");
    let mut stream = Gunzip::new(response);
    let initial = stream.until(is_initial_events_end).await;
    assert_eq!(named(&initial), pairs(&[("ADDED", "a"), ("ADDED", "b")]));

    // Each live event decodes from the pieces sent so far: no event waits for a compression
    // block to fill.
    let mut delays = Vec::new();
    for name in ["c", "d", "e", "f", "g"] {
        backend.create(name, json!({})).await;
        let created = Instant::now();
        let event = stream.next().await.expect("the live event");
        delays.push(created.elapsed());
        assert_eq!(named(&[event]), pairs(&[("ADDED", name)]));
    }
    delays.sort();
    println!("delays from the backend's event to the client's decoded event: {delays:?}");
    assert!(delays[2] < Duration::from_millis(100), "{delays:?}");
    assert!(delays[4] < Duration::from_secs(1), "{delays:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_native_gzipped_streaming_list_passes_through_and_plain_clients_get_plain_json() {
    let backend = Backend::start("wardle.example.com", "native", &["--watch-list", "native"]);
    let gw = gateway(&[&backend]);
    gw.wait_ready().await;
    backend.create("a", json!({})).await;
    let response = open_gzipped(&gw, &backend).await;
    assert_eq!(response.status(), 200);
    // The backend compressed it; apiagg relayed it as it came.
    assert_eq!(response.headers()["content-encoding"], "gzip");
    let mut stream = Gunzip::new(response);
    let initial = stream.until(is_initial_events_end).await;
    assert_eq!(named(&initial), pairs(&[("ADDED", "a")]));
    backend.create("b", json!({})).await;
    let event = stream.next().await.expect("live event");
    assert_eq!(named(&[event]), pairs(&[("ADDED", "b")]));

    // Without Accept-Encoding, the same stream is plain JSON lines, emulated or not.
    let emulated = Backend::start("wardle.example.com", "ignores", &[]);
    let gw2 = gateway(&[&emulated]);
    gw2.wait_ready().await;
    emulated.create("a", json!({})).await;
    for (gw, backend) in [(&gw, &backend), (&gw2, &emulated)] {
        let url = gw.url(&format!("{}?{}", backend.path(), streaming_list("")));
        let mut plain = raw_client().get(url).send().await.expect("plain");
        assert_eq!(plain.status(), 200);
        assert!(plain.headers().get("content-encoding").is_none());
        let mut buffer = Vec::new();
        let initial = read_until(&mut plain, &mut buffer, is_initial_events_end).await;
        assert_eq!(named(&initial)[0], pairs(&[("ADDED", "a")])[0]);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gzip_bomb_from_a_backend_is_cut_and_the_gateway_goes_on() {
    let backend = Backend::start("wardle.example.com", "ignores", &[]);
    let gw = gateway(&[&backend]);
    gw.wait_ready().await;
    backend.create("a", json!({})).await;
    // From now on the backend's lists are 256 MiB of JSON whitespace in 250 KiB of gzip.
    backend.debug("gzip-bomb-lists").await;
    let started = Instant::now();
    let response = open_gzipped(&gw, &backend).await;
    let code = response.status().as_u16();
    let body = response.bytes().await.expect("the refusal");
    let status: Value = serde_json::from_slice(&body).expect("a Status");
    assert_eq!(code, 503, "{status}");
    assert_eq!(status["kind"], "Status");
    let message = status["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("listing for a streaming list") && message.contains("67108864"),
        "the message names the cause and the bound: {message}"
    );
    assert!(started.elapsed() < LIMIT);
    // What apiagg held for it stayed near the bound, not the bomb's size.
    let peak = apiagg_tests::api::peak_rss_kib(gw.proc.child.id());
    assert!(peak < 200 * 1024, "peak RSS {peak} KiB");
    // And it goes on serving.
    let healthz = client()
        .get(gw.url("/healthz"))
        .send()
        .await
        .expect("healthz");
    assert_eq!(healthz.status(), 200);
}
