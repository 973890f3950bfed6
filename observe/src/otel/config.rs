//! kube-apiserver's tracing file (`--tracing-config-file`): a `TracingConfiguration` of
//! `apiserver.config.k8s.io/v1`, `v1beta1` or `v1alpha1` with the collector's `endpoint` (OTLP
//! over gRPC, default `localhost:4317`) and `samplingRatePerMillion` (0 to 1,000,000, default
//! 0: only requests whose caller sampled them are traced).

use std::path::{Path, PathBuf};

use serde::Deserialize;

/// The collector kube-apiserver sends to when the file names none.
const DEFAULT_ENDPOINT: &str = "localhost:4317";

/// The API versions kube-apiserver reads the file in.
const API_VERSIONS: [&str; 3] = [
    "apiserver.config.k8s.io/v1",
    "apiserver.config.k8s.io/v1beta1",
    "apiserver.config.k8s.io/v1alpha1",
];

/// The highest `samplingRatePerMillion`: every request is sampled.
pub const MILLION: u32 = 1_000_000;

/// What a valid tracing file says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TracingSettings {
    /// The collector's gRPC URL (`http://host:port`).
    pub endpoint: String,
    /// Requests sampled per million among those whose caller did not decide.
    pub sampling_rate_per_million: u32,
}

/// Why a tracing file cannot be used. None is retryable: the file must be fixed.
#[derive(Debug, thiserror::Error)]
pub enum TracingConfigError {
    /// The file cannot be read.
    #[error("tracing config {}: {error}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// What reading it said.
        error: std::io::Error,
    },
    /// The file is not a `TracingConfiguration` document (YAML or JSON; unknown fields are
    /// refused, and named).
    #[error("tracing config {}: {error}", path.display())]
    Parse {
        /// The file.
        path: PathBuf,
        /// What the decoder said.
        error: serde_yaml_ng::Error,
    },
    /// A field holds a value kube-apiserver refuses too.
    #[error("tracing config {}: {field}: Invalid value: {message}", path.display())]
    Invalid {
        /// The file.
        path: PathBuf,
        /// The field.
        field: &'static str,
        /// Why.
        message: String,
    },
}

/// The file as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Raw {
    api_version: Option<String>,
    kind: Option<String>,
    endpoint: Option<String>,
    sampling_rate_per_million: Option<i64>,
}

/// Reads and validates the tracing file at `path`.
pub fn load(path: &Path) -> Result<TracingSettings, TracingConfigError> {
    let text = std::fs::read_to_string(path).map_err(|error| TracingConfigError::Read {
        path: path.to_path_buf(),
        error,
    })?;
    parse(&text).map_err(|e| e.at(path))
}

