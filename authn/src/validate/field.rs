//! Go's `field.Error` texts (`<path>: Invalid value: "<value>": <detail>`) and the string
//! checks of `k8s.io/apimachinery/pkg/util/validation` that the configuration's checks use; the
//! authorization configuration's validation (`apiagg-authz`) writes its errors with them too.

use std::fmt::Write as _;

use crate::expr::{CompileError, Expression, Scope};

/// Go's `field.Error` texts, collected.
#[derive(Default)]
pub struct Errors(pub Vec<String>);

impl Errors {
    /// `field.Required`.
    pub fn required(&mut self, path: &str, detail: &str) {
        self.push(path, "Required value", detail);
    }

    /// `field.Invalid` of a string value.
    pub fn invalid(&mut self, path: &str, value: &str, detail: &str) {
        self.invalid_raw(path, &quote(value), detail);
    }

    /// `value` already formatted as Go's `%#v` would print it.
    pub fn invalid_raw(&mut self, path: &str, value: &str, detail: &str) {
        self.push(path, &format!("Invalid value: {value}"), detail);
    }

    /// `field.Duplicate`.
    pub fn duplicate(&mut self, path: &str, value: &str) {
        self.push(path, &format!("Duplicate value: {}", quote(value)), "");
    }

    /// `field.NotSupported`: the value, then the supported ones.
    pub fn not_supported(&mut self, path: &str, value: &str, supported: &[&str]) {
        let list: Vec<String> = supported.iter().map(|s| quote(s)).collect();
        let detail = format!("supported values: {}", list.join(", "));
        self.push(
            path,
            &format!("Unsupported value: {}", quote(value)),
            &detail,
        );
    }

    /// `field.TooMany`.
    pub fn too_many(&mut self, path: &str, actual: usize, max: usize) {
        let detail = format!("must have at most {max} items");
        self.push(path, &format!("Too many: {actual}"), &detail);
    }

    /// How many errors were collected.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether none was.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    fn push(&mut self, path: &str, body: &str, detail: &str) {
        let mut error = format!("{path}: {body}");
        if !detail.is_empty() {
            let _ = write!(error, ": {detail}");
        }
        self.0.push(error);
    }

    /// Compiles `source`, a compilation error becoming the field's error.
    pub fn compile(&mut self, path: &str, source: &str, scope: Scope) -> Option<Expression> {
        match Expression::compile(source, scope) {
            Ok(expression) => Some(expression),
            Err(CompileError::Empty) => {
                self.required(path, "");
                None
            }
            Err(e) => {
                self.invalid(path, source, &e.to_string());
                None
            }
        }
    }
}

/// `utilvalidation.IsDomainPrefixedPath`.
pub(super) fn domain_prefixed_path(errs: &mut Errors, path: &str, key: &str) {
    if key.is_empty() {
        return errs.required(path, "");
    }
    let Some((host, rest)) = key
        .split_once('/')
        .filter(|(h, r)| !h.is_empty() && !r.is_empty())
    else {
        return errs.invalid(
            path,
            key,
            "must be a domain-prefixed path (such as \"acme.io/foo\")",
        );
    };
    for detail in dns1123_subdomain(host) {
        errs.invalid(path, host, detail);
    }
    if !rest
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "/-._~%!$&'()*+,;=:".contains(c))
    {
        let detail =
            "Invalid path (regex used for validation is '[A-Za-z0-9/\\-._~%!$&'()*+,;=:]+')";
        errs.invalid(path, rest, detail);
    }
}

/// Whether the key's domain is `k8s.io`, `kubernetes.io` or one of their subdomains.
pub(super) fn is_kubernetes_domain(key: &str) -> bool {
    let domain = key.split_once('/').map_or("", |(d, _)| d);
    ["kubernetes.io", "k8s.io"]
        .iter()
        .any(|k| domain == *k || domain.strip_suffix(k).is_some_and(|d| d.ends_with('.')))
}

/// Go's `%q` (`strconv.Quote`), for the values in messages.
pub use apiagg_requestinfo::go_quote as quote;

/// `apiVersion` and `kind`, read before the strict decoding as upstream's decoder does.
#[derive(serde::Deserialize)]
struct TypeMeta {
    #[serde(default, rename = "apiVersion")]
    api_version: String,
    #[serde(default)]
    kind: String,
}

/// Decodes a configuration file of `kind` in `group` (one of `versions`) strictly, YAML or JSON,
/// its single error worded as upstream's decoder words it where it can be.
pub fn decode_config<T: serde::de::DeserializeOwned>(
    bytes: &[u8],
    group: &str,
    versions: &[&str],
    kind: &str,
) -> Result<T, String> {
    let decoding = |e: serde_yaml_ng::Error| {
        let text = e.to_string();
        if text.contains("unknown field") || text.contains("duplicate field") {
            format!("strict decoding error: {text}")
        } else {
            format!("decoding error: {text}")
        }
    };
    let meta: Option<TypeMeta> = serde_yaml_ng::from_slice(bytes).map_err(decoding)?;
    let (api_version, found) = meta.map_or_else(Default::default, |m| (m.api_version, m.kind));
    if found.is_empty() {
        return Err("Object 'Kind' is missing".to_string());
    }
    if api_version.is_empty() {
        return Err("Object 'apiVersion' is missing".to_string());
    }
    let version_known = api_version
        .strip_prefix(group)
        .and_then(|v| v.strip_prefix('/'))
        .is_some_and(|v| versions.contains(&v));
    if !version_known || found != kind {
        return Err(format!(
            "no kind {} is registered for version {}",
            quote(&found),
            quote(&api_version)
        ));
    }
    serde_yaml_ng::from_slice(bytes).map_err(decoding)
}

/// `utilvalidation.IsDNS1123Subdomain`: its messages, none when `value` is one.
pub fn dns1123_subdomain(value: &str) -> Vec<&'static str> {
    let mut errors = Vec::new();
    if value.len() > 253 {
        errors.push("must be no more than 253 characters");
    }
    let label = |l: &str| {
        let b = l.as_bytes();
        !b.is_empty()
            && b.iter()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
            && b[0] != b'-'
            && b[b.len() - 1] != b'-'
    };
    if !value.split('.').all(label) {
        errors.push(DNS1123_SUBDOMAIN);
    }
    errors
}

/// The message of a value that is not a lowercase RFC 1123 subdomain.
const DNS1123_SUBDOMAIN: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";
