//! Checks of the parts of a config file: `apiServiceFiles` patterns, the delegate, the services
//! table and APIService manifests. Each failure is an [`Invalid`], reported as a [`Problem`].

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use apiagg_apis::APIService;
use serde::Deserialize;

use super::{Problem, ServiceEntry};
use crate::endpoint::{parse_endpoint, EndpointError};

/// What is wrong with one part of a config: the message of a [`Problem`]. None is retryable:
/// the files must change.
#[derive(Debug, thiserror::Error)]
pub(super) enum Invalid {
    /// An `apiServiceFiles` entry is not a valid glob pattern. Not retryable.
    #[error("bad pattern {pattern:?}: {source}")]
    Pattern {
        /// The entry as written.
        pattern: String,
        /// Why glob refused it.
        source: glob::PatternError,
    },
    /// An `apiServiceFiles` entry without wildcards names no file. Not retryable.
    #[error("file {0:?} does not exist")]
    Missing(PathBuf),
    /// A service entry without namespace or name. Not retryable.
    #[error("namespace and name are required")]
    ServiceName,
    /// A service port outside 1–65535. Not retryable.
    #[error("port {0}: must be between 1 and 65535, inclusive")]
    ServicePort(i32),
    /// A service endpoint that is not `http(s)://host[:port]`. Not retryable.
    #[error(transparent)]
    Endpoint(#[from] EndpointError),
    /// The same `namespace/name:port` twice in `services`. Not retryable.
    #[error("duplicate service, first declared at services[{0}]")]
    DuplicateService(usize),
    /// An APIService file is not UTF-8. Not retryable.
    #[error(transparent)]
    NotUtf8(#[from] std::str::Utf8Error),
    /// A document of an APIService file is not YAML. Not retryable.
    #[error("document {index}: {source}")]
    Yaml {
        /// 1-based position in the file.
        index: usize,
        /// The YAML error.
        source: serde_yaml_ng::Error,
    },
    /// An inline `apiServices` entry of another kind. Not retryable.
    #[error("expected an object of kind APIService")]
    NotAnApiServiceKind,
    /// An APIService of another API version. Not retryable.
    #[error("apiVersion {0:?} is not supported: use apiregistration.k8s.io/v1")]
    ApiVersion(String),
    /// An APIService that does not decode. Not retryable.
    #[error("not a valid APIService: {0}")]
    NotAnApiService(serde_json::Error),
    /// A built-in group of Kubernetes routed to a Service: the file may declare it only as local
    /// (`spec.service` unset). Not retryable.
    #[error("group {0:?} is built into Kubernetes and served by the delegate: declare it without spec.service (local) or not at all")]
    RemoteBuiltinGroup(String),
    /// An APIService name declared before. Not retryable.
    #[error("duplicate APIService {name:?}, first declared at {first}")]
    DuplicateApiService {
        /// The APIService name.
        name: String,
        /// Where it was first declared.
        first: String,
    },
}

/// The result of checking one part.
type Result<T, E = Invalid> = std::result::Result<T, E>;

/// The files an `apiServiceFiles` entry names, sorted; a plain path must exist, a glob may
/// match nothing.
pub(super) fn expand_pattern(base: &Path, pattern: &str) -> Result<Vec<PathBuf>> {
    let full = base.join(pattern);
    let full_text = full.to_string_lossy();
    let has_glob = pattern.contains(['*', '?', '[']);
    let mut matched: Vec<PathBuf> = glob::glob(&full_text)
        .map_err(|source| Invalid::Pattern {
            pattern: pattern.to_string(),
            source,
        })?
        .filter_map(Result::ok)
        .filter(|p| p.is_file())
        .collect();
    matched.sort();
    if matched.is_empty() && !has_glob {
        return Err(Invalid::Missing(full));
    }
    Ok(matched)
}

pub(super) fn check_services(shown: &str, services: &[ServiceEntry], problems: &mut Vec<Problem>) {
    let mut seen = HashMap::new();
    for (i, s) in services.iter().enumerate() {
        let location = format!(
            "{shown}: services[{i}] ({}/{}:{})",
            s.namespace, s.name, s.port
        );
        if s.namespace.is_empty() || s.name.is_empty() {
            problems.push(Problem::new(location.clone(), Invalid::ServiceName));
        }
        if !(1..=65535).contains(&s.port) {
            problems.push(Problem::new(location.clone(), Invalid::ServicePort(s.port)));
        }
        for e in &s.endpoints {
            if let Err(e) = parse_endpoint(e) {
                problems.push(Problem::new(location.clone(), Invalid::Endpoint(e)));
            }
        }
        if let Some(first) = seen.insert((&s.namespace, &s.name, s.port), i) {
            problems.push(Problem::new(location, Invalid::DuplicateService(first)));
        }
    }
}

/// Splits a multi-document YAML text into JSON values (empty documents skipped).
pub(super) fn documents(bytes: &[u8]) -> Result<Vec<serde_json::Value>> {
    let text = std::str::from_utf8(bytes)?;
    let mut out = Vec::new();
    for (i, doc) in serde_yaml_ng::Deserializer::from_str(text).enumerate() {
        let value = serde_json::Value::deserialize(doc).map_err(|source| Invalid::Yaml {
            index: i + 1,
            source,
        })?;
        if !value.is_null() {
            out.push(value);
        }
    }
    Ok(out)
}

/// Turns one manifest into an APIService; `Ok(None)` for objects of other kinds. `List` objects
/// are not expanded here: APIService files hold plain documents.
pub(super) fn object_from_value(value: serde_json::Value) -> Result<Option<APIService>> {
    let kind = value.get("kind").and_then(|k| k.as_str()).unwrap_or("");
    if kind != "APIService" {
        return Ok(None);
    }
    let api_version = value
        .get("apiVersion")
        .and_then(|k| k.as_str())
        .unwrap_or("");
    if api_version != "apiregistration.k8s.io/v1" {
        return Err(Invalid::ApiVersion(api_version.to_string()));
    }
    serde_json::from_value(value)
        .map(Some)
        .map_err(Invalid::NotAnApiService)
}
