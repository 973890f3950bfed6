//! Two apiagg replicas on one etcd (Debian's `etcd-server`): a registration through one routes
//! on the other within a second; both keep routing while etcd is away; a change made once it is
//! back reaches both.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use apiagg_tests::{answer_code, client, status_code, wait_until, Apiagg, Proc};
use serde_json::json;

const API: &str = "/apis/apiregistration.k8s.io/v1/apiservices";

fn free_port() -> u16 {
    let socket = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    socket.local_addr().expect("addr").port()
}

/// A real etcd on loopback, its data in `dir`.
fn etcd(dir: &std::path::Path, client_port: u16, peer_port: u16) -> Proc {
    let url = format!("http://127.0.0.1:{client_port}");
    let child = Command::new("etcd")
        .arg("--data-dir")
        .arg(dir)
        .args([
            "--listen-client-urls",
            &url,
            "--advertise-client-urls",
            &url,
        ])
        .args([
            "--listen-peer-urls",
            &format!("http://127.0.0.1:{peer_port}"),
        ])
        .args([
            "--initial-advertise-peer-urls",
            &format!("http://127.0.0.1:{peer_port}"),
        ])
        .args([
            "--initial-cluster",
            &format!("default=http://127.0.0.1:{peer_port}"),
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start etcd (Debian: apt-get install -y etcd-server)");
    Proc { child }
}

async fn etcd_ready(client_port: u16) {
    let url = format!("http://127.0.0.1:{client_port}/health");
    wait_until(
        "etcd to start (its /health answering 200)",
        Duration::from_secs(20),
        || answer_code(client().get(&url)),
        |code| *code == 200,
    )
    .await;
}

/// `v1.<name>.example.com`, served by the Service `test/<name>`.
fn object(name: &str) -> serde_json::Value {
    let group = format!("{name}.example.com");
    json!({"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
        "metadata": {"name": format!("v1.{group}")},
        "spec": {"group": group, "version": "v1", "groupPriorityMinimum": 1000, "versionPriority": 15,
            "service": {"namespace": "test", "name": name}}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_share_registrations_through_etcd() {
    let data = tempfile::tempdir().expect("tempdir");
    let (client_port, peer_port) = (free_port(), free_port());
    let mut server = etcd(data.path(), client_port, peer_port);
    etcd_ready(client_port).await;
    let (one, two) = (
        apiagg_tests::backend("one.example.com", "one", 0),
        apiagg_tests::backend("two.example.com", "two", 0),
    );
    let config = format!(
        "services:\n{}{}",
        apiagg_tests::service("one", &one.url),
        apiagg_tests::service("two", &two.url)
    );
    let etcd_url = format!("http://127.0.0.1:{client_port}");
    let a = Apiagg::start(&config, &["--etcd-servers", &etcd_url]);
    let b = Apiagg::start(&config, &["--etcd-servers", &etcd_url]);
    a.wait_ready().await;
    b.wait_ready().await;

    // Registered through A, routed by B as soon as etcd's watch tells it (within a second; the
    // bound leaves a loaded machine room).
    let started = Instant::now();
    let r = client()
        .post(a.url(API))
        .json(&object("one"))
        .send()
        .await
        .expect("create");
    assert_eq!(r.status(), 201);
    let path = "/apis/one.example.com/v1/foos";
    let on_b = b.url(path);
    wait_until(
        "replica B to route the new group",
        Duration::from_secs(10),
        || status_code(&on_b),
        |code| *code == 200,
    )
    .await;
    let took = started.elapsed();
    eprintln!("apply on A to a proxied 200 on B: {took:?}");

    // etcd away: both keep routing what they know.
    server.signal("KILL");
    server.wait_exit(Duration::from_secs(5));
    for gw in [&a, &b] {
        assert_eq!(status_code(&gw.url(path)).await, 200);
    }
    let refused = client()
        .post(a.url(API))
        .json(&object("two"))
        .send()
        .await
        .expect("create");
    assert!(refused.status().is_server_error(), "{}", refused.status());

    // etcd back: a change through B reaches A.
    let _server = etcd(data.path(), client_port, peer_port);
    etcd_ready(client_port).await;
    wait_until(
        "a write through B after etcd came back",
        Duration::from_secs(10),
        || answer_code(client().post(b.url(API)).json(&object("two"))),
        // 409: an earlier attempt was stored although its answer was lost.
        |code| *code == 201 || *code == 409,
    )
    .await;
    let two = a.url("/apis/two.example.com/v1/foos");
    wait_until(
        "replica A to see the change made after etcd came back",
        Duration::from_secs(10),
        || status_code(&two),
        |code| *code == 200,
    )
    .await;
}

/// An older replica (or anyone with etcd access) stored `v1.apps` pointing at its own backend:
/// apiagg never routes it — the delegate's `apps/v1` wins from the first request — marks it
/// `Available=False/BuiltinGroup`, and GET and DELETE reach the stored object. Caller: an
/// anonymous admin of this test config.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_builtin_group_planted_in_etcd_never_routes() {
    use base64::Engine;
    let data = tempfile::tempdir().expect("tempdir");
    let (client_port, peer_port) = (free_port(), free_port());
    let _server = etcd(data.path(), client_port, peer_port);
    etcd_ready(client_port).await;
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    let planted = json!({"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
        "metadata": {"name": "v1.apps", "uid": "0c3d1b6e-0000-4000-8000-000000000001"},
        "spec": {"group": "apps", "version": "v1", "groupPriorityMinimum": 20000,
            "versionPriority": 1000, "insecureSkipTLSVerify": true,
            "service": {"namespace": "test", "name": "attacker"}}});
    let put = json!({"key": b64("/registry/apiregistration.k8s.io/apiservices/v1.apps"),
        "value": b64(&planted.to_string())});
    let stored = client()
        .post(format!("http://127.0.0.1:{client_port}/v3/kv/put"))
        .json(&put)
        .send()
        .await
        .expect("etcd put");
    assert_eq!(stored.status(), 200);

    let attacker = apiagg_tests::sample(apiagg_tests::G, "attacker", false);
    let delegate = apiagg_tests::kube_delegate(false, &[]);
    let config = format!(
        "delegate: {{url: \"{}\"}}\nservices:\n{}",
        delegate.url,
        apiagg_tests::service("attacker", &attacker.url)
    );
    let etcd_url = format!("http://127.0.0.1:{client_port}");
    let gw = Apiagg::start(&config, &["--etcd-servers", &etcd_url]);
    gw.wait_ready().await;
    for path in [
        "/apis/apps/v1/deployments",
        "/api/v1/namespaces/kube-system/secrets",
    ] {
        client().get(gw.url(path)).send().await.expect("request");
        assert_eq!(delegate.requests(path).await, 1, "{path}");
        assert_eq!(attacker.requests(path).await, 0, "{path}");
    }
    let url = gw.url(&format!("{API}/v1.apps"));
    let object = wait_until(
        "the planted APIService to be marked BuiltinGroup",
        Duration::from_secs(10),
        || async { apiagg_tests::json_of(client().get(&url).send().await.expect("get")).await },
        |object| object["status"]["conditions"][0]["reason"] == "BuiltinGroup",
    )
    .await;
    assert_eq!(object["spec"]["service"]["name"], "attacker", "{object}");
    assert_eq!(object["status"]["conditions"][0]["status"], "False");
    let deleted = client().delete(&url).send().await.expect("delete");
    assert_eq!(deleted.status(), 200);
    let object = apiagg_tests::json_of(client().get(&url).send().await.expect("get")).await;
    assert_eq!(
        object["metadata"]["annotations"]["apiagg.io/declared-in"],
        "the delegate"
    );
    assert_eq!(attacker.requests("/apis/apps/v1/deployments").await, 0);
}
