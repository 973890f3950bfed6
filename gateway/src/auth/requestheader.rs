//! Request-header authentication: the identity a trusted front proxy states in headers
//! (`X-Remote-User`, `X-Remote-Uid`, `X-Remote-Group`, `X-Remote-Extra-*` by default), believed
//! only on a connection whose client certificate chains to the front proxy's CA with an allowed
//! CN (checked per connection in `x509.rs`).

use std::sync::Arc;

use apiagg_config::RequestHeader;
use http::{HeaderMap, HeaderName, HeaderValue};

use super::user::{unescape_key, Field, InvalidIdentity, User, Why};

/// The header names, lower-cased and parsed once.
pub struct RequestHeaderNames {
    username: Vec<HeaderName>,
    uid: Vec<HeaderName>,
    group: Vec<HeaderName>,
    extra_prefixes: Vec<String>,
}

/// A configured request-header name that is not an HTTP header name. Not retryable: the config
/// must change.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid header name {0:?}")]
pub struct InvalidHeaderName(pub String);

fn names(list: &[String]) -> Result<Vec<HeaderName>, InvalidHeaderName> {
    list.iter()
        .map(|n| {
            HeaderName::from_bytes(n.trim().as_bytes()).map_err(|_| InvalidHeaderName(n.clone()))
        })
        .collect()
}

impl RequestHeaderNames {
    /// Parses the configured names.
    pub fn new(config: &RequestHeader) -> Result<RequestHeaderNames, InvalidHeaderName> {
        Ok(RequestHeaderNames {
            username: names(&config.username_headers)?,
            uid: names(&config.uid_headers)?,
            group: names(&config.group_headers)?,
            extra_prefixes: config
                .extra_header_prefixes
                .iter()
                .map(|p| p.trim().to_ascii_lowercase())
                .collect(),
        })
    }

    /// Whether a client header is one of these (removed before forwarding, like `X-Remote-*`).
    pub fn is_identity_header(&self, name: &HeaderName) -> bool {
        self.username.contains(name)
            || self.uid.contains(name)
            || self.group.contains(name)
            || self
                .extra_prefixes
                .iter()
                .any(|p| name.as_str().starts_with(p.as_str()))
    }

    /// The user the headers state; `None` without a user name; `Err` when any identity header
    /// cannot be forwarded exactly (never a user with that header left out).
    pub fn user(&self, headers: &HeaderMap) -> Option<Result<Arc<User>, InvalidIdentity>> {
        let text = |v: &HeaderValue, field: Field| {
            std::str::from_utf8(v.as_bytes())
                .map(str::to_string)
                .map_err(|_| InvalidIdentity {
                    field,
                    why: Why::NotUtf8,
                })
        };
        let first = |names: &[HeaderName], field: Field| {
            names
                .iter()
                .filter_map(|n| headers.get(n))
                .find(|v| !v.is_empty())
                .map(|v| text(v, field))
        };
        let name = match first(&self.username, Field::User)? {
            Ok(name) => name,
            Err(e) => return Some(Err(e)),
        };
        Some(self.rest(headers, name, first(&self.uid, Field::Uid), text))
    }

