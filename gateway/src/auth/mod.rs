//! Layer 2: who the caller is and what it may do. The union of the configured authenticators in
//! kube-apiserver's order — front proxy (request headers over a trusted client certificate),
//! client certificate, static token file, TokenReview at the delegate — then anonymous, or 401;
//! then the authorizer (apiagg's built-in rule, or a chain: the delegate's SubjectAccessReviews,
//! or an `AuthorizationConfiguration` with webhooks, RBAC, AlwaysAllow and AlwaysDeny).

mod authz;
mod jwt;
mod requestheader;
mod token;
mod user;
mod x509;

use std::path::PathBuf;
use std::sync::Arc;

use apiagg_config::Authentication;
use apiagg_config::Authorization;
use http::{HeaderMap, HeaderName};

pub use self::authz::{
    requested_impersonation, Authorizer, AuthzMetrics, AuthzRequest, RbacSource, Refusal, Reviewer,
    StructuredAuthz, ACCESS_CHECKS, IMPERSONATE_PREFIX,
};
use self::requestheader::{InvalidHeaderName, RequestHeaderNames};
pub use self::token::{ReviewError, Source, TokenCache};
use self::token::{TokenFile, TokenFileError, TokenReviewer};
use self::x509::CaError;
use crate::backends::{Clients, Reloadable, Upstream};
use apiagg_observe::CertificateKind;

pub use self::jwt::{Attempt, AuthnMetrics, IssuerRefusal, StructuredAuthn};
pub use self::user::{FieldsSize, InvalidIdentity, User, FIELD_OVERHEAD};
pub use self::x509::{
    CaFile, CertificateRefusal, ClientCertificates, ConnectionIdentity, IdentifyConnections,
    RequestClientCertificates,
};

/// How a caller was authenticated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    /// Identity headers of a trusted front proxy.
    FrontProxy,
    /// A client certificate chaining to `clientCAFile`.
    ClientCertificate,
    /// A bearer token listed in the static token file.
    TokenFile,
    /// A bearer token the delegate vouched for.
    TokenReview,
    /// A JWT of an issuer of the authentication configuration (`--authentication-config`).
    Jwt,
    /// No credentials.
    Anonymous,
    /// `Impersonate-*` headers of a caller authenticated otherwise, authorized by apiagg: the
    /// delegate sees apiagg impersonating the result.
    Impersonation,
}

/// An authenticated caller.
#[derive(Debug, Clone)]
pub struct Authenticated {
    /// Who.
    pub user: Arc<User>,
    /// How.
    pub method: Method,
}

impl Authenticated {
    /// Whether the delegate can authenticate this caller itself (it vouched for the token, or
    /// apiagg knows nothing about the caller); otherwise apiagg impersonates the caller there.
    pub fn delegate_authenticates(&self) -> bool {
        matches!(self.method, Method::TokenReview | Method::Anonymous)
    }
}

/// Why a request is not authenticated.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    /// The credentials do not hold, or there are none and anonymous requests are disabled:
    /// 401 `Unauthorized`. Not retryable with the same credentials.
    #[error("{0}")]
    Unauthorized(String),
    /// An authenticator found a caller whose identity cannot be forwarded exactly (see
    /// [`User::new`]): 401 `Unauthorized`, whatever else the request carries. Not retryable.
    #[error("{method:?}: {source}")]
    InvalidIdentity {
        /// Which authenticator.
        method: Method,
        /// Which field, and why.
        source: InvalidIdentity,
    },
    /// A bearer token apiagg does not know and may not review now (TokenReview rate limit):
    /// 429 `TooManyRequests` with `Retry-After: 1`, as the token may be valid. Retryable.
    #[error("too many TokenReviews of unknown tokens; retry in a second")]
    TooManyReviews,
}

impl AuthError {
    /// The HTTP status of the answer: 401, or 429 for [`AuthError::TooManyReviews`].
    pub fn status(&self) -> u16 {
        match self {
            AuthError::TooManyReviews => 429,
            _ => 401,
        }
    }

    /// The `reason` of the Status answer (`Unauthorized`, `TooManyRequests`).
    pub fn reason(&self) -> apiagg_apis::Reason {
        match self {
            AuthError::TooManyReviews => apiagg_apis::Reason::TooManyRequests,
            _ => apiagg_apis::Reason::Unauthorized,
        }
    }

