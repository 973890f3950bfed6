//! The gateway config file: schema, multi-document APIService files, and loading with errors that
//! say what is wrong and where.

use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::apiservice::{self, APIService};

/// Address served when neither the file nor `--listen` names one.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:8080";

/// The config file as written (camelCase keys, like Kubernetes objects).
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RawConfig {
    listen: Option<String>,
    tls: Option<ServingTls>,
    delegate: Option<RawDelegate>,
    #[serde(default)]
    services: Vec<ServiceEntry>,
    #[serde(default)]
    api_services: Vec<serde_json::Value>,
    #[serde(default)]
    api_service_files: Vec<String>,
}

/// Serving certificate of the gateway's own listener.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ServingTls {
    /// PEM certificate chain.
    pub cert_file: PathBuf,
    /// PEM private key.
    pub key_file: PathBuf,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RawDelegate {
    url: String,
    ca_file: Option<PathBuf>,
    #[serde(default)]
    insecure_skip_tls_verify: bool,
}

/// The API server that serves the built-in groups.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DelegateConfig {
    /// Base URL (`https://host:port`).
    pub url: url::Url,
    /// PEM CA bundle (file contents) used to verify the delegate.
    pub ca_pem: Option<Vec<u8>>,
    /// Skip verification of the delegate's certificate.
    pub insecure_skip_tls_verify: bool,
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
    apiservice::DEFAULT_SERVICE_PORT
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
    /// Service endpoint table.
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

/// Every problem found in a config; the config is rejected as a whole.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// The problems, in file order.
    pub problems: Vec<Problem>,
}

impl ConfigError {
    fn single(location: impl Into<String>, message: impl Into<String>) -> Self {
        ConfigError {
            problems: vec![Problem {
                location: location.into(),
                message: message.into(),
            }],
        }
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let lines: Vec<String> = self
            .problems
            .iter()
            .map(|p| format!("{}: {}", p.location, p.message))
            .collect();
        write!(f, "{}", lines.join("; "))
    }
}

impl std::error::Error for ConfigError {}

/// The raw bytes a config consists of: the file and every APIService file it names. Comparing two
/// `Sources` tells whether anything changed on disk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sources {
    path: PathBuf,
    main: Vec<u8>,
    files: Vec<(PathBuf, Vec<u8>)>,
}

fn read(path: &Path) -> Result<Vec<u8>, ConfigError> {
    std::fs::read(path).map_err(|e| ConfigError::single(path.display().to_string(), e.to_string()))
}

fn base_dir(path: &Path) -> PathBuf {
    path.parent()
        .filter(|p| !p.as_os_str().is_empty())
        .map_or_else(|| PathBuf::from("."), Path::to_path_buf)
}

fn parse_raw(path: &Path, bytes: &[u8]) -> Result<RawConfig, ConfigError> {
    let text = std::str::from_utf8(bytes)
        .map_err(|e| ConfigError::single(path.display().to_string(), e.to_string()))?;
    if text.trim().is_empty() {
        return Ok(RawConfig::default());
    }
    serde_yaml_ng::from_str(text)
        .map_err(|e| ConfigError::single(path.display().to_string(), e.to_string()))
}

fn expand_pattern(base: &Path, pattern: &str) -> Result<Vec<PathBuf>, String> {
    let full = base.join(pattern);
    let full_text = full.to_string_lossy();
    let has_glob = pattern.contains(['*', '?', '[']);
    let mut matched: Vec<PathBuf> = glob::glob(&full_text)
        .map_err(|e| format!("bad pattern {pattern:?}: {e}"))?
        .filter_map(Result::ok)
        .filter(|p| p.is_file())
        .collect();
    matched.sort();
    if matched.is_empty() && !has_glob {
        return Err(format!("file {:?} does not exist", full.display()));
    }
    Ok(matched)
}

