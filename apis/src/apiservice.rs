//! The `apiregistration.k8s.io/v1` APIService object: parsing, defaulting and validation with the
//! messages kube-apiserver gives (kube-aggregator's
//! `pkg/apis/apiregistration/validation/validation.go`).

use std::fmt;

pub use k8s_openapi::kube_aggregator::pkg::apis::apiregistration::v1::{
    APIService, APIServiceSpec, ServiceReference,
};

/// Port used when `spec.service.port` is omitted.
pub const DEFAULT_SERVICE_PORT: i32 = 443;

/// The API the APIService objects belong to, as a route key (`<group>/<version>`).
pub const GROUP_VERSION: &str = "apiregistration.k8s.io/v1";

/// One field error, rendered like apimachinery's `field.Error`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    /// Field path, e.g. `spec.groupPriorityMinimum`.
    pub field: String,
    /// `Required value`, `Invalid value: <v>`, …
    pub kind: String,
    /// Human detail.
    pub detail: String,
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.detail.is_empty() {
            write!(f, "{}: {}", self.field, self.kind)
        } else {
            write!(f, "{}: {}: {}", self.field, self.kind, self.detail)
        }
    }
}

fn required(field: &str, detail: &str) -> FieldError {
    FieldError {
        field: field.into(),
        kind: "Required value".into(),
        detail: detail.into(),
    }
}

fn invalid(field: &str, value: impl fmt::Display, detail: &str) -> FieldError {
    FieldError {
        field: field.into(),
        kind: format!("Invalid value: {value}"),
        detail: detail.into(),
    }
}

fn forbidden(field: &str, detail: &str) -> FieldError {
    FieldError {
        field: field.into(),
        kind: "Forbidden".into(),
        detail: detail.into(),
    }
}

/// All field errors of one APIService, shown the way kubectl prints them (`Invalid`, 422). Not
/// retryable: the object must change.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct ValidationErrors {
    /// The object's name (may be empty).
    pub name: String,
    /// Every failed rule, in rule order.
    pub errors: Vec<FieldError>,
}

impl fmt::Display for ValidationErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "APIService {:?} is invalid: ", self.name)?;
        let parts: Vec<String> = self.errors.iter().map(ToString::to_string).collect();
        if parts.len() == 1 {
            write!(f, "{}", parts[0])
        } else {
            write!(f, "[{}]", parts.join(", "))
        }
    }
}

/// The result of a validation.
type Result<T, E = ValidationErrors> = std::result::Result<T, E>;

/// Fills the defaults the API server applies (`spec.service.port = 443`).
pub fn apply_defaults(api_service: &mut APIService) {
    if let Some(service) = api_service.spec.as_mut().and_then(|s| s.service.as_mut()) {
        service.port.get_or_insert(DEFAULT_SERVICE_PORT);
    }
}

fn is_dns1123_subdomain(value: &str) -> bool {
    value.len() <= 253
        && value.split('.').all(|label| {
            !label.is_empty()
                && label
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        })
}

