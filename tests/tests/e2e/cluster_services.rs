//! `serviceResolution: endpoints | cluster`: apiagg reads the delegate's Services and
//! EndpointSlices (with its own token, which the delegate checks), watches them, and moves
//! traffic when they change, without a config change. The backends trust only apiagg's
//! front-proxy client certificate and name the caller from `X-Remote-*`.

use std::path::Path;
use std::time::{Duration, Instant};

use apiagg_tests::pki::{write_pair, Ca};
use apiagg_tests::trust::{delegate_tokens, PROXY_CN};
use apiagg_tests::*;
use base64::Engine;
use serde_json::{json, Value};

const TOKEN: &str = "apiagg-token-1";
const WHOAMI: &str = "/apis/wardle.example.com/v1alpha1/whoami";

/// A backend pod: TLS for `api.test.svc`, trusting only the front-proxy CA.
fn pod(name: &str, listen: &str, front_ca: &Path) -> Sample {
    let front_ca = front_ca.to_str().expect("utf8");
    Sample::start(
        &[
            "--listen",
            listen,
            "--group",
            G,
            "--version",
            V,
            "--name",
            name,
            "--hostname",
            "api.test.svc",
            "--requestheader-client-ca-file",
            front_ca,
            "--requestheader-allowed-names",
            PROXY_CN,
        ],
        true,
    )
}

/// The pods' CAs as one `caBundle`.
fn ca_bundle(pods: &[&Sample]) -> String {
    let mut pem = Vec::new();
    for pod in pods {
        let dir = pod.cert_dir.as_ref().expect("TLS pod");
        pem.extend(std::fs::read(dir.path().join("ca.crt")).expect("ca.crt"));
    }
    base64::engine::general_purpose::STANDARD.encode(pem)
}

struct World {
    gw: Apiagg,
    delegate: Sample,
    client: reqwest::Client,
}

impl World {
    /// A delegate serving Services and EndpointSlices to token holders, and apiagg resolving
    /// `test/api` port `port` through it as `mode` says.
    fn start(mode: &str, port: u16, pods: &[&Sample], front_proxy: &Ca) -> World {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path();
        let tokens = path.join("delegate-tokens.csv");
        std::fs::write(&tokens, delegate_tokens(TOKEN)).expect("tokens");
        let tokens = tokens.to_str().expect("utf8");
        let delegate = kube_delegate(false, &["--require-token", tokens, "--cluster"]);
        std::fs::write(path.join("apiagg-token"), TOKEN).expect("token");
        write_pair(path, "proxy-client", &front_proxy.client(PROXY_CN, &[]));
        let config = format!(
            "delegate: {{url: \"{}\", bearerTokenFile: apiagg-token}}\n\
             proxyClient: {{certFile: proxy-client.crt, keyFile: proxy-client.key}}\n\
             serviceResolution: {mode}\n\
             apiServices:\n  - apiVersion: apiregistration.k8s.io/v1\n    kind: APIService\n    \
             metadata: {{name: {V}.{G}}}\n    spec: {{group: {G}, version: {V}, groupPriorityMinimum: 1000, \
             versionPriority: 15, service: {{namespace: test, name: api, port: {port}}}, caBundle: {}}}\n",
            delegate.url,
            ca_bundle(pods),
        );
        World {
            gw: Apiagg::start_in(dir, &config, &[], &[]),
            delegate,
            client: client(),
        }
    }

    /// Sends `object` to the delegate's `collection` (POST), or replaces it (PUT) when `name`.
    async fn write(&self, method: reqwest::Method, path: &str, object: &Value) {
        let r = self
            .client
            .request(method.clone(), format!("{}{path}", self.delegate.url))
            .bearer_auth(TOKEN)
            .json(object)
            .send()
            .await
            .expect("write to the delegate");
        assert!(r.status().is_success(), "{method} {path}: {}", r.status());
    }

