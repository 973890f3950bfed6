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

/// Bytes a header field costs beyond its name and value when a header list is measured as
/// HTTP/2 measures it (RFC 9113 §6.5.2), the way Go's servers bound what they accept.
pub const FIELD_OVERHEAD: usize = 32;

/// How many header fields a set holds and how many bytes they are, each field counted as its
/// name, its value and [`FIELD_OVERHEAD`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FieldsSize {
    /// Header fields (one per value).
    pub fields: usize,
    /// Their bytes, as HTTP/2 counts a header list.
    pub bytes: usize,
}

impl FieldsSize {
    /// The size of `headers`.
    pub fn of(headers: &Headers) -> FieldsSize {
        let bytes = headers
            .iter()
            .map(|(name, value)| name.as_str().len() + value.len() + FIELD_OVERHEAD)
            .sum();
        FieldsSize {
            fields: headers.len(),
            bytes,
        }
    }
}

/// Which part of an identity cannot be forwarded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Field {
    /// The user name.
    User,
    /// The UID.
    Uid,
    /// The group at this index.
    Group(usize),
    /// The extra key at this index.
    ExtraKey(usize),
    /// A value of the extra key at this index.
    ExtraValue(usize),
}

impl std::fmt::Display for Field {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Field::User => f.write_str("user name"),
            Field::Uid => f.write_str("uid"),
            Field::Group(i) => write!(f, "group #{}", i + 1),
            Field::ExtraKey(i) => write!(f, "extra key #{}", i + 1),
            Field::ExtraValue(i) => write!(f, "a value of extra key #{}", i + 1),
        }
    }
}

/// Why a value cannot be forwarded exactly as a header value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Why {
    /// The value is empty where a value is needed (user name, extra key).
    #[error("it is empty")]
    Empty,
    /// A control character (including tab and DEL) would be refused or cut by receivers.
    #[error("it holds a control character")]
    Control,
    /// Receivers trim leading and trailing whitespace: `"admin "` would arrive as `admin`.
    #[error("it has leading or trailing whitespace")]
    Whitespace,
    /// Bytes that are not UTF-8 text (a header a front proxy or a client sent): receivers would
    /// read another name.
    #[error("it is not valid UTF-8")]
    NotUtf8,
}

/// An identity apiagg cannot forward exactly: the request is refused with 401 rather than
/// forwarded with part of the identity missing. Not retryable: the credential must change.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid identity: the {field} cannot be forwarded exactly: {why}")]
pub struct InvalidIdentity {
    /// Which part.
    pub field: Field,
    /// Why.
    pub why: Why,
}

/// Checks that `value` goes into a header value and comes out the same at every receiver: no
/// control character (C0, DEL, C1), no leading or trailing whitespace (receivers trim it, as Go's
/// `strings.TrimSpace` does). Other Unicode text (`josé`) is forwarded as its UTF-8 bytes, as
/// kube-apiserver forwards OIDC names.
pub fn forwardable(value: &str, field: Field) -> Result<(), InvalidIdentity> {
    let fail = |why| {
        Err(InvalidIdentity {
            field: field.clone(),
            why,
        })
    };
    if value.chars().any(char::is_control) {
        return fail(Why::Control);
    }
    if value.starts_with(char::is_whitespace) || value.ends_with(char::is_whitespace) {
        return fail(Why::Whitespace);
    }
    Ok(())
}

/// A caller as authenticated by apiagg. Only [`User::new`] makes one, so every user's header
/// sets are complete.
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
    remote_size: FieldsSize,
    impersonation_size: FieldsSize,
}

