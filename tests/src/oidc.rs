//! A real OpenID provider for the JWT authentication suites: npm's `oidc-provider` (a certified
//! OpenID provider) run by `tests/oidc/provider.mjs` under Node, over HTTPS on loopback with a
//! serving certificate from a test CA. It publishes the test's signing keys at its `jwks_uri`
//! and issues JWT access tokens with the client_credentials grant: each client stands for one
//! user, its claims in every token, and `resource` is the token's `aud`.
//!
//! The test chooses the keys ([`SigningKey`]: the first signs, all are published), restarts the
//! provider on the same port with others (key rotation), stops it, or starts it only later on a
//! port held from the start (an issuer that is down when apiagg starts). [`decode_jwt`] and
//! [`verify_jwt`] read tokens; [`SigningKey::sign_jwt`] makes tokens the provider would not
//! (expired, another issuer, an unpublished key).
//!
//! Needs Node 20+ and the npm packages of `tests/oidc` (`make test` installs them:
//! `scripts/need.sh npm:tests/oidc`).

use std::fs::OpenOptions;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use percent_encoding::{utf8_percent_encode, NON_ALPHANUMERIC};
use serde_json::{json, Value};

mod keys;

pub use self::keys::{decode_jwt, verify_jwt, Alg, SigningKey};
use crate::pki::{write_pair, Ca};
use crate::{hold_port, read_listening, PortHold, Proc};

/// The prefix of the `resource` that asks for any audience: the provider takes only absolute
/// URIs as resources, and gives `aud` = the percent-decoded rest for this one.
pub const AUDIENCE_RESOURCE_PREFIX: &str = "urn:apiagg-test:audience:";

/// A client of the provider, standing for one user: its tokens carry `claims` (say
/// `{"email": "alice@example.com", "groups": ["dev"]}`). `sub` is the client ID unless `claims`
/// names one; the provider's own claims (`iss`, `aud`, `exp`, `iat`, `jti`, `client_id`,
/// `scope`) cannot be replaced.
#[derive(Debug, Clone)]
pub struct OidcClient {
    /// Its client ID.
    pub client_id: String,
    /// Its secret (client_secret_basic or client_secret_post).
    pub client_secret: String,
    /// The claims added to its access tokens.
    pub claims: Value,
}

impl OidcClient {
    /// A client `client_id` (secret `<client_id>-secret`) whose tokens carry `claims`.
    pub fn new(client_id: &str, claims: Value) -> OidcClient {
        OidcClient {
            client_id: client_id.to_string(),
            client_secret: format!("{client_id}-secret"),
            claims,
        }
    }
}

/// How the provider runs.
#[derive(Debug, Clone)]
pub struct OidcOptions {
    /// Its keys: the first signs every token, all are published.
    pub keys: Vec<SigningKey>,
    /// Its clients.
    pub clients: Vec<OidcClient>,
    /// A path the provider is mounted under, part of the issuer (`/realms/test`); empty: the
    /// issuer is `https://127.0.0.1:PORT`.
    pub issuer_path: String,
    /// The lifetime of access tokens, whole seconds (`exp` = `iat` + this, `iat` the second of
    /// issue rounded down).
    pub token_ttl: Duration,
}

impl OidcOptions {
    /// These keys and clients, mounted at the root, tokens valid for 300 s.
    pub fn new(keys: Vec<SigningKey>, clients: Vec<OidcClient>) -> OidcOptions {
        OidcOptions {
            keys,
            clients,
            issuer_path: String::new(),
            token_ttl: Duration::from_secs(300),
        }
    }
}

/// A running (or held) OpenID provider; its process is killed when dropped.
pub struct OidcProvider {
    options: OidcOptions,
    /// Holds the port while the provider is down, and before it first starts.
    hold: PortHold,
    /// Certificates, keys, clients and the provider's log.
    dir: tempfile::TempDir,
    ca_pem: String,
    proc: Option<Proc>,
    http: reqwest::Client,
}

impl OidcProvider {
    /// Starts the provider on a free loopback port and waits until it listens.
    pub fn start(options: OidcOptions) -> OidcProvider {
        let mut provider = OidcProvider::reserve(options);
        provider.up();
        provider
    }

