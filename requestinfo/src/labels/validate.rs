//! Upstream's checks of label keys (`content.IsLabelKey`) and values (`content.IsLabelValue`),
//! with its messages, and the printing of its field errors.

use super::{FieldError, LabelOperator, RequirementError};

const KEY_FORMAT: &str = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]";
const KEY_MESSAGE: &str = "must consist of alphanumeric characters, '-', '_' or '.', and must \
                           start and end with an alphanumeric character";
const VALUE_FORMAT: &str = "(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?";
const VALUE_MESSAGE: &str = "a valid label must be an empty string or consist of alphanumeric \
                             characters, '-', '_' or '.', and must start and end with an \
                             alphanumeric character";
const SUBDOMAIN_FORMAT: &str = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*";
const SUBDOMAIN_MESSAGE: &str = "a lowercase RFC 1123 subdomain must consist of lower case \
                                 alphanumeric characters, '-' or '.', and must start and end \
                                 with an alphanumeric character";
/// The longest label name and value.
const NAME_MAX: usize = 63;
/// The longest key prefix.
const SUBDOMAIN_MAX: usize = 253;

/// Upstream's `RegexError`: `message`, examples, and the regex.
pub fn regex_error(message: &str, format: &str, examples: &[&str]) -> String {
    let examples: Vec<String> = examples.iter().map(|e| format!("'{e}', ")).collect();
    format!(
        "{message} (e.g. {}regex used for validation is '{format}')",
        examples.join(" or ")
    )
}

fn max_len_error(max: usize) -> String {
    format!("must be no more than {max} bytes")
}

/// `([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]`.
fn is_name(text: &str) -> bool {
    let bytes = text.as_bytes();
    match (bytes.first(), bytes.last()) {
        (Some(first), Some(last)) => {
            first.is_ascii_alphanumeric()
                && last.is_ascii_alphanumeric()
                && bytes
                    .iter()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        }
        _ => false,
    }
}

/// A lowercase RFC 1123 subdomain: dot-separated labels of `[a-z0-9-]`, alphanumeric at both
/// ends.
fn is_subdomain(text: &str) -> bool {
    text.split('.').all(|label| {
        let bytes = label.as_bytes();
        let edge = |b: Option<&u8>| b.is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
        edge(bytes.first())
            && edge(bytes.last())
            && bytes
                .iter()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
    })
}

/// Upstream's `IsDNS1123Subdomain`; its length counted in `unit` (`bytes` in a label key's
/// prefix, `characters` in an object's name).
pub fn subdomain_errors(prefix: &str, unit: &str) -> Vec<String> {
    let mut errors = Vec::new();
    if prefix.len() > SUBDOMAIN_MAX {
        errors.push(format!("must be no more than {SUBDOMAIN_MAX} {unit}"));
    }
    if !is_subdomain(prefix) {
        errors.push(regex_error(
            SUBDOMAIN_MESSAGE,
            SUBDOMAIN_FORMAT,
            &["example.com"],
        ));
    }
    errors
}

/// Upstream's `IsLabelKey` (`api/validate/content`: label and annotation keys, finalizers): an
/// optional DNS subdomain prefix and `/`, then a name of at most 63 bytes; its messages.
pub fn label_key_errors(key: &str) -> Vec<String> {
    let mut errors = Vec::new();
    let parts: Vec<&str> = key.split('/').collect();
    let name = match parts.as_slice() {
        [name] => *name,
        [prefix, name] => {
            if prefix.is_empty() {
                errors.push("prefix part must be non-empty".to_string());
            } else {
                let each = subdomain_errors(prefix, "bytes").into_iter();
                errors.extend(each.map(|e| format!("prefix part {e}")));
            }
            *name
        }
        _ => {
            let regex = regex_error(KEY_MESSAGE, KEY_FORMAT, &["MyName", "my.name", "123-abc"]);
            return vec![format!(
                "a valid label key {regex} with an optional DNS subdomain prefix and '/' \
                 (e.g. 'example.com/MyName')"
            )];
        }
    };
    if name.is_empty() {
        errors.push("name part must be non-empty".to_string());
    } else if name.len() > NAME_MAX {
        errors.push(format!("name part {}", max_len_error(NAME_MAX)));
    }
    if !is_name(name) {
        let regex = regex_error(KEY_MESSAGE, KEY_FORMAT, &["MyName", "my.name", "123-abc"]);
        errors.push(format!("name part {regex}"));
    }
    errors
}

/// Upstream's `IsLabelValue`; its messages.
pub fn label_value_errors(value: &str) -> Vec<String> {
    let mut errors = Vec::new();
    if value.len() > NAME_MAX {
        errors.push(max_len_error(NAME_MAX));
    }
    if !value.is_empty() && !is_name(value) {
        let examples = ["MyValue", "my_value", "12345"];
        errors.push(regex_error(VALUE_MESSAGE, VALUE_FORMAT, &examples));
    }
    errors
}

/// Checks a key as the parser does (its field path is the parser's, unset: `<nil>`).
pub(super) fn key(key: &str) -> Result<(), RequirementError> {
    let errors = label_key_errors(key);
    if errors.is_empty() {
        return Ok(());
    }
    Err(RequirementError::Invalid(vec![FieldError {
        field: "<nil>".to_string(),
        value: key.to_string(),
        detail: errors.join("; "),
    }]))
}

/// Upstream's `NewRequirement` checks of the values a parsed requirement can have: integers for
/// `gt` and `lt`, label values for all.
pub(super) fn requirement(
    key: &str,
    operator: LabelOperator,
    values: &[String],
) -> Result<(), RequirementError> {
    let mut errors = Vec::new();
    if matches!(
        operator,
        LabelOperator::GreaterThan | LabelOperator::LessThan
    ) {
        for (i, value) in values.iter().enumerate() {
            if value.parse::<i64>().is_err() {
                errors.push(FieldError {
                    field: format!("values[{i}]"),
                    value: value.clone(),
                    detail: "for 'Gt', 'Lt' operators, the value must be an integer".to_string(),
                });
            }
        }
    }
    for (i, value) in values.iter().enumerate() {
        let found = label_value_errors(value);
        if !found.is_empty() {
            errors.push(FieldError {
                field: format!("values[{i}][{key}]"),
                value: value.clone(),
                detail: found.join("; "),
            });
        }
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(RequirementError::Invalid(errors))
    }
}

/// Upstream's aggregate error: one message as is, several (deduplicated) in brackets.
pub(super) fn aggregate(errors: &[FieldError]) -> String {
    let mut messages: Vec<String> = Vec::new();
    for message in errors.iter().map(ToString::to_string) {
        if !messages.contains(&message) {
            messages.push(message);
        }
    }
    match messages.as_slice() {
        [one] => one.clone(),
        many => format!("[{}]", many.join(", ")),
    }
}
