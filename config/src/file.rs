//! The gateway config file: schema, multi-document APIService files, and loading with errors that
//! say what is wrong and where.

mod delegate;
mod parts;
mod trust;

use std::collections::HashMap;
use std::fmt::Display;
use std::path::{Path, PathBuf};

use apiagg_apis::{apply_defaults, validate, APIService, DEFAULT_SERVICE_PORT};
use serde::Deserialize;

pub use self::delegate::{
    from_kubeconfig, in_cluster, CertSource, DelegateConfig, DelegateError, KubeconfigProblem,
    TokenSource, SERVICE_ACCOUNT_DIR,
};
use self::delegate::{parse_delegate, RawDelegate};
use self::parts::{check_services, documents, expand_pattern, object_from_value, Invalid};
use self::trust::{parse_authentication, parse_authorization, RawAuthentication, RawAuthorization};
pub use self::trust::{
    Authentication, Authorization, AuthorizationMode, ProxyClient, RequestHeader, ServingTls,
    SniCertificate, TokenReview, TrustError,
};
use crate::cluster::ServiceResolution;

/// Address served when neither the file nor `--listen` names one.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:8080";

/// The config file as written (camelCase keys, like Kubernetes objects).
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RawConfig {
    listen: Option<String>,
    tls: Option<ServingTls>,
    delegate: Option<RawDelegate>,
    authentication: Option<RawAuthentication>,
    authorization: Option<RawAuthorization>,
    proxy_client: Option<ProxyClient>,
    #[serde(default)]
    service_resolution: ServiceResolution,
    #[serde(default)]
    services: Vec<ServiceEntry>,
    #[serde(default)]
    api_services: Vec<serde_json::Value>,
    #[serde(default)]
    api_service_files: Vec<String>,
}

/// Maps `spec.service` of APIServices to endpoint URLs.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ServiceEntry {
    /// Service namespace.
    pub namespace: String,
    /// Service name.
    pub name: String,
    /// Service port (matched against `spec.service.port`), 443 when omitted.
    #[serde(default = "default_port")]
    pub port: i32,
    /// Endpoint URLs (`https://127.0.0.1:9443`); the scheme decides TLS.
    #[serde(default)]
    pub endpoints: Vec<String>,
}

fn default_port() -> i32 {
    DEFAULT_SERVICE_PORT
}

/// An APIService together with where it was declared.
#[derive(Debug, Clone, PartialEq)]
pub struct SourcedApiService {
    /// The defaulted, validated object.
    pub object: APIService,
    /// `file.yaml: apiServices[2]` or `apiservices/x.yaml: document 1`.
    pub origin: String,
}

/// A loaded and validated gateway configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct GatewayConfig {
    /// Listen address.
    pub listen: String,
    /// Serving TLS, paths resolved against the config file's folder.
    pub tls: Option<ServingTls>,
    /// Delegate API server.
    pub delegate: Option<DelegateConfig>,
    /// How callers are authenticated.
    pub authentication: Authentication,
    /// What authenticated callers may do.
    pub authorization: Authorization,
    /// The certificate presented to remote backends.
    pub proxy_client: Option<ProxyClient>,
    /// Where `spec.service` is resolved besides the `services` table.
    pub service_resolution: ServiceResolution,
    /// Service endpoint table; an entry here wins over the cluster's Service.
    pub services: Vec<ServiceEntry>,
    /// Every APIService, inline ones first, then files in pattern and name order.
    pub api_services: Vec<SourcedApiService>,
}

/// One problem found while loading, with where it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// File and position (`config.yaml: apiServices[0] (v1.a.io)`).
    pub location: String,
    /// What is wrong.
    pub message: String,
}

/// Every problem found in a config; the config is rejected as a whole. Not retryable: loading
/// succeeds only once the files are fixed (the gateway keeps its last good config and tries
/// again when they change).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", list(.problems))]
pub struct ConfigError {
    /// The problems, in file order.
    pub problems: Vec<Problem>,
}

/// The result of loading a config.
type Result<T, E = ConfigError> = std::result::Result<T, E>;

impl Problem {
    /// A problem at `location`; its message is `what` in words.
    fn new(location: impl Into<String>, what: impl Display) -> Problem {
        Problem {
            location: location.into(),
            message: what.to_string(),
        }
    }
}

impl ConfigError {
    fn single(location: &Path, what: impl Display) -> Self {
        ConfigError {
            problems: vec![Problem::new(location.display().to_string(), what)],
        }
    }
}

/// `location: message` of every problem, joined by `; `.
fn list(problems: &[Problem]) -> String {
    let lines: Vec<String> = problems
        .iter()
        .map(|p| format!("{}: {}", p.location, p.message))
        .collect();
    lines.join("; ")
}

/// The raw bytes a config consists of: the file and every APIService file it names. Comparing two
/// `Sources` tells whether anything changed on disk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sources {
    path: PathBuf,
    main: Vec<u8>,
    files: Vec<(PathBuf, Vec<u8>)>,
}

fn read(path: &Path) -> Result<Vec<u8>> {
    std::fs::read(path).map_err(|e| ConfigError::single(path, e))
}

fn base_dir(path: &Path) -> PathBuf {
    path.parent()
        .filter(|p| !p.as_os_str().is_empty())
        .map_or_else(|| PathBuf::from("."), Path::to_path_buf)
}

fn parse_raw(path: &Path, bytes: &[u8]) -> Result<RawConfig> {
    let text = std::str::from_utf8(bytes).map_err(|e| ConfigError::single(path, e))?;
    if text.trim().is_empty() {
        return Ok(RawConfig::default());
    }
    serde_yaml_ng::from_str(text).map_err(|e| ConfigError::single(path, e))
}

