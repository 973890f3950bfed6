//! The `delegate:` section: where the delegate API server is and which credentials apiagg
//! presents to it — a URL with token and certificate files, a kubeconfig (its current context,
//! read as kubectl reads it), or the in-cluster service account.

use std::path::{Path, PathBuf};

use base64::Engine;
use kube_client::config::{AuthInfo, Cluster, Kubeconfig, KubeconfigError};
use secrecy::ExposeSecret;
use serde::Deserialize;

/// Where the in-cluster service account's files are mounted.
pub const SERVICE_ACCOUNT_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// The `delegate:` section as written.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(super) struct RawDelegate {
    url: Option<String>,
    ca_file: Option<PathBuf>,
    #[serde(
        default,
        rename = "insecureSkipTLSVerify",
        alias = "insecureSkipTlsVerify"
    )]
    insecure_skip_tls_verify: bool,
    bearer_token_file: Option<PathBuf>,
    cert_file: Option<PathBuf>,
    key_file: Option<PathBuf>,
    kubeconfig: Option<PathBuf>,
    #[serde(default)]
    in_cluster: bool,
    service_account_dir: Option<PathBuf>,
    #[serde(default)]
    endpoints: Vec<String>,
}

/// A bearer token apiagg presents: a file (re-read when it changes; projected service-account
/// tokens rotate) or a value written in a kubeconfig.
#[derive(Clone, PartialEq, Eq)]
pub enum TokenSource {
    /// Read from this file, again whenever it changes.
    File(PathBuf),
    /// A fixed value.
    Inline(String),
}

impl std::fmt::Debug for TokenSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TokenSource::File(path) => f.debug_tuple("File").field(path).finish(),
            TokenSource::Inline(_) => f.write_str("Inline(<redacted>)"),
        }
    }
}

/// A client certificate and key: files (re-read when they change) or PEM from a kubeconfig.
#[derive(Clone, PartialEq, Eq)]
pub enum CertSource {
    /// PEM files.
    Files {
        /// Certificate chain.
        cert: PathBuf,
        /// Private key.
        key: PathBuf,
    },
    /// PEM bytes.
    Pem {
        /// Certificate chain.
        cert: Vec<u8>,
        /// Private key.
        key: Vec<u8>,
    },
}

impl std::fmt::Debug for CertSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CertSource::Files { cert, key } => f
                .debug_struct("Files")
                .field("cert", cert)
                .field("key", key)
                .finish(),
            CertSource::Pem { .. } => f.write_str("Pem(<redacted>)"),
        }
    }
}

/// The API server that serves the built-in groups, and how apiagg authenticates to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DelegateConfig {
    /// Base URL (`https://host:port`).
    pub url: url::Url,
    /// PEM CA bundle (file contents) used to verify the delegate.
    pub ca_pem: Option<Vec<u8>>,
    /// Skip verification of the delegate's certificate.
    pub insecure_skip_tls_verify: bool,
    /// Bearer token apiagg presents.
    pub token: Option<TokenSource>,
    /// Client certificate apiagg presents.
    pub client_cert: Option<CertSource>,
    /// The API servers of an HA control plane behind `url` (its host is the name verified in
    /// their certificates): requests spread over the healthy ones. Empty: `url` alone.
    pub endpoints: Vec<url::Url>,
}

