//! Bearer tokens: kube-apiserver's static token file (CSV, re-read when it changes) and
//! TokenReview at the delegate, cached by the token's SHA-256 (accepted tokens 2 min, refused
//! ones 10 s by default, in separate bounded caches; transport errors are not cached;
//! concurrent look-ups of one token share one review; reviews of unknown tokens are
//! rate-limited process-wide and shared fairly between connections, `gate.rs`).

use std::collections::HashMap;
use std::future::Future;
use std::num::NonZeroU32;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use apiagg_config::TokenReview;
use arc_swap::ArcSwap;
use governor::{Quota, RateLimiter};
use moka::future::Cache;
use serde::Deserialize;
use sha2::{Digest, Sha256};

use super::user::{InvalidIdentity, User};
use crate::backends::{Clients, Reload, Upstream};

mod gate;

use self::gate::ReviewGate;
pub use self::gate::Source;

/// Why the static token file is refused (the previous good file keeps serving; the file is
/// read again when it changes).
#[derive(Debug, thiserror::Error)]
pub enum TokenFileError {
    /// The file cannot be read. Retryable: it may be in the middle of a rotation.
    #[error("{0}")]
    Read(std::io::Error),
    /// A line is not kube-apiserver's CSV. Not retryable: the file must change.
    #[error("line {line}: {why}")]
    Syntax {
        /// 1-based line number.
        line: usize,
        /// What is wrong.
        why: Syntax,
    },
    /// A line names a user that cannot be forwarded exactly. Not retryable.
    #[error("line {line}: {error}")]
    Identity {
        /// 1-based line number.
        line: usize,
        /// Which field, and why (in the message, not a `source()`).
        error: InvalidIdentity,
    },
    /// The file is not UTF-8. Not retryable.
    #[error("the file is not UTF-8")]
    NotUtf8,
}

/// What is wrong with a line of the token file (none is retryable: the file must change).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Syntax {
    /// A double quote is never closed.
    #[error("unterminated quote")]
    UnterminatedQuote,
    /// Fewer than three fields.
    #[error("needs at least token, user name and uid")]
    TooFewFields,
    /// The token or the user name is empty.
    #[error("empty token or user name")]
    EmptyTokenOrUser,
}

/// The token-file result.
type Result<T, E = TokenFileError> = std::result::Result<T, E>;

/// The static token file: token → user.
pub struct TokenFile {
    path: PathBuf,
    users: ArcSwap<HashMap<String, Arc<User>>>,
    last: Mutex<Vec<u8>>,
}

/// Parses kube-apiserver's CSV: `token,user,uid,"group1,group2"` (groups optional; further
/// columns ignored; `#` comments and blank lines skipped).
pub fn parse_token_csv(text: &str) -> Result<HashMap<String, Arc<User>>> {
    let mut users = HashMap::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let syntax = |why| TokenFileError::Syntax { line: i + 1, why };
        let fields = split_csv(line).map_err(syntax)?;
        if fields.len() < 3 {
            return Err(syntax(Syntax::TooFewFields));
        }
        let groups = fields
            .get(3)
            .map(|g| {
                g.split(',')
                    .map(str::trim)
                    .filter(|g| !g.is_empty())
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default();
        let (token, name, uid) = (&fields[0], &fields[1], &fields[2]);
        if token.is_empty() || name.is_empty() {
            return Err(syntax(Syntax::EmptyTokenOrUser));
        }
        let user = User::new(name.clone(), uid.clone(), groups, Vec::new())
            .map_err(|error| TokenFileError::Identity { line: i + 1, error })?;
        let user = Arc::new(user);
        // As kube-apiserver: a duplicated token keeps its first line.
        users.entry(token.clone()).or_insert(user);
    }
    Ok(users)
}

/// The fields of one CSV line, trimmed.
type Fields = Vec<String>;

/// One CSV line split into fields; double quotes group, `""` is a quote.
fn split_csv(line: &str) -> Result<Fields, Syntax> {
    let mut fields = Vec::new();
    let mut field = String::new();
    let mut quoted = false;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match (c, quoted) {
            ('"', true) if chars.peek() == Some(&'"') => {
                chars.next();
                field.push('"');
            }
            ('"', _) => quoted = !quoted,
            (',', false) => fields.push(std::mem::take(&mut field)),
            (c, _) => field.push(c),
        }
    }
    if quoted {
        return Err(Syntax::UnterminatedQuote);
    }
    fields.push(field);
    Ok(fields.into_iter().map(|f| f.trim().to_string()).collect())
}

impl TokenFile {
    /// Reads the file; it must be valid now.
    pub fn load(path: PathBuf) -> Result<TokenFile> {
        let file = TokenFile {
            path,
            users: ArcSwap::from_pointee(HashMap::new()),
            last: Mutex::new(Vec::new()),
        };
        file.reload()?;
        Ok(file)
    }

