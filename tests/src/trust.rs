//! A cluster where everybody checks who is calling: callers with client certificates, tokens and
//! a front proxy; apiagg serving TLS; a backend that trusts only apiagg's front-proxy client
//! certificate; a delegate that requires a token, answers TokenReview and honours impersonation.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;

use crate::pki::{write_pair, Ca};
use crate::{apiservice, kube_delegate_over, Apiagg, Sample, G, V};

/// apiagg's token at the delegate (a service account that may impersonate).
pub const APIAGG_USER: &str = "system:serviceaccount:kube-system:apiagg";
/// A service-account token only the delegate knows (apiagg asks it with TokenReview).
pub const REVIEWED_TOKEN: &str = "sa-token-123";
/// A token in apiagg's own static token file.
pub const STATIC_TOKEN: &str = "static-token-456";
/// The CN of apiagg's proxy client certificate, the one name the backend accepts.
pub const PROXY_CN: &str = "front-proxy-client";
/// The CN of the front proxy allowed in front of apiagg.
pub const OUTER_PROXY_CN: &str = "outer-proxy";

/// Everything the trust tests start.
pub struct Cluster {
    /// apiagg, serving TLS.
    pub gw: Apiagg,
    /// The wardle backend, trusting only apiagg's proxy client certificate.
    pub backend: Sample,
    /// The delegate (token-requiring, TokenReview, impersonation).
    pub delegate: Sample,
    /// Callers' client CA.
    pub client_ca: Ca,
    /// CA of the front proxies (apiagg toward backends, the outer proxy toward apiagg).
    pub front_proxy_ca: Ca,
    /// CA of apiagg's serving certificate.
    pub serving_ca: Ca,
    /// Where the config and its files are.
    pub dir: PathBuf,
}

/// The delegate's token file: apiagg's token and a reviewed service account (with extra).
pub fn delegate_tokens(apiagg_token: &str) -> String {
    format!(
        "{apiagg_token},{APIAGG_USER},uid-apiagg,\"system:serviceaccounts\"\n\
         {REVIEWED_TOKEN},system:serviceaccount:default:app,uid-app,\"system:serviceaccounts,system:serviceaccounts:default\",authentication.kubernetes.io/pod-name=app-1\n"
    )
}

/// The delegate (a token-requiring kube-apiserver stand-in) with its token file in `dir`.
pub fn token_delegate(dir: &Path, apiagg_token: &str, tls: bool) -> Sample {
    token_delegate_with(dir, apiagg_token, tls, &[])
}

/// [`token_delegate`] with further arguments.
pub fn token_delegate_with(dir: &Path, apiagg_token: &str, tls: bool, extra: &[&str]) -> Sample {
    let tokens = dir.join("delegate-tokens.csv");
    std::fs::write(&tokens, delegate_tokens(apiagg_token)).expect("delegate tokens");
    let mut args = vec!["--require-token", tokens.to_str().expect("utf8")];
    args.extend_from_slice(extra);
    kube_delegate_over(tls, true, &args)
}

/// The deploy example's config with this cluster's files and delegate.
fn deploy_config(example: &str, delegate: &str) -> String {
    let mut config = example.to_string();
    for (mounted, here) in [
        ("/etc/apiagg/tls/tls.crt", "serving.crt"),
        ("/etc/apiagg/tls/tls.key", "serving.key"),
        ("/etc/apiagg/client-ca/client-ca.crt", "client-ca.crt"),
        (
            "/etc/apiagg/front-proxy/requestheader-client-ca.crt",
            "front-proxy-ca.crt",
        ),
        ("/etc/apiagg/front-proxy/tls.crt", "proxy-client.crt"),
        ("/etc/apiagg/front-proxy/tls.key", "proxy-client.key"),
    ] {
        assert!(
            config.contains(mounted),
            "the deploy example no longer names {mounted}"
        );
        config = config.replace(mounted, here);
    }
    let in_cluster = "  inCluster: true";
    assert!(
        config.contains(in_cluster),
        "the deploy example no longer uses inCluster"
    );
    config.replace(
        in_cluster,
        &format!("  url: \"{delegate}\"\n  bearerTokenFile: apiagg-token"),
    )
}

/// Where [`Cluster::start_audited`] writes its audit log, in the cluster's folder.
const AUDIT_LOG: &str = "audit.log";

/// Where [`Cluster::start_authorizing`] keeps the delegate's authorization policy.
pub const POLICY_FILE: &str = "policy.json";
/// The `AuthenticationConfiguration` of [`Cluster::start_structured`], in the cluster's folder.
pub const AUTHENTICATION_CONFIG: &str = "authentication-config.yaml";
/// The `AuthorizationConfiguration` of [`Setup::authorization_config`], in the cluster's folder.
pub const AUTHORIZATION_CONFIG: &str = "authorization-config.yaml";