    /// Everything but the process: a port held (so that [`issuer`](Self::issuer) is known and
    /// refuses connections), certificates and clients written. [`up`](Self::up) starts it.
    pub fn reserve(options: OidcOptions) -> OidcProvider {
        assert!(!options.keys.is_empty(), "the provider needs a signing key");
        assert!(
            options.issuer_path.is_empty()
                || (options.issuer_path.starts_with('/') && !options.issuer_path.ends_with('/')),
            "issuer_path is empty or /a/path: {:?}",
            options.issuer_path
        );
        let dir = tempfile::tempdir().expect("tempdir");
        let ca = Ca::new("oidc-test-ca");
        ca.write_ca(dir.path(), "ca");
        write_pair(
            dir.path(),
            "server",
            &ca.server(&["127.0.0.1", "localhost"]),
        );
        let clients: Vec<Value> = options
            .clients
            .iter()
            .map(|c| json!({"client_id": c.client_id, "client_secret": c.client_secret, "claims": c.claims}))
            .collect();
        std::fs::write(
            dir.path().join("clients.json"),
            Value::from(clients).to_string(),
        )
        .expect("write clients.json");
        let http = reqwest::Client::builder()
            .add_root_certificate(
                reqwest::Certificate::from_pem(ca.cert_pem.as_bytes()).expect("CA"),
            )
            .timeout(Duration::from_secs(10))
            .build()
            .expect("client");
        OidcProvider {
            options,
            hold: hold_port(),
            dir,
            ca_pem: ca.cert_pem,
            proc: None,
            http,
        }
    }

