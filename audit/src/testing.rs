//! Helpers of the crate's tests: a user, requests run through an auditor, metric values, a tiny
//! HTTP server on loopback that plays an audit webhook, and a plain-HTTP client for it.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use apiagg_requestinfo::RequestInfo;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use super::{AuditId, Auditor, Begin, Identity, WebhookTarget};

/// A user for tests.
pub struct TestUser {
    pub name: String,
    pub uid: String,
    pub groups: Vec<String>,
    pub extra: Vec<(String, Vec<String>)>,
}

impl TestUser {
    pub fn new(name: &str, groups: &[&str]) -> Arc<TestUser> {
        Arc::new(TestUser {
            name: name.into(),
            uid: String::new(),
            groups: groups.iter().map(|g| g.to_string()).collect(),
            extra: Vec::new(),
        })
    }
}

impl Identity for TestUser {
    fn username(&self) -> &str {
        &self.name
    }
    fn uid(&self) -> &str {
        &self.uid
    }
    fn groups(&self) -> &[String] {
        &self.groups
    }
    fn extra(&self) -> &[(String, Vec<String>)] {
        &self.extra
    }
}

pub const CLIENT_IP: IpAddr = IpAddr::V4(Ipv4Addr::new(192, 0, 2, 7));

/// `method target` by `user` through `auditor`: begin, the bodies it wants, complete with
/// `code`. Returns whether the request was audited.
pub fn run(
    auditor: &Auditor,
    user: Arc<dyn Identity>,
    method: &str,
    target: &str,
    bodies: (&[u8], &[u8]),
    code: u16,
) -> bool {
    let (path, query) = match target.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (target, None),
    };
    let info = RequestInfo::new(method, path, query).expect("request info");
    let begin = Begin {
        id: AuditId::new(),
        user,
        impersonated: None,
        info: &info,
        request_uri: target,
        source_ips: &[CLIENT_IP],
        user_agent: Some("audit-test/1.0"),
        received: SystemTime::now(),
    };
    let Some(mut audit) = auditor.begin(begin) else {
        return false;
    };
    audit.authorized("allow", "");
    if audit.wants_request_body() {
        for piece in bodies.0.chunks(7) {
            audit.request_body(piece);
        }
    }
    audit.response_started(code);
    if audit.wants_response_body() {
        audit.response_body(bodies.1);
    }
    audit.complete(code, None);
    true
}

/// Writes a policy file into `dir`.
pub fn policy_file(dir: &Path, rules: &str) -> PathBuf {
    let path = dir.join("policy.yaml");
    let text = format!("apiVersion: audit.k8s.io/v1\nkind: Policy\n{rules}");
    std::fs::write(&path, text).expect("write policy");
    path
}

/// The value of counter `name` with exactly `labels` (0 when absent).
pub fn counter(registry: &prometheus::Registry, name: &str, labels: &[(&str, &str)]) -> u64 {
    registry
        .gather()
        .iter()
        .filter(|family| family.name() == name)
        .flat_map(|family| family.get_metric().iter())
        .filter(|metric| {
            let pairs = metric.get_label();
            pairs.len() == labels.len()
                && labels
                    .iter()
                    .all(|(k, v)| pairs.iter().any(|p| p.name() == *k && p.value() == *v))
        })
        .map(|metric| metric.get_counter().value() as u64)
        .sum()
}

/// What the test webhook received.
#[derive(Default)]
pub struct Received {
    /// Bodies (parsed `EventList`s) of the requests answered with 2xx, in order of arrival.
    pub lists: Vec<serde_json::Value>,
    /// `Authorization` headers.
    pub authorization: Vec<String>,
    /// Requests answered (any status).
    pub requests: usize,
}

impl Received {
    /// Events delivered (in requests answered with 2xx).
    pub fn events(&self) -> usize {
        self.lists
            .iter()
            .map(|l| l["items"].as_array().map_or(0, Vec::len))
            .sum()
    }
}

