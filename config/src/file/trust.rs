//! Trust settings: the serving certificates (`tls:`), who callers are (`authentication:`), what
//! they may do (`authorization:`) and the certificate apiagg presents to remote backends
//! (`proxyClient:`). Paths are resolved against the
//! config's folder; the files are read by the gateway, which re-reads them when they change.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

/// Serving certificates of the gateway's own listener.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ServingTls {
    /// PEM certificate chain (the default certificate).
    pub cert_file: PathBuf,
    /// PEM private key.
    pub key_file: PathBuf,
    /// Further certificates, chosen by the name the client asks for (SNI).
    #[serde(default)]
    pub sni_certificates: Vec<SniCertificate>,
}

/// A certificate served to clients that ask for one of its names.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SniCertificate {
    /// PEM certificate chain.
    pub cert_file: PathBuf,
    /// PEM private key.
    pub key_file: PathBuf,
    /// Names (`api.example.com`, `*.example.com`); the certificate's DNS names when empty.
    #[serde(default)]
    pub names: Vec<String>,
}

impl ServingTls {
    pub(super) fn resolve(self, base: &Path) -> ServingTls {
        ServingTls {
            cert_file: base.join(self.cert_file),
            key_file: base.join(self.key_file),
            sni_certificates: self
                .sni_certificates
                .into_iter()
                .map(|s| SniCertificate {
                    cert_file: base.join(s.cert_file),
                    key_file: base.join(s.key_file),
                    names: s.names,
                })
                .collect(),
        }
    }
}

/// The certificate apiagg presents to remote backends (kube-apiserver's
/// `--proxy-client-cert-file`/`--proxy-client-key-file`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ProxyClient {
    /// PEM certificate chain.
    pub cert_file: PathBuf,
    /// PEM private key.
    pub key_file: PathBuf,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(super) struct RawAuthentication {
    anonymous: Option<bool>,
    #[serde(rename = "clientCAFile", alias = "clientCaFile")]
    client_ca_file: Option<PathBuf>,
    request_header: Option<RawRequestHeader>,
    token_file: Option<PathBuf>,
    #[serde(default)]
    token_review: bool,
    #[serde(rename = "tokenReviewCacheTTL", alias = "tokenReviewCacheTtl")]
    token_review_cache_ttl: Option<String>,
    #[serde(
        rename = "tokenReviewFailureCacheTTL",
        alias = "tokenReviewFailureCacheTtl"
    )]
    token_review_failure_cache_ttl: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RawRequestHeader {
    #[serde(rename = "clientCAFile", alias = "clientCaFile")]
    client_ca_file: PathBuf,
    #[serde(default)]
    allowed_names: Vec<String>,
    username_headers: Option<Vec<String>>,
    uid_headers: Option<Vec<String>>,
    group_headers: Option<Vec<String>>,
    extra_header_prefixes: Option<Vec<String>>,
}

/// How callers are authenticated: the union of what is set, in kube-apiserver's order
/// (front proxy, client certificate, token file, TokenReview), then anonymous.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Authentication {
    /// Callers without credentials are `system:anonymous` (else 401).
    pub anonymous: bool,
    /// Whether the file sets `anonymous` itself (an `AuthenticationConfiguration` may not then).
    pub anonymous_set: bool,
    /// CA of caller client certificates (user = CN, groups = O).
    pub client_ca_file: Option<PathBuf>,
    /// A trusted front proxy's identity headers.
    pub request_header: Option<RequestHeader>,
    /// kube-apiserver's static token file (CSV).
    pub token_file: Option<PathBuf>,
    /// Bearer tokens reviewed by the delegate (TokenReview), with the cache lifetimes.
    pub token_review: Option<TokenReview>,
}

impl Default for Authentication {
    fn default() -> Self {
        Authentication {
            anonymous: true,
            anonymous_set: false,
            client_ca_file: None,
            request_header: None,
            token_file: None,
            token_review: None,
        }
    }
}

impl Authentication {
    /// Whether some authenticator needs the caller's client certificate.
    pub fn wants_client_certificates(&self) -> bool {
        self.client_ca_file.is_some() || self.request_header.is_some()
    }
}