/// A [`TracingConfigError`] before the file is known.
enum Problem {
    Parse(serde_yaml_ng::Error),
    Invalid(&'static str, String),
}

impl Problem {
    fn at(self, path: &Path) -> TracingConfigError {
        let path = path.to_path_buf();
        match self {
            Problem::Parse(error) => TracingConfigError::Parse { path, error },
            Problem::Invalid(field, message) => TracingConfigError::Invalid {
                path,
                field,
                message,
            },
        }
    }
}

fn parse(text: &str) -> Result<TracingSettings, Problem> {
    let raw: Raw = serde_yaml_ng::from_str(text).map_err(Problem::Parse)?;
    let api_version = raw.api_version.unwrap_or_default();
    if !API_VERSIONS.contains(&api_version.as_str()) {
        let message = format!(
            "{api_version:?}: must be one of {}",
            API_VERSIONS.join(", ")
        );
        return Err(Problem::Invalid("apiVersion", message));
    }
    let kind = raw.kind.unwrap_or_default();
    if kind != "TracingConfiguration" {
        let message = format!("{kind:?}: must be TracingConfiguration");
        return Err(Problem::Invalid("kind", message));
    }
    let rate = raw.sampling_rate_per_million.unwrap_or(0);
    let sampling_rate_per_million = u32::try_from(rate)
        .ok()
        .filter(|r| *r <= MILLION)
        .ok_or_else(|| {
            let message = format!("{rate}: must be between 0 and 1000000, inclusive");
            Problem::Invalid("samplingRatePerMillion", message)
        })?;
    let endpoint = raw.endpoint.unwrap_or_else(|| DEFAULT_ENDPOINT.to_string());
    let endpoint = grpc_url(&endpoint)
        .map_err(|why| Problem::Invalid("endpoint", format!("{endpoint:?}: {why}")))?;
    Ok(TracingSettings {
        endpoint,
        sampling_rate_per_million,
    })
}

/// The collector's URL from `host:port` (kube-apiserver's form) or `http://host:port`.
fn grpc_url(endpoint: &str) -> Result<String, &'static str> {
    let url = if endpoint.contains("://") {
        endpoint.to_string()
    } else {
        format!("http://{endpoint}")
    };
    let parsed = url::Url::parse(&url).map_err(|_| "not a host:port or URL")?;
    if parsed.scheme() != "http" {
        return Err("only plain gRPC (http://, or host:port) is supported");
    }
    if parsed.host_str().is_none_or(str::is_empty) || parsed.port_or_known_default().is_none() {
        return Err("needs a host and a port");
    }
    if parsed.path() != "/" && !parsed.path().is_empty() {
        return Err("a gRPC endpoint has no path");
    }
    Ok(url)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn problem(text: &str) -> String {
        match parse(text) {
            Ok(settings) => panic!("accepted: {settings:?}"),
            Err(p) => p.at(Path::new("/etc/tracing.yaml")).to_string(),
        }
    }

    #[test]
    fn every_version_kube_apiserver_reads_is_read() {
        for version in API_VERSIONS {
            let text = format!(
                "apiVersion: {version}\nkind: TracingConfiguration\nendpoint: collector:4317\n\
                 samplingRatePerMillion: 250\n"
            );
            let settings = parse(&text).map_err(|p| p.at(Path::new("f")).to_string());
            assert_eq!(
                settings.ok(),
                Some(TracingSettings {
                    endpoint: "http://collector:4317".into(),
                    sampling_rate_per_million: 250,
                })
            );
        }
    }

    #[test]
    fn defaults_are_kube_apiservers() {
        let text = "apiVersion: apiserver.config.k8s.io/v1\nkind: TracingConfiguration\n";
        let settings = parse(text).ok().expect("valid");
        assert_eq!(settings.endpoint, "http://localhost:4317");
        assert_eq!(settings.sampling_rate_per_million, 0);
    }

    #[test]
    fn errors_name_the_file_and_the_field() {
        let head = "apiVersion: apiserver.config.k8s.io/v1beta1\nkind: TracingConfiguration\n";
        let rate = problem(&format!("{head}samplingRatePerMillion: 1000001\n"));
        assert!(rate.contains("/etc/tracing.yaml"), "{rate}");
        assert!(
            rate.contains("samplingRatePerMillion: Invalid value: 1000001"),
            "{rate}"
        );
        let negative = problem(&format!("{head}samplingRatePerMillion: -1\n"));
        assert!(negative.contains("samplingRatePerMillion"), "{negative}");
        let unknown = problem(&format!("{head}samplingRate: 5\n"));
        assert!(unknown.contains("samplingRate"), "{unknown}");
        let typed = problem(&format!("{head}samplingRatePerMillion: lots\n"));
        assert!(typed.contains("samplingRatePerMillion"), "{typed}");
        let tls = problem(&format!("{head}endpoint: https://collector:4317\n"));
        assert!(tls.contains("endpoint: Invalid value"), "{tls}");
        let nonsense = problem(&format!("{head}endpoint: 'a b:c'\n"));
        assert!(nonsense.contains("endpoint"), "{nonsense}");
        let version = problem("apiVersion: v1\nkind: TracingConfiguration\n");
        assert!(version.contains("apiVersion: Invalid value"), "{version}");
        let kind = problem("apiVersion: apiserver.config.k8s.io/v1\nkind: Tracing\n");
        assert!(kind.contains("kind: Invalid value"), "{kind}");
    }
}
