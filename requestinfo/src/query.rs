//! The query parameters kube-apiserver reads, each read once with Go's `url.Values.Get` rule:
//! the first value of a key wins, and later ones are ignored by everybody.

use std::borrow::Cow;

use crate::selector::FieldSelector;

/// The first raw (still encoded) value of every parameter apiagg reads.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct QueryParams<'a> {
    /// The raw query string.
    pub raw: &'a str,
    /// `watch`.
    pub watch: Option<&'a str>,
    /// `timeout` (a Go duration bounding a non-long-running request).
    pub timeout: Option<&'a str>,
    /// `timeoutSeconds` (of a watch).
    pub timeout_seconds: Option<&'a str>,
    /// `fieldSelector`.
    pub field_selector: Option<&'a str>,
    /// `labelSelector`.
    pub label_selector: Option<&'a str>,
    /// `resourceVersion`.
    pub resource_version: Option<&'a str>,
    /// `resourceVersionMatch`.
    pub resource_version_match: Option<&'a str>,
    /// `limit`.
    pub limit: Option<&'a str>,
    /// `continue`.
    pub continue_token: Option<&'a str>,
    /// `allowWatchBookmarks`.
    pub allow_watch_bookmarks: Option<&'a str>,
    /// `sendInitialEvents`.
    pub send_initial_events: Option<&'a str>,
    /// `fieldManager`.
    pub field_manager: Option<&'a str>,
    /// `force`.
    pub force: Option<&'a str>,
    /// `fieldValidation`.
    pub field_validation: Option<&'a str>,
    /// `dryRun`.
    pub dry_run: Option<&'a str>,
    /// `hash` (of an OpenAPI v3 document).
    pub hash: Option<&'a str>,
    /// A pair Go's `url.ParseQuery` skips (it holds `;` or an invalid `%` escape): receivers
    /// would read different first values, so such a query is refused.
    pub ambiguous: bool,
}

impl<'a> QueryParams<'a> {
    /// Reads `raw` once (no allocation unless a key is percent-encoded).
    pub fn parse(raw: &'a str) -> QueryParams<'a> {
        let mut params = QueryParams {
            raw,
            ..QueryParams::default()
        };
        if raw.is_empty() {
            return params;
        }
        for pair in raw.split('&') {
            if pair.is_empty() {
                continue;
            }
            if skipped_by_go(pair) {
                params.ambiguous = true;
                continue;
            }
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            let key = decode_value(key);
            let slot = match &*key {
                "watch" => &mut params.watch,
                "timeout" => &mut params.timeout,
                "timeoutSeconds" => &mut params.timeout_seconds,
                "fieldSelector" => &mut params.field_selector,
                "labelSelector" => &mut params.label_selector,
                "resourceVersion" => &mut params.resource_version,
                "resourceVersionMatch" => &mut params.resource_version_match,
                "limit" => &mut params.limit,
                "continue" => &mut params.continue_token,
                "allowWatchBookmarks" => &mut params.allow_watch_bookmarks,
                "sendInitialEvents" => &mut params.send_initial_events,
                "fieldManager" => &mut params.field_manager,
                "force" => &mut params.force,
                "fieldValidation" => &mut params.field_validation,
                "dryRun" => &mut params.dry_run,
                "hash" => &mut params.hash,
                _ => continue,
            };
            slot.get_or_insert(value);
        }
        params
    }

    /// `watch` as a list reads it (upstream's string → bool conversion): true unless absent,
    /// `0` or `false` (any case).
    pub fn watch(&self) -> bool {
        flag(self.watch)
    }

    /// A boolean parameter (`allowWatchBookmarks`, `sendInitialEvents`, …) with the same rule;
    /// `None` when absent.
    pub fn flag(value: Option<&str>) -> Option<bool> {
        value.map(|v| flag(Some(v)))
    }

    /// The decoded value of a parameter.
    pub fn decoded(value: Option<&'a str>) -> Option<Cow<'a, str>> {
        value.map(decode_value)
    }

    /// The name an exact `metadata.name` term of the field selector requires, when the list
    /// options parse and the name is a valid path segment (what upstream's request info puts in
    /// `Name` for a list or watch).
    pub fn selected_name(&self) -> Option<Cow<'a, str>> {
        let selector = decode_value(self.field_selector?);
        let integers = [self.limit, self.timeout_seconds];
        if integers
            .iter()
            .flatten()
            .any(|v| decode_value(v).parse::<i64>().is_err())
        {
            return None;
        }
        let parsed = FieldSelector::parse(&selector).ok()?;
        let name = parsed.requires_exact("metadata.name")?;
        let valid = name != "." && name != ".." && !name.contains('/') && !name.contains('%');
        valid.then(|| Cow::Owned(name.to_string()))
    }
}

/// Whether Go's `url.ParseQuery` drops `pair`: it holds a `;`, or a `%` not followed by two
/// hex digits.
fn skipped_by_go(pair: &str) -> bool {
    let bytes = pair.as_bytes();
    bytes.iter().enumerate().any(|(i, &b)| {
        b == b';'
            || (b == b'%'
                && !(bytes.get(i + 1).is_some_and(u8::is_ascii_hexdigit)
                    && bytes.get(i + 2).is_some_and(u8::is_ascii_hexdigit)))
    })
}

fn flag(value: Option<&str>) -> bool {
    match value {
        None => false,
        Some(v) => {
            let v = decode_value(v);
            !(v == "0" || v.eq_ignore_ascii_case("false"))
        }
    }
}

/// A query key or value decoded as a form (`+` is a space, `%XX` a byte); borrowed when there is
/// nothing to decode.
pub fn decode_value(text: &str) -> Cow<'_, str> {
    if !text.bytes().any(|b| b == b'%' || b == b'+') {
        return Cow::Borrowed(text);
    }
    let spaced = text.replace('+', " ");
    let decoded = percent_encoding::percent_decode_str(&spaced).decode_utf8_lossy();
    Cow::Owned(decoded.into_owned())
}