/// Request-header authentication (kube-apiserver's `--requestheader-*` flags).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestHeader {
    /// CA the front proxy's client certificate must chain to.
    pub client_ca_file: PathBuf,
    /// Common names the front proxy may have; any when empty.
    pub allowed_names: Vec<String>,
    /// Headers naming the user (first present wins).
    pub username_headers: Vec<String>,
    /// Headers naming the user's UID.
    pub uid_headers: Vec<String>,
    /// Headers naming groups (every value of every header).
    pub group_headers: Vec<String>,
    /// Prefixes of headers carrying extra attributes.
    pub extra_header_prefixes: Vec<String>,
}

/// TokenReview cache lifetimes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TokenReview {
    /// How long an accepted token is remembered.
    pub cache_ttl: Duration,
    /// How long a refused token is remembered.
    pub failure_cache_ttl: Duration,
}

/// What is wrong with the trust settings. None is retryable: the files must change.
#[derive(Debug, thiserror::Error)]
pub enum TrustError {
    /// A duration does not parse. Not retryable.
    #[error("{field} {value:?}: {source}")]
    Duration {
        /// The setting.
        field: &'static str,
        /// As written.
        value: String,
        /// Why it does not parse.
        source: humantime::DurationError,
    },
    /// TTLs without `tokenReview: true`. Not retryable.
    #[error("tokenReviewCacheTTL and tokenReviewFailureCacheTTL need tokenReview: true")]
    TtlWithoutReview,
    /// Authorization cache TTLs with `mode: AlwaysAllow`. Not retryable.
    #[error("cacheAuthorizedTTL and cacheUnauthorizedTTL need mode: Webhook")]
    TtlWithoutWebhook,
    /// `allowAnyoneTo…` with `mode: Webhook`, where the delegate decides. Not retryable.
    #[error("allowAnyoneToChangeAPIServices and allowAnyoneToReadMetrics apply to mode: AlwaysAllow; with Webhook the delegate's RBAC decides (grant the access there)")]
    OpenWithWebhook,
    /// Client certificates are asked for only over TLS. Not retryable.
    #[error("clientCAFile and requestHeader need tls: client certificates come with TLS")]
    NeedsTls,
    /// An empty header list or name. Not retryable.
    #[error("requestHeader.{0} must name at least one non-empty header")]
    EmptyHeaders(&'static str),
}

/// The result of reading the trust settings.
type Result<T, E = TrustError> = std::result::Result<T, E>;

fn duration(field: &'static str, value: Option<String>, default: Duration) -> Result<Duration> {
    match value {
        None => Ok(default),
        Some(value) => humantime::parse_duration(&value).map_err(|source| TrustError::Duration {
            field,
            value,
            source,
        }),
    }
}

/// `requestHeader:` resolved: header names default to kube-apiserver's `X-Remote-*`; a list
/// given empty, or with an empty name, is refused.
fn request_header(base: &Path, raw: RawRequestHeader) -> Result<RequestHeader> {
    let names = |given: Option<Vec<String>>, default: &str| {
        given.unwrap_or_else(|| vec![default.to_string()])
    };
    let header = RequestHeader {
        client_ca_file: base.join(raw.client_ca_file),
        allowed_names: raw.allowed_names,
        username_headers: names(raw.username_headers, "X-Remote-User"),
        uid_headers: names(raw.uid_headers, "X-Remote-Uid"),
        group_headers: names(raw.group_headers, "X-Remote-Group"),
        extra_header_prefixes: names(raw.extra_header_prefixes, "X-Remote-Extra-"),
    };
    let lists = [
        ("usernameHeaders", &header.username_headers),
        ("uidHeaders", &header.uid_headers),
        ("groupHeaders", &header.group_headers),
        ("extraHeaderPrefixes", &header.extra_header_prefixes),
    ];
    for (field, list) in lists {
        if list.is_empty() || list.iter().any(|h| h.trim().is_empty()) {
            return Err(TrustError::EmptyHeaders(field));
        }
    }
    Ok(header)
}

/// Resolves `authentication:` against the config's folder; `tls` says whether apiagg serves TLS.
pub(super) fn parse_authentication(
    base: &Path,
    raw: RawAuthentication,
    tls: bool,
) -> Result<Authentication> {
    if !raw.token_review
        && (raw.token_review_cache_ttl.is_some() || raw.token_review_failure_cache_ttl.is_some())
    {
        return Err(TrustError::TtlWithoutReview);
    }
    let token_review = if raw.token_review {
        Some(TokenReview {
            cache_ttl: duration(
                "tokenReviewCacheTTL",
                raw.token_review_cache_ttl,
                Duration::from_secs(120),
            )?,
            failure_cache_ttl: duration(
                "tokenReviewFailureCacheTTL",
                raw.token_review_failure_cache_ttl,
                Duration::from_secs(10),
            )?,
        })
    } else {
        None
    };
    let request_header = raw
        .request_header
        .map(|r| request_header(base, r))
        .transpose()?;
    let authentication = Authentication {
        anonymous: raw.anonymous.unwrap_or(true),
        anonymous_set: raw.anonymous.is_some(),
        client_ca_file: raw.client_ca_file.map(|f| base.join(f)),
        request_header,
        token_file: raw.token_file.map(|f| base.join(f)),
        token_review,
    };
    if authentication.wants_client_certificates() && !tls {
        return Err(TrustError::NeedsTls);
    }
    Ok(authentication)
}

/// `authorization.mode`: kube-apiserver's `--authorization-mode` values apiagg knows.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
pub enum AuthorizationMode {
    /// Requests apiagg forwards go on (the backends and the delegate decide); what apiagg serves
    /// itself follows its built-in rule: the APIService API is read by authenticated callers and
    /// changed by `system:masters` only, `/metrics` and `/debug/*` are read by `system:masters`
    /// and `system:monitoring`, unless the `allowAnyoneTo…` options open them.
    #[default]
    AlwaysAllow,
    /// Every request is authorized by a SubjectAccessReview at the delegate (cached).
    Webhook,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(super) struct RawAuthorization {
    mode: Option<AuthorizationMode>,
    #[serde(rename = "cacheAuthorizedTTL", alias = "cacheAuthorizedTtl")]
    cache_authorized_ttl: Option<String>,
    #[serde(rename = "cacheUnauthorizedTTL", alias = "cacheUnauthorizedTtl")]
    cache_unauthorized_ttl: Option<String>,
    #[serde(default, rename = "allowAnyoneToChangeAPIServices")]
    allow_anyone_to_change_api_services: bool,
    #[serde(default)]
    allow_anyone_to_read_metrics: bool,
}

/// What authenticated callers may do (kube-apiserver's `--authorization-mode` and
/// `--authorization-webhook-cache-*-ttl` flags).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Authorization {
    /// Who decides.
    pub mode: AuthorizationMode,
    /// How long an allowed request is remembered (`Webhook`; 5 minutes by default).
    pub cache_authorized_ttl: Duration,
    /// How long a denied request is remembered (`Webhook`; 30 seconds by default).
    pub cache_unauthorized_ttl: Duration,
    /// `allowAnyoneToChangeAPIServices` (`AlwaysAllow` only): every caller apiagg lets in,
    /// anonymous ones included, may create, change and delete APIServices, and so receive
    /// everyone's requests. For a loopback playground; never on a shared network.
    pub allow_anyone_to_change_api_services: bool,
    /// `allowAnyoneToReadMetrics` (`AlwaysAllow` only): every caller may read `/metrics` and
    /// `/debug/apiagg/status`.
    pub allow_anyone_to_read_metrics: bool,
    /// Whether the file sets any of the above (`--authorization-config` may not be given then:
    /// one place says who decides).
    pub configured: bool,
}

impl Default for Authorization {
    fn default() -> Self {
        Authorization {
            mode: AuthorizationMode::AlwaysAllow,
            cache_authorized_ttl: Duration::from_secs(300),
            cache_unauthorized_ttl: Duration::from_secs(30),
            allow_anyone_to_change_api_services: false,
            allow_anyone_to_read_metrics: false,
            configured: false,
        }
    }
}

/// Validates `authorization:`.
pub(super) fn parse_authorization(raw: RawAuthorization) -> Result<Authorization> {
    let configured = raw.mode.is_some()
        || raw.cache_authorized_ttl.is_some()
        || raw.cache_unauthorized_ttl.is_some()
        || raw.allow_anyone_to_change_api_services
        || raw.allow_anyone_to_read_metrics;
    let mode = raw.mode.unwrap_or_default();
    let ttls = raw.cache_authorized_ttl.is_some() || raw.cache_unauthorized_ttl.is_some();
    if mode == AuthorizationMode::AlwaysAllow && ttls {
        return Err(TrustError::TtlWithoutWebhook);
    }
    let opened = raw.allow_anyone_to_change_api_services || raw.allow_anyone_to_read_metrics;
    if mode == AuthorizationMode::Webhook && opened {
        return Err(TrustError::OpenWithWebhook);
    }
    let default = Authorization::default();
    Ok(Authorization {
        mode,
        cache_authorized_ttl: duration(
            "cacheAuthorizedTTL",
            raw.cache_authorized_ttl,
            default.cache_authorized_ttl,
        )?,
        cache_unauthorized_ttl: duration(
            "cacheUnauthorizedTTL",
            raw.cache_unauthorized_ttl,
            default.cache_unauthorized_ttl,
        )?,
        allow_anyone_to_change_api_services: raw.allow_anyone_to_change_api_services,
        allow_anyone_to_read_metrics: raw.allow_anyone_to_read_metrics,
        configured,
    })
}

#[cfg(test)]
mod tests {
    use super::super::{ConfigError, GatewayConfig};
    use super::*;

