//! Caller-sent `Impersonate-*` headers, as kube-apiserver's constrained impersonation filter
//! (KEP-5284) reads them: the modes `associated-node`, `arbitrary-node`, `serviceaccount` and
//! `user-info` are tried first — each asks `impersonate-on:<mode>:<verb>` on the request
//! itself, then `impersonate:<mode>` on every part of the identity — and the legacy
//! `impersonate` checks last. The first mode that allows wins (and is tried first next time for
//! that caller); when none does, the first refusal met is the answer.

mod modes;

use moka::future::Cache;

use self::modes::{Mode, Plan, Step, MODES};
use super::*;

/// Why `Impersonate-*` headers cannot be honoured: a 500 `InternalError`, as upstream's legacy
/// filter answers. Not retryable: the request must change.
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
    /// More values than [`MAX_IMPERSONATION_VALUES`] once duplicates are removed; it holds the
    /// number of values sent. Not retryable.
    #[error(
        "{0} Impersonate-* values were sent, more than the limit of {MAX_IMPERSONATION_VALUES} \
         once duplicates are removed (the user and the UID count one each)"
    )]
    TooMany(usize),
}

/// What the headers ask for.
#[derive(Debug, Clone, Default)]
pub(super) struct Wanted {
    pub(super) name: String,
    pub(super) uid: Option<String>,
    pub(super) groups: Vec<String>,
    pub(super) extra: Vec<(String, Vec<String>)>,
}

impl Wanted {
    /// Only a user name is asked for (the node and service-account modes need that).
    pub(super) fn name_only(&self) -> bool {
        self.uid.is_none() && self.groups.is_empty() && self.extra.is_empty()
    }
}

/// The impersonation the headers ask for, if any; `Err` for groups, extra or a UID without a
/// user, or a value that is not text.
pub(super) fn wanted(headers: &HeaderMap) -> Result<Option<Wanted>, ImpersonationError> {
    if !headers
        .keys()
        .any(|n| n.as_str().starts_with(IMPERSONATE_PREFIX))
    {
        return Ok(None);
    }
    // A name that is not text would be read as another name (replacement characters).
    let mut sent = 0;
    for (n, v) in headers {
        if n.as_str().starts_with(IMPERSONATE_PREFIX) {
            if std::str::from_utf8(v.as_bytes()).is_err() {
                return Err(ImpersonationError::NotText);
            }
            sent += 1;
        }
    }
    let text = |v: &http::HeaderValue| String::from_utf8_lossy(v.as_bytes()).into_owned();
    // Each value costs an access check: a name sent twice is checked once, and past the cap
    // nothing is checked at all, nor compared any further (the user and UID count once each,
    // whether sent or not).
    let over = |distinct: usize| 2 + distinct > MAX_IMPERSONATION_VALUES;
    let mut groups: Vec<String> = Vec::new();
    for group in headers.get_all(IMPERSONATE_GROUP).iter() {
        if over(groups.len()) {
            return Err(ImpersonationError::TooMany(sent));
        }
        let group = text(group);
        if !groups.contains(&group) {
            groups.push(group);
        }
    }
    let mut wanted = Wanted {
        groups,
        uid: headers
            .get(IMPERSONATE_UID)
            .map(text)
            .filter(|u| !u.is_empty()),
        ..Wanted::default()
    };
    let mut distinct = wanted.groups.len();
    for (header, value) in headers {
        let Some(escaped) = header.as_str().strip_prefix(IMPERSONATE_EXTRA) else {
            continue;
        };
        if over(distinct) {
            return Err(ImpersonationError::TooMany(sent));
        }
        let key = unescape_key(escaped);
        let value = text(value);
        match wanted.extra.iter_mut().find(|(k, _)| *k == key) {
            Some((_, values)) if values.contains(&value) => continue,
            Some((_, values)) => values.push(value),
            None => wanted.extra.push((key, vec![value])),
        }
        distinct += 1;
    }
    if over(distinct) {
        return Err(ImpersonationError::TooMany(sent));
    }
    match headers
        .get(IMPERSONATE_USER)
        .map(text)
        .filter(|n| !n.is_empty())
    {
        Some(name) => wanted.name = name,
        // Only unknown impersonate-* headers: nothing is impersonated.
        None if wanted.groups.is_empty() && wanted.extra.is_empty() && wanted.uid.is_none() => {
            return Ok(None)
        }
        None => return Err(ImpersonationError::NoUser),
    }
    Ok(Some(wanted))
}

/// The user legacy impersonation gives: a service account gets its default groups when none
/// are asked for, anonymous is kept in `system:unauthenticated`, everybody else is in
/// `system:authenticated` (asking for `system:unauthenticated` is refused, never widened).
pub(super) fn legacy_user(wanted: &Wanted) -> Result<User, ImpersonationError> {
    let mut groups = wanted.groups.clone();
    if groups.is_empty() {
        if let Some((namespace, _)) = service_account(&wanted.name) {
            groups = modes::service_account_groups(namespace);
        }
    }
    finish(wanted, groups)
}