impl User {
    /// A user with its header sets; `system:authenticated` is added to the groups unless the
    /// user is anonymous or already has it. Fails when any part cannot be forwarded exactly
    /// (see [`forwardable`]) or the name is empty: no identity is ever forwarded in part.
    pub fn new(
        name: String,
        uid: String,
        mut groups: Vec<String>,
        extra: Vec<(String, Vec<String>)>,
    ) -> Result<User, InvalidIdentity> {
        if name.is_empty() {
            return Err(InvalidIdentity {
                field: Field::User,
                why: Why::Empty,
            });
        }
        forwardable(&name, Field::User)?;
        forwardable(&uid, Field::Uid)?;
        for (i, g) in groups.iter().enumerate() {
            forwardable(g, Field::Group(i))?;
        }
        for (i, (key, values)) in extra.iter().enumerate() {
            if key.is_empty() {
                return Err(InvalidIdentity {
                    field: Field::ExtraKey(i),
                    why: Why::Empty,
                });
            }
            forwardable(key, Field::ExtraKey(i))?;
            for v in values {
                forwardable(v, Field::ExtraValue(i))?;
            }
        }
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
            remote_size: FieldsSize::default(),
            impersonation_size: FieldsSize::default(),
        };
        user.remote = user.headers(
            "x-remote-user",
            "x-remote-uid",
            "x-remote-group",
            "x-remote-extra-",
            true,
        )?;
        user.impersonation = user.headers(
            "impersonate-user",
            "impersonate-uid",
            "impersonate-group",
            "impersonate-extra-",
            false,
        )?;
        user.remote_size = FieldsSize::of(&user.remote);
        user.impersonation_size = FieldsSize::of(&user.impersonation);
        Ok(user)
    }

    /// `system:anonymous` in `system:unauthenticated` (one shared value).
    pub fn anonymous() -> &'static Arc<User> {
        static ANON: OnceLock<Arc<User>> = OnceLock::new();
        ANON.get_or_init(|| {
            let user = User::new(
                ANONYMOUS.into(),
                String::new(),
                vec![UNAUTHENTICATED.into()],
                Vec::new(),
            );
            // Constants, checked by the `anonymous_is_unauthenticated` test.
            Arc::new(user.expect("the anonymous identity is forwardable"))
        })
    }

    /// `X-Remote-User`, `X-Remote-Uid` (when known), one `X-Remote-Group` per group and one
    /// `X-Remote-Extra-<escaped key>` per value (client-go's `transport/round_trippers.go`).
    pub fn remote_headers(&self) -> &Headers {
        &self.remote
    }

    /// The same identity as `Impersonate-*` headers; `system:authenticated` is left out (the
    /// delegate adds it itself, and asking for it would need one more RBAC rule).
    pub fn impersonation_headers(&self) -> &Headers {
        &self.impersonation
    }

    /// The size of [`User::remote_headers`], measured once.
    pub fn remote_size(&self) -> FieldsSize {
        self.remote_size
    }

    /// The size of [`User::impersonation_headers`], measured once.
    pub fn impersonation_size(&self) -> FieldsSize {
        self.impersonation_size
    }

    /// One header set; every value must make it in (checked again here, so that a value the
    /// `http` crate refuses is an error, never a silent gap).
    fn headers(
        &self,
        user: &'static str,
        uid: &'static str,
        group: &'static str,
        extra: &str,
        all_groups: bool,
    ) -> Result<Headers, InvalidIdentity> {
        let mut out = Vec::new();
        let mut push = |name: HeaderName, value: &str, field: Field| {
            let value = HeaderValue::from_str(value).map_err(|_| InvalidIdentity {
                field,
                why: Why::Control,
            })?;
            out.push((name, value));
            Ok::<_, InvalidIdentity>(())
        };
        push(HeaderName::from_static(user), &self.name, Field::User)?;
        if !self.uid.is_empty() {
            push(HeaderName::from_static(uid), &self.uid, Field::Uid)?;
        }
        for (i, g) in self.groups.iter().enumerate() {
            if all_groups || g != AUTHENTICATED {
                push(HeaderName::from_static(group), g, Field::Group(i))?;
            }
        }
        for (i, (key, values)) in self.extra.iter().enumerate() {
            let name = HeaderName::from_bytes(format!("{extra}{}", escape_key(key)).as_bytes())
                .map_err(|_| InvalidIdentity {
                    field: Field::ExtraKey(i),
                    why: Why::Control,
                })?;
            for v in values {
                push(name.clone(), v, Field::ExtraValue(i))?;
            }
        }
        Ok(out)
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
    apiagg_requestinfo::decode_segment(escaped).to_lowercase()
}

#[cfg(test)]
mod tests;
