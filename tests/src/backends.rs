//! The sample backends the tests start, and the config lines that register them.

use std::process::{Command, Stdio};
use std::time::Duration;

use base64::Engine;

use crate::{binary, fixtures, read_listening, wait_until, Proc};

/// A running sample extension API server, killed when dropped.
pub struct Sample {
    /// The process.
    pub proc: Proc,
    /// `http://127.0.0.1:PORT` or `https://…`.
    pub url: String,
    /// The port of [`Sample::url`].
    pub port: u16,
    /// With TLS: the folder of its `ca.crt` and serving certificate.
    pub cert_dir: Option<tempfile::TempDir>,
}

impl Sample {
    /// Starts `sample-apiserver` with `args` (plus `--tls --cert-dir` when `tls`).
    pub fn start(args: &[&str], tls: bool) -> Sample {
        let cert_dir = tls.then(|| tempfile::tempdir().expect("tempdir"));
        let mut cmd = Command::new(binary("sample-apiserver", "apiagg-tests"));
        cmd.args(args);
        if !args.contains(&"--listen") {
            cmd.args(["--listen", "127.0.0.1:0"]);
        }
        if let Some(dir) = &cert_dir {
            cmd.arg("--tls").arg("--cert-dir").arg(dir.path());
        }
        cmd.stdout(Stdio::piped()).stderr(Stdio::inherit());
        let mut child = cmd.spawn().expect("spawn sample-apiserver");
        let stdout = child.stdout.take().expect("stdout");
        let mut proc = Proc { child };
        let Some(listening) = read_listening(stdout) else {
            eprintln!("sample-apiserver did not say where it listens: waiting for its exit status");
            let status = proc.wait_exit(Duration::from_secs(5));
            panic!("sample-apiserver did not say where it listens (exit status {status:?})");
        };
        Sample {
            proc,
            url: listening.url,
            port: listening.port,
            cert_dir,
        }
    }

    /// A plain-HTTP sample serving `wardle.example.com/v1alpha1` flunders, with `extra` arguments
    /// (e.g. `--namespaced`).
    pub fn wardle(extra: &[&str]) -> Sample {
        let mut args = vec!["--group", G, "--version", V, "--resource", "flunders"];
        args.extend_from_slice(&["--kind", "Flunder", "--name", "w"]);
        args.extend_from_slice(extra);
        Sample::start(&args, false)
    }

    /// What this backend was asked, as `METHOD path?query`, oldest first (its
    /// `/debug/queries` log).
    pub async fn queries(&self) -> Vec<String> {
        crate::client()
            .get(format!("{}/debug/queries", self.url))
            .send()
            .await
            .expect("queries")
            .json()
            .await
            .expect("queries JSON")
    }

    /// How many requests for `path` this backend has served (its `/debug/requests` log).
    pub async fn requests(&self, path: &str) -> u64 {
        let client = reqwest::Client::builder()
            .danger_accept_invalid_certs(true)
            .build()
            .expect("client");
        let log: serde_json::Value = client
            .get(format!("{}/debug/requests", self.url))
            .send()
            .await
            .expect("GET /debug/requests")
            .json()
            .await
            .expect("request log JSON");
        log[path].as_u64().unwrap_or(0)
    }

    /// What this backend was asked for at `path` and answered (its `/debug/negotiation` log):
    /// `Accept` (empty when absent) → `"<status> <Content-Type>"` → count.
    pub async fn negotiation(
        &self,
        path: &str,
    ) -> std::collections::BTreeMap<String, std::collections::BTreeMap<String, u64>> {
        let client = reqwest::Client::builder()
            .danger_accept_invalid_certs(true)
            .build()
            .expect("client");
        let mut log: std::collections::BTreeMap<String, _> = client
            .get(format!("{}/debug/negotiation", self.url))
            .send()
            .await
            .expect("GET /debug/negotiation")
            .json()
            .await
            .expect("negotiation log JSON");
        log.remove(path).unwrap_or_default()
    }