    /// The user of `token`, if listed.
    pub fn user(&self, token: &str) -> Option<Arc<User>> {
        self.users.load().get(token).cloned()
    }
}

impl Reload for TokenFile {
    type Error = TokenFileError;

    fn name(&self) -> String {
        format!("token file {}", self.path.display())
    }

    fn reload(&self) -> Result<bool> {
        let bytes = std::fs::read(&self.path).map_err(TokenFileError::Read)?;
        let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        if *last == bytes {
            return Ok(false);
        }
        let text = std::str::from_utf8(&bytes).map_err(|_| TokenFileError::NotUtf8)?;
        let users = parse_token_csv(text)?;
        self.users.store(Arc::new(users));
        *last = bytes;
        Ok(true)
    }
}

/// Upper bound of one TokenReview.
const REVIEW_TIMEOUT: Duration = Duration::from_secs(10);
/// Most tokens remembered in each cache (accepted, refused); past it the least used go first.
const CACHE_LIMIT: u64 = 16_384;
/// TokenReviews per second for tokens in neither cache: a flood of unknown tokens never
/// becomes a flood at the delegate (kube-apiserver's own limit per client is in this range).
pub const REVIEWS_PER_SECOND: u32 = 100;
/// Reviews that may go at once after a quiet spell (a restart with every client reconnecting).
pub const REVIEW_BURST: u32 = 200;

/// Why a bearer token does not authenticate.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReviewError {
    /// The delegate refused the token (cached as a refusal). Not retryable with this token.
    #[error("TokenReview: {0}")]
    Refused(String),
    /// The delegate vouched for a user apiagg cannot forward exactly (cached as a refusal).
    #[error("TokenReview: {0}")]
    Identity(InvalidIdentity),
    /// The delegate could not be asked or its answer is not a review (not cached). Retryable.
    #[error("TokenReview: {0}")]
    Unavailable(String),
    /// Too many reviews of unknown tokens right now (not cached): 429 with `Retry-After: 1`,
    /// since the token may well be valid. Retryable.
    #[error("TokenReview: too many reviews of unknown tokens, retry in a second")]
    TooMany,
}

/// A token's cache key: its SHA-256 (the token itself is not kept).
fn key(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

/// Outcomes of token reviews by the SHA-256 of the token: acceptances and refusals in separate
/// bounded caches (a flood of refusals cannot evict an accepted token), each entry until its
/// cache's TTL, least used evicted first; concurrent loads of one token merged into one.
pub struct TokenCache {
    accepted: Option<Cache<[u8; 32], Arc<User>>>,
    refused: Option<Cache<[u8; 32], ReviewError>>,
}

/// A bounded cache whose entries live `ttl`; none when `ttl` is zero (nothing is kept).
fn bounded<V: Clone + Send + Sync + 'static>(ttl: Duration) -> Option<Cache<[u8; 32], V>> {
    (!ttl.is_zero()).then(|| {
        Cache::builder()
            .max_capacity(CACHE_LIMIT)
            .time_to_live(ttl)
            .build()
    })
}

impl TokenCache {
    /// Caches keeping acceptances `accepted` long and refusals `refused` long.
    pub fn new(accepted: Duration, refused: Duration) -> TokenCache {
        TokenCache {
            accepted: bounded(accepted),
            refused: bounded(refused),
        }
    }

    /// The outcome remembered for `token`, if still fresh.
    pub async fn get(&self, token: &str) -> Option<Result<Arc<User>, ReviewError>> {
        self.get_key(&key(token)).await
    }

    async fn get_key(&self, key: &[u8; 32]) -> Option<Result<Arc<User>, ReviewError>> {
        if let Some(user) = self.accepted.as_ref()?.get(key).await {
            return Some(Ok(user));
        }
        Some(Err(self.refused.as_ref()?.get(key).await?))
    }

    /// Remembers that `token` is `user`'s.
    pub async fn accept(&self, token: &str, user: Arc<User>) {
        if let Some(accepted) = &self.accepted {
            accepted.insert(key(token), user).await;
        }
    }

    /// The outcome of `review` for the token of `key`, run once for all concurrent callers:
    /// acceptances and refusals are remembered, other failures are not.
    async fn load(
        &self,
        key: [u8; 32],
        review: impl Future<Output = Result<Arc<User>, ReviewError>>,
    ) -> Result<Arc<User>, ReviewError> {
        let review = async {
            let outcome = review.await;
            if let (Err(e @ (ReviewError::Refused(_) | ReviewError::Identity(_))), Some(refused)) =
                (&outcome, &self.refused)
            {
                refused.insert(key, e.clone()).await;
            }
            outcome
        };
        match &self.accepted {
            Some(accepted) => accepted
                .try_get_with(key, review)
                .await
                .map_err(|e| (*e).clone()),
            None => review.await,
        }
    }