/// `wanted`'s name, UID and extra with `groups`, and the group of its kind added.
pub(super) fn finish(wanted: &Wanted, mut groups: Vec<String>) -> Result<User, ImpersonationError> {
    if wanted.name == ANONYMOUS {
        if !groups.iter().any(|g| g == UNAUTHENTICATED) {
            groups.push(UNAUTHENTICATED.into());
        }
    } else if groups.iter().any(|g| g == UNAUTHENTICATED) {
        return Err(ImpersonationError::Unauthenticated);
    } else if !groups.iter().any(|g| g == AUTHENTICATED) {
        groups.push(AUTHENTICATED.into());
    }
    // An impersonated identity that cannot be forwarded exactly is refused, never cut short.
    User::new(
        wanted.name.clone(),
        wanted.uid.clone().unwrap_or_default(),
        groups,
        wanted.extra.clone(),
    )
    .map_err(ImpersonationError::Identity)
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

/// Callers remembered with the mode that last allowed them (upstream keeps 10,000).
const MODES_REMEMBERED: u64 = 10_000;

/// The mode that last allowed each caller, tried first next time.
pub(super) struct ModeCache(Cache<String, u8>);

impl Default for ModeCache {
    fn default() -> Self {
        ModeCache(Cache::new(MODES_REMEMBERED))
    }
}

impl Authorizer {
    /// The user `wanted` becomes for `requestor` doing `a`, when some mode allows it, and
    /// whether only `AlwaysAllow` allowed it (a [`Grant`]).
    pub(super) async fn impersonated(
        &self,
        wanted: &Wanted,
        requestor: &User,
        a: &Attributes,
        reviewer: Reviewer<'_>,
    ) -> Result<Grant, Refusal> {
        let last = self.modes.0.get(&requestor.name).await.map(usize::from);
        let order = last
            .into_iter()
            .chain((0..MODES.len()).filter(|i| Some(*i) != last));
        let mut first: Option<Refusal> = None;
        for index in order {
            let mode = MODES[index];
            if !mode.applies(wanted, requestor) {
                continue;
            }
            match self.try_mode(mode, wanted, requestor, a, reviewer).await {
                Ok(grant) => {
                    if let Ok(index) = u8::try_from(index) {
                        self.modes.0.insert(requestor.name.clone(), index).await;
                    }
                    return Ok(grant);
                }
                Err(refusal) => {
                    first.get_or_insert(refusal);
                }
            }
        }
        Err(first.unwrap_or_else(|| forbidden(requestor, a, "impersonation is not allowed")))
    }

    /// Every check of `mode`, in order; the user it gives when all allow.
    async fn try_mode(
        &self,
        mode: Mode,
        wanted: &Wanted,
        requestor: &User,
        a: &Attributes,
        reviewer: Reviewer<'_>,
    ) -> Result<Grant, Refusal> {
        let Plan {
            subject_extra,
            steps,
            groups,
        } = mode.plan(wanted, requestor, a)?;
        let who = Subject {
            extra: subject_extra.as_deref().unwrap_or(&requestor.extra),
            ..subject(requestor)
        };
        let mut blanket = false;
        for step in steps {
            match step {
                Step::One(check) => {
                    blanket |= self.require(&who, requestor, &check, reviewer).await?
                }
                Step::Wildcard { all, each } => {
                    let verdict = self.decide(&who, &all, reviewer).await;
                    if verdict.decision.allowed() {
                        blanket |= verdict.blanket;
                    } else {
                        for check in &each {
                            blanket |= self.require(&who, requestor, check, reviewer).await?;
                        }
                    }
                }
            }
        }
        let user = finish(wanted, groups).map_err(|e| Refusal::Internal(e.to_string()))?;
        Ok(Grant { user, blanket })
    }

    /// `Ok` when the chain allows `who` doing `check` (`Ok(true)`: only `AlwaysAllow` did); an
    /// impersonation that cannot be checked is forbidden, not a 500, as upstream answers.
    async fn require(
        &self,
        who: &Subject<'_>,
        requestor: &User,
        check: &Attributes,
        reviewer: Reviewer<'_>,
    ) -> Result<bool, Refusal> {
        let verdict = self.decide(who, check, reviewer).await;
        if verdict.decision.allowed() {
            return Ok(verdict.blanket);
        }
        if !verdict.errors.is_empty() {
            tracing::warn!("impersonation check failed: {}", verdict.errors.join("; "));
        }
        Err(forbidden(requestor, check, verdict.decision.reason()))
    }
}

/// An impersonation the chain allowed.
pub(super) struct Grant {
    /// Who the request acts as.
    pub(super) user: User,
    /// Some check was allowed only by `AlwaysAllow`: no policy decided that the caller may
    /// be this user, so apiagg does not act as it (the headers go on, and the delegate decides
    /// with the caller's own credentials).
    pub(super) blanket: bool,
}