impl Sources {
    /// Reads the config file and every file its `apiServiceFiles` patterns match.
    pub fn read(path: &Path) -> Result<Sources, ConfigError> {
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
                Err(message) => problems.push(Problem {
                    location: format!("{}: apiServiceFiles[{i}]", path.display()),
                    message,
                }),
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
    pub fn parse(&self) -> Result<GatewayConfig, ConfigError> {
        let path = &self.path;
        let raw = parse_raw(path, &self.main)?;
        let base = base_dir(path);
        let shown = path.display().to_string();
        let mut problems = Vec::new();

        let listen = raw.listen.unwrap_or_else(|| DEFAULT_LISTEN.to_string());
        let tls = raw.tls.map(|t| ServingTls {
            cert_file: base.join(t.cert_file),
            key_file: base.join(t.key_file),
        });
        let delegate = raw.delegate.and_then(|d| match parse_delegate(&base, d) {
            Ok(d) => Some(d),
            Err(message) => {
                problems.push(Problem {
                    location: format!("{shown}: delegate"),
                    message,
                });
                None
            }
        });
        check_services(&shown, &raw.services, &mut problems);

        let mut api_services = Vec::new();
        for (i, value) in raw.api_services.into_iter().enumerate() {
            let origin = format!("{shown}: apiServices[{i}]");
            match object_from_value(value) {
                Ok(Some(obj)) => api_services.push((obj, origin)),
                Ok(None) => problems.push(Problem {
                    location: origin,
                    message: "expected an object of kind APIService".into(),
                }),
                Err(message) => problems.push(Problem {
                    location: origin,
                    message,
                }),
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
                            Err(message) => problems.push(Problem {
                                location: origin,
                                message,
                            }),
                        }
                    }
                }
                Err(message) => problems.push(Problem {
                    location: file_shown,
                    message,
                }),
            }
        }

        let mut seen: HashMap<String, String> = HashMap::new();
        let mut validated = Vec::new();
        for (mut object, origin) in api_services {
            apiservice::apply_defaults(&mut object);
            let name = object.metadata.name.clone().unwrap_or_default();
            let location = format!("{origin} ({name})");
            if let Err(e) = apiservice::validate(&object) {
                problems.push(Problem {
                    location,
                    message: e.to_string(),
                });
                continue;
            }
            if let Some(first) = seen.get(&name) {
                problems.push(Problem {
                    location,
                    message: format!("duplicate APIService {name:?}, first declared at {first}"),
                });
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
            services: raw.services,
            api_services: validated,
        })
    }
}

impl GatewayConfig {
    /// Reads, parses and validates the config at `path`.
    pub fn load(path: &Path) -> Result<GatewayConfig, ConfigError> {
        Sources::read(path)?.parse()
    }
}

fn parse_delegate(base: &Path, raw: RawDelegate) -> Result<DelegateConfig, String> {
    let url = url::Url::parse(&raw.url).map_err(|e| format!("url {:?}: {e}", raw.url))?;
    if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
        return Err(format!("url {:?}: must be http(s)://host[:port]", raw.url));
    }
    if raw.ca_file.is_some() && raw.insecure_skip_tls_verify {
        return Err("caFile and insecureSkipTLSVerify may not both be set".into());
    }
    let ca_pem = match raw.ca_file {
        Some(file) => {
            let file = base.join(file);
            Some(std::fs::read(&file).map_err(|e| format!("caFile {:?}: {e}", file.display()))?)
        }
        None => None,
    };
    Ok(DelegateConfig {
        url,
        ca_pem,
        insecure_skip_tls_verify: raw.insecure_skip_tls_verify,
    })
}