/// What a [`Cluster`] runs with, beyond its fixed parts.
#[derive(Debug, Default, Clone, Copy)]
pub struct Setup<'a> {
    /// apiagg's `authentication.anonymous` (left to the file with `authentication`).
    pub anonymous: bool,
    /// apiagg's `authorization:` (a YAML flow mapping).
    pub authorization: Option<&'a str>,
    /// The delegate answers SubjectAccessReviews from this policy (JSON, [`POLICY_FILE`]).
    pub policy: Option<&'a str>,
    /// The deploy example's config (see [`Cluster::start_deploy_example`]).
    pub example: Option<&'a str>,
    /// Audit every request at `Metadata` level to [`Cluster::audit_log`].
    pub audited: bool,
    /// An `AuthenticationConfiguration` (`--authentication-config`).
    pub authentication: Option<&'a str>,
    /// An `AuthorizationConfiguration` (`--authorization-config`, [`AUTHORIZATION_CONFIG`]).
    pub authorization_config: Option<&'a str>,
    /// The delegate serves cluster objects (`--cluster`: Services, EndpointSlices, flow
    /// control and RBAC objects).
    pub cluster_objects: bool,
    /// More lines of apiagg's static token file, after [`STATIC_TOKEN`]'s (each ending in a
    /// newline).
    pub tokens: Option<&'a str>,
}

impl Cluster {
    /// Starts the cluster; `anonymous` is apiagg's `authentication.anonymous`.
    pub async fn start(anonymous: bool) -> Cluster {
        Cluster::start_with(anonymous, None).await
    }

    /// [`Cluster::start`] with apiagg's `authorization:` (a YAML flow mapping) and the delegate
    /// answering SubjectAccessReviews from `policy` (JSON, in [`POLICY_FILE`] of `dir`).
    pub async fn start_authorizing(anonymous: bool, authorization: &str, policy: &str) -> Cluster {
        Cluster::start_with(anonymous, Some((authorization, policy))).await
    }

    /// The cluster with apiagg running the deploy example's config (`example`, the
    /// `apiagg.yaml` of `kubectl kustomize deploy/base`), its `/etc/apiagg/…` files and
    /// `inCluster` delegate replaced by this cluster's, and the delegate authorizing from
    /// `policy` and serving Services and EndpointSlices (`serviceResolution: cluster`).
    pub async fn start_deploy_example(example: &str, policy: &str) -> Cluster {
        Cluster::start_configured(true, Some(("", policy)), Some(example)).await
    }

    /// [`Cluster::start`] with apiagg auditing every request at `Metadata` level to
    /// [`Cluster::audit_log`].
    pub async fn start_audited(anonymous: bool) -> Cluster {
        Cluster::start_flagged(anonymous, None, None, true, None).await
    }

    /// [`Cluster::start`] with apiagg reading `authentication` (an `AuthenticationConfiguration`,
    /// YAML) from [`AUTHENTICATION_CONFIG`] of its folder (`--authentication-config`); the config
    /// file leaves `authentication.anonymous` to it.
    pub async fn start_structured(authentication: &str) -> Cluster {
        Cluster::start_flagged(false, None, None, false, Some(authentication)).await
    }

    /// The audit log of a cluster started with [`Cluster::start_audited`].
    pub fn audit_log(&self) -> PathBuf {
        self.dir.join(AUDIT_LOG)
    }

    async fn start_with(anonymous: bool, authorization: Option<(&str, &str)>) -> Cluster {
        Cluster::start_configured(anonymous, authorization, None).await
    }

    async fn start_configured(
        anonymous: bool,
        authorization: Option<(&str, &str)>,
        example: Option<&str>,
    ) -> Cluster {
        Cluster::start_flagged(anonymous, authorization, example, false, None).await
    }

    async fn start_flagged(
        anonymous: bool,
        authorization: Option<(&str, &str)>,
        example: Option<&str>,
        audited: bool,
        authentication: Option<&str>,
    ) -> Cluster {
        Cluster::start_setup(Setup {
            anonymous,
            authorization: authorization.map(|(a, _)| a),
            policy: authorization.map(|(_, p)| p),
            example,
            audited,
            authentication,
            ..Setup::default()
        })
        .await
    }

