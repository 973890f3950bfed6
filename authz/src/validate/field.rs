//! The string check of `k8s.io/apimachinery/pkg/util/validation` the configuration's names use;
//! Go's `field.Error` texts are `apiagg-authn`'s (one home for both configuration files).

pub(crate) use apiagg_authn::validate::field::{quote, Errors};

/// `utilvalidation.IsDNS1123Subdomain`: its messages, none when `value` is one.
pub(super) fn dns1123_subdomain(value: &str) -> Vec<&'static str> {
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
        errors.push("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')");
    }
    errors
}