    /// Waits until this backend has served `path` at least `count` times (at most `limit`).
    pub async fn wait_requests(&self, path: &str, count: u64, limit: Duration) {
        wait_until(
            &format!("{path} to be asked {count} times"),
            limit,
            || self.requests(path),
            |seen| *seen >= count,
        )
        .await;
    }

    /// How many requests for `path` this backend holds now: arrived, and not answered yet
    /// (its `/debug/in-flight`). A `slow?ms=` request is held for its milliseconds; a watch is
    /// answered (its stream begun) at once.
    pub async fn in_flight(&self, path: &str) -> u64 {
        let client = reqwest::Client::builder()
            .danger_accept_invalid_certs(true)
            .build()
            .expect("client");
        let held: serde_json::Value = client
            .get(format!("{}/debug/in-flight", self.url))
            .send()
            .await
            .expect("GET /debug/in-flight")
            .json()
            .await
            .expect("in-flight JSON");
        held[path].as_u64().unwrap_or(0)
    }

    /// Waits until this backend holds `count` requests for `path` at once (at most `limit`).
    pub async fn wait_in_flight(&self, path: &str, count: u64, limit: Duration) {
        wait_until(
            &format!("the backend to hold {count} requests for {path} at once"),
            limit,
            || self.in_flight(path),
            |held| *held == count,
        )
        .await;
    }

    /// `ca.crt` of a TLS sample, base64 for an APIService `caBundle`.
    pub fn ca_bundle(&self) -> String {
        let dir = self.cert_dir.as_ref().expect("a TLS sample");
        let pem = std::fs::read(dir.path().join("ca.crt")).expect("ca.crt");
        base64::engine::general_purpose::STANDARD.encode(pem)
    }
}

/// The delegate of most tests: a sample-apiserver named `delegate` serving the kube-apiserver
/// discovery fixtures (`apps/v1` deployments as its own resource), with `openapi` the
/// kube-apiserver 1.32 OpenAPI v2 and v3 documents too; `extra` adds arguments (`--listen`).
pub fn kube_delegate(openapi: bool, extra: &[&str]) -> Sample {
    kube_delegate_over(false, openapi, extra)
}

/// [`kube_delegate`], serving HTTPS when `tls` (its CA in `cert_dir/ca.crt`).
pub fn kube_delegate_over(tls: bool, openapi: bool, extra: &[&str]) -> Sample {
    kube_apiserver(tls, openapi, "delegate", extra)
}

/// A kube-apiserver stand-in named `name` (several of them: an HA control plane), plain HTTP,
/// serving the discovery fixtures; `extra` adds arguments.
pub fn kube_named(name: &str, extra: &[&str]) -> Sample {
    kube_apiserver(false, false, name, extra)
}

