//! Field errors as k8s.io/apimachinery's `field.Error` prints them, and the `Invalid` error of an
//! APIService that gathers them (`errors.NewInvalid`).

use std::fmt;

use super::names::go_quote;

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

/// Upstream's error types by the words that start `kind`, and their Status cause reasons.
const REASONS: [(&str, &str); 9] = [
    ("Required value", "FieldValueRequired"),
    ("Forbidden", "FieldValueForbidden"),
    ("Unsupported value", "FieldValueNotSupported"),
    ("Too long", "FieldValueTooLong"),
    ("Too many", "FieldValueTooMany"),
    ("Duplicate value", "FieldValueDuplicate"),
    ("Not found", "FieldValueNotFound"),
    ("Internal error", "InternalError"),
    ("Invalid value", "FieldValueInvalid"),
];

impl FieldError {
    /// The Status cause reason of the error's type (`FieldValueRequired`, …).
    pub fn reason(&self) -> &'static str {
        REASONS
            .iter()
            .find(|(words, _)| self.kind.starts_with(words))
            .map_or("FieldValueInvalid", |(_, reason)| reason)
    }

    /// Upstream's `ErrorBody`: the type (with the value), then `: <detail>` when there is one;
    /// the message of a Status cause.
    pub fn body(&self) -> String {
        if self.detail.is_empty() {
            self.kind.clone()
        } else {
            format!("{}: {}", self.kind, self.detail)
        }
    }
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.body())
    }
}

/// `Required value` at `field`.
pub(super) fn required(field: &str, detail: &str) -> FieldError {
    FieldError {
        field: field.into(),
        kind: "Required value".into(),
        detail: detail.into(),
    }
}

/// `Invalid value: <value>` at `field` (`value` as Go prints it: strings quoted).
pub(super) fn invalid(field: &str, value: impl fmt::Display, detail: &str) -> FieldError {
    FieldError {
        field: field.into(),
        kind: format!("Invalid value: {value}"),
        detail: detail.into(),
    }
}

/// `Too long` at `field`.
pub(super) fn too_long(field: &str, detail: &str) -> FieldError {
    FieldError {
        field: field.into(),
        kind: "Too long".into(),
        detail: detail.into(),
    }
}

/// All field errors of one APIService, shown the way kube-apiserver's `Invalid` Status says them
/// (`APIService.apiregistration.k8s.io "<name>" is invalid: …`, 422). Not retryable: the object
/// must change.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct ValidationErrors {
    /// The object's name (may be empty).
    pub name: String,
    /// Every failed rule, in rule order (a rule upstream checks twice appears twice).
    pub errors: Vec<FieldError>,
}

impl fmt::Display for ValidationErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "APIService.apiregistration.k8s.io {} is invalid: ",
            go_quote(&self.name)
        )?;
        // As `field.ErrorList.ToAggregate`: each message once, one alone, several in brackets.
        let mut parts: Vec<String> = Vec::with_capacity(self.errors.len());
        for part in self.errors.iter().map(ToString::to_string) {
            if !parts.contains(&part) {
                parts.push(part);
            }
        }
        match parts.as_slice() {
            [one] => write!(f, "{one}"),
            _ => write!(f, "[{}]", parts.join(", ")),
        }
    }
}