    /// Starts the cluster `setup` describes.
    pub async fn start_setup(setup: Setup<'_>) -> Cluster {
        let Setup {
            anonymous,
            authorization,
            policy: rules,
            example,
            audited,
            authentication,
            authorization_config,
            cluster_objects,
            tokens,
        } = setup;
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().to_path_buf();
        let (client_ca, front_proxy_ca, serving_ca) = (
            Ca::new("client-ca"),
            Ca::new("front-proxy-ca"),
            Ca::new("serving-ca"),
        );
        client_ca.write_ca(&path, "client-ca");
        let front_ca = front_proxy_ca.write_ca(&path, "front-proxy-ca");
        write_pair(&path, "proxy-client", &front_proxy_ca.client(PROXY_CN, &[]));
        write_pair(
            &path,
            "serving",
            &serving_ca.server(&["localhost", "127.0.0.1"]),
        );
        std::fs::write(path.join("apiagg-token"), "apiagg-token-1\n").expect("token");
        std::fs::write(
            path.join("tokens.csv"),
            format!(
                "{STATIC_TOKEN},carol,uid-carol,\"static-group\"\n{}",
                tokens.unwrap_or_default()
            ),
        )
        .expect("static tokens");

        let front_ca = front_ca.to_str().expect("utf8");
        let backend = Sample::start(
            &[
                "--group",
                G,
                "--version",
                V,
                "--name",
                "secure",
                "--hostname",
                "secure.test.svc",
                "--namespaced",
                "--requestheader-client-ca-file",
                front_ca,
                "--requestheader-allowed-names",
                PROXY_CN,
            ],
            true,
        );
        let policy = path.join(POLICY_FILE);
        let mut args = Vec::new();
        if let Some(rules) = rules {
            std::fs::write(&policy, rules).expect("policy");
            args.push("--authorization-policy");
            args.push(policy.to_str().expect("utf8"));
        }
        if example.is_some() || cluster_objects {
            args.push("--cluster");
        }
        let delegate = token_delegate_with(&path, "apiagg-token-1", false, &args);
        let authorization =
            authorization.map_or_else(String::new, |a| format!("authorization: {a}\n"));
        let anonymous = match authentication {
            Some(_) => String::new(),
            None => format!("anonymous: {anonymous}\n  "),
        };
        let config = match example {
            Some(text) => deploy_config(text, &delegate.url),
            None => format!(
            "tls: {{certFile: serving.crt, keyFile: serving.key}}\n\
             authentication:\n  {anonymous}clientCAFile: client-ca.crt\n  \
             requestHeader: {{clientCAFile: front-proxy-ca.crt, allowedNames: [{OUTER_PROXY_CN}]}}\n  \
             tokenFile: tokens.csv\n  tokenReview: true\n{authorization}\
             proxyClient: {{certFile: proxy-client.crt, keyFile: proxy-client.key}}\n\
             delegate: {{url: \"{}\", bearerTokenFile: apiagg-token}}\n\
             services:\n  - {{namespace: test, name: secure, port: 443, endpoints: [\"{}\"]}}\n\
             apiServices:\n{}",
            delegate.url,
            backend.url,
            apiservice(G, V, "secure", &format!(", caBundle: {}", backend.ca_bundle())),
        ),
        };
        let mut flags = Vec::new();
        if audited {
            std::fs::write(
                path.join("audit-policy.yaml"),
                "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: Metadata\n",
            )
            .expect("audit policy");
            let policy = path.join("audit-policy.yaml");
            let log = path.join(AUDIT_LOG);
            flags = vec![
                "--audit-policy-file".to_string(),
                policy.to_str().expect("utf8").to_string(),
                "--audit-log-path".to_string(),
                log.to_str().expect("utf8").to_string(),
            ];
        }
        if let Some(text) = authentication {
            let file = path.join(AUTHENTICATION_CONFIG);
            std::fs::write(&file, text).expect("authentication config");
            flags.push("--authentication-config".to_string());
            flags.push(file.to_str().expect("utf8").to_string());
        }
        if let Some(text) = authorization_config {
            let file = path.join(AUTHORIZATION_CONFIG);
            std::fs::write(&file, text).expect("authorization config");
            flags.push("--authorization-config".to_string());
            flags.push(file.to_str().expect("utf8").to_string());
        }
        let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
        // Access control is what these tests are about: apiagg's secure defaults apply.
        let gw = Apiagg::start_in_secure(dir, &config, &flags);
        let cluster = Cluster {
            gw,
            backend,
            delegate,
            client_ca,
            front_proxy_ca,
            serving_ca,
            dir: path,
        };
        cluster.wait_ready().await;
        cluster
    }

