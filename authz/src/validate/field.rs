//! Go's `field.Error` texts (`<path>: Invalid value: "<value>": <detail>`) and the string check
//! of `k8s.io/apimachinery/pkg/util/validation` that the configuration's checks use.

use std::fmt::Write as _;

/// Go's `field.Error` texts, collected in order.
#[derive(Default)]
pub(super) struct Errors(pub(super) Vec<String>);

impl Errors {
    pub(super) fn required(&mut self, path: &str, detail: &str) {
        self.push(path, "Required value", detail);
    }

    pub(super) fn invalid(&mut self, path: &str, value: &str, detail: &str) {
        self.push(path, &format!("Invalid value: {}", quote(value)), detail);
    }

    pub(super) fn duplicate(&mut self, path: &str, value: &str) {
        self.push(path, &format!("Duplicate value: {}", quote(value)), "");
    }

    /// `field.NotSupported`: the value, then the supported ones.
    pub(super) fn not_supported(&mut self, path: &str, value: &str, supported: &[&str]) {
        let list: Vec<String> = supported.iter().map(|s| quote(s)).collect();
        let detail = format!("supported values: {}", list.join(", "));
        self.push(
            path,
            &format!("Unsupported value: {}", quote(value)),
            &detail,
        );
    }

    pub(super) fn too_many(&mut self, path: &str, actual: usize, max: usize) {
        let detail = format!("must have at most {max} items");
        self.push(path, &format!("Too many: {actual}"), &detail);
    }

    pub(super) fn len(&self) -> usize {
        self.0.len()
    }

    fn push(&mut self, path: &str, body: &str, detail: &str) {
        let mut error = format!("{path}: {body}");
        if !detail.is_empty() {
            let _ = write!(error, ": {detail}");
        }
        self.0.push(error);
    }
}

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

/// Go's `%q` (`strconv.Quote`), for the values in messages. Non-printable characters are
/// approximated by Rust's `char::is_control`.
pub(crate) fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\x07' => out.push_str("\\a"),
            '\x08' => out.push_str("\\b"),
            '\x0c' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\x0b' => out.push_str("\\v"),
            c if (c as u32) < 0x20 || c == '\x7f' => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c if c.is_control() => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}