fn check_services(shown: &str, services: &[ServiceEntry], problems: &mut Vec<Problem>) {
    let mut seen = HashMap::new();
    for (i, s) in services.iter().enumerate() {
        let location = format!(
            "{shown}: services[{i}] ({}/{}:{})",
            s.namespace, s.name, s.port
        );
        if s.namespace.is_empty() || s.name.is_empty() {
            problems.push(Problem {
                location: location.clone(),
                message: "namespace and name are required".into(),
            });
        }
        if !(1..=65535).contains(&s.port) {
            problems.push(Problem {
                location: location.clone(),
                message: format!("port {}: must be between 1 and 65535, inclusive", s.port),
            });
        }
        for e in &s.endpoints {
            if let Err(message) = crate::registry::parse_endpoint(e) {
                problems.push(Problem {
                    location: location.clone(),
                    message,
                });
            }
        }
        if let Some(first) = seen.insert((&s.namespace, &s.name, s.port), i) {
            problems.push(Problem {
                location,
                message: format!("duplicate service, first declared at services[{first}]"),
            });
        }
    }
}

/// Splits a multi-document YAML text into JSON values (empty documents skipped).
fn documents(bytes: &[u8]) -> Result<Vec<serde_json::Value>, String> {
    let text = std::str::from_utf8(bytes).map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    for (i, doc) in serde_yaml_ng::Deserializer::from_str(text).enumerate() {
        let value =
            serde_json::Value::deserialize(doc).map_err(|e| format!("document {}: {e}", i + 1))?;
        if !value.is_null() {
            out.push(value);
        }
    }
    Ok(out)
}