    /// A raw TLS connection to apiagg (HTTP/1.1 by ALPN) presenting `identity` (cert, key PEM):
    /// for tests that need one connection of their own (keep-alive, upgrades).
    pub async fn tls_connect(
        &self,
        identity: &(String, String),
    ) -> tokio_rustls::client::TlsStream<tokio::net::TcpStream> {
        use rustls::pki_types::pem::PemObject;
        use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
        let mut roots = rustls::RootCertStore::empty();
        for cert in CertificateDer::pem_slice_iter(self.serving_ca.cert_pem.as_bytes()) {
            roots.add(cert.expect("CA")).expect("root");
        }
        let chain = CertificateDer::pem_slice_iter(identity.0.as_bytes())
            .collect::<Result<Vec<_>, _>>()
            .expect("chain");
        let key = PrivateKeyDer::from_pem_slice(identity.1.as_bytes()).expect("key");
        let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("versions")
            .with_root_certificates(roots)
            .with_client_auth_cert(chain, key)
            .expect("client auth");
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        let tcp = tokio::net::TcpStream::connect(("127.0.0.1", self.gw.port))
            .await
            .expect("connect");
        let name = ServerName::try_from("localhost").expect("name");
        tokio_rustls::TlsConnector::from(std::sync::Arc::new(config))
            .connect(name, tcp)
            .await
            .expect("TLS handshake")
    }

    /// A kubeconfig in the cluster's folder (`name`) for apiagg with the client certificate
    /// `pair` (cert, key PEM), namespace `default`.
    pub fn kubeconfig(&self, name: &str, pair: &(String, String)) -> PathBuf {
        use base64::Engine;
        let b64 = |text: &str| base64::engine::general_purpose::STANDARD.encode(text);
        let text = format!(
            "apiVersion: v1\nkind: Config\ncurrent-context: apiagg\n\
             clusters:\n- name: apiagg\n  cluster: {{server: \"{}\", certificate-authority-data: {}}}\n\
             users:\n- name: u\n  user: {{client-certificate-data: {}, client-key-data: {}}}\n\
             contexts:\n- name: apiagg\n  context: {{cluster: apiagg, user: u, namespace: default}}\n",
            self.url(""),
            b64(&self.serving_ca.cert_pem),
            b64(&pair.0),
            b64(&pair.1),
        );
        let path = self.dir.join(name);
        std::fs::write(&path, text).expect("kubeconfig");
        path
    }

    /// `https://127.0.0.1:PORT<path>`.
    pub fn url(&self, path: &str) -> String {
        format!("https://127.0.0.1:{}{path}", self.gw.port)
    }

    /// A client trusting apiagg's serving CA, presenting `identity` (cert, key PEM) if any.
    pub fn client(&self, identity: Option<&(String, String)>) -> reqwest::Client {
        let ca = reqwest::Certificate::from_pem(self.serving_ca.cert_pem.as_bytes()).expect("CA");
        let mut builder = reqwest::Client::builder()
            .add_root_certificate(ca)
            .timeout(Duration::from_secs(20));
        if let Some((cert, key)) = identity {
            let pem = format!("{cert}{key}");
            builder = builder.identity(reqwest::Identity::from_pem(pem.as_bytes()).expect("id"));
        }
        builder.build().expect("client")
    }

    /// Waits for `/readyz` (no credentials needed) to answer 200.
    pub async fn wait_ready(&self) {
        let client = self.client(None);
        crate::wait_until(
            "apiagg to answer /readyz with 200",
            Duration::from_secs(20),
            || crate::answer_code(client.get(self.url("/readyz"))),
            |code| *code == 200,
        )
        .await;
    }

    /// The sum of every series of `/metrics` named `name` (or `name{labels}` exactly), read as
    /// a member of `system:monitoring`; 0 when there is none.
    pub async fn metric_sum(&self, name: &str) -> f64 {
        let monitor = self.client_ca.client("prometheus", &["system:monitoring"]);
        let response = self.client(Some(&monitor)).get(self.url("/metrics")).send();
        let response = response.await.expect("metrics");
        let status = response.status();
        let text = response.text().await.expect("metrics text");
        assert!(status.is_success(), "/metrics answered {status}: {text}");
        text.lines()
            .filter_map(|l| l.strip_prefix(name))
            .filter(|rest| rest.starts_with('{') || rest.starts_with(' '))
            .filter_map(|rest| rest.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    }

    /// `GET path` with `headers`: the status and the body as JSON (`null` if it is not).
    pub async fn get(
        &self,
        client: &reqwest::Client,
        path: &str,
        headers: &[(&str, &str)],
    ) -> (u16, Value) {
        let mut req = client.get(self.url(path));
        for (name, value) in headers {
            req = req.header(*name, *value);
        }
        let resp = req.send().await.unwrap_or_else(|e| panic!("{path}: {e}"));
        let code = resp.status().as_u16();
        let text = resp.text().await.unwrap_or_default();
        (code, serde_json::from_str(&text).unwrap_or(Value::Null))
    }
}
