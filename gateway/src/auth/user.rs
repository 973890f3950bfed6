//! The authenticated caller and the headers that carry it: `X-Remote-*` to remote backends,
//! `Impersonate-*` to the delegate. Both sets are built once per user, not per request.

use std::sync::{Arc, OnceLock};

use http::{HeaderName, HeaderValue};

/// The group every authenticated caller is in.
pub const AUTHENTICATED: &str = "system:authenticated";
/// The user of callers without credentials.
pub const ANONYMOUS: &str = "system:anonymous";
/// The group of [`ANONYMOUS`].
pub const UNAUTHENTICATED: &str = "system:unauthenticated";

/// Header name and value pairs, ready to append.
pub type Headers = Vec<(HeaderName, HeaderValue)>;

/// A caller as authenticated by apiagg.
#[derive(Debug)]
pub struct User {
    /// User name.
    pub name: String,
    /// UID, empty when unknown.
    pub uid: String,
    /// Groups, in order.
    pub groups: Vec<String>,
    /// Extra attributes, keys in order.
    pub extra: Vec<(String, Vec<String>)>,
    remote: Headers,
    impersonation: Headers,
}

impl User {
    /// A user with its header sets; `system:authenticated` is added to the groups unless the
    /// user is anonymous or already has it. Values that are not valid header values are left
    /// out of the headers.
    pub fn new(
        name: String,
        uid: String,
        mut groups: Vec<String>,
        extra: Vec<(String, Vec<String>)>,
    ) -> User {
        if name != ANONYMOUS && !groups.iter().any(|g| g == AUTHENTICATED) {
            groups.push(AUTHENTICATED.to_string());
        }
        let mut user = User {
            name,
            uid,
            groups,
            extra,
            remote: Vec::new(),
            impersonation: Vec::new(),
        };
        user.remote = user.headers(
            "x-remote-user",
            "x-remote-uid",
            "x-remote-group",
            "x-remote-extra-",
            true,
        );
        user.impersonation = user.headers(
            "impersonate-user",
            "impersonate-uid",
            "impersonate-group",
            "impersonate-extra-",
            false,
        );
        user
    }

    /// `system:anonymous` in `system:unauthenticated` (one shared value).
    pub fn anonymous() -> &'static Arc<User> {
        static ANON: OnceLock<Arc<User>> = OnceLock::new();
        ANON.get_or_init(|| {
            Arc::new(User::new(
                ANONYMOUS.into(),
                String::new(),
                vec![UNAUTHENTICATED.into()],
                Vec::new(),
            ))
        })
    }

    /// `X-Remote-User`, `X-Remote-Uid` (when known), one `X-Remote-Group` per group and one
    /// `X-Remote-Extra-<escaped key>` per value (spec §4.2).
    pub fn remote_headers(&self) -> &Headers {
        &self.remote
    }

    /// The same identity as `Impersonate-*` headers; `system:authenticated` is left out (the
    /// delegate adds it itself, and asking for it would need one more RBAC rule).
    pub fn impersonation_headers(&self) -> &Headers {
        &self.impersonation
    }

    fn headers(
        &self,
        user: &'static str,
        uid: &'static str,
        group: &'static str,
        extra: &str,
        all_groups: bool,
    ) -> Headers {
        let mut out = Vec::new();
        let mut push = |name: HeaderName, value: &str| {
            if let Ok(value) = HeaderValue::from_str(value) {
                out.push((name, value));
            }
        };
        push(HeaderName::from_static(user), &self.name);
        if !self.uid.is_empty() {
            push(HeaderName::from_static(uid), &self.uid);
        }
        for g in &self.groups {
            if all_groups || g != AUTHENTICATED {
                push(HeaderName::from_static(group), g);
            }
        }
        for (key, values) in &self.extra {
            let Ok(name) = HeaderName::from_bytes(format!("{extra}{}", escape_key(key)).as_bytes())
            else {
                continue;
            };
            for v in values {
                push(name.clone(), v);
            }
        }
        out
    }
}

/// RFC 7230 token characters, except `%`, stay; every other byte becomes `%XX` (upstream's
/// escaping of extra keys in header names; receivers lower-case and unescape).
pub fn escape_key(key: &str) -> String {
    let mut out = String::with_capacity(key.len());
    for b in key.bytes() {
        let token = b.is_ascii_alphanumeric() || b"!#$&'*+-.^_`|~".contains(&b);
        if token {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The inverse of [`escape_key`] (for front-proxy headers): `%XX` decoded, lower-cased.
pub fn unescape_key(escaped: &str) -> String {
    percent_decode(escaped).to_lowercase()
}

/// `%XX` sequences decoded (as Go's `URL.Path` and `url.PathUnescape`); invalid ones are kept as
/// they are.
pub fn percent_decode(text: &str) -> String {
    if !text.contains('%') {
        return text.to_string();
    }
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(b)) => {
                out.push(b);
                i += 3;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values<'a>(headers: &'a Headers, name: &str) -> Vec<&'a str> {
        headers
            .iter()
            .filter(|(n, _)| n == name)
            .filter_map(|(_, v)| v.to_str().ok())
            .collect()
    }

    #[test]
    fn remote_headers_follow_upstream() {
        let user = User::new(
            "alice".into(),
            "u-1".into(),
            vec!["dev".into(), "ops".into()],
            vec![("example.org/scopes".into(), vec!["a".into(), "b".into()])],
        );
        let h = user.remote_headers();
        assert_eq!(values(h, "x-remote-user"), ["alice"]);
        assert_eq!(values(h, "x-remote-uid"), ["u-1"]);
        assert_eq!(values(h, "x-remote-group"), ["dev", "ops", AUTHENTICATED]);
        assert_eq!(values(h, "x-remote-extra-example.org%2fscopes"), ["a", "b"]);
        let i = user.impersonation_headers();
        assert_eq!(values(i, "impersonate-group"), ["dev", "ops"]);
        assert_eq!(
            values(i, "impersonate-extra-example.org%2fscopes"),
            ["a", "b"]
        );
    }

    #[test]
    fn keys_round_trip() {
        for key in ["example.org/scopes", "100%", "a b", "plain-key"] {
            assert_eq!(unescape_key(&escape_key(key)), key.to_lowercase());
        }
        assert_eq!(escape_key("100%"), "100%25");
    }

    #[test]
    fn anonymous_is_unauthenticated() {
        let anon = User::anonymous();
        assert_eq!(anon.groups, [UNAUTHENTICATED]);
    }
}