    fn load(text: &str) -> Result<GatewayConfig, ConfigError> {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("c.yaml");
        std::fs::write(&path, text).expect("write");
        GatewayConfig::load(&path)
    }

    const DELEGATE: &str = "delegate: {url: \"https://127.0.0.1:6443\"}\n";

    #[test]
    fn authorization_defaults_to_always_allow() {
        let config = load("").expect("empty config");
        assert_eq!(config.authorization, Authorization::default());
        assert_eq!(config.authorization.mode, AuthorizationMode::AlwaysAllow);
    }

    #[test]
    fn webhook_takes_its_ttls() {
        let config = load(&format!(
            "{DELEGATE}authorization: {{mode: Webhook, cacheAuthorizedTTL: 1m, cacheUnauthorizedTTL: 2s}}\n"
        ))
        .expect("webhook");
        let a = config.authorization;
        assert_eq!(a.mode, AuthorizationMode::Webhook);
        assert_eq!(a.cache_authorized_ttl, Duration::from_secs(60));
        assert_eq!(a.cache_unauthorized_ttl, Duration::from_secs(2));
        let config = load(&format!("{DELEGATE}authorization: {{mode: Webhook}}\n")).expect("ok");
        assert_eq!(
            config.authorization.cache_authorized_ttl,
            Duration::from_secs(300)
        );
        assert_eq!(
            config.authorization.cache_unauthorized_ttl,
            Duration::from_secs(30)
        );
    }