/// Turns one manifest into an APIService; `Ok(None)` for objects of other kinds. `List` objects
/// are not expanded here: APIService files hold plain documents.
fn object_from_value(value: serde_json::Value) -> Result<Option<APIService>, String> {
    let kind = value.get("kind").and_then(|k| k.as_str()).unwrap_or("");
    if kind != "APIService" {
        return Ok(None);
    }
    let api_version = value
        .get("apiVersion")
        .and_then(|k| k.as_str())
        .unwrap_or("");
    if api_version != "apiregistration.k8s.io/v1" {
        return Err(format!(
            "apiVersion {api_version:?} is not supported: use apiregistration.k8s.io/v1"
        ));
    }
    serde_json::from_value(value)
        .map(Some)
        .map_err(|e| format!("not a valid APIService: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixtures() -> PathBuf {
        std::env::var_os("APIAGG_FIXTURES").map_or_else(
            || Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/fixtures"),
            PathBuf::from,
        )
    }

    fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, text).expect("write test file");
        p
    }

    #[test]
    fn every_fixture_apiservice_loads_unchanged() {
        let dir = fixtures().join("apiservices");
        assert!(dir.is_dir(), "fixture folder missing: {}", dir.display());
        let mut names = Vec::new();
        for entry in std::fs::read_dir(&dir).expect("read fixture dir") {
            let path = entry.expect("dir entry").path();
            if path.extension().and_then(|e| e.to_str()) != Some("yaml") {
                continue;
            }
            let tmp = tempfile::tempdir().expect("tempdir");
            let cfg = write(
                tmp.path(),
                "c.yaml",
                &format!("apiServiceFiles: [{:?}]\n", path.display().to_string()),
            );
            let loaded = GatewayConfig::load(&cfg)
                .unwrap_or_else(|e| panic!("{} failed: {e}", path.display()));
            for s in loaded.api_services {
                names.push(s.object.metadata.name.clone().unwrap_or_default());
            }
        }
        names.sort();
        names.dedup();
        for expected in [
            "v1alpha1.wardle.example.com",
            "v1beta1.metrics.k8s.io",
            "v1beta1.custom.metrics.k8s.io",
            "v1beta2.custom.metrics.k8s.io",
            "v1beta1.external.metrics.k8s.io",
        ] {
            assert!(
                names.iter().any(|n| n == expected),
                "{expected} not in {names:?}"
            );
        }
    }

    #[test]
    fn templated_karmada_files_are_rejected_with_their_location() {
        let path = fixtures().join("apiservices/templated/karmada-v1.18.2-search.yaml");
        let tmp = tempfile::tempdir().expect("tempdir");
        let cfg = write(
            tmp.path(),
            "c.yaml",
            &format!("apiServiceFiles: [{:?}]\n", path.display().to_string()),
        );
        let err = GatewayConfig::load(&cfg).unwrap_err();
        assert!(
            err.to_string().contains("karmada-v1.18.2-search.yaml"),
            "{err}"
        );
    }

    #[test]
    fn full_config_with_relative_files() {
        let tmp = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir(tmp.path().join("apiservices")).expect("mkdir");
        write(
            tmp.path(),
            "apiservices/a.yaml",
            "apiVersion: apiregistration.k8s.io/v1\nkind: APIService\nmetadata: {name: v1.a.io}\nspec: {group: a.io, version: v1, groupPriorityMinimum: 100, versionPriority: 10, service: {namespace: ns, name: a}}\n---\napiVersion: v1\nkind: Service\nmetadata: {name: a}\n",
        );
        let cfg = write(
            tmp.path(),
            "c.yaml",
            r#"
listen: 127.0.0.1:9999
services:
  - {namespace: ns, name: a, endpoints: ["http://127.0.0.1:1234"]}
apiServices:
  - apiVersion: apiregistration.k8s.io/v1
    kind: APIService
    metadata: {name: v2.b.io}
    spec: {group: b.io, version: v2, groupPriorityMinimum: 200, versionPriority: 20, insecureSkipTLSVerify: true, service: {namespace: ns, name: b, port: 8443}}
apiServiceFiles: ["apiservices/*.yaml"]
"#,
        );
        let c = GatewayConfig::load(&cfg).expect("loads");
        assert_eq!(c.listen, "127.0.0.1:9999");
        assert_eq!(c.services[0].port, 443);
        let names: Vec<_> = c
            .api_services
            .iter()
            .map(|s| s.object.metadata.name.clone().unwrap_or_default())
            .collect();
        assert_eq!(names, ["v2.b.io", "v1.a.io"]);
        assert!(c.api_services[1].origin.ends_with("a.yaml: document 1"));
    }

    #[test]
    fn invalid_objects_report_file_and_name() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let cfg = write(
            tmp.path(),
            "c.yaml",
            r#"
apiServices:
  - apiVersion: apiregistration.k8s.io/v1
    kind: APIService
    metadata: {name: v1.a.io}
    spec: {group: a.io, version: v1, groupPriorityMinimum: 0, versionPriority: 10}
  - apiVersion: apiregistration.k8s.io/v1
    kind: APIService
    metadata: {name: v1.a.io}
    spec: {group: a.io, version: v1, groupPriorityMinimum: 10, versionPriority: 10}
  - apiVersion: apiregistration.k8s.io/v1
    kind: APIService
    metadata: {name: v1.a.io}
    spec: {group: a.io, version: v1, groupPriorityMinimum: 10, versionPriority: 10}
"#,
        );
        let err = GatewayConfig::load(&cfg).unwrap_err();
        assert_eq!(err.problems.len(), 2, "{err}");
        assert!(err.problems[0]
            .location
            .ends_with("c.yaml: apiServices[0] (v1.a.io)"));
        assert!(err.problems[0].message.contains(
            "spec.groupPriorityMinimum: Invalid value: 0: must be positive and less than 20000"
        ));
        assert!(err.problems[1].message.contains("duplicate APIService"));
    }

    #[test]
    fn unknown_keys_and_bad_endpoints_are_rejected() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let cfg = write(tmp.path(), "c.yaml", "listn: 1\n");
        let err = GatewayConfig::load(&cfg).unwrap_err();
        assert!(err.to_string().contains("unknown field `listn`"), "{err}");
        let cfg = write(
            tmp.path(),
            "d.yaml",
            "services: [{namespace: a, name: b, endpoints: [\"ftp://x\"]}]\n",
        );
        let err = GatewayConfig::load(&cfg).unwrap_err();
        assert!(err.to_string().contains("services[0]"), "{err}");
        let cfg = write(tmp.path(), "e.yaml", "apiServiceFiles: [missing.yaml]\n");
        let err = GatewayConfig::load(&cfg).unwrap_err();
        assert!(err.to_string().contains("does not exist"), "{err}");
    }
}