    /// Seconds for `Retry-After`, when the client should retry.
    pub fn retry_after(&self) -> Option<u32> {
        matches!(self, AuthError::TooManyReviews).then_some(1)
    }
}

/// Why a setting cannot be used at startup (each message says the whole cause, with the setting
/// and the file). Not retryable: the config or the files must change.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    /// A CA file (`clientCAFile`, `requestHeader.clientCAFile`) is unusable. Not retryable.
    #[error("authentication.{setting}: {}: {error}", path.display())]
    Ca {
        /// The setting that names the file.
        setting: &'static str,
        /// The file.
        path: PathBuf,
        /// Why (in the message, not a `source()`).
        error: CaError,
    },
    /// The static token file is unusable. Not retryable.
    #[error("authentication.tokenFile: {}: {error}", path.display())]
    TokenFile {
        /// The file.
        path: PathBuf,
        /// Why (in the message, not a `source()`).
        error: TokenFileError,
    },
    /// A `requestHeader` header name is invalid. Not retryable.
    #[error("authentication.requestHeader: {0}")]
    RequestHeader(InvalidHeaderName),
}

/// The configured authenticators.
pub struct Authenticator {
    anonymous: bool,
    request_header: Option<RequestHeaderNames>,
    certificates: Option<Arc<ClientCertificates>>,
    token_file: Option<Arc<TokenFile>>,
    reviewer: Option<TokenReviewer>,
    structured: Option<Arc<StructuredAuthn>>,
    metrics: Option<AuthnMetrics>,
    reloadable: Vec<Reloadable>,
    authorizer: Authorizer,
}

impl Authenticator {
    /// Reads every file the config names.
    pub fn new(config: &Authentication) -> Result<Authenticator, SetupError> {
        let mut reloadable: Vec<Reloadable> = Vec::new();
        let mut ca = |setting, path: &PathBuf, kind| -> Result<Arc<CaFile>, SetupError> {
            let ca = CaFile::load(path.clone(), kind).map_err(|error| SetupError::Ca {
                setting,
                path: path.clone(),
                error,
            })?;
            let ca = Arc::new(ca);
            reloadable.push(ca.clone().into());
            Ok(ca)
        };
        let client_ca = config
            .client_ca_file
            .as_ref()
            .map(|p| ca("clientCAFile", p, CertificateKind::ClientCa))
            .transpose()?;
        let front_proxy = config
            .request_header
            .as_ref()
            .map(|r| {
                Ok::<_, SetupError>((
                    ca(
                        "requestHeader.clientCAFile",
                        &r.client_ca_file,
                        CertificateKind::RequestHeaderCa,
                    )?,
                    r.allowed_names.clone(),
                ))
            })
            .transpose()?;
        let request_header = config
            .request_header
            .as_ref()
            .map(RequestHeaderNames::new)
            .transpose()
            .map_err(SetupError::RequestHeader)?;
        let certificates = (client_ca.is_some() || front_proxy.is_some()).then(|| {
            Arc::new(ClientCertificates {
                client_ca,
                front_proxy,
            })
        });
        let token_file = match &config.token_file {
            Some(path) => {
                let file =
                    TokenFile::load(path.clone()).map_err(|error| SetupError::TokenFile {
                        path: path.clone(),
                        error,
                    })?;
                let file = Arc::new(file);
                reloadable.push(file.clone().into());
                Some(file)
            }
            None => None,
        };
        Ok(Authenticator {
            anonymous: config.anonymous,
            request_header,
            certificates,
            token_file,
            reviewer: config.token_review.map(TokenReviewer::new),
            structured: None,
            metrics: None,
            reloadable,
            authorizer: Authorizer::default(),
        })
    }

    /// The same authenticators, counting attempts and their duration in `metrics`
    /// (`authentication_attempts`, `authentication_duration_seconds`, see [`Authenticator::count`]).
    pub fn counted(mut self, metrics: AuthnMetrics) -> Authenticator {
        self.metrics = Some(metrics);
        self
    }

    /// Counts one request's authentication, which took `took`, as kube-apiserver counts it.
    pub fn count(&self, result: &Result<Authenticated, AuthError>, took: std::time::Duration) {
        let Some(metrics) = &self.metrics else {
            return;
        };
        let attempt = match result {
            Ok(_) => Attempt::Success,
            Err(AuthError::TooManyReviews) => Attempt::Error,
            Err(_) => Attempt::Failure,
        };
        metrics.attempt(attempt, took);
    }

