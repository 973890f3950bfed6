//! The real Kubernetes control plane of the `real_kube::` suites: etcd, kube-apiserver and
//! k8s.io/sample-apiserver, built from Go modules by `scripts/need.sh kube` (`tests/kube`), started
//! once per test process on loopback ports with a generated PKI, and apiagg in front of them
//! ([`RealKube::apiagg`]).
//!
//! kube-apiserver runs as a cluster's does for what apiagg touches: client certificates, the
//! front-proxy CA (`--requestheader-*` and `--proxy-client-*`), service-account keys,
//! `--authorization-mode=Node,RBAC`, API Priority and Fairness on (its default). sample-apiserver
//! keeps its flunders in the same etcd (its own prefix), authenticates and authorizes through
//! kube-apiserver (TokenReview, SubjectAccessReview) and trusts `X-Remote-*` from the front-proxy
//! CA's two clients: kube-apiserver's aggregator and apiagg. kube-apiserver reaches it through the
//! APIService `v1alpha1.wardle.example.com` and a Service `wardle/api` of type ExternalName
//! `localhost`: Endpoints and EndpointSlices may not hold loopback addresses, a ClusterIP is not
//! routable here, and kube-aggregator resolves an ExternalName Service to `<externalName>:<port of
//! the APIService>` (verifying the name `api.wardle.svc`, which the serving certificate holds).
//!
//! The processes outlive every test of the process and are ended with it: each is started by one
//! long-lived thread with a parent-death signal (`setpriv --pdeathsig KILL`), so a test process
//! that ends, however it ends, takes them along. Their folder (logs, etcd data) is
//! `$TMPDIR/apiagg-real-kube-<pid>`; the folders of ended processes are removed by the next start.

mod clients;
mod front;
mod process;
mod setup;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::pki::Ca;
use crate::wait_until;

pub use clients::{events, kubectl, kubectl_137, GoClient};
pub use front::{Front, Lookup, APIAGG_PROXY_CN};
pub use process::{free_port, kube_binaries};
use process::{process_folder, spawn_lasting};
use setup::requestheader;

/// The group-version sample-apiserver serves.
pub const WARDLE: &str = "/apis/wardle.example.com/v1alpha1";
/// The CN of kube-apiserver's proxy client certificate (`--proxy-client-cert-file`).
pub const KUBE_PROXY_CN: &str = "front-proxy-client";