    async fn delete(&self, path: &str) {
        let r = self
            .client
            .delete(format!("{}{path}", self.delegate.url))
            .bearer_auth(TOKEN)
            .send()
            .await
            .expect("delete at the delegate");
        assert!(r.status().is_success(), "DELETE {path}: {}", r.status());
    }

    /// Which pod answered `whoami` through apiagg (`None` when apiagg did not answer 200), and
    /// who the pod says the caller is.
    async fn answered_by(&self) -> Option<(String, String)> {
        let r = self.client.get(self.gw.url(WHOAMI)).send().await.ok()?;
        if r.status() != 200 {
            return None;
        }
        let pod = r
            .headers()
            .get("x-sample-server")?
            .to_str()
            .ok()?
            .to_string();
        let who: Value = r.json().await.ok()?;
        Some((pod, who["user"].as_str().unwrap_or("").to_string()))
    }

    /// The pods that answered `n` requests in a row.
    async fn spread(&self, n: usize) -> Vec<String> {
        let mut seen = Vec::new();
        for _ in 0..n {
            let pod = self.answered_by().await.map_or("none".into(), |(p, _)| p);
            if !seen.contains(&pod) {
                seen.push(pod);
            }
        }
        seen.sort();
        seen
    }

    /// Waits until `n` requests in a row are spread over exactly `pods`; returns how long.
    async fn wait_spread(&self, pods: &[&str], n: usize) -> Duration {
        let start = Instant::now();
        wait_until(
            &format!("{n} requests in a row to go to exactly {pods:?} (the pods observed)"),
            Duration::from_secs(10),
            || self.spread(n),
            |seen| seen == pods,
        )
        .await;
        start.elapsed()
    }

    /// The `Available` condition of the APIService.
    async fn condition(&self) -> Value {
        let url = self.gw.url(&format!(
            "/apis/apiregistration.k8s.io/v1/apiservices/{V}.{G}"
        ));
        let object = json_of(self.client.get(url).send().await.expect("get")).await;
        object["status"]["conditions"][0].clone()
    }

    async fn wait_condition(&self, status: &str, reason: &str) -> Value {
        wait_until(
            &format!("the condition {status}/{reason}"),
            Duration::from_secs(10),
            || self.condition(),
            |c| c["status"] == status && c["reason"] == reason,
        )
        .await
    }
}

fn service(spec: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "api", "namespace": "test"}, "spec": spec})
}

fn slice(name: &str, port: u16, addresses: &[&str]) -> Value {
    let endpoints: Vec<Value> = addresses
        .iter()
        .map(|a| json!({"addresses": [a], "conditions": {"ready": true}}))
        .collect();
    json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice", "addressType": "IPv4",
        "metadata": {"name": name, "namespace": "test", "labels": {"kubernetes.io/service-name": "api"}},
        "ports": [{"name": "https", "port": port, "protocol": "TCP"}], "endpoints": endpoints})
}

const SERVICES: &str = "/api/v1/namespaces/test/services";
const SLICES: &str = "/apis/discovery.k8s.io/v1/namespaces/test/endpointslices";