    #[test]
    fn bad_authorization_settings_say_why() {
        let err = load("authorization: {mode: Webhook}\n")
            .expect_err("no delegate")
            .to_string();
        assert!(
            err.contains("authorization.mode: Webhook needs a delegate"),
            "{err}"
        );
        let err = load("authorization: {cacheAuthorizedTTL: 1m}\n")
            .expect_err("ttl")
            .to_string();
        assert!(err.contains("need mode: Webhook"), "{err}");
        let err = load(&format!(
            "{DELEGATE}authorization: {{mode: Webhook, cacheUnauthorizedTTL: soon}}\n"
        ))
        .expect_err("duration")
        .to_string();
        assert!(err.contains("cacheUnauthorizedTTL \"soon\""), "{err}");
        let err = load(&format!(
            "{DELEGATE}authorization: {{mode: Webhook, allowAnyoneToChangeAPIServices: true}}\n"
        ))
        .expect_err("open with webhook")
        .to_string();
        assert!(err.contains("apply to mode: AlwaysAllow"), "{err}");
        let open = load("authorization: {allowAnyoneToChangeAPIServices: true}\n").expect("open");
        assert!(open.authorization.allow_anyone_to_change_api_services);
        assert!(!open.authorization.allow_anyone_to_read_metrics);
        let err = load("authorization: {mode: RBAC}\n")
            .expect_err("mode")
            .to_string();
        assert!(err.contains("unknown variant `RBAC`"), "{err}");
    }
}