    /// Runs the caches' pending evictions (for tests and counts).
    #[cfg(test)]
    async fn settle(&self) -> (u64, u64) {
        let mut counts = (0, 0);
        if let Some(c) = &self.accepted {
            c.run_pending_tasks().await;
            counts.0 = c.entry_count();
        }
        if let Some(c) = &self.refused {
            c.run_pending_tasks().await;
            counts.1 = c.entry_count();
        }
        counts
    }
}

/// TokenReview at the delegate, with a cache and a fair rate limit for unknown tokens.
pub struct TokenReviewer {
    cache: TokenCache,
    gate: Arc<ReviewGate>,
}

#[derive(Deserialize)]
struct Review {
    #[serde(default)]
    status: ReviewStatus,
}

#[derive(Default, Deserialize)]
struct ReviewStatus {
    #[serde(default)]
    authenticated: bool,
    #[serde(default)]
    user: ReviewUser,
    #[serde(default)]
    error: String,
}

#[derive(Default, Deserialize)]
struct ReviewUser {
    #[serde(default)]
    username: String,
    #[serde(default)]
    uid: String,
    #[serde(default)]
    groups: Vec<String>,
    #[serde(default)]
    extra: std::collections::BTreeMap<String, Vec<String>>,
}

const fn nonzero(n: u32) -> NonZeroU32 {
    match NonZeroU32::new(n) {
        Some(n) => n,
        None => NonZeroU32::MIN,
    }
}

impl TokenReviewer {
    /// A reviewer remembering outcomes as long as `ttl` says, asking at most
    /// [`REVIEWS_PER_SECOND`] (bursts of [`REVIEW_BURST`]) about unknown tokens.
    pub fn new(ttl: TokenReview) -> TokenReviewer {
        let quota =
            Quota::per_second(nonzero(REVIEWS_PER_SECOND)).allow_burst(nonzero(REVIEW_BURST));
        TokenReviewer::waiting_at_most(ttl, quota, gate::MAX_WAIT)
    }

    /// A reviewer at `quota` whose queued reviews wait at most `max_wait`.
    fn waiting_at_most(ttl: TokenReview, quota: Quota, max_wait: Duration) -> TokenReviewer {
        TokenReviewer {
            cache: TokenCache::new(ttl.cache_ttl, ttl.failure_cache_ttl),
            gate: ReviewGate::waiting_at_most(RateLimiter::direct(quota), max_wait),
        }
    }

    /// Who `token`, sent from `source`, belongs to, as the delegate says (cached; one review
    /// for concurrent look-ups of one token; rate-limited, each source taking its turn).
    pub async fn review(
        &self,
        token: &str,
        source: Source,
        delegate: &Upstream,
        clients: &Clients,
    ) -> Result<Arc<User>, ReviewError> {
        let key = key(token);
        if let Some(outcome) = self.cache.get_key(&key).await {
            return outcome;
        }
        let review = async {
            if let Err(busy) = self.gate.admit(source).await {
                tracing::debug!("TokenReview of an unknown token not sent: {busy}");
                return Err(ReviewError::TooMany);
            }
            ask(token, delegate, clients).await
        };
        self.cache.load(key, review).await
    }
}

/// One TokenReview: the user, a refusal, or `Unavailable` when the delegate could not be asked.
async fn ask(
    token: &str,
    delegate: &Upstream,
    clients: &Clients,
) -> Result<Arc<User>, ReviewError> {
    let body = serde_json::json!({
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenReview",
        "spec": {"token": token},
    });
    let unavailable = |e: &dyn std::fmt::Display| ReviewError::Unavailable(e.to_string());
    let client = clients.pick(delegate).map_err(|e| unavailable(&e))?;
    let path = "/apis/authentication.k8s.io/v1/tokenreviews";
    let answer = client
        .post_json(path, &body, REVIEW_TIMEOUT)
        .await
        .map_err(|e| unavailable(&e))?;
    if !matches!(answer.status, 200 | 201) {
        let status = answer.status;
        return Err(unavailable(&format!("the delegate answered {status}")));
    }
    let review: Review = serde_json::from_slice(&answer.body)
        .map_err(|e| unavailable(&format!("invalid answer: {e}")))?;
    let status = review.status;
    if !status.authenticated || status.user.username.is_empty() {
        let why = if status.error.is_empty() {
            "token not accepted".into()
        } else {
            status.error
        };
        return Err(ReviewError::Refused(why));
    }
    let user = status.user;
    let extra = user.extra.into_iter().collect();
    let user =
        User::new(user.username, user.uid, user.groups, extra).map_err(ReviewError::Identity)?;
    Ok(Arc::new(user))
}

#[cfg(test)]
mod tests;