#[tokio::test]
async fn endpoint_slices_move_traffic_as_pods_scale() {
    let dir = tempfile::tempdir().expect("tempdir");
    let front_proxy = Ca::new("front-proxy-ca");
    let front_ca = front_proxy.write_ca(dir.path(), "front-proxy-ca");
    let (a, b) = (
        pod("pod-a", "127.0.0.1:0", &front_ca),
        pod("pod-b", "127.0.0.1:0", &front_ca),
    );
    let world = World::start("endpoints", 443, &[&a, &b], &front_proxy);
    world.gw.wait_ready().await;
    world.wait_condition("False", "ServiceNotFound").await;

    let spec = json!({"clusterIP": "10.96.0.10", "ports": [{"name": "https", "port": 443, "targetPort": 8443}]});
    world
        .write(reqwest::Method::POST, SERVICES, &service(spec))
        .await;
    let none = world.wait_condition("False", "EndpointsNotFound").await;
    assert_eq!(
        none["message"],
        "cannot find endpoints for service/api in \"test\""
    );
    assert_eq!(status_code(&world.gw.url(WHOAMI)).await, 503);

    // One pod: its slice makes the group routable, with the caller's identity passed on.
    let started = Instant::now();
    world
        .write(
            reqwest::Method::POST,
            SLICES,
            &slice("api-a", a.port, &["127.0.0.1"]),
        )
        .await;
    let answer = wait_until(
        "the new endpoint to answer",
        Duration::from_secs(5),
        || world.answered_by(),
        Option::is_some,
    )
    .await;
    let first = started.elapsed();
    assert_eq!(
        answer,
        Some(("pod-a".to_string(), "system:anonymous".to_string()))
    );
    world.wait_condition("True", "Passed").await;

    // Scale up: a second slice; both pods get traffic. Scale down: pod-a's slice empties.
    world
        .write(
            reqwest::Method::POST,
            SLICES,
            &slice("api-b", b.port, &["127.0.0.1"]),
        )
        .await;
    let up = world.wait_spread(&["pod-a", "pod-b"], 20).await;
    world
        .write(
            reqwest::Method::PUT,
            &format!("{SLICES}/api-a"),
            &slice("api-a", a.port, &[]),
        )
        .await;
    let down = world.wait_spread(&["pod-b"], 20).await;
    eprintln!(
        "endpoints: first request routed after {first:?}, scale up {up:?}, scale down {down:?}"
    );

    // The delegate goes away: the last known endpoints keep serving.
    let World {
        gw,
        mut delegate,
        client,
    } = world;
    delegate.proc.signal("KILL");
    delegate.proc.wait_exit(Duration::from_secs(5));
    let world = World {
        gw,
        delegate,
        client,
    };
    for _ in 0..10 {
        assert_eq!(
            world.answered_by().await.map(|(p, _)| p).as_deref(),
            Some("pod-b")
        );
    }
}

#[tokio::test]
async fn cluster_ips_follow_the_service() {
    let dir = tempfile::tempdir().expect("tempdir");
    let front_proxy = Ca::new("front-proxy-ca");
    let front_ca = front_proxy.write_ca(dir.path(), "front-proxy-ca");
    let a = pod("pod-a", "127.0.0.1:0", &front_ca);
    // The same port on another loopback address: a second "cluster IP".
    let b = pod("pod-b", &format!("127.0.0.2:{}", a.port), &front_ca);
    let world = World::start("cluster", a.port, &[&a, &b], &front_proxy);
    world.gw.wait_ready().await;

    let ports = json!([{"name": "https", "port": a.port}]);
    let spec = json!({"clusterIP": "127.0.0.1", "ports": ports});
    world
        .write(reqwest::Method::POST, SERVICES, &service(spec))
        .await;
    world.wait_spread(&["pod-a"], 5).await;
    world.wait_condition("True", "Passed").await;

    let moved = json!({"clusterIP": "127.0.0.2", "ports": ports});
    world
        .write(
            reqwest::Method::PUT,
            &format!("{SERVICES}/api"),
            &service(moved),
        )
        .await;
    let took = world.wait_spread(&["pod-b"], 5).await;
    eprintln!("cluster: a changed cluster IP took {took:?}");

    let wrong_port = json!({"clusterIP": "127.0.0.2", "ports": [{"name": "https", "port": 1}]});
    world
        .write(
            reqwest::Method::PUT,
            &format!("{SERVICES}/api"),
            &service(wrong_port),
        )
        .await;
    let port = world.wait_condition("False", "ServicePortError").await;
    assert_eq!(
        port["message"],
        format!(
            "service/api in \"test\" is not listening on port {}",
            a.port
        )
    );
    world.delete(&format!("{SERVICES}/api")).await;
    world.wait_condition("False", "ServiceNotFound").await;
    assert_eq!(status_code(&world.gw.url(WHOAMI)).await, 503);
}