/// A webhook on loopback answering each request with the next of `statuses` (then 200), or
/// never answering when `silent`.
pub struct TestWebhook {
    pub addr: SocketAddr,
    pub received: Arc<Mutex<Received>>,
}

impl TestWebhook {
    pub async fn start(statuses: &[u16], silent: bool) -> TestWebhook {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let received = Arc::new(Mutex::new(Received::default()));
        let statuses = Arc::new(Mutex::new(
            statuses.iter().rev().copied().collect::<Vec<_>>(),
        ));
        let r = received.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let (r, s) = (r.clone(), statuses.clone());
                tokio::spawn(async move { serve(stream, r, s, silent).await });
            }
        });
        TestWebhook { addr, received }
    }

    /// A kubeconfig for this webhook with a bearer token, written into `dir`.
    pub fn kubeconfig(&self, dir: &Path) -> PathBuf {
        let path = dir.join("webhook.kubeconfig");
        let text = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: hook\n  cluster:\n    server: http://{}/audit\ncontexts:\n- name: hook\n  context: {{cluster: hook, user: hook}}\ncurrent-context: hook\nusers:\n- name: hook\n  user: {{token: secret-token}}\n",
            self.addr
        );
        std::fs::write(&path, text).expect("write kubeconfig");
        path
    }

    pub fn received(&self) -> std::sync::MutexGuard<'_, Received> {
        self.received.lock().expect("lock")
    }
}

async fn serve(
    mut stream: tokio::net::TcpStream,
    received: Arc<Mutex<Received>>,
    statuses: Arc<Mutex<Vec<u16>>>,
    silent: bool,
) {
    let mut buffer = Vec::new();
    let mut chunk = [0u8; 16 << 10];
    loop {
        let Some(end) = buffer.windows(4).position(|w| w == b"\r\n\r\n") else {
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buffer.extend_from_slice(&chunk[..n]),
            }
            continue;
        };
        let head = String::from_utf8_lossy(&buffer[..end]).to_string();
        let header = |name: &str| {
            head.lines()
                .find_map(|l| {
                    l.split_once(':')
                        .filter(|(k, _)| k.eq_ignore_ascii_case(name))
                })
                .map(|(_, v)| v.trim().to_string())
        };
        let length: usize = header("content-length")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        while buffer.len() < end + 4 + length {
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buffer.extend_from_slice(&chunk[..n]),
            }
        }
        let body: Vec<u8> = buffer.drain(..end + 4 + length).skip(end + 4).collect();
        if silent {
            tokio::time::sleep(Duration::from_secs(3600)).await;
            return;
        }
        let status = statuses.lock().expect("lock").pop().unwrap_or(200);
        {
            let mut r = received.lock().expect("lock");
            r.requests += 1;
            r.authorization.extend(header("authorization"));
            if (200..300).contains(&status) {
                r.lists
                    .push(serde_json::from_slice(&body).expect("the body is JSON"));
            }
        }
        let answer = format!("HTTP/1.1 {status} X\r\ncontent-length: 0\r\n\r\n");
        if stream.write_all(answer.as_bytes()).await.is_err() {
            return;
        }
    }
}

/// The [`WebhookTarget`] of a test kubeconfig: plain HTTP, its inline token (the gateway builds
/// TLS and token-file clients the same way through its own client stack).
pub fn connect(path: &Path) -> Result<WebhookTarget, String> {
    let config = apiagg_config::from_kubeconfig(path).map_err(|e| e.to_string())?;
    let token = match config.token {
        Some(apiagg_config::TokenSource::Inline(token)) => Some(token),
        _ => None,
    };
    let authorization = token.map(|token| {
        let value = http::HeaderValue::try_from(format!("Bearer {token}")).expect("header");
        Arc::new(move || Some(value.clone())) as super::Authorization
    });
    Ok(WebhookTarget {
        http: reqwest::Client::builder()
            .no_proxy()
            .build()
            .map_err(|e| e.to_string())?,
        url: config.url.to_string(),
        authorization,
    })
}