/// What is wrong with the `delegate:` section. Only a file that cannot be read may read on a
/// later attempt; everything else needs a changed file.
#[derive(Debug, thiserror::Error)]
pub enum DelegateError {
    /// The `url` does not parse. Not retryable.
    #[error("url {url:?}: {source}")]
    Url {
        /// The URL as written.
        url: String,
        /// Why it does not parse.
        source: url::ParseError,
    },
    /// The `url` is not `http(s)://host[:port]`. Not retryable.
    #[error("url {0:?}: must be http(s)://host[:port]")]
    Scheme(String),
    /// Not exactly one of `url`, `kubeconfig` and `inCluster`. Not retryable.
    #[error("exactly one of url, kubeconfig and inCluster: true must be set")]
    Source,
    /// Credentials or trust given beside a kubeconfig or `inCluster`, which bring their own.
    /// Not retryable.
    #[error("{0} may not be set with kubeconfig or inCluster: they bring their own")]
    Conflict(&'static str),
    /// Both a CA and `insecureSkipTLSVerify`. Not retryable.
    #[error("caFile and insecureSkipTLSVerify may not both be set")]
    Trust,
    /// `certFile` without `keyFile` or the reverse. Not retryable.
    #[error("certFile and keyFile must be set together")]
    CertPair,
    /// A file cannot be read. Retryable: the file may appear or become readable (the config is
    /// read again when it changes).
    #[error("{what} {path:?}: {source}")]
    Read {
        /// Which setting names the file.
        what: &'static str,
        /// The file, resolved against the config's folder.
        path: PathBuf,
        /// The read error.
        source: std::io::Error,
    },
    /// The kubeconfig cannot be read or used. Not retryable, unless it could not be read
    /// ([`KubeconfigProblem::Read`]).
    #[error("kubeconfig {path:?}: {source}")]
    Kubeconfig {
        /// The kubeconfig.
        path: PathBuf,
        /// What is wrong with it.
        source: KubeconfigProblem,
    },
    /// `inCluster: true` outside a pod. Not retryable: the environment is fixed at start.
    #[error("inCluster: {0} is not set (is apiagg running in a pod?)")]
    Environment(&'static str),
}

/// What is wrong with a kubeconfig (the `source` of [`DelegateError::Kubeconfig`]).
#[derive(Debug, thiserror::Error)]
pub enum KubeconfigProblem {
    /// kube-client cannot read or parse the file. Retryable only when the file could not be
    /// read (it may appear); a parse error needs a changed file.
    #[error(transparent)]
    Read(#[from] KubeconfigError),
    /// A UTF-16 file (byte order mark) of odd length, which kube-client would panic on. Not
    /// retryable.
    #[error("invalid UTF-16: the file has an odd number of bytes")]
    OddUtf16,
    /// `current-context` is missing or empty. Not retryable.
    #[error("no current-context")]
    NoCurrentContext,
    /// The current context names no context of the file. Not retryable.
    #[error("context {0:?} not found")]
    NoContext(String),
    /// The context names no cluster of the file. Not retryable.
    #[error("cluster {0:?} not found")]
    NoCluster(String),
    /// The context names no user of the file. Not retryable.
    #[error("user {0:?} not found")]
    NoUser(String),
    /// The cluster has no `server`. Not retryable.
    #[error("cluster {0:?} has no server")]
    NoServer(String),
    /// A `*-data` field is not base64. Not retryable.
    #[error("{field}: {source}")]
    Base64 {
        /// The field (`certificate-authority-data`, …).
        field: &'static str,
        /// Why it does not decode.
        source: base64::DecodeError,
    },
    /// The user authenticates with `exec` or an `auth-provider`. Not retryable.
    #[error("exec and auth-provider credentials are not supported: use a token, tokenFile or a client certificate")]
    Plugin,
    /// The user has a username or password. Not retryable.
    #[error("basic authentication is not supported")]
    BasicAuth,
    /// A client certificate without its key or the reverse. Not retryable.
    #[error("a client certificate needs both certificate and key")]
    HalfPair,
}

/// The result of reading the `delegate:` section.
type Result<T, E = DelegateError> = std::result::Result<T, E>;

fn read(what: &'static str, path: PathBuf) -> Result<Vec<u8>> {
    std::fs::read(&path).map_err(|source| DelegateError::Read { what, path, source })
}

fn parse_url(text: &str) -> Result<url::Url> {
    let url = url::Url::parse(text).map_err(|source| DelegateError::Url {
        url: text.to_string(),
        source,
    })?;
    if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
        return Err(DelegateError::Scheme(text.to_string()));
    }
    Ok(url)
}

/// Resolves the section against the config's folder `base`.
pub(super) fn parse_delegate(base: &Path, raw: RawDelegate) -> Result<DelegateConfig> {
    let sources = [raw.url.is_some(), raw.kubeconfig.is_some(), raw.in_cluster];
    if sources.iter().filter(|s| **s).count() != 1 {
        return Err(DelegateError::Source);
    }
    if raw.url.is_none() {
        let conflicts = [
            (raw.ca_file.is_some(), "caFile"),
            (raw.insecure_skip_tls_verify, "insecureSkipTLSVerify"),
            (raw.bearer_token_file.is_some(), "bearerTokenFile"),
            (
                raw.cert_file.is_some() || raw.key_file.is_some(),
                "certFile",
            ),
        ];
        if let Some((_, name)) = conflicts.iter().find(|(set, _)| *set) {
            return Err(DelegateError::Conflict(name));
        }
    }
    let endpoints = raw
        .endpoints
        .iter()
        .map(|e| parse_url(e))
        .collect::<Result<Vec<_>, _>>()?;
    let with_endpoints = |config: DelegateConfig| DelegateConfig {
        endpoints: endpoints.clone(),
        ..config
    };
    if let Some(kubeconfig) = raw.kubeconfig {
        return from_kubeconfig(&base.join(kubeconfig)).map(with_endpoints);
    }
    if raw.in_cluster {
        let dir = raw
            .service_account_dir
            .map_or_else(|| PathBuf::from(SERVICE_ACCOUNT_DIR), |d| base.join(d));
        return in_cluster(&dir, |name| std::env::var(name).ok()).map(with_endpoints);
    }
    let text = raw.url.unwrap_or_default();
    let url = parse_url(&text)?;
    if raw.ca_file.is_some() && raw.insecure_skip_tls_verify {
        return Err(DelegateError::Trust);
    }
    let ca_pem = raw
        .ca_file
        .map(|f| read("caFile", base.join(f)))
        .transpose()?;
    let client_cert = match (raw.cert_file, raw.key_file) {
        (Some(cert), Some(key)) => Some(CertSource::Files {
            cert: base.join(cert),
            key: base.join(key),
        }),
        (None, None) => None,
        _ => return Err(DelegateError::CertPair),
    };
    Ok(DelegateConfig {
        endpoints,
        url,
        ca_pem,
        insecure_skip_tls_verify: raw.insecure_skip_tls_verify,
        token: raw
            .bearer_token_file
            .map(|f| TokenSource::File(base.join(f))),
        client_cert,
    })
}

/// The in-cluster service account: `KUBERNETES_SERVICE_HOST`/`_PORT`, and `token` and `ca.crt`
/// in `dir`; `env` reads the environment.
pub fn in_cluster(dir: &Path, env: impl Fn(&str) -> Option<String>) -> Result<DelegateConfig> {
    let host = env("KUBERNETES_SERVICE_HOST")
        .filter(|h| !h.is_empty())
        .ok_or(DelegateError::Environment("KUBERNETES_SERVICE_HOST"))?;
    let port = env("KUBERNETES_SERVICE_PORT")
        .filter(|p| !p.is_empty())
        .ok_or(DelegateError::Environment("KUBERNETES_SERVICE_PORT"))?;
    let host = if host.contains(':') {
        format!("[{host}]")
    } else {
        host
    };
    let token = dir.join("token");
    // The token must be readable now; later reads follow its rotation.
    read("service account token", token.clone())?;
    Ok(DelegateConfig {
        endpoints: Vec::new(),
        url: parse_url(&format!("https://{host}:{port}"))?,
        ca_pem: Some(read("service account CA", dir.join("ca.crt"))?),
        insecure_skip_tls_verify: false,
        token: Some(TokenSource::File(token)),
        client_cert: None,
    })
}

fn kubeconfig_error(path: &Path, problem: impl Into<KubeconfigProblem>) -> DelegateError {
    DelegateError::Kubeconfig {
        path: path.to_path_buf(),
        source: problem.into(),
    }
}

/// Refuses a kubeconfig with a UTF-16 byte order mark and an odd length: kube-client reads such
/// a file two bytes at a time and panics on the last one. Read errors are left to kube-client.
fn check_utf16_length(path: &Path) -> Result<()> {
    match std::fs::read(path).as_deref() {
        Ok([0xFF, 0xFE, rest @ ..] | [0xFE, 0xFF, rest @ ..]) if rest.len() % 2 == 1 => {
            Err(kubeconfig_error(path, KubeconfigProblem::OddUtf16))
        }
        _ => Ok(()),
    }
}

/// The current context of the kubeconfig at `path`: server, CA, and token or client certificate.
pub fn from_kubeconfig(path: &Path) -> Result<DelegateConfig> {
    check_utf16_length(path)?;
    let config = Kubeconfig::read_from(path).map_err(|e| kubeconfig_error(path, e))?;
    let current = config
        .current_context
        .as_deref()
        .filter(|c| !c.is_empty())
        .ok_or_else(|| kubeconfig_error(path, KubeconfigProblem::NoCurrentContext))?;
    let context = config
        .contexts
        .iter()
        .find(|c| c.name == current)
        .and_then(|c| c.context.as_ref())
        .ok_or_else(|| kubeconfig_error(path, KubeconfigProblem::NoContext(current.into())))?;
    let cluster = config
        .clusters
        .iter()
        .find(|c| c.name == context.cluster)
        .and_then(|c| c.cluster.as_ref())
        .ok_or_else(|| {
            kubeconfig_error(path, KubeconfigProblem::NoCluster(context.cluster.clone()))
        })?;
    let user = match context.user.as_deref() {
        Some(name) => config
            .auth_infos
            .iter()
            .find(|a| a.name == name)
            .and_then(|a| a.auth_info.clone())
            .ok_or_else(|| kubeconfig_error(path, KubeconfigProblem::NoUser(name.into())))?,
        None => AuthInfo::default(),
    };
    let server = cluster.server.as_deref().ok_or_else(|| {
        kubeconfig_error(path, KubeconfigProblem::NoServer(context.cluster.clone()))
    })?;
    let (token, client_cert) = credentials(path, &user)?;
    Ok(DelegateConfig {
        endpoints: Vec::new(),
        url: parse_url(server)?,
        ca_pem: certificate_authority(path, cluster)?,
        insecure_skip_tls_verify: cluster.insecure_skip_tls_verify.unwrap_or(false),
        token,
        client_cert,
    })
}

fn decode(path: &Path, field: &'static str, data: &str) -> Result<Vec<u8>> {
    base64::engine::general_purpose::STANDARD
        .decode(data.trim())
        .map_err(|source| kubeconfig_error(path, KubeconfigProblem::Base64 { field, source }))
}

fn certificate_authority(path: &Path, cluster: &Cluster) -> Result<Option<Vec<u8>>> {
    if let Some(data) = &cluster.certificate_authority_data {
        return decode(path, "certificate-authority-data", data).map(Some);
    }
    cluster
        .certificate_authority
        .as_ref()
        .map(|file| read("certificate-authority", PathBuf::from(file)))
        .transpose()
}

type Credentials = (Option<TokenSource>, Option<CertSource>);

fn credentials(path: &Path, user: &AuthInfo) -> Result<Credentials> {
    if user.exec.is_some() || user.auth_provider.is_some() {
        return Err(kubeconfig_error(path, KubeconfigProblem::Plugin));
    }
    if user.username.is_some() || user.password.is_some() {
        return Err(kubeconfig_error(path, KubeconfigProblem::BasicAuth));
    }
    let token = match (&user.token, &user.token_file) {
        (Some(token), _) => Some(TokenSource::Inline(token.expose_secret().to_string())),
        (None, Some(file)) => Some(TokenSource::File(PathBuf::from(file))),
        (None, None) => None,
    };
    let client_cert = match (
        (&user.client_certificate_data, &user.client_certificate),
        (&user.client_key_data, &user.client_key),
    ) {
        ((None, None), (None, None)) => None,
        // Files stay files, so a rotated certificate is picked up.
        ((None, Some(cert)), (None, Some(key))) => Some(CertSource::Files {
            cert: PathBuf::from(cert),
            key: PathBuf::from(key),
        }),
        ((cert_data, cert_file), (key_data, key_file)) => {
            let cert = match (cert_data, cert_file) {
                (Some(data), _) => decode(path, "client-certificate-data", data)?,
                (None, Some(file)) => read("client-certificate", PathBuf::from(file))?,
                (None, None) => return Err(half_pair(path)),
            };
            let key = match (key_data, key_file) {
                (Some(data), _) => decode(path, "client-key-data", data.expose_secret())?,
                (None, Some(file)) => read("client-key", PathBuf::from(file))?,
                (None, None) => return Err(half_pair(path)),
            };
            Some(CertSource::Pem { cert, key })
        }
    };
    Ok((token, client_cert))
}

fn half_pair(path: &Path) -> DelegateError {
    kubeconfig_error(path, KubeconfigProblem::HalfPair)
}

#[cfg(test)]
mod fuzz_regressions {
    use super::*;

    /// Found by `fuzz/fuzz_targets/config_file.rs`; minimized input: the config
    /// `delegate:\n kubeconfig: apiservices/a.yaml` and that file holding `FE FF FF`. kube-client
    /// read the UTF-16 file two bytes at a time and panicked (index out of bounds).
    #[test]
    fn a_kubeconfig_of_odd_length_utf16_is_refused_not_a_panic() {
        let dir = tempfile::tempdir().expect("temporary folder");
        for bytes in [&[0xFE, 0xFF, 0xFF][..], &[0xFF, 0xFE, b'a', 0, b'b']] {
            let path = dir.path().join("kubeconfig");
            std::fs::write(&path, bytes).expect("write kubeconfig");
            let error = from_kubeconfig(&path).expect_err("refused");
            assert!(error.to_string().contains("invalid UTF-16"), "{error}");
        }
    }
}
