//! kubectl over HTTPS (HTTP/2) with a client-certificate kubeconfig and with a token kubeconfig,
//! against apiagg with anonymous requests off: discovery, get, watch, explain; and a WebSocket
//! upgrade with a client certificate, which the authenticating backend accepts only because
//! apiagg presents its proxy client certificate and the caller's identity on the tunnel.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use apiagg_tests::trust::{Cluster, REVIEWED_TOKEN};
use apiagg_tests::{G, V};
use base64::Engine;
use futures_util::{SinkExt, StreamExt};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::Message;

fn b64(text: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(text)
}

/// A kubeconfig for apiagg with `user` (a YAML mapping).
pub(crate) fn kubeconfig(c: &Cluster, name: &str, user: &str) -> std::path::PathBuf {
    let text = format!(
        "apiVersion: v1\nkind: Config\ncurrent-context: apiagg\n\
         clusters:\n- name: apiagg\n  cluster: {{server: \"{}\", certificate-authority-data: {}}}\n\
         users:\n- name: u\n  user: {user}\n\
         contexts:\n- name: apiagg\n  context: {{cluster: apiagg, user: u, namespace: default}}\n",
        c.url(""),
        b64(&c.serving_ca.cert_pem)
    );
    let path = c.dir.join(name);
    std::fs::write(&path, text).expect("kubeconfig");
    path
}

pub(crate) fn kubectl(config: &std::path::Path, args: &[&str]) -> String {
    let mut command = Command::new("kubectl");
    command.arg("--kubeconfig").arg(config);
    apiagg_tests::kubectl_ok(command, args)
}

pub(crate) async fn create(c: &Cluster, client: &reqwest::Client, name: &str) {
    let body = serde_json::json!({"apiVersion": format!("{G}/{V}"), "kind": "Flunder",
        "metadata": {"name": name}});
    let url = c.url(&format!("/apis/{G}/{V}/namespaces/default/flunders"));
    let r = client.post(url).json(&body).send().await.expect("create");
    assert_eq!(r.status(), 201, "{}", r.text().await.unwrap_or_default());
}

/// `kubectl get -w` prints the existing object, then one created while it watches.
pub(crate) async fn watch(
    c: &Cluster,
    config: &std::path::Path,
    client: &reqwest::Client,
    name: &str,
) {
    let mut child = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(config)
        .args(["get", "flunders", "-w", "-o", "name"])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("kubectl get -w");
    let stdout = child.stdout.take().expect("stdout");
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    // The objects that exist are listed first (in name order), then what changes.
    wait_for(&mut rx, "flunder.wardle.example.com/first").await;
    create(c, client, name).await;
    wait_for(&mut rx, &format!("flunder.wardle.example.com/{name}")).await;
    let _ = child.kill();
    let _ = child.wait();
}

/// Reads lines until `expected` (20 s at most).
async fn wait_for(rx: &mut tokio::sync::mpsc::UnboundedReceiver<String>, expected: &str) {
    let mut seen = Vec::new();
    let found = tokio::time::timeout(Duration::from_secs(20), async {
        while let Some(line) = rx.recv().await {
            if line == expected {
                return true;
            }
            seen.push(line);
        }
        false
    })
    .await;
    assert_eq!(
        found,
        Ok(true),
        "kubectl get -w never printed {expected}: {seen:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_with_certificate_and_token_kubeconfigs() {
    let c = Cluster::start(false).await;
    let pair = c.client_ca.client("alice", &["dev"]);
    let alice = c.client(Some(&pair));
    create(&c, &alice, "first").await;

    let by_cert = kubeconfig(
        &c,
        "cert.kubeconfig",
        &format!(
            "{{client-certificate-data: {}, client-key-data: {}}}",
            b64(&pair.0),
            b64(&pair.1)
        ),
    );
    let by_token = kubeconfig(
        &c,
        "token.kubeconfig",
        &format!("{{token: {REVIEWED_TOKEN}}}"),
    );
    for (config, created) in [(&by_cert, "by-cert"), (&by_token, "by-token")] {
        let resources = kubectl(config, &["api-resources"]);
        assert!(resources.contains("flunders"), "{resources}");
        assert!(resources.contains("deployments"), "{resources}");
        let names = kubectl(config, &["get", "flunders", "-o", "name"]);
        assert!(
            names.contains("flunder.wardle.example.com/first"),
            "{names}"
        );
        let explained = kubectl(config, &["explain", "flunders"]);
        assert!(
            explained.contains("KIND:") && explained.contains("Flunder"),
            "{explained}"
        );
        watch(&c, config, &alice, created).await;
    }
    // With a token nobody knows kubectl is refused.
    let stranger = kubeconfig(&c, "unknown.kubeconfig", "{token: nope}");
    let out = Command::new(apiagg_tests::KUBECTL_132_BIN)
        .arg("--kubeconfig")
        .arg(&stranger)
        .args(["get", "flunders"])
        .stdin(Stdio::null())
        .output()
        .expect("kubectl");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("(Unauthorized)"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_websocket_upgrade_carries_the_identity_on_the_tunnel() {
    let c = Cluster::start(false).await;
    let tls = c.tls_connect(&c.client_ca.client("alice", &[])).await;
    let url = format!(
        "wss://localhost:{}/apis/{G}/{V}/namespaces/default/flunders/x/exec",
        c.gw.port
    );
    let mut request = url.into_client_request().expect("request");
    request.headers_mut().insert(
        "sec-websocket-protocol",
        "v5.channel.k8s.io".parse().expect("header"),
    );
    let (mut ws, response) = tokio_tungstenite::client_async(request, tls)
        .await
        .expect("the backend accepted the upgrade");
    assert_eq!(response.status(), 101);
    ws.send(Message::binary(vec![1u8, 2, 3]))
        .await
        .expect("send");
    let echoed = ws.next().await.expect("message").expect("ok");
    assert_eq!(echoed, Message::binary(vec![1u8, 2, 3]));
    ws.close(None).await.expect("close");
}
