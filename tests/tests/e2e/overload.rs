//! One caller cannot take everyone down: while it holds thousands of requests on a slow
//! APIService, the others (another backend, the delegate, discovery) are served, the flood's
//! excess gets 429 with `Retry-After` at once, the slow backend never holds more than its
//! bound, and apiagg's memory and open files stay bounded. (`tests/bench/overload.sh` runs the
//! same at 10,000 requests on a release build and reports latencies.)

use std::time::Duration;

use apiagg_tests::*;

const GV: &str = "/apis/wardle.example.com/v1alpha1";
/// Flood requests (`APIAGG_OVERLOAD_FLOOD` overrides: `tests/bench/overload.sh` runs 10,000
/// on a release build).
fn flood_size() -> usize {
    std::env::var("APIAGG_OVERLOAD_FLOOD")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(2000)
}
const CAP: usize = 100;

const TOKENS: &str = "tok-flood,system:serviceaccount:flood:flooder,1,\"system:serviceaccounts,system:serviceaccounts:flood\"\n\
tok-ctrl,system:serviceaccount:apps:controller,2,\"system:serviceaccounts,system:serviceaccounts:apps\"\n\
tok-user,jane,3,\n";

/// Resident memory (KiB) and open files of a process.
fn usage(pid: u32) -> (u64, usize) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let rss = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0);
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count());
    (rss, fds)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_flooding_caller_does_not_take_the_others_down() {
    let slow = sample(G, "wardle", false);
    let other = sample("other.example.com", "other", false);
    let delegate = kube_delegate(false, &[]);
    let dir = tempfile::tempdir().expect("tempdir");
    let tokens = dir.path().join("tokens.csv");
    std::fs::write(&tokens, TOKENS).expect("tokens");
    let config = format!(
        "authentication: {{anonymous: true, tokenFile: {}}}\ndelegate: {{url: \"{}\"}}\n\
         services:\n{}{}apiServices:\n{}{}",
        tokens.display(),
        delegate.url,
        service("wardle", &slow.url),
        service("other", &other.url),
        apiservice(G, V, "wardle", ""),
        apiservice("other.example.com", V, "other", ""),
    );
    let cap = CAP.to_string();
    let gw = Apiagg::start(&config, &["--max-requests-inflight-per-apiservice", &cap]);
    gw.wait_ready().await;
    let pid = gw.proc.child.id();
    let (rss_before, fds_before) = usage(pid);

    // The flood: every request on a connection of its own, all held by the slow backend.
    let flood_url = gw.url(&format!("{GV}/slow?ms=8000"));
    let flood_n = flood_size();
    let flood: Vec<_> = (0..flood_n)
        .map(|_| {
            let url = flood_url.clone();
            tokio::spawn(async move {
                let c = reqwest::Client::new();
                match c.get(url).bearer_auth("tok-flood").send().await {
                    Ok(r) => (r.status().as_u16(), r.headers().contains_key("retry-after")),
                    Err(_) => (0, false),
                }
            })
        })
        .collect();
    // The backend holds its bound of them.
    slow.wait_requests(&format!("{GV}/slow"), CAP as u64, Duration::from_secs(20))
        .await;

    // Meanwhile, everyone else.
    let c = client();
    let others = [
        (
            gw.url("/apis/other.example.com/v1alpha1/flunders"),
            "tok-ctrl",
        ),
        (gw.url("/apis"), "tok-user"),
        (gw.url("/api"), "tok-user"),
        (gw.url("/version"), "tok-ctrl"),
    ];
    let (mut asked, mut served) = (0, 0);
    let mut latencies = Vec::new();
    for round in 0..50 {
        for (url, token) in &others {
            asked += 1;
            let started = std::time::Instant::now();
            let r = c.get(url).bearer_auth(token).send().await;
            latencies.push(started.elapsed());
            if r.is_ok_and(|r| r.status() == 200) {
                served += 1;
            } else {
                eprintln!("round {round}: {url} failed");
            }
        }
    }
    let (rss_during, fds_during) = usage(pid);

    let mut answers = Vec::new();
    for f in flood {
        answers.push(f.await.expect("join"));
    }
    assert!(
        served * 100 >= asked * 99,
        "only {served} of {asked} other requests were served during the flood"
    );
    let ok = answers.iter().filter(|(c, _)| *c == 200).count();
    let refused = answers.iter().filter(|(c, _)| *c == 429).count();
    assert_eq!(ok, CAP, "flood answers: {ok} served, {refused} refused");
    assert_eq!(ok + refused, flood_n, "every flood request got an answer");
    assert!(
        answers
            .iter()
            .filter(|(c, _)| *c == 429)
            .all(|(_, retry)| *retry),
        "a 429 without Retry-After"
    );
    assert_eq!(
        slow.requests(&format!("{GV}/slow")).await,
        CAP as u64,
        "the slow backend got more than its bound"
    );
    latencies.sort();
    let p99 = latencies[latencies.len() * 99 / 100];
    // A measurement, printed for tests/bench/overload.sh (timings are not asserted here).
    println!(
        "overload: flood {flood_n}, others served {served}/{asked}, p99 {p99:?}, RSS {rss_before} -> {rss_during} KiB, open files {fds_before} -> {fds_during}"
    );
    // Bounded: a little per connection the flood opened, nothing per request it sent.
    let bound = rss_before + 128 * 1024 + flood_n as u64 * 32;
    assert!(
        rss_during < bound,
        "RSS grew from {rss_before} to {rss_during} KiB (bound {bound})"
    );
    assert!(
        fds_during < fds_before + flood_n + CAP + 200,
        "open files grew from {fds_before} to {fds_during}"
    );
}
