//! k8s.io/apimachinery's checks of names and keys, with its messages: DNS subdomains and labels
//! (`util/validation`, lengths in characters), path segments (`api/validation/path`), and Go's
//! `%q` and JSON printing of the values a field error shows. Label keys and values
//! (`api/validate/content`) and DNS subdomains are checked where label selectors are:
//! `apiagg_requestinfo`.

pub use apiagg_requestinfo::go_quote;
use apiagg_requestinfo::{regex_error, subdomain_errors};

const DNS1035_FORMAT: &str = "[a-z]([-a-z0-9]*[a-z0-9])?";
const DNS1035_MESSAGE: &str = "a DNS-1035 label must consist of lower case alphanumeric \
                               characters or '-', start with an alphabetic character, and end \
                               with an alphanumeric character";
/// The longest DNS label.
const LABEL_MAX: usize = 63;

/// `util/validation.IsDNS1123Subdomain` (a length in characters).
pub(super) fn dns1123_subdomain_errors(value: &str) -> Vec<String> {
    subdomain_errors(value, "characters")
}

/// `util/validation.IsDNS1035Label` (a length in characters).
pub(super) fn dns1035_label_errors(value: &str) -> Vec<String> {
    let mut errors = Vec::new();
    if value.len() > LABEL_MAX {
        errors.push(format!("must be no more than {LABEL_MAX} characters"));
    }
    let bytes = value.as_bytes();
    let valid = bytes.first().is_some_and(u8::is_ascii_lowercase)
        && bytes
            .last()
            .is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        && bytes
            .iter()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-');
    if !valid {
        let examples = ["my-name", "abc-123"];
        errors.push(regex_error(DNS1035_MESSAGE, DNS1035_FORMAT, &examples));
    }
    errors
}

/// `api/validation/path.IsValidPathSegmentName`: not `.` or `..` (then nothing else is said),
/// no `/` and no `%`.
pub(super) fn path_segment_errors(name: &str) -> Vec<String> {
    if let Some(dots) = [".", ".."].into_iter().find(|dots| name == *dots) {
        return vec![format!("may not be '{dots}'")];
    }
    ["/", "%"]
        .into_iter()
        .filter(|c| name.contains(c))
        .map(|c| format!("may not contain '{c}'"))
        .collect()
}

/// A value as Go's `encoding/json` writes it (`<`, `>`, `&`, U+2028 and U+2029 escaped), as
/// field errors show values that are neither strings nor numbers.
pub(super) fn go_json(value: &serde_json::Value) -> String {
    let text = value.to_string();
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '<' => out.push_str("\\u003c"),
            '>' => out.push_str("\\u003e"),
            '&' => out.push_str("\\u0026"),
            '\u{2028}' => out.push_str("\\u2028"),
            '\u{2029}' => out.push_str("\\u2029"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use apiagg_requestinfo::{label_key_errors, label_value_errors};

    #[test]
    fn subdomain_length_and_form_are_separate_errors() {
        let long = format!("A{}", "a".repeat(253));
        let errors = dns1123_subdomain_errors(&long);
        assert_eq!(errors[0], "must be no more than 253 characters");
        let format = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*";
        assert!(errors[1].ends_with(&format!("regex used for validation is '{format}')")));
        assert!(dns1123_subdomain_errors(&"a".repeat(253)).is_empty());
    }

    #[test]
    fn dns1035_message_is_upstreams() {
        assert_eq!(
            dns1035_label_errors("1v"),
            ["a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')"]
        );
        assert_eq!(
            dns1035_label_errors(&format!("v{}", "1".repeat(63))).len(),
            1
        );
        assert!(dns1035_label_errors("v1beta1").is_empty());
    }

    #[test]
    fn path_segments() {
        assert_eq!(path_segment_errors(".."), ["may not be '..'"]);
        assert_eq!(
            path_segment_errors("a/b%c"),
            ["may not contain '/'", "may not contain '%'"]
        );
        assert!(path_segment_errors("v1.a.io").is_empty());
    }

    #[test]
    fn label_keys_and_values() {
        assert_eq!(label_key_errors("/x"), ["prefix part must be non-empty"]);
        assert_eq!(label_key_errors("example.com/").len(), 2);
        assert!(label_key_errors("a/b/c")[0].starts_with("a valid label key must consist"));
        assert_eq!(
            label_key_errors(&"k".repeat(64)),
            ["name part must be no more than 63 bytes"]
        );
        assert!(label_key_errors("example.com/My_Key.1").is_empty());
        assert_eq!(
            label_value_errors(&"v".repeat(64)),
            ["must be no more than 63 bytes"]
        );
        assert!(label_value_errors("").is_empty());
    }

    #[test]
    fn go_printing() {
        assert_eq!(go_quote("a\tb\"\u{1}é"), "\"a\\tb\\\"\\x01é\"");
        assert_eq!(
            go_json(&serde_json::json!(["<&>"])),
            "[\"\\u003c\\u0026\\u003e\"]"
        );
    }
}
