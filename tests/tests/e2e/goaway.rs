//! `--goaway-chance` (kube-apiserver's flag): two apiagg replicas behind one address (a
//! round-robin TCP balancer, as a cloud load balancer spreads connections), and one HTTP/2
//! client sending its requests one after another on the connection it holds. Without the flag
//! every request stays on the replica it first reached; with it, GOAWAY after a few answers
//! makes the client reconnect, and the balancer gives the next connection to the other replica.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use apiagg_tests::wire::tls_apiagg_with;
use apiagg_tests::*;
use serde_json::Value;
use tokio::net::{TcpListener, TcpStream};

/// A TCP balancer on loopback: each new connection goes to the next of `ports`.
async fn round_robin(ports: Vec<u16>) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let port = listener.local_addr().expect("address").port();
    let next = Arc::new(AtomicUsize::new(0));
    tokio::spawn(async move {
        while let Ok((mut client, _)) = listener.accept().await {
            let target = ports[next.fetch_add(1, Ordering::Relaxed) % ports.len()];
            tokio::spawn(async move {
                if let Ok(mut server) = TcpStream::connect(("127.0.0.1", target)).await {
                    let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                }
            });
        }
    });
    port
}

/// Two replicas, each in front of its own sample backend (named `one` and `two`, which the
/// backend's `echo` says), behind one balancer; the client trusts both.
async fn replicas(extra: &[&str]) -> (Vec<Apiagg>, Vec<Sample>, reqwest::Client, String) {
    let mut gateways = Vec::new();
    let mut samples = Vec::new();
    let mut client = reqwest::Client::builder().http2_prior_knowledge();
    for name in ["one", "two"] {
        let sample = sample_with("wardle.example.com", name, false, &[]);
        let config = format!(
            "services:\n{}apiServices:\n{}",
            service("b0", &sample.url),
            apiservice("wardle.example.com", V, "b0", "")
        );
        let (gw, ca) = tls_apiagg_with(&config, extra).await;
        client =
            client.add_root_certificate(reqwest::Certificate::from_pem(ca.as_bytes()).expect("CA"));
        gateways.push(gw);
        samples.push(sample);
    }
    let port = round_robin(gateways.iter().map(|gw| gw.port).collect()).await;
    let client = client.build().expect("client");
    (
        gateways,
        samples,
        client,
        format!("https://127.0.0.1:{port}"),
    )
}

/// Sends `n` GETs of the backend's `echo` one after another; counts the answers by the
/// backend (so by replica) that gave them. Every request must be answered.
async fn spread(client: &reqwest::Client, base: &str, n: usize) -> BTreeMap<String, usize> {
    let url = format!("{base}/apis/wardle.example.com/{V}/echo");
    let mut by_replica = BTreeMap::new();
    for i in 0..n {
        let answer = client
            .get(&url)
            .send()
            .await
            .unwrap_or_else(|e| panic!("request {i} lost: {e:?}"));
        assert_eq!(answer.version(), reqwest::Version::HTTP_2);
        assert_eq!(answer.status(), 200, "request {i}");
        let echo: Value = answer.json().await.expect("echo");
        let server = echo["server"].as_str().unwrap_or_default().to_string();
        *by_replica.entry(server).or_insert(0) += 1;
    }
    by_replica
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_goaway_chance_spreads_one_clients_requests_over_both_replicas() {
    let (gateways, _samples, client, base) = replicas(&["--goaway-chance", "0.02"]).await;
    let by_replica = spread(&client, &base, 1_000).await;
    println!("answers by replica with --goaway-chance 0.02: {by_replica:?}");
    assert_eq!(by_replica.values().sum::<usize>(), 1_000);
    // About 20 reconnections, alternating: each replica serves about half; a tenth is far
    // below what chance gives (the odds of less are below one in a million).
    for name in ["one", "two"] {
        let served = by_replica.get(name).copied().unwrap_or_default();
        assert!(served >= 100, "{name} served {served}: {by_replica:?}");
    }
    let mut sent = 0.0;
    for gw in &gateways {
        let url = format!("https://127.0.0.1:{}/metrics", gw.port);
        sent += metric_at(&client, &url, "apiagg_goaway_sent_total")
            .await
            .unwrap_or_default();
    }
    assert!(sent >= 5.0, "GOAWAYs sent: {sent}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_it_a_client_stays_on_the_replica_it_reached() {
    let (_gateways, _samples, client, base) = replicas(&[]).await;
    let by_replica = spread(&client, &base, 200).await;
    assert_eq!(by_replica.len(), 1, "{by_replica:?}");
}