    /// The user `name` with the uid, groups and extra the headers state.
    fn rest(
        &self,
        headers: &HeaderMap,
        name: String,
        uid: Option<Result<String, InvalidIdentity>>,
        text: impl Fn(&HeaderValue, Field) -> Result<String, InvalidIdentity>,
    ) -> Result<Arc<User>, InvalidIdentity> {
        let uid = uid.transpose()?.unwrap_or_default();
        let groups = self
            .group
            .iter()
            .flat_map(|n| headers.get_all(n))
            .enumerate()
            .map(|(i, v)| text(v, Field::Group(i)))
            .collect::<Result<Vec<_>, _>>()?;
        let mut extra: Vec<(String, Vec<String>)> = Vec::new();
        for (header, value) in headers {
            let Some(key) = self
                .extra_prefixes
                .iter()
                .find_map(|p| header.as_str().strip_prefix(p.as_str()))
            else {
                continue;
            };
            let key = unescape_key(key);
            let index = extra.iter().position(|(k, _)| *k == key);
            let value = text(value, Field::ExtraValue(index.unwrap_or(extra.len())))?;
            match extra.iter_mut().find(|(k, _)| *k == key) {
                Some((_, values)) => values.push(value),
                None => extra.push((key, vec![value])),
            }
        }
        User::new(name, uid, groups, extra).map(Arc::new)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn defaults() -> RequestHeaderNames {
        RequestHeaderNames::new(&RequestHeader {
            client_ca_file: "ca".into(),
            allowed_names: vec![],
            username_headers: vec!["X-Remote-User".into()],
            uid_headers: vec!["X-Remote-Uid".into()],
            group_headers: vec!["X-Remote-Group".into()],
            extra_header_prefixes: vec!["X-Remote-Extra-".into()],
        })
        .expect("names")
    }

    #[test]
    fn the_headers_make_the_user() {
        let mut headers = HeaderMap::new();
        for (n, v) in [
            ("x-remote-user", "bob"),
            ("x-remote-uid", "42"),
            ("x-remote-group", "a"),
            ("x-remote-group", "b"),
            ("x-remote-extra-example.org%2Fscopes", "s1"),
            ("x-remote-extra-example.org%2fscopes", "s2"),
        ] {
            let name = HeaderName::from_bytes(n.as_bytes()).expect("name");
            headers.append(name, v.parse().expect("value"));
        }
        let user = defaults().user(&headers).expect("user").expect("valid");
        assert_eq!(user.name, "bob");
        assert_eq!(user.uid, "42");
        assert_eq!(user.groups, ["a", "b", "system:authenticated"]);
        assert_eq!(
            user.extra,
            [(
                "example.org/scopes".to_string(),
                vec!["s1".to_string(), "s2".to_string()]
            )]
        );
    }

    #[test]
    fn a_name_that_is_no_header_name_is_refused() {
        let config = RequestHeader {
            client_ca_file: "ca".into(),
            allowed_names: vec![],
            username_headers: vec!["X-Remote-User".into(), "X Remote".into()],
            uid_headers: vec![],
            group_headers: vec![],
            extra_header_prefixes: vec![],
        };
        let err = RequestHeaderNames::new(&config).err().expect("refused");
        assert_eq!(err, InvalidHeaderName("X Remote".into()));
        assert_eq!(err.to_string(), "invalid header name \"X Remote\"");
    }

    #[test]
    fn no_user_no_identity() {
        let mut headers = HeaderMap::new();
        headers.insert("x-remote-group", "a".parse().expect("value"));
        assert!(defaults().user(&headers).is_none());
    }

    fn user_of(pairs: &[(&str, &[u8])]) -> Option<Result<Arc<User>, InvalidIdentity>> {
        let mut headers = HeaderMap::new();
        for (n, v) in pairs {
            let name = HeaderName::from_bytes(n.as_bytes()).expect("name");
            headers.append(name, HeaderValue::from_bytes(v).expect("value"));
        }
        defaults().user(&headers)
    }

    fn why(pairs: &[(&str, &[u8])]) -> (Field, Why) {
        let refused = user_of(pairs).expect("a user header").expect_err("refused");
        (refused.field, refused.why)
    }

    #[test]
    fn a_proxy_stated_identity_that_cannot_be_forwarded_is_refused() {
        assert_eq!(
            why(&[("x-remote-user", b"admin ")]),
            (Field::User, Why::Whitespace)
        );
        assert_eq!(
            why(&[("x-remote-user", b"b\xe9b")]),
            (Field::User, Why::NotUtf8)
        );
        assert_eq!(
            why(&[("x-remote-user", "b\u{85}b".as_bytes())]),
            (Field::User, Why::Control)
        );
        assert_eq!(
            why(&[("x-remote-user", b"a\tb")]),
            (Field::User, Why::Control)
        );
        assert_eq!(
            why(&[("x-remote-user", b"bob"), ("x-remote-uid", b"\xff")]),
            (Field::Uid, Why::NotUtf8)
        );
        // A group the `http` crate cannot show as text is refused, not skipped.
        assert_eq!(
            why(&[
                ("x-remote-user", b"bob"),
                ("x-remote-group", b"ok"),
                ("x-remote-group", b"\x80")
            ]),
            (Field::Group(1), Why::NotUtf8)
        );
        assert_eq!(
            why(&[("x-remote-user", b"bob"), ("x-remote-extra-scopes", b" s")]),
            (Field::ExtraValue(0), Why::Whitespace)
        );
        assert!(user_of(&[("x-remote-user", b"bob")]).expect("user").is_ok());
        // Unicode text is forwarded as it is.
        let jose = user_of(&[("x-remote-user", "jos\u{e9}".as_bytes())]).expect("user");
        assert_eq!(jose.expect("josé").name, "jos\u{e9}");
    }
}