/// The running control plane (see the module's documentation).
pub struct RealKube {
    /// Its folder: certificates, kubeconfigs, `*.log`, etcd's data.
    pub dir: PathBuf,
    /// kube-apiserver's port (`https://127.0.0.1:PORT`).
    pub kube_port: u16,
    /// sample-apiserver's port (`https://127.0.0.1:PORT`, the name `api.wardle.svc`).
    pub sample_port: u16,
    /// CA of the serving certificates of kube-apiserver and sample-apiserver.
    pub serving_ca: Ca,
    /// CA of the client certificates of callers (`--client-ca-file`).
    pub client_ca: Ca,
    /// CA of the front proxies: kube-apiserver's aggregator and apiagg.
    pub front_proxy_ca: Ca,
    /// A `system:masters` client certificate (cert, key PEM).
    pub admin: (String, String),
    /// How long each part took to start, in order.
    pub startup: Vec<(&'static str, Duration)>,
    processes: Mutex<Vec<(&'static str, Child)>>,
}

impl RealKube {
    /// The control plane of this test process, started by the first caller (the others wait).
    /// A start that failed is not tried again: every later caller fails with its message.
    pub async fn shared() -> &'static RealKube {
        use futures_util::FutureExt;
        static SHARED: tokio::sync::OnceCell<Result<RealKube, String>> =
            tokio::sync::OnceCell::const_new();
        let started = SHARED.get_or_init(|| async {
            let start = std::panic::AssertUnwindSafe(RealKube::start());
            start.catch_unwind().await.map_err(|panic| {
                let text = (panic.downcast_ref::<String>().cloned())
                    .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()));
                format!(
                    "the real Kubernetes did not start: {}",
                    text.unwrap_or_default()
                )
            })
        });
        started.await.as_ref().unwrap_or_else(|e| panic!("{e}"))
    }

    async fn start() -> RealKube {
        let began = Instant::now();
        let bin = kube_binaries();
        let dir = process_folder();
        let (client_ca, front_proxy_ca, serving_ca) = (
            Ca::new("real-kube-client-ca"),
            Ca::new("real-kube-front-proxy-ca"),
            Ca::new("real-kube-serving-ca"),
        );
        let mut kube = RealKube {
            dir: dir.clone(),
            kube_port: free_port(),
            sample_port: free_port(),
            admin: client_ca.client("admin", &["system:masters"]),
            client_ca,
            front_proxy_ca,
            serving_ca,
            startup: vec![("go binaries (scripts/need.sh kube-bin)", began.elapsed())],
            processes: Mutex::new(Vec::new()),
        };
        kube.write_pki();
        let (etcd, peer) = (free_port(), free_port());
        let etcd_url = format!("http://127.0.0.1:{etcd}");
        let data = dir.join("etcd-data");
        let (initial, peer_url) = (
            format!("default=http://127.0.0.1:{peer}"),
            format!("http://127.0.0.1:{peer}"),
        );
        let at = Instant::now();
        kube.spawn("etcd", &bin, |c| {
            c.args(["--name", "default", "--data-dir"]).arg(&data);
            c.args([
                "--listen-client-urls",
                &etcd_url,
                "--advertise-client-urls",
                &etcd_url,
            ]);
            c.args(["--listen-peer-urls", &peer_url]);
            c.args(["--initial-advertise-peer-urls", &peer_url]);
            // A test cluster: nothing here must survive a crash of the machine.
            c.args(["--initial-cluster", &initial, "--unsafe-no-fsync"]);
        });
        let kube_port = kube.kube_port.to_string();
        kube.spawn("kube-apiserver", &bin, |c| {
            c.args(["--etcd-servers", &etcd_url, "--bind-address", "127.0.0.1"]);
            c.args(["--secure-port", &kube_port]);
            // Loopback may not be a Service's endpoint: no reconciler for `default/kubernetes`.
            c.args(["--advertise-address", "127.0.0.1"]);
            c.args(["--endpoint-reconciler-type", "none"]);
            c.args(["--service-cluster-ip-range", "10.96.0.0/16"]);
            c.args(["--authorization-mode", "Node,RBAC"]);
            c.args(["--tls-cert-file", "kube-apiserver.crt"]);
            c.args(["--tls-private-key-file", "kube-apiserver.key"]);
            c.args(["--client-ca-file", "client-ca.crt"]);
            c.args(["--service-account-issuer", "https://kubernetes.default.svc"]);
            c.args(["--service-account-key-file", "service-account.pub"]);
            c.args(["--service-account-signing-key-file", "service-account.key"]);
            c.args(["--proxy-client-cert-file", "front-proxy-client.crt"]);
            c.args(["--proxy-client-key-file", "front-proxy-client.key"]);
            c.args(["--requestheader-allowed-names", KUBE_PROXY_CN]);
            requestheader(c);
            c.args(["--cert-dir", "kube-apiserver-certs"]);
        });
        kube.wait_ok(
            "kube-apiserver",
            &format!("https://127.0.0.1:{kube_port}/readyz"),
        )
        .await;
        kube.startup
            .push(("etcd and kube-apiserver to /readyz", at.elapsed()));
        let at = Instant::now();
        kube.register_wardle().await;
        let sample_port = kube.sample_port.to_string();
        let allowed = format!("{KUBE_PROXY_CN},{APIAGG_PROXY_CN}");
        kube.spawn("sample-apiserver", &bin, |c| {
            c.args(["--etcd-servers", &etcd_url, "--bind-address", "127.0.0.1"]);
            c.args(["--secure-port", &sample_port]);
            c.args(["--tls-cert-file", "sample-apiserver.crt"]);
            c.args(["--tls-private-key-file", "sample-apiserver.key"]);
            for flag in ["--kubeconfig", "--authentication-kubeconfig"] {
                c.args([flag, "sample-apiserver.kubeconfig"]);
            }
            c.args(["--authorization-kubeconfig", "sample-apiserver.kubeconfig"]);
            c.args(["--requestheader-allowed-names", &allowed]);
            requestheader(c);
        });
        let path = "/apis/apiregistration.k8s.io/v1/apiservices/v1alpha1.wardle.example.com";
        let (plane, admin) = (&kube, &kube.client(Some(&kube.admin)));
        wait_until(
            "kube-apiserver to call v1alpha1.wardle.example.com Available",
            Duration::from_secs(60),
            move || async move {
                plane.check_alive();
                let (_, body) = send(admin, "GET", &plane.kube_url(path), None).await;
                body["status"]["conditions"][0].clone()
            },
            |condition| condition["status"] == "True",
        )
        .await;
        kube.startup
            .push(("sample-apiserver to Available", at.elapsed()));
        let at = Instant::now();
        kube.wait_openapi_v3().await;
        kube.startup
            .push(("kube-apiserver's OpenAPI v3 documents", at.elapsed()));
        eprintln!(
            "real Kubernetes up in {:?} ({})",
            began.elapsed(),
            kube.timings()
        );
        kube
    }

    /// How long each part took to start, in words.
    pub fn timings(&self) -> String {
        let parts: Vec<String> = self
            .startup
            .iter()
            .map(|(what, took)| format!("{what}: {:.1} s", took.as_secs_f64()))
            .collect();
        parts.join(", ")
    }

    /// `https://127.0.0.1:<kube-apiserver>` + `path`.
    pub fn kube_url(&self, path: &str) -> String {
        format!("https://127.0.0.1:{}{path}", self.kube_port)
    }

    /// A client trusting the control plane's serving CA, presenting `identity` (cert, key PEM).
    pub fn client(&self, identity: Option<&(String, String)>) -> reqwest::Client {
        self.client_builder(identity).build().expect("client")
    }

    /// The same client, showing redirects instead of following them.
    pub fn client_seeing_redirects(&self, identity: Option<&(String, String)>) -> reqwest::Client {
        let builder = self.client_builder(identity);
        let builder = builder.redirect(reqwest::redirect::Policy::none());
        builder.build().expect("client")
    }

    fn client_builder(&self, identity: Option<&(String, String)>) -> reqwest::ClientBuilder {
        let ca = reqwest::Certificate::from_pem(self.serving_ca.cert_pem.as_bytes()).expect("CA");
        let mut builder = reqwest::Client::builder()
            .add_root_certificate(ca)
            .no_gzip()
            .timeout(Duration::from_secs(30));
        if let Some((cert, key)) = identity {
            let pem = format!("{cert}{key}");
            builder = builder.identity(reqwest::Identity::from_pem(pem.as_bytes()).expect("id"));
        }
        builder
    }

    /// `method path` at kube-apiserver as the admin, with a JSON `body`; the status and the
    /// answer as JSON.
    pub async fn admin(&self, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
        let admin = self.client(Some(&self.admin));
        send(&admin, method, &self.kube_url(path), body).await
    }

    /// Creates `object` (JSON) at `collection` as the admin: 201, or 409 when it exists.
    pub async fn create(&self, collection: &str, object: Value) {
        let (code, body) = self.admin("POST", collection, Some(object)).await;
        assert!(
            code == 201 || code == 409,
            "POST {collection}: {code} {body}"
        );
    }

    /// Creates namespace `name` (a no-op when it exists).
    pub async fn namespace(&self, name: &str) {
        let object = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}});
        self.create("/api/v1/namespaces", object).await;
    }

    /// A token of the service account `namespace/name` (created when missing), from
    /// TokenRequest: bound to the service account, valid for an hour.
    pub async fn service_account_token(&self, namespace: &str, name: &str) -> String {
        let account = json!({"apiVersion": "v1", "kind": "ServiceAccount",
            "metadata": {"name": name, "namespace": namespace}});
        let accounts = format!("/api/v1/namespaces/{namespace}/serviceaccounts");
        self.create(&accounts, account).await;
        let request = json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
            "spec": {"expirationSeconds": 3600}});
        let path = format!("{accounts}/{name}/token");
        let (code, answer) = self.admin("POST", &path, Some(request)).await;
        assert_eq!(code, 201, "TokenRequest: {answer}");
        answer["status"]["token"]
            .as_str()
            .expect("token")
            .to_string()
    }

    /// Fails the test naming a process of the control plane that has exited, with its log's end.
    pub fn check_alive(&self) {
        let mut processes = self.processes.lock().expect("processes");
        for (name, child) in processes.iter_mut() {
            if let Ok(Some(status)) = child.try_wait() {
                panic!("{name} exited ({status}):\n{}", self.log_tail(name));
            }
        }
    }

    /// The last lines of `name`'s log.
    pub fn log_tail(&self, name: &str) -> String {
        let log = std::fs::read_to_string(self.dir.join(format!("{name}.log"))).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }

    fn spawn(&mut self, name: &'static str, bin: &Path, args: impl FnOnce(&mut Command)) {
        let log = std::fs::File::create(self.dir.join(format!("{name}.log"))).expect("log");
        let mut command = Command::new("setpriv");
        command
            .args(["--pdeathsig", "KILL", "--"])
            .arg(bin.join(name));
        args(&mut command);
        command
            .current_dir(&self.dir)
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log);
        let child = spawn_lasting(command).unwrap_or_else(|e| panic!("start {name}: {e}"));
        self.processes
            .get_mut()
            .expect("processes")
            .push((name, child));
    }

    /// Waits until kube-apiserver serves every document its `/openapi/v3` index lists: just
    /// after it starts, some answer 502 (`apis`, `version`) or are another server's, and a
    /// front started then would read those.
    async fn wait_openapi_v3(&self) {
        let admin = &self.client(Some(&self.admin));
        let (_, index) = send(admin, "GET", &self.kube_url("/openapi/v3"), None).await;
        let paths = index["paths"].as_object().cloned().unwrap_or_default();
        for (key, entry) in paths {
            let url = entry["serverRelativeURL"].as_str().unwrap_or_default();
            let url = self.kube_url(url);
            let read = |body: &Value| body["info"]["title"].as_str().map(str::to_string);
            wait_until(
                &format!("kube-apiserver to serve its /openapi/v3/{key}"),
                Duration::from_secs(60),
                || async { send(admin, "GET", &url, None).await },
                // The group-versions of APIServices are the backends' documents; the rest
                // kube-apiserver's own.
                |(code, body)| {
                    *code == 200
                        && (key.starts_with("apis/wardle.example.com/")
                            || read(body).as_deref() == Some("Kubernetes"))
                },
            )
            .await;
        }
    }

    async fn wait_ok(&self, name: &str, url: &str) {
        let admin = &self.client(Some(&self.admin));
        wait_until(
            &format!("{name} to answer {url} with 200"),
            Duration::from_secs(60),
            move || async move {
                self.check_alive();
                crate::answer_code(admin.get(url)).await
            },
            |code| *code == 200,
        )
        .await;
    }
}