fn kube_apiserver(tls: bool, openapi: bool, name: &str, extra: &[&str]) -> Sample {
    let kube = fixtures().join("kubernetes");
    let path = |p: &str| kube.join(p).to_str().expect("utf8 path").to_string();
    let mut args: Vec<String> = vec!["--fixtures".into(), path("discovery")];
    if openapi {
        args.extend([
            "--openapi-v2".into(),
            path("openapi-v2/swagger-v1.32.json"),
            "--openapi-v3-dir".into(),
            path("openapi-v3"),
        ]);
    }
    for arg in [
        "--group",
        "apps",
        "--version",
        "v1",
        "--resource",
        "deployments",
        "--kind",
        "Deployment",
        "--name",
        name,
    ] {
        args.push(arg.into());
    }
    args.extend(extra.iter().map(|a| a.to_string()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    Sample::start(&args, tls)
}

/// One APIService manifest line for a config.
pub fn apiservice(group: &str, version: &str, service: &str, tls: &str) -> String {
    format!(
        "  - apiVersion: apiregistration.k8s.io/v1\n    kind: APIService\n    metadata: {{name: {version}.{group}}}\n    spec: {{group: {group}, version: {version}, groupPriorityMinimum: 1000, versionPriority: 15, service: {{namespace: test, name: {service}, port: 443}}{tls}}}\n"
    )
}

/// One `services` entry.
pub fn service(name: &str, url: &str) -> String {
    format!("  - {{namespace: test, name: {name}, port: 443, endpoints: [\"{url}\"]}}\n")
}

/// A config with one remote APIService, `v1alpha1.wardle.example.com`, served by `backend` as
/// Service `test/<name>`.
pub fn one_backend(name: &str, backend: &Sample) -> String {
    format!(
        "services:\n{}apiServices:\n{}",
        service(name, &backend.url),
        apiservice(G, V, name, "")
    )
}

/// The group and version of the wardle sample backends.
pub const G: &str = "wardle.example.com";

/// See [`G`].
pub const V: &str = "v1alpha1";

/// A TLS sample backend for the wardle group that offers h2 (ALPN), as Service `test/h2`.
pub fn h2_sample() -> Sample {
    Sample::start(
        &[
            "--group",
            G,
            "--version",
            V,
            "--name",
            "h2",
            "--hostname",
            "h2.test.svc",
            "--h2",
        ],
        true,
    )
}

/// A sample backend for `group`; with TLS its certificate is valid for `<name>.test.svc`, the
/// server name apiagg verifies for an APIService whose service is `test/<name>`.
pub fn sample(group: &str, name: &str, tls: bool) -> Sample {
    sample_with(group, name, tls, &[])
}

/// [`sample`] with `extra` arguments.
pub fn sample_with(group: &str, name: &str, tls: bool, extra: &[&str]) -> Sample {
    let hostname = format!("{name}.test.svc");
    let mut args = vec![
        "--group",
        group,
        "--version",
        V,
        "--resource",
        "flunders",
        "--kind",
        "Flunder",
        "--name",
        name,
        "--hostname",
        &hostname,
    ];
    args.extend_from_slice(extra);
    Sample::start(&args, tls)
}

/// A sample backend serving `foos` in `<group>/v1`, named `name`, on `port` (0: any).
pub fn backend(group: &str, name: &str, port: u16) -> Sample {
    Sample::start(
        &[
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--group",
            group,
            "--version",
            "v1",
            "--resource",
            "foos",
            "--kind",
            "Foo",
            "--name",
            name,
        ],
        false,
    )
}

/// An APIService `v1.<group>` served by `test/<service>` (priorities 1000/15).
pub fn apiservice_v1(group: &str, service: &str) -> String {
    apiservice(group, "v1", service, "")
}

/// The oauth-apiserver backend on `port`, serving its discovery fixtures; with `openapi_docs`
/// also the `swagger.json` and `v3/` documents of that folder (read on every request).
pub fn oauth_backend(port: u16, openapi_docs: Option<&std::path::Path>) -> Sample {
    let discovery = fixtures().join("extension-apiservers/oauth-apiserver/discovery");
    let path = |p: std::path::PathBuf| p.to_str().expect("utf8 path").to_string();
    let mut args = vec![
        "--listen".to_string(),
        format!("127.0.0.1:{port}"),
        "--fixtures".into(),
        path(discovery),
    ];
    if let Some(docs) = openapi_docs {
        args.extend([
            "--openapi-v2".into(),
            path(docs.join("swagger.json")),
            "--openapi-v3-dir".into(),
            path(docs.join("v3")),
        ]);
    }
    for arg in [
        "--group",
        "oauth.openshift.io",
        "--version",
        "v1",
        "--resource",
        "oauthclients",
        "--kind",
        "OAuthClient",
        "--name",
        "oauth",
    ] {
        args.push(arg.into());
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    Sample::start(&args, false)
}