    /// Starts the provider on its port with its current keys and waits until it listens (the
    /// test fails when it is already running, or cannot start).
    pub fn up(&mut self) {
        assert!(
            self.proc.is_none(),
            "the OpenID provider is already running"
        );
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("oidc");
        assert!(
            root.join("node_modules/oidc-provider").is_dir(),
            "the OpenID provider's npm packages are missing ({}): run `make test`, or \
             `scripts/need.sh npm:tests/oidc` at the top of the checkout",
            root.join("node_modules").display()
        );
        let keys: Vec<Value> = self
            .options
            .keys
            .iter()
            .map(SigningKey::private_jwk)
            .collect();
        let jwks = self.dir.path().join("jwks.json");
        std::fs::write(&jwks, json!({"keys": keys}).to_string()).expect("write jwks.json");
        // The listening socket joins the held port (SO_REUSEPORT) and is the child's stdin.
        let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)
            .expect("socket");
        socket.set_reuse_port(true).expect("SO_REUSEPORT");
        let addr: std::net::SocketAddr = ([127, 0, 0, 1], self.hold.port).into();
        socket.bind(&addr.into()).expect("bind the provider's port");
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path())
            .expect("open the provider's log");
        let ttl = self.options.token_ttl.as_secs_f64().ceil().max(1.0) as u64;
        let mut child = {
            let mut cmd = Command::new("node");
            cmd.arg(root.join("provider.mjs"))
                .arg("--cert")
                .arg(self.dir.path().join("server.crt"))
                .arg("--key")
                .arg(self.dir.path().join("server.key"))
                .arg("--jwks")
                .arg(&jwks)
                .arg("--clients")
                .arg(self.dir.path().join("clients.json"))
                .args(["--listen-fd", "0", "--token-ttl", &ttl.to_string()])
                .args(["--issuer-path", &self.options.issuer_path])
                .stdin(Stdio::from(OwnedFd::from(socket)))
                .stdout(Stdio::piped())
                .stderr(log);
            // The command (and with it this process's copy of the socket) drops here: once the
            // child exits, the port refuses connections.
            cmd.spawn().unwrap_or_else(|e| {
                panic!("run node (Node.js 20 or later runs the OpenID provider): {e}")
            })
        };
        let stdout = child.stdout.take().expect("stdout");
        let mut proc = Proc { child };
        let Some(listening) = read_listening(stdout) else {
            let status = proc.wait_exit(Duration::from_secs(5));
            panic!(
                "the OpenID provider did not say where it listens (exit status {status:?}); its log:\n{}",
                self.log()
            );
        };
        assert_eq!(listening.port, self.hold.port, "the provider's port");
        self.proc = Some(proc);
    }

    /// Kills the provider (its port then refuses connections); nothing when it is down.
    pub fn stop(&mut self) {
        self.proc = None;
    }

    /// Stops the provider and starts it again on the same port with `keys` (the first signs):
    /// a key rotation. Tokens it issued before stay valid for whoever still trusts their key.
    pub fn restart(&mut self, keys: Vec<SigningKey>) {
        assert!(!keys.is_empty(), "the provider needs a signing key");
        self.stop();
        self.options.keys = keys;
        self.up();
    }

    /// Whether the provider runs.
    pub fn running(&self) -> bool {
        self.proc.is_some()
    }

    /// Its port on 127.0.0.1 (held while it is down).
    pub fn port(&self) -> u16 {
        self.hold.port
    }

    /// The issuer: `https://127.0.0.1:PORT` and the issuer path.
    pub fn issuer(&self) -> String {
        format!(
            "https://127.0.0.1:{}{}",
            self.hold.port, self.options.issuer_path
        )
    }

    /// `<issuer>/.well-known/openid-configuration`. The provider answers on `localhost` too
    /// (its certificate names both), so `discovery_url().replace("127.0.0.1", "localhost")` is
    /// a discovery URL that is not the issuer's, its document still naming [`issuer`](Self::issuer).
    pub fn discovery_url(&self) -> String {
        format!("{}/.well-known/openid-configuration", self.issuer())
    }

    /// Its `jwks_uri`: `<issuer>/jwks`.
    pub fn jwks_uri(&self) -> String {
        format!("{}/jwks", self.issuer())
    }

    /// Its token endpoint: `<issuer>/token`.
    pub fn token_endpoint(&self) -> String {
        format!("{}/token", self.issuer())
    }

    /// The PEM of the CA of its serving certificate (`certificateAuthority` of a `jwt` issuer).
    pub fn ca_pem(&self) -> String {
        self.ca_pem.clone()
    }

    /// A file holding [`ca_pem`](Self::ca_pem).
    pub fn ca_file(&self) -> PathBuf {
        self.dir.path().join("ca.crt")
    }

    /// Its current keys (the first signs).
    pub fn keys(&self) -> &[SigningKey] {
        &self.options.keys
    }

    /// Its clients.
    pub fn clients(&self) -> &[OidcClient] {
        &self.options.clients
    }

    /// What the provider wrote to stderr, every start of it.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join("provider.log")
    }

    /// An HTTP client that trusts the provider's CA.
    pub fn http(&self) -> reqwest::Client {
        self.http.clone()
    }

    /// GET of `url` with [`http`](Self::http), the body as JSON (the test fails unless 200).
    pub async fn get_json(&self, url: &str) -> Value {
        let response = self.http.get(url).send().await;
        let response = response.unwrap_or_else(|e| panic!("GET {url}: {e}"));
        let status = response.status();
        let text = response.text().await.expect("body");
        assert_eq!(status, 200, "GET {url}: {text}");
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("GET {url}: not JSON ({e}): {text}"))
    }

    /// An access token for `client_id` (one of the clients) with `aud` = `audience`: the
    /// client_credentials grant with `resource` = [`AUDIENCE_RESOURCE_PREFIX`] + `audience`,
    /// client_secret_basic. The test fails when the provider does not issue one.
    pub async fn token(&self, client_id: &str, audience: &str) -> String {
        let client = self
            .options
            .clients
            .iter()
            .find(|c| c.client_id == client_id)
            .unwrap_or_else(|| panic!("no OpenID client {client_id}"));
        let resource = format!(
            "{AUDIENCE_RESOURCE_PREFIX}{}",
            utf8_percent_encode(audience, NON_ALPHANUMERIC)
        );
        let (status, body) = self
            .request_token(client_id, &client.client_secret, Some(&resource))
            .await;
        assert_eq!(status, 200, "token for {client_id} ({audience}): {body}");
        body["access_token"]
            .as_str()
            .unwrap_or_else(|| panic!("no access_token: {body}"))
            .to_string()
    }

    /// A client_credentials request at the token endpoint as sent (client_secret_basic, the
    /// `resource` as given, none when `None`: an opaque token): the status and the JSON body.
    pub async fn request_token(
        &self,
        client_id: &str,
        client_secret: &str,
        resource: Option<&str>,
    ) -> (u16, Value) {
        // RFC 6749 §2.3.1: the ID and secret are form-encoded before Basic.
        let credentials = format!(
            "{}:{}",
            utf8_percent_encode(client_id, NON_ALPHANUMERIC),
            utf8_percent_encode(client_secret, NON_ALPHANUMERIC)
        );
        let mut form = vec![("grant_type", "client_credentials")];
        if let Some(resource) = resource {
            form.push(("resource", resource));
        }
        let url = self.token_endpoint();
        let response = self
            .http
            .post(&url)
            .header(
                "authorization",
                format!("Basic {}", STANDARD.encode(credentials)),
            )
            .form(&form)
            .send()
            .await
            .unwrap_or_else(|e| panic!("POST {url}: {e}"));
        let status = response.status().as_u16();
        let text = response.text().await.expect("body");
        let body = serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"));
        (status, body)
    }
}