    /// The same authenticators with the JWT issuers and anonymous rule of an
    /// `AuthenticationConfiguration` file (re-read when it changes).
    pub fn with_structured(mut self, structured: Arc<StructuredAuthn>) -> Authenticator {
        self.reloadable.push(structured.clone().into());
        self.structured = Some(structured);
        self
    }

    /// The same authenticators, followed by the authorizer `config` asks for.
    pub fn authorizing(mut self, config: &Authorization, metrics: &AuthzMetrics) -> Authenticator {
        self.authorizer = Authorizer::new(config, metrics);
        self
    }

    /// The same authenticators, followed by the chain of an `AuthorizationConfiguration` file
    /// (re-read when it changes).
    pub fn with_structured_authz(mut self, structured: Arc<StructuredAuthz>) -> Authenticator {
        self.authorizer = Authorizer::structured(&structured);
        self.reloadable.push(structured.into());
        self
    }

    /// What authenticated callers may do.
    pub fn authorizer(&self) -> &Authorizer {
        &self.authorizer
    }

    /// What is open to whom, one line each, for the start-up log; `true` beside a line that
    /// opens routes or monitoring to every caller (logged as a warning).
    pub fn access(&self) -> Vec<(bool, String)> {
        let mut methods = Vec::new();
        if self.request_header.is_some() {
            methods.push("front proxy");
        }
        if self
            .certificates
            .as_ref()
            .is_some_and(|c| c.client_ca.is_some())
        {
            methods.push("client certificates");
        }
        if self.token_file.is_some() {
            methods.push("token file");
        }
        let issuers = self.structured.as_ref().map(|s| s.issuers());
        let jwt = issuers
            .as_ref()
            .filter(|i| !i.is_empty())
            .map(|i| format!("JWT issuers {}", i.join(", ")));
        if let Some(jwt) = &jwt {
            methods.push(jwt);
        }
        if self.reviewer.is_some() {
            methods.push("TokenReview");
        }
        if methods.is_empty() {
            methods.push("none");
        }
        let anonymous = match self.structured.as_ref().and_then(|s| s.anonymous()) {
            Some(rule) if rule.enabled => match rule.paths {
                Some(paths) => format!("allowed as system:anonymous on {} only", paths.join(", ")),
                None => "allowed, as system:anonymous".to_string(),
            },
            Some(_) => "refused with 401".to_string(),
            None if self.anonymous => "allowed, as system:anonymous".to_string(),
            None => "refused with 401".to_string(),
        };
        let stomped = anonymous.starts_with("allowed") && self.authorizer.allows_everything();
        let anonymous = if stomped {
            format!(
                "refused with 401: anonymous authentication ({anonymous}) is turned off beside \
                 the AlwaysAllow authorizer, as kube-apiserver turns it off; use another authorizer"
            )
        } else {
            anonymous
        };
        let mut lines = vec![
            (false, format!("authentication: {}", methods.join(", "))),
            (
                stomped,
                format!("requests without credentials: {anonymous}"),
            ),
        ];
        for line in self.authorizer.describe(self.anonymous) {
            lines.push((line.contains("ANYONE"), line));
        }
        lines
    }

    /// The client-certificate checks, when configured: the TLS listener identifies each
    /// connection with them, and each request re-checks against the current CA bundles.
    pub fn certificates(&self) -> Option<Arc<ClientCertificates>> {
        self.certificates.clone()
    }

    /// The files to re-read when they change.
    pub fn reloadable(&self) -> Vec<Reloadable> {
        self.reloadable.clone()
    }

    /// Whether `name` is a configured front-proxy identity header (never forwarded as sent).
    pub fn is_identity_header(&self, name: &HeaderName) -> bool {
        self.request_header
            .as_ref()
            .is_some_and(|r| r.is_identity_header(name))
    }