/// Only a control plane whose start failed is dropped (the shared one lives as long as the
/// process): its processes end with it.
impl Drop for RealKube {
    fn drop(&mut self) {
        if let Ok(processes) = self.processes.get_mut() {
            for (_, child) in processes.iter_mut() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }
}

/// The cluster's set of APIServices, as the tests of a process see it: a test that reads the
/// whole cluster's discovery (kubectl api-resources, client-go's) holds it shared
/// ([`apiservices_steady`]); a test that registers an APIService in kube-apiserver holds it alone
/// ([`apiservices_changing`]), so an APIService it makes unavailable fails nobody else's walk.
static APISERVICES: tokio::sync::RwLock<()> = tokio::sync::RwLock::const_new(());

/// See [`APISERVICES`].
pub async fn apiservices_steady() -> tokio::sync::RwLockReadGuard<'static, ()> {
    APISERVICES.read().await
}

/// See [`APISERVICES`].
pub async fn apiservices_changing() -> tokio::sync::RwLockWriteGuard<'static, ()> {
    APISERVICES.write().await
}

/// Sends `method url` with a JSON `body` (merge patch for PATCH): the response.
pub async fn sent(
    client: &reqwest::Client,
    method: &str,
    url: &str,
    body: Option<&Value>,
) -> reqwest::Response {
    let method = reqwest::Method::from_bytes(method.as_bytes()).expect("method");
    let content_type = if method == reqwest::Method::PATCH {
        "application/merge-patch+json"
    } else {
        "application/json"
    };
    let mut request = client.request(method, url);
    if let Some(body) = body {
        request = request
            .header("Content-Type", content_type)
            .body(body.to_string());
    }
    request
        .send()
        .await
        .unwrap_or_else(|e| panic!("{url}: {e}"))
}

/// Sends `method url` with a JSON `body` (merge patch for PATCH); the status and the answer as
/// JSON (`Value::String` of the text when it is not JSON).
pub async fn send(
    client: &reqwest::Client,
    method: &str,
    url: &str,
    body: Option<Value>,
) -> (u16, Value) {
    let response = sent(client, method, url, body.as_ref()).await;
    let code = response.status().as_u16();
    let text = response.text().await.unwrap_or_default();
    (
        code,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}
