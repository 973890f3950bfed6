//! Request-header authentication: the identity a trusted front proxy states in headers
//! (`X-Remote-User`, `X-Remote-Uid`, `X-Remote-Group`, `X-Remote-Extra-*` by default), believed
//! only on a connection whose client certificate chains to the front proxy's CA with an allowed
//! CN (checked per connection in `x509.rs`).

use std::sync::Arc;

use apiagg_config::RequestHeader;
use http::{HeaderMap, HeaderName};

use super::user::{unescape_key, User};

/// The header names, lower-cased and parsed once.
pub struct RequestHeaderNames {
    username: Vec<HeaderName>,
    uid: Vec<HeaderName>,
    group: Vec<HeaderName>,
    extra_prefixes: Vec<String>,
}

fn names(list: &[String]) -> Result<Vec<HeaderName>, String> {
    list.iter()
        .map(|n| {
            HeaderName::from_bytes(n.trim().as_bytes())
                .map_err(|_| format!("invalid header name {n:?}"))
        })
        .collect()
}

impl RequestHeaderNames {
    /// Parses the configured names.
    pub fn new(config: &RequestHeader) -> Result<RequestHeaderNames, String> {
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

    /// The user the headers state; `None` without a user name.
    pub fn user(&self, headers: &HeaderMap) -> Option<Arc<User>> {
        let first = |names: &[HeaderName]| {
            names
                .iter()
                .filter_map(|n| headers.get(n))
                .filter_map(|v| v.to_str().ok())
                .find(|v| !v.is_empty())
                .map(str::to_string)
        };
        let name = first(&self.username)?;
        let uid = first(&self.uid).unwrap_or_default();
        let groups = self
            .group
            .iter()
            .flat_map(|n| headers.get_all(n))
            .filter_map(|v| v.to_str().ok())
            .map(str::to_string)
            .collect();
        let mut extra: Vec<(String, Vec<String>)> = Vec::new();
        for (header, value) in headers {
            let Some(key) = self
                .extra_prefixes
                .iter()
                .find_map(|p| header.as_str().strip_prefix(p.as_str()))
            else {
                continue;
            };
            let (key, Ok(value)) = (unescape_key(key), value.to_str()) else {
                continue;
            };
            match extra.iter_mut().find(|(k, _)| *k == key) {
                Some((_, values)) => values.push(value.to_string()),
                None => extra.push((key, vec![value.to_string()])),
            }
        }
        Some(Arc::new(User::new(name, uid, groups, extra)))
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
        let user = defaults().user(&headers).expect("user");
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
    fn no_user_no_identity() {
        let mut headers = HeaderMap::new();
        headers.insert("x-remote-group", "a".parse().expect("value"));
        assert!(defaults().user(&headers).is_none());
    }
}