    /// Authenticates a request from `peer`: `Err` says why, and which answer it gets
    /// ([`AuthError::status`]). The connection's client certificate is verified against the
    /// current CA bundles (reusing its last verdict while they are unchanged).
    pub async fn authenticate(
        &self,
        path: &str,
        headers: &HeaderMap,
        peer: Option<std::net::SocketAddr>,
        connection: Option<&ConnectionIdentity>,
        delegate: Option<&Upstream>,
        clients: &Clients,
    ) -> Result<Authenticated, AuthError> {
        let invalid = |method, source| AuthError::InvalidIdentity { method, source };
        let mut errors: Vec<String> = Vec::new();
        let verdict = connection.map(ConnectionIdentity::verdict);
        if let (Some(names), Some(verdict)) = (&self.request_header, &verdict) {
            match (&verdict.front_proxy, names.user(headers)) {
                (Some(Ok(())), Some(Ok(user))) => return Ok(found(user, Method::FrontProxy)),
                (Some(Ok(())), Some(Err(e))) => return Err(invalid(Method::FrontProxy, e)),
                (Some(Err(e)), _) => errors.push(e.to_string()),
                _ => {}
            }
        }
        match verdict.as_ref().and_then(|v| v.certificate.as_ref()) {
            Some(Ok(user)) => return Ok(found(user.clone(), Method::ClientCertificate)),
            Some(Err(CertificateRefusal::Identity(e))) => {
                return Err(invalid(Method::ClientCertificate, e.clone()))
            }
            Some(Err(e)) => errors.push(e.to_string()),
            None => {}
        }
        let token =
            if self.token_file.is_some() || self.reviewer.is_some() || self.structured.is_some() {
                bearer(headers)
            } else {
                None
            };
        if let Some(token) = token {
            if let Some(user) = self.token_file.as_ref().and_then(|f| f.user(token)) {
                return Ok(found(user, Method::TokenFile));
            }
            if let Some(structured) = &self.structured {
                // Boxed: a validation's state stays out of every request's future.
                match Box::pin(structured.authenticate(token)).await {
                    Some(Ok(user)) => return Ok(found(user, Method::Jwt)),
                    Some(Err(IssuerRefusal::Identity { why, .. })) => {
                        return Err(invalid(Method::Jwt, why))
                    }
                    Some(Err(why)) => {
                        // The issuer matched: its refusal is final (nothing of it in the body).
                        tracing::debug!("JWT refused: {why}");
                        return Err(AuthError::Unauthorized("invalid bearer token".into()));
                    }
                    None => {}
                }
            }
            match (&self.reviewer, delegate) {
                (Some(reviewer), Some(delegate)) => {
                    // Boxed: a review's state stays out of every request's future.
                    match Box::pin(reviewer.review(token, Source::of(peer), delegate, clients))
                        .await
                    {
                        Ok(user) => return Ok(found(user, Method::TokenReview)),
                        Err(ReviewError::TooMany) => return Err(AuthError::TooManyReviews),
                        Err(ReviewError::Identity(e)) => {
                            return Err(invalid(Method::TokenReview, e))
                        }
                        Err(e) => errors.push(e.to_string()),
                    }
                }
                (Some(_), None) => errors.push("TokenReview: no delegate to ask".into()),
                (None, _) => errors.push("invalid bearer token".into()),
            }
        }
        if !errors.is_empty() {
            return Err(AuthError::Unauthorized(errors.join("; ")));
        }
        let anonymous = self
            .structured
            .as_ref()
            .and_then(|s| s.admits_anonymous(path));
        if !anonymous.unwrap_or(self.anonymous) {
            return Err(AuthError::Unauthorized(
                "no credentials and anonymous requests are disabled".into(),
            ));
        }
        if self.authorizer.allows_everything() {
            // An anonymous caller would be allowed everything, as kube-apiserver refuses.
            return Err(AuthError::Unauthorized(
                "no credentials, and anonymous requests are refused while the AlwaysAllow \
                 authorizer is configured"
                    .into(),
            ));
        }
        Ok(found(User::anonymous().clone(), Method::Anonymous))
    }
}

fn found(user: Arc<User>, method: Method) -> Authenticated {
    Authenticated { user, method }
}

/// The token of an `Authorization: Bearer <token>` header.
fn bearer(headers: &HeaderMap) -> Option<&str> {
    let value = headers
        .get(http::header::AUTHORIZATION)?
        .to_str()
        .ok()?
        .trim();
    let (scheme, token) = value.split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty() && !token.contains(' '))
        .then_some(token)
}
