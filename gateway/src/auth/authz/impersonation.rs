//! Caller-sent `Impersonate-*` headers, and the checks they need first.

use super::*;

/// Why `Impersonate-*` headers cannot be honoured: a 500 `InternalError`, as upstream answers.
/// Not retryable: the request must change.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(super) enum ImpersonationError {
    /// A header value is not UTF-8 (it would be read as another name). Not retryable.
    #[error("Impersonate-* header values must be UTF-8 text")]
    NotText,
    /// Groups, extra or a UID are asked for without a user. Not retryable.
    #[error("requested impersonation of groups, extra or a UID without impersonating a user")]
    NoUser,
    /// The user is asked for in `system:unauthenticated` (it would be widened). Not retryable.
    #[error("impersonating a user in system:unauthenticated is not supported")]
    Unauthenticated,
    /// The impersonated identity cannot be forwarded exactly. Not retryable.
    #[error("impersonation: {0}")]
    Identity(InvalidIdentity),
}

pub(super) fn impersonate(resource: &str, group: &str, name: &str) -> Attributes {
    Attributes {
        verb: "impersonate".into(),
        resource_request: true,
        group: group.into(),
        version: "v1".into(),
        resource: resource.into(),
        name: name.into(),
        ..Attributes::default()
    }
}

/// `(namespace, name)` of a service account user name, as upstream's `SplitUsername`.
pub(super) fn service_account(user: &str) -> Option<(&str, &str)> {
    let (namespace, name) = user.strip_prefix(SERVICE_ACCOUNT_PREFIX)?.split_once(':')?;
    let valid = |s: &str| {
        !s.is_empty()
            && s.len() <= 253
            && s.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
    };
    (valid(namespace) && valid(name) && !name.contains(':')).then_some((namespace, name))
}

/// The impersonation the headers ask for, if any; `Err` for groups, extra or a UID without a
/// user (upstream answers 500 for it).
pub(super) fn impersonation(
    headers: &HeaderMap,
) -> Result<Option<Impersonation>, ImpersonationError> {
    if !headers
        .keys()
        .any(|n| n.as_str().starts_with(IMPERSONATE_PREFIX))
    {
        return Ok(None);
    }
    // A name that is not text would be read as another name (replacement characters).
    let not_text = headers.iter().any(|(n, v)| {
        n.as_str().starts_with(IMPERSONATE_PREFIX) && std::str::from_utf8(v.as_bytes()).is_err()
    });
    if not_text {
        return Err(ImpersonationError::NotText);
    }
    let text = |v: &http::HeaderValue| String::from_utf8_lossy(v.as_bytes()).into_owned();
    let name = headers
        .get(IMPERSONATE_USER)
        .map(text)
        .filter(|n| !n.is_empty());
    let groups: Vec<String> = headers
        .get_all(IMPERSONATE_GROUP)
        .iter()
        .map(text)
        .collect();
    let mut extra: Vec<(String, Vec<String>)> = Vec::new();
    let mut extra_checks = Vec::new();
    for (header, value) in headers {
        let Some(escaped) = header.as_str().strip_prefix(IMPERSONATE_EXTRA) else {
            continue;
        };
        let key = unescape_key(escaped);
        let value = text(value);
        let mut check = impersonate("userextras", "authentication.k8s.io", &value);
        check.subresource = key.clone();
        extra_checks.push(check);
        match extra.iter_mut().find(|(k, _)| *k == key) {
            Some((_, values)) => values.push(value),
            None => extra.push((key, vec![value])),
        }
    }
    let uid = headers
        .get(IMPERSONATE_UID)
        .map(text)
        .filter(|u| !u.is_empty());
    let Some(name) = name else {
        if groups.is_empty() && extra.is_empty() && uid.is_none() {
            // Only unknown impersonate-* headers: nothing is impersonated.
            return Ok(None);
        }
        return Err(ImpersonationError::NoUser);
    };
    let mut checks = Vec::new();
    let mut user_groups = groups.clone();
    match service_account(&name) {
        Some((namespace, account)) => {
            let mut check = impersonate("serviceaccounts", "", account);
            check.namespace = namespace.into();
            checks.push(check);
            if groups.is_empty() {
                user_groups = vec![
                    "system:serviceaccounts".into(),
                    format!("system:serviceaccounts:{namespace}"),
                ];
            }
        }
        None => checks.push(impersonate("users", "", &name)),
    }
    checks.extend(groups.iter().map(|g| impersonate("groups", "", g)));
    checks.extend(extra_checks);
    if let Some(uid) = &uid {
        checks.push(impersonate("uids", "authentication.k8s.io", uid));
    }
    if name == ANONYMOUS {
        if !user_groups.iter().any(|g| g == UNAUTHENTICATED) {
            user_groups.push(UNAUTHENTICATED.into());
        }
    } else if user_groups.iter().any(|g| g == UNAUTHENTICATED) {
        // Upstream adds system:authenticated unless one of the two is asked for; `User::new`
        // adds it unless present, so an unauthenticated impersonation is refused instead of
        // being widened.
        return Err(ImpersonationError::Unauthenticated);
    } else if !user_groups.iter().any(|g| g == AUTHENTICATED) {
        user_groups.push(AUTHENTICATED.into());
    }
    // An impersonated identity that cannot be forwarded exactly is refused, never cut short.
    let user = User::new(name, uid.unwrap_or_default(), user_groups, extra)
        .map_err(ImpersonationError::Identity)?;
    Ok(Some(Impersonation { user, checks }))
}

/// What `Impersonate-*` headers ask for: the user they name and one check per thing
/// impersonated (upstream's `buildImpersonationRequests`).
#[derive(Debug)]
pub(super) struct Impersonation {
    pub(super) user: User,
    pub(super) checks: Vec<Attributes>,
}