fn is_dns1035_label(value: &str) -> bool {
    !value.is_empty()
        && value.len() <= 63
        && value.as_bytes()[0].is_ascii_lowercase()
        && !value.ends_with('-')
        && value
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

fn is_valid_path_segment(value: &str) -> bool {
    value != "." && value != ".." && !value.contains('/') && !value.contains('%')
}

/// Validates an APIService (after [`apply_defaults`]) with the rules and messages of
/// kube-aggregator's `pkg/apis/apiregistration/validation/validation.go`.
pub fn validate(api_service: &APIService) -> Result<()> {
    let name = api_service.metadata.name.clone().unwrap_or_default();
    let mut errors = Vec::new();
    let default_spec = APIServiceSpec::default();
    let spec = api_service.spec.as_ref().unwrap_or(&default_spec);
    let group = spec.group.as_deref().unwrap_or("");
    let version = spec.version.as_deref().unwrap_or("");

    let expected = format!("{version}.{group}");
    if name.is_empty() {
        errors.push(required(
            "metadata.name",
            "name or generateName is required",
        ));
    } else if !is_valid_path_segment(&name) || name != expected {
        errors.push(invalid(
            "metadata.name",
            format!("{name:?}"),
            &format!("must be `spec.version+\".\"+spec.group`: {expected:?}"),
        ));
    }

    if group.is_empty() {
        if version != "v1" {
            errors.push(required(
                "spec.group",
                "only v1 may have an empty group and it better be legacy kube",
            ));
        }
    } else if !is_dns1123_subdomain(group) {
        errors.push(invalid(
            "spec.group",
            format!("{group:?}"),
            "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character",
        ));
    }
    if !is_dns1035_label(version) {
        errors.push(invalid(
            "spec.version",
            format!("{version:?}"),
            "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character",
        ));
    }

    if !(1..=20000).contains(&spec.group_priority_minimum) {
        errors.push(invalid(
            "spec.groupPriorityMinimum",
            spec.group_priority_minimum,
            "must be positive and less than 20000",
        ));
    }
    if !(1..=1000).contains(&spec.version_priority) {
        errors.push(invalid(
            "spec.versionPriority",
            spec.version_priority,
            "must be positive and less than 1000",
        ));
    }

    let ca_len = spec.ca_bundle.as_ref().map_or(0, |b| b.0.len());
    let insecure = spec.insecure_skip_tls_verify.unwrap_or(false);
    match &spec.service {
        None => {
            if ca_len > 0 {
                errors.push(invalid(
                    "spec.caBundle",
                    format!("\"{ca_len} bytes\""),
                    "local APIServices may not have a caBundle",
                ));
            }
            if insecure {
                errors.push(invalid(
                    "spec.insecureSkipTLSVerify",
                    insecure,
                    "local APIServices may not have insecureSkipTLSVerify",
                ));
            }
        }
        Some(service) => {
            if service.namespace.as_deref().unwrap_or("").is_empty() {
                errors.push(required("spec.service.namespace", ""));
            }
            if service.name.as_deref().unwrap_or("").is_empty() {
                errors.push(required("spec.service.name", ""));
            }
            let port = service.port.unwrap_or(DEFAULT_SERVICE_PORT);
            if !(1..=65535).contains(&port) {
                errors.push(invalid(
                    "spec.service.port",
                    port,
                    "port is not valid: must be between 1 and 65535, inclusive",
                ));
            }
            if insecure && ca_len > 0 {
                errors.push(invalid(
                    "spec.insecureSkipTLSVerify",
                    insecure,
                    "may not be true if caBundle is present",
                ));
            }
        }
    }
    if let Err(e) = crate::WatchListMode::of(&api_service.metadata) {
        errors.push(e);
    }
    if api_service.metadata.generate_name.is_some() && api_service.metadata.name.is_none() {
        errors.push(forbidden(
            "metadata.generateName",
            "APIService names must equal <version>.<group>",
        ));
    }

    if errors.is_empty() {
        Ok(())
    } else {
        Err(ValidationErrors { name, errors })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(json: serde_json::Value) -> APIService {
        let mut svc: APIService = serde_json::from_value(json).expect("test object parses");
        apply_defaults(&mut svc);
        svc
    }

    fn remote(name: &str, group: &str, version: &str, gpm: i32, vp: i32) -> APIService {
        parse(serde_json::json!({
            "apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
            "metadata": {"name": name},
            "spec": {"group": group, "version": version, "groupPriorityMinimum": gpm,
                     "versionPriority": vp, "insecureSkipTLSVerify": true,
                     "service": {"namespace": "ns", "name": "svc"}}
        }))
    }

    #[test]
    fn defaults_port() {
        let svc = remote("v1.a.io", "a.io", "v1", 100, 10);
        let port = svc.spec.and_then(|s| s.service).and_then(|s| s.port);
        assert_eq!(port, Some(443));
    }

    #[test]
    fn accepts_inclusive_bounds() {
        assert!(validate(&remote("v1.a.io", "a.io", "v1", 20000, 1000)).is_ok());
        assert!(validate(&remote("v1.a.io", "a.io", "v1", 1, 1)).is_ok());
    }

    #[test]
    fn rejects_out_of_range_priorities_with_upstream_messages() {
        let err = validate(&remote("v1.a.io", "a.io", "v1", 20001, 0)).unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("spec.groupPriorityMinimum: Invalid value: 20001: must be positive and less than 20000"),
            "{text}"
        );
        assert!(
            text.contains(
                "spec.versionPriority: Invalid value: 0: must be positive and less than 1000"
            ),
            "{text}"
        );
    }

    #[test]
    fn name_must_match() {
        let err = validate(&remote("wrong", "a.io", "v1", 100, 10)).unwrap_err();
        assert_eq!(
            err.errors[0].to_string(),
            "metadata.name: Invalid value: \"wrong\": must be `spec.version+\".\"+spec.group`: \"v1.a.io\""
        );
    }

    #[test]
    fn empty_group_only_for_v1() {
        assert!(validate(&remote("v1.", "", "v1", 100, 10)).is_ok());
        let err = validate(&remote("v2.", "", "v2", 100, 10)).unwrap_err();
        assert_eq!(
            err.errors[0].to_string(),
            "spec.group: Required value: only v1 may have an empty group and it better be legacy kube"
        );
    }

    #[test]
    fn local_may_not_have_tls_settings() {
        let svc = parse(serde_json::json!({
            "apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
            "metadata": {"name": "v1.a.io"},
            "spec": {"group": "a.io", "version": "v1", "groupPriorityMinimum": 100,
                     "versionPriority": 10, "insecureSkipTLSVerify": true, "caBundle": "YWJj"}
        }));
        let text = validate(&svc).unwrap_err().to_string();
        assert!(
            text.contains("local APIServices may not have a caBundle"),
            "{text}"
        );
        assert!(text.contains("\"3 bytes\""), "{text}");
        assert!(
            text.contains("local APIServices may not have insecureSkipTLSVerify"),
            "{text}"
        );
    }

    #[test]
    fn remote_rules() {
        let svc = parse(serde_json::json!({
            "apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
            "metadata": {"name": "v1.a.io"},
            "spec": {"group": "a.io", "version": "v1", "groupPriorityMinimum": 100,
                     "versionPriority": 10, "insecureSkipTLSVerify": true, "caBundle": "YWJj",
                     "service": {"port": 70000}}
        }));
        let text = validate(&svc).unwrap_err().to_string();
        assert!(
            text.contains("spec.service.namespace: Required value"),
            "{text}"
        );
        assert!(text.contains("spec.service.name: Required value"), "{text}");
        assert!(
            text.contains("port is not valid: must be between 1 and 65535, inclusive"),
            "{text}"
        );
        assert!(
            text.contains("may not be true if caBundle is present"),
            "{text}"
        );
    }

    #[test]
    fn rejects_bad_group_and_version() {
        let err = validate(&remote("V1.A_b", "A_b", "V1", 100, 10)).unwrap_err();
        let fields: Vec<&str> = err.errors.iter().map(|e| e.field.as_str()).collect();
        assert!(fields.contains(&"spec.group"));
        assert!(fields.contains(&"spec.version"));
    }
}