impl Sources {
    /// Reads the config file and every file its `apiServiceFiles` patterns match.
    pub fn read(path: &Path) -> Result<Sources> {
        let main = read(path)?;
        let raw = parse_raw(path, &main)?;
        let base = base_dir(path);
        let mut files = Vec::new();
        let mut problems = Vec::new();
        for (i, pattern) in raw.api_service_files.iter().enumerate() {
            match expand_pattern(&base, pattern) {
                Ok(paths) => {
                    for p in paths {
                        match read(&p) {
                            Ok(bytes) => files.push((p, bytes)),
                            Err(e) => problems.extend(e.problems),
                        }
                    }
                }
                Err(invalid) => problems.push(Problem::new(
                    format!("{}: apiServiceFiles[{i}]", path.display()),
                    invalid,
                )),
            }
        }
        if !problems.is_empty() {
            return Err(ConfigError { problems });
        }
        Ok(Sources {
            path: path.to_path_buf(),
            main,
            files,
        })
    }

    /// Parses and validates the sources into a config.
    pub fn parse(&self) -> Result<GatewayConfig> {
        let path = &self.path;
        let raw = parse_raw(path, &self.main)?;
        let base = base_dir(path);
        let shown = path.display().to_string();
        let mut problems = Vec::new();

        let listen = raw.listen.unwrap_or_else(|| DEFAULT_LISTEN.to_string());
        let tls = raw.tls.map(|t| t.resolve(&base));
        let delegate = raw.delegate.and_then(|d| match parse_delegate(&base, d) {
            Ok(d) => Some(d),
            Err(invalid) => {
                problems.push(Problem::new(format!("{shown}: delegate"), invalid));
                None
            }
        });
        let authentication = match raw.authentication {
            Some(a) => parse_authentication(&base, a, tls.is_some()).unwrap_or_else(|e| {
                problems.push(Problem::new(format!("{shown}: authentication"), e));
                Authentication::default()
            }),
            None => Authentication::default(),
        };
        if authentication.token_review.is_some() && delegate.is_none() {
            problems.push(Problem::new(
                format!("{shown}: authentication.tokenReview"),
                "needs a delegate: TokenReviews are sent to it",
            ));
        }
        let authorization = match raw.authorization {
            Some(a) => parse_authorization(a).unwrap_or_else(|e| {
                problems.push(Problem::new(format!("{shown}: authorization"), e));
                Authorization::default()
            }),
            None => Authorization::default(),
        };
        if authorization.mode == AuthorizationMode::Webhook && delegate.is_none() {
            problems.push(Problem::new(
                format!("{shown}: authorization.mode"),
                "Webhook needs a delegate: SubjectAccessReviews are sent to it",
            ));
        }
        let proxy_client = raw.proxy_client.map(|p| ProxyClient {
            cert_file: base.join(p.cert_file),
            key_file: base.join(p.key_file),
        });
        check_services(&shown, &raw.services, &mut problems);
        if raw.service_resolution != ServiceResolution::Config && delegate.is_none() {
            problems.push(Problem::new(
                format!("{shown}: serviceResolution"),
                "needs a delegate: Services and EndpointSlices are read from it",
            ));
        }

        let mut api_services = Vec::new();
        for (i, value) in raw.api_services.into_iter().enumerate() {
            let origin = format!("{shown}: apiServices[{i}]");
            match object_from_value(value) {
                Ok(Some(obj)) => api_services.push((obj, origin)),
                Ok(None) => problems.push(Problem::new(origin, Invalid::NotAnApiServiceKind)),
                Err(invalid) => problems.push(Problem::new(origin, invalid)),
            }
        }
        for (file, bytes) in &self.files {
            let file_shown = file.display().to_string();
            match documents(bytes) {
                Ok(docs) => {
                    for (d, value) in docs.into_iter().enumerate() {
                        let origin = format!("{file_shown}: document {}", d + 1);
                        match object_from_value(value) {
                            Ok(Some(obj)) => api_services.push((obj, origin)),
                            Ok(None) => {}
                            Err(invalid) => problems.push(Problem::new(origin, invalid)),
                        }
                    }
                }
                Err(invalid) => problems.push(Problem::new(file_shown, invalid)),
            }
        }

        let mut seen: HashMap<String, String> = HashMap::new();
        let mut validated = Vec::new();
        for (mut object, origin) in api_services {
            apply_defaults(&mut object);
            let name = object.metadata.name.clone().unwrap_or_default();
            let location = format!("{origin} ({name})");
            if let Err(e) = validate(&object) {
                problems.push(Problem::new(location, e));
                continue;
            }
            let spec = object.spec.as_ref();
            let group = spec.and_then(|s| s.group.as_deref()).unwrap_or("");
            if crate::ownership::remote_builtin(group, spec.is_some_and(|s| s.service.is_some())) {
                let remote = Invalid::RemoteBuiltinGroup(group.to_string());
                problems.push(Problem::new(location, remote));
                continue;
            }
            if let Some(first) = seen.get(&name) {
                let duplicate = Invalid::DuplicateApiService {
                    name: name.clone(),
                    first: first.clone(),
                };
                problems.push(Problem::new(location, duplicate));
                continue;
            }
            seen.insert(name, origin.clone());
            validated.push(SourcedApiService { object, origin });
        }

        if !problems.is_empty() {
            return Err(ConfigError { problems });
        }
        Ok(GatewayConfig {
            listen,
            tls,
            delegate,
            authentication,
            authorization,
            proxy_client,
            service_resolution: raw.service_resolution,
            services: raw.services,
            api_services: validated,
        })
    }
}

impl GatewayConfig {
    /// Reads, parses and validates the config at `path`.
    pub fn load(path: &Path) -> Result<GatewayConfig> {
        Sources::read(path)?.parse()
    }
}

#[cfg(test)]
mod tests;
