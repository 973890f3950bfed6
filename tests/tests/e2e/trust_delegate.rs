//! apiagg's own credentials at a delegate that requires a token: a token file (rotated without a
//! restart), a kubeconfig, and the in-cluster service account.

use std::time::Duration;

use apiagg_tests::pki::{write_pair, Ca};
use apiagg_tests::trust::{token_delegate, Cluster, APIAGG_USER};
use apiagg_tests::{answer_code, wait_until, Apiagg, Sample};
use base64::Engine;
use serde_json::json;

/// Waits until apiagg is ready (plain HTTP listener), which needs the delegate's groups.
async fn ready(gw: &Apiagg) {
    gw.wait_ready().await;
    let apis = apiagg_tests::get_text(&gw.url("/apis")).await;
    assert!(apis.contains("\"apps\""), "the delegate's groups: {apis}");
}

fn ca_of(delegate: &Sample) -> Vec<u8> {
    let dir = delegate.cert_dir.as_ref().expect("TLS delegate");
    std::fs::read(dir.path().join("ca.crt")).expect("ca.crt")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotated_token_file_is_used_without_a_restart() {
    let mut c = Cluster::start(true).await;
    let alice = c.client(Some(&c.client_ca.client("alice", &[])));
    let whoami = || c.get(&alice, "/debug/whoami", &[]);
    let impersonated = |(code, seen): &(u16, serde_json::Value)| {
        *code == 200 && seen["impersonatedBy"] == APIAGG_USER
    };
    let first = whoami().await;
    assert!(
        impersonated(&first),
        "impersonation with the first token: {first:?}"
    );

    // The delegate now knows only the second token: impersonation fails until apiagg reads it.
    let tokens = c.dir.join("delegate-tokens.csv");
    std::fs::write(
        &tokens,
        apiagg_tests::trust::delegate_tokens("apiagg-token-2"),
    )
    .expect("rotate");
    assert_eq!(c.get(&alice, "/debug/whoami", &[]).await.0, 401);
    std::fs::write(c.dir.join("apiagg-token"), "apiagg-token-2\n").expect("rotate");
    wait_until(
        "the rotated token to be used (apiagg impersonating alice at the delegate)",
        Duration::from_secs(10),
        whoami,
        impersonated,
    )
    .await;
    let exited = c.gw.proc.child.try_wait().expect("try_wait");
    assert!(exited.is_none(), "apiagg restarted: {exited:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kubeconfig_gives_server_ca_and_token() {
    let dir = tempfile::tempdir().expect("tempdir");
    let delegate = token_delegate(dir.path(), "kubeconfig-token", true);
    let ca = base64::engine::general_purpose::STANDARD.encode(ca_of(&delegate));
    let kubeconfig = format!(
        "apiVersion: v1\nkind: Config\ncurrent-context: ctx\n\
         clusters:\n- name: c\n  cluster: {{server: \"{}\", certificate-authority-data: {ca}}}\n\
         users:\n- name: u\n  user: {{token: kubeconfig-token}}\n\
         contexts:\n- name: other\n  context: {{cluster: missing, user: u}}\n- name: ctx\n  context: {{cluster: c, user: u}}\n",
        delegate.url
    );
    std::fs::write(dir.path().join("kubeconfig"), kubeconfig).expect("kubeconfig");
    let gw = Apiagg::start_in(dir, "delegate: {kubeconfig: kubeconfig}\n", &[], &[]);
    ready(&gw).await;
    assert!(delegate.requests("/apis").await >= 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_cluster_reads_the_environment_and_the_service_account() {
    let dir = tempfile::tempdir().expect("tempdir");
    let delegate = token_delegate(dir.path(), "in-cluster-token", true);
    let account = dir.path().join("serviceaccount");
    std::fs::create_dir(&account).expect("mkdir");
    std::fs::write(account.join("token"), "in-cluster-token").expect("token");
    std::fs::write(account.join("ca.crt"), ca_of(&delegate)).expect("ca");
    let port = delegate.port.to_string();
    let env = [
        ("KUBERNETES_SERVICE_HOST", "127.0.0.1"),
        ("KUBERNETES_SERVICE_PORT", port.as_str()),
    ];
    let config = "delegate: {inCluster: true, serviceAccountDir: serviceaccount}\n";
    let gw = Apiagg::start_in(dir, config, &[], &env);
    ready(&gw).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_credentials_the_token_delegate_never_gets_ready() {
    let dir = tempfile::tempdir().expect("tempdir");
    let delegate = token_delegate(dir.path(), "unused", false);
    let config = format!("delegate: {{url: \"{}\"}}\n", delegate.url);
    let gw = Apiagg::start_in(dir, &config, &[], &[]);
    // The delegate refuses apiagg's anonymous discovery: readyz stays red, saying why.
    delegate
        .wait_requests("/apis", 1, Duration::from_secs(10))
        .await;
    let client = apiagg_tests::client();
    let readyz = client
        .get(gw.url("/readyz?verbose"))
        .send()
        .await
        .expect("readyz");
    assert_eq!(readyz.status(), 500);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotated_proxy_client_certificate_is_presented_without_a_restart() {
    let c = Cluster::start(true).await;
    let alice = c.client(Some(&c.client_ca.client("alice", &[])));
    let whoami = format!("/apis/{}/{}/whoami", apiagg_tests::G, apiagg_tests::V);
    let code = || async { c.get(&alice, &whoami, &[]).await.0 };
    assert_eq!(code().await, 200);
    // A certificate with a CN the backend does not accept: the availability probe, now sent with
    // it, is refused (401) and the APIService turns unavailable (503 with the reason).
    let replace = |pair: (String, String)| {
        let tmp = c.dir.join("rotating");
        std::fs::create_dir_all(&tmp).expect("mkdir");
        write_pair(&tmp, "proxy-client", &pair);
        std::fs::rename(tmp.join("proxy-client.key"), c.dir.join("proxy-client.key")).expect("key");
        std::fs::rename(tmp.join("proxy-client.crt"), c.dir.join("proxy-client.crt"))
            .expect("cert");
    };
    replace(c.front_proxy_ca.client("someone-else", &[]));
    wait_until(
        "the new certificate to be presented (the APIService unavailable: 503)",
        Duration::from_secs(10),
        code,
        |code| *code == 503,
    )
    .await;
    let (_, status) = c.get(&alice, &whoami, &[]).await;
    let message = status["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("FailedDiscoveryCheck") && message.contains("401"),
        "{status}"
    );
    replace(c.front_proxy_ca.client(apiagg_tests::trust::PROXY_CN, &[]));
    wait_until(
        "the restored certificate to be presented (200 again)",
        Duration::from_secs(10),
        code,
        |code| *code == 200,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delegate_certificate_is_used_only_in_apiaggs_own_name() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().to_path_buf();
    let (delegate_ca, callers_ca, serving_ca) = (
        Ca::new("delegate-clients"),
        Ca::new("callers"),
        Ca::new("serving"),
    );
    let delegate_ca_file = delegate_ca.write_ca(&path, "delegate-client-ca");
    write_pair(
        &path,
        "apiagg-client",
        &delegate_ca.client("apiagg", &["impersonators"]),
    );
    callers_ca.write_ca(&path, "callers-ca");
    write_pair(
        &path,
        "serving",
        &serving_ca.server(&["localhost", "127.0.0.1"]),
    );
    let delegate = apiagg_tests::kube_delegate_over(
        true,
        false,
        &["--client-ca-file", delegate_ca_file.to_str().expect("utf8")],
    );
    std::fs::write(path.join("delegate-ca.crt"), ca_of(&delegate)).expect("ca");
    let config = format!(
        "tls: {{certFile: serving.crt, keyFile: serving.key}}\n\
         authentication: {{clientCAFile: callers-ca.crt}}\n\
         delegate: {{url: \"{}\", caFile: delegate-ca.crt, certFile: apiagg-client.crt, keyFile: apiagg-client.key}}\n",
        delegate.url
    );
    let gw = Apiagg::start_in(dir, &config, &[], &[]);
    let client = |identity: Option<&(String, String)>| {
        let ca = reqwest::Certificate::from_pem(serving_ca.cert_pem.as_bytes()).expect("CA");
        let mut b = reqwest::Client::builder().add_root_certificate(ca);
        if let Some((cert, key)) = identity {
            let pem = format!("{cert}{key}");
            b = b.identity(reqwest::Identity::from_pem(pem.as_bytes()).expect("identity"));
        }
        b.build().expect("client")
    };
    let url = |p: &str| format!("https://localhost:{}{p}", gw.port);
    let plain = client(None);
    wait_until(
        "apiagg to get ready with its delegate certificate",
        Duration::from_secs(20),
        || answer_code(plain.get(url("/readyz"))),
        |code| *code == 200,
    )
    .await;

    // A certificate caller goes as apiagg's certificate impersonating it.
    let bob = client(Some(&callers_ca.client("bob", &["dev"])));
    for _ in 0..3 {
        let r = bob.get(url("/debug/whoami")).send().await.expect("whoami");
        assert_eq!(r.status(), 200);
        let seen: serde_json::Value = r.json().await.expect("json");
        assert_eq!(
            (&seen["user"], &seen["impersonatedBy"]),
            (&json!("bob"), &json!("apiagg")),
            "{seen}"
        );
    }
    // An anonymous caller right after never rides on apiagg's authenticated connections.
    for _ in 0..3 {
        let r = plain
            .get(url("/debug/whoami"))
            .send()
            .await
            .expect("whoami");
        assert_eq!(
            r.status(),
            401,
            "an anonymous caller borrowed apiagg's certificate"
        );
    }
}
