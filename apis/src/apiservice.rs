//! The `apiregistration.k8s.io/v1` APIService object: parsing, defaulting and validation with the
//! rules and messages kube-apiserver gives (kube-aggregator's
//! `pkg/apis/apiregistration/validation/validation.go`, with apimachinery's rules for metadata).

mod field;
mod meta;
mod names;

pub use k8s_openapi::kube_aggregator::pkg::apis::apiregistration::v1::{
    APIService, APIServiceSpec, ServiceReference,
};

pub use field::{FieldError, ValidationErrors};
pub use names::go_quote;

use field::{invalid, required};
use names::{dns1035_label_errors, dns1123_subdomain_errors, path_segment_errors};

/// Port used when `spec.service.port` is omitted.
pub const DEFAULT_SERVICE_PORT: i32 = 443;

/// The API the APIService objects belong to, as a route key (`<group>/<version>`).
pub const GROUP_VERSION: &str = "apiregistration.k8s.io/v1";

/// The result of a validation.
type Result<T, E = ValidationErrors> = std::result::Result<T, E>;

/// Fills the defaults the API server applies (`spec.service.port = 443`).
pub fn apply_defaults(api_service: &mut APIService) {
    if let Some(service) = api_service.spec.as_mut().and_then(|s| s.service.as_mut()) {
        service.port.get_or_insert(DEFAULT_SERVICE_PORT);
    }
}

/// Validates a new APIService (after [`apply_defaults`]) as kube-apiserver validates a create:
/// kube-aggregator's `ValidateAPIService` (the metadata by apimachinery's `ValidateObjectMeta`,
/// the name being `<version>.<group>`, then the spec), then apiagg's own annotation.
pub fn validate(api_service: &APIService) -> Result<()> {
    finish(api_service, rules(api_service))
}

/// Validates an update of `old` to `new` as kube-apiserver does, once the API server has set what
/// an update may not change (generation, timestamps, a missing UID): the metadata common to every
/// resource (names as path segments) and its update rules, the update rules again in
/// `ValidateAPIServiceUpdate`, then [`validate`]'s rules. Upstream checks labels, annotations and
/// owner references four times on an update and reports each failure as often.
pub fn validate_update(new: &APIService, old: &APIService) -> Result<()> {
    let mut errors = meta::object_meta(&new.metadata, path_segment_errors);
    let update = meta::object_meta_update(&new.metadata, &old.metadata);
    errors.extend(update.iter().cloned());
    errors.extend(update);
    errors.extend(rules(new));
    finish(new, errors)
}

fn finish(api_service: &APIService, errors: Vec<FieldError>) -> Result<()> {
    if errors.is_empty() {
        return Ok(());
    }
    let name = api_service.metadata.name.clone().unwrap_or_default();
    Err(ValidationErrors { name, errors })
}

/// `ValidateAPIService`, then the watch-list annotation.
fn rules(api_service: &APIService) -> Vec<FieldError> {
    let default_spec = APIServiceSpec::default();
    let spec = api_service.spec.as_ref().unwrap_or(&default_spec);
    let group = spec.group.as_deref().unwrap_or("");
    let version = spec.version.as_deref().unwrap_or("");

    let expected = format!("{version}.{group}");
    let name_rule = |name: &str| {
        let minimal = path_segment_errors(name);
        if !minimal.is_empty() {
            return minimal;
        }
        if name != expected {
            let shown = go_quote(&expected);
            return vec![format!("must be `spec.version+\".\"+spec.group`: {shown}")];
        }
        Vec::new()
    };
    let mut errors = meta::object_meta(&api_service.metadata, name_rule);

    if group.is_empty() {
        if version != "v1" {
            errors.push(required(
                "spec.group",
                "only v1 may have an empty group and it better be legacy kube",
            ));
        }
    } else {
        for message in dns1123_subdomain_errors(group) {
            errors.push(invalid("spec.group", go_quote(group), &message));
        }
    }
    for message in dns1035_label_errors(version) {
        errors.push(invalid("spec.version", go_quote(version), &message));
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
    errors
}

#[cfg(test)]
mod tests;
