//! One JWT issuer at run time: its discovery document and key set fetched over TLS with the
//! configured CA (or the system's roots), refreshed every [`REFRESH`] and when a token names a
//! key it does not know (at most once per [`MISS_INTERVAL`], so forged `kid`s are no flood at
//! the provider); retried with backoff while unreachable; validated tokens cached by the token
//! until they expire, each only while the very key that verified it is still published. The
//! fetch loop ends when the issuer is dropped (a reload replaced it).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use apiagg_authn::jwt::{KeyId, KeySet, MAX_JWKS};
use apiagg_authn::{Accepted, Identity, JwtAuthenticator, MappingError};
use arc_swap::ArcSwapOption;
use moka::future::Cache;
use serde::Deserialize;
use sha2::{Digest, Sha256};
use tokio::sync::{watch, Notify, Semaphore};

use super::metrics::AuthnMetrics;
use crate::auth::user::User;
use apiagg_observe::error_chain;

/// Keys are fetched again this often.
pub const REFRESH: Duration = Duration::from_secs(300);
/// A token with an unknown `kid` triggers a fetch at most this often.
pub const MISS_INTERVAL: Duration = Duration::from_secs(10);
/// First wait after a failed fetch; doubled up to [`BACKOFF_MAX`] (kube-apiserver polls an
/// unreachable issuer every 10 s).
const BACKOFF_MIN: Duration = Duration::from_millis(500);
const BACKOFF_MAX: Duration = Duration::from_secs(10);
/// Upper bound of one fetch (discovery or key set).
const FETCH_TIMEOUT: Duration = Duration::from_secs(10);
/// The largest discovery document read.
const MAX_DISCOVERY: usize = 256 * 1024;
/// Bytes of validated tokens remembered per issuer (each weighs its length and
/// [`ENTRY_OVERHEAD`]); past it the least used go first.
const CACHE_BYTES: u64 = 16 << 20;
/// What a cached token costs besides its bytes: the user, the entry, the key's `Arc`.
const ENTRY_OVERHEAD: usize = 512;
/// Longest a validated token is remembered, whatever its `exp`.
const CACHE_TTL_MAX: Duration = Duration::from_secs(3600);
/// How long a request waits for keys fetched because of an unknown `kid`.
const MISS_WAIT: Duration = Duration::from_secs(5);

/// Why an issuer's keys could not be fetched (logged on change, counted). Retryable: the loop
/// tries again with backoff.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FetchError {
    /// The request failed (connection, TLS, timeout, status).
    #[error("{what} {url}: {why}")]
    Http {
        /// `discovery` or `key set`.
        what: &'static str,
        /// The URL.
        url: String,
        /// Why.
        why: String,
    },
    /// The discovery document names another issuer, or no usable `jwks_uri`.
    #[error("discovery {url}: {why}")]
    Discovery {
        /// The URL.
        url: String,
        /// Why.
        why: String,
    },
    /// The key set is unusable.
    #[error("key set {url}: {why}")]
    Keys {
        /// The URL.
        url: String,
        /// Why.
        why: String,
    },
}

/// Why a token of this issuer is refused (logged; the caller gets a bare 401).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IssuerRefusal {
    /// No keys fetched yet. Retryable once the issuer answers.
    #[error("issuer {0}: no keys yet (the issuer has not been reached)")]
    NoKeys(String),
    /// The token or its mapping failed. Not retryable with this token.
    #[error("issuer {issuer}: {why}")]
    Invalid {
        /// The issuer URL.
        issuer: String,
        /// Why.
        why: MappingError,
    },
    /// The check on the blocking pool did not run to its end (the runtime is shutting down).
    /// Retryable.
    #[error("issuer {0}: the token's check was interrupted")]
    Interrupted(String),
    /// The mapped user cannot be forwarded exactly. Not retryable.
    #[error("issuer {issuer}: {why}")]
    Identity {
        /// The issuer URL.
        issuer: String,
        /// Why.
        why: crate::auth::InvalidIdentity,
    },
}

/// One configured issuer.
pub struct Issuer {
    config: JwtAuthenticator,
    keys: ArcSwapOption<KeySet>,
    /// Woken when a token names an unknown key.
    wanted: Notify,
    /// Sends the keys' generation each time a fetch ends (success or not).
    fetched: watch::Sender<u64>,
    last_miss: Mutex<Option<Instant>>,
    /// Keyed by the whole token: a look-up hashes it with the cache's keyed hash and compares
    /// it whole (a SHA-256 per request would cost more than the rest of authentication).
    cache: Cache<Arc<str>, Cached>,
    client: reqwest::Client,
    /// Bounds signature checks running at once (they run off the async workers).
    verifying: Arc<Semaphore>,
    /// `sha256:<hex>` of the issuer URL, the metrics' `jwt_issuer_hash`.
    hash: String,
    metrics: AuthnMetrics,
}

/// A validated token's user, until the token expires.
#[derive(Clone)]
struct Cached {
    user: Arc<User>,
    expires: SystemTime,
    /// The key that verified it: the entry holds only while the issuer still publishes that
    /// very key (not merely one under its `kid`).
    key: KeyId,
}

/// Expires each cached user when its token does (at most [`CACHE_TTL_MAX`] after it was cached).
struct UntilExpiry;

impl moka::Expiry<Arc<str>, Cached> for UntilExpiry {
    fn expire_after_create(&self, _: &Arc<str>, value: &Cached, _: Instant) -> Option<Duration> {
        let left = value
            .expires
            .duration_since(SystemTime::now())
            .unwrap_or_default();
        Some(left.min(CACHE_TTL_MAX))
    }
}

impl Issuer {
    /// An issuer whose keys are not fetched yet ([`Issuer::run`] fetches them).
    pub fn new(
        config: JwtAuthenticator,
        verifying: Arc<Semaphore>,
        metrics: AuthnMetrics,
    ) -> Result<Issuer, reqwest::Error> {
        let mut client = reqwest::Client::builder()
            .use_rustls_tls()
            .https_only(true)
            .redirect(reqwest::redirect::Policy::none())
            .timeout(FETCH_TIMEOUT);
        if !config.certificate_authority.is_empty() {
            client = client.tls_built_in_root_certs(false);
            for cert in
                reqwest::Certificate::from_pem_bundle(config.certificate_authority.as_bytes())?
            {
                client = client.add_root_certificate(cert);
            }
        }
        let hash = format!("sha256:{:x}", Sha256::digest(config.issuer.as_bytes()));
        Ok(Issuer {
            keys: ArcSwapOption::empty(),
            wanted: Notify::new(),
            fetched: watch::channel(0).0,
            last_miss: Mutex::new(None),
            cache: Cache::builder()
                .max_capacity(CACHE_BYTES)
                .weigher(|token: &Arc<str>, _: &Cached| {
                    u32::try_from(token.len() + ENTRY_OVERHEAD).unwrap_or(u32::MAX)
                })
                .expire_after(UntilExpiry)
                .build(),
            client: client.build()?,
            verifying,
            hash,
            metrics,
            config,
        })
    }

    /// The issuer URL (`iss`).
    pub fn url(&self) -> &str {
        &self.config.issuer
    }

    /// `sha256:<hex>` of the URL (the metrics' `jwt_issuer_hash`).
    pub fn hash(&self) -> &str {
        &self.hash
    }

    /// Whether `other` fetches its keys from the same place with the same trust.
    pub fn same_source(&self, other: &Issuer) -> bool {
        self.config.issuer == other.config.issuer
            && self.config.discovery_url == other.config.discovery_url
            && self.config.certificate_authority == other.config.certificate_authority
    }

    /// Serves with `other`'s keys until its own are fetched (a reload of the file).
    pub fn adopt_keys(&self, other: &Issuer) {
        self.keys.store(other.keys.load_full());
    }

    /// The user of a token this issuer validated before, while the token has not expired and
    /// its signing key is still published.
    pub async fn cached(&self, token: &str) -> Option<Arc<User>> {
        let cached = self.cache.get(token).await?;
        if cached.expires > SystemTime::now() && self.still_published(&cached.key) {
            return Some(cached.user);
        }
        self.cache.invalidate(token).await;
        None
    }

    /// The user of `token`, which claims this issuer and is not in its cache.
    pub async fn authenticate(self: &Arc<Self>, token: &str) -> Result<Arc<User>, IssuerRefusal> {
        let started = Instant::now();
        let mut result = self.verify(token).await;
        if let Err(IssuerRefusal::Invalid {
            why: MappingError::Token(apiagg_authn::jwt::TokenError::UnknownKey { .. }),
            ..
        }) = &result
        {
            if self.fetch_for_miss().await {
                result = self.verify(token).await;
            }
        }
        let outcome = if result.is_ok() { "success" } else { "failure" };
        self.metrics.latency(&self.hash, outcome, started.elapsed());
        let cached = result?;
        let user = cached.user.clone();
        self.cache.insert(Arc::from(token), cached).await;
        Ok(user)
    }

    /// Verifies and maps `token` on the blocking pool (a signature costs a few hundred
    /// microseconds).
    async fn verify(self: &Arc<Self>, token: &str) -> Result<Cached, IssuerRefusal> {
        let Some(keys) = self.keys.load_full() else {
            return Err(IssuerRefusal::NoKeys(self.config.issuer.clone()));
        };
        let interrupted = || IssuerRefusal::Interrupted(self.config.issuer.clone());
        let _permit = self
            .verifying
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| interrupted())?;
        let this = self.clone();
        let token = token.to_string();
        let mapped = tokio::task::spawn_blocking(move || {
            this.config.authenticate(&token, &keys, SystemTime::now())
        })
        .await
        .map_err(|_| interrupted())?;
        let invalid = |why| IssuerRefusal::Invalid {
            issuer: self.config.issuer.clone(),
            why,
        };
        let Accepted {
            identity,
            expires,
            key,
            ..
        } = mapped.map_err(invalid)?;
        let Identity {
            username,
            uid,
            groups,
            extra,
        } = identity;
        let user =
            User::new(username, uid, groups, extra.into_iter().collect()).map_err(|why| {
                IssuerRefusal::Identity {
                    issuer: self.config.issuer.clone(),
                    why,
                }
            })?;
        Ok(Cached {
            user: Arc::new(user),
            expires,
            key,
        })
    }

    /// Whether the key `key` still verifies this issuer's tokens (a dropped or replaced key
    /// ends the tokens it verified at the next fetch of the key set).
    fn still_published(&self, key: &KeyId) -> bool {
        self.keys
            .load()
            .as_deref()
            .is_some_and(|keys| keys.holds(key))
    }

    /// Asks the loop for fresh keys after an unknown `kid` and waits for them: `false` when a
    /// fetch for a miss ran less than [`MISS_INTERVAL`] ago, or none ended in [`MISS_WAIT`].
    async fn fetch_for_miss(&self) -> bool {
        {
            let mut last = self.last_miss.lock().unwrap_or_else(|e| e.into_inner());
            if last.is_some_and(|t| t.elapsed() < MISS_INTERVAL) {
                return false;
            }
            *last = Some(Instant::now());
        }
        let mut fetched = self.fetched.subscribe();
        fetched.mark_unchanged();
        self.wanted.notify_one();
        tokio::time::timeout(MISS_WAIT, fetched.changed())
            .await
            .is_ok()
    }

    /// Fetches keys until `stop` ends: at once, then every [`REFRESH`] or when a token names an
    /// unknown key; after a failure, with backoff.
    pub async fn run(self: Arc<Self>, mut stop: watch::Receiver<()>) {
        let mut backoff = BACKOFF_MIN;
        let mut last_error: Option<String> = None;
        loop {
            let wait = match self.fetch().await {
                Ok(keys) => {
                    backoff = BACKOFF_MIN;
                    if last_error.take().is_some() || self.keys.load().is_none() {
                        let (usable, skipped) = keys.counts();
                        tracing::info!(issuer = %self.config.issuer, keys = usable, skipped, "JWT issuer keys fetched");
                    }
                    self.metrics.fetched(&self.hash, true, Some(keys.hash()));
                    self.keys.store(Some(Arc::new(keys)));
                    REFRESH
                }
                Err(e) => {
                    self.metrics.fetched(&self.hash, false, None);
                    let message = e.to_string();
                    if last_error.as_deref() != Some(&message) {
                        tracing::warn!(issuer = %self.config.issuer, error = %message, "cannot fetch the JWT issuer's keys; retrying with backoff");
                        last_error = Some(message);
                    }
                    let wait = backoff;
                    backoff = (backoff * 2).min(BACKOFF_MAX);
                    wait
                }
            };
            self.fetched.send_modify(|n| *n += 1);
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                _ = self.wanted.notified() => {}
                _ = stop.changed() => return,
            }
        }
    }

    /// One round: the discovery document, then the key set it names.
    async fn fetch(&self) -> Result<KeySet, FetchError> {
        let url = if self.config.discovery_url.is_empty() {
            format!(
                "{}/.well-known/openid-configuration",
                self.config.issuer.trim_end_matches('/')
            )
        } else {
            self.config.discovery_url.clone()
        };
        let body = self.get("discovery", &url, MAX_DISCOVERY).await?;
        #[derive(Deserialize)]
        struct Discovery {
            issuer: String,
            jwks_uri: String,
        }
        let discovery: Discovery =
            serde_json::from_slice(&body).map_err(|e| FetchError::Discovery {
                url: url.clone(),
                why: format!("not an OpenID discovery document: {e}"),
            })?;
        if discovery.issuer != self.config.issuer {
            return Err(FetchError::Discovery {
                url,
                why: format!(
                    "names issuer {:?}, not the configured {:?}",
                    discovery.issuer, self.config.issuer
                ),
            });
        }
        if !discovery.jwks_uri.starts_with("https://") {
            return Err(FetchError::Discovery {
                url,
                why: format!("jwks_uri {:?} is not https", discovery.jwks_uri),
            });
        }
        let body = self.get("key set", &discovery.jwks_uri, MAX_JWKS).await?;
        KeySet::parse(&body).map_err(|e| FetchError::Keys {
            url: discovery.jwks_uri,
            why: e.to_string(),
        })
    }

    /// GETs `url`, reading at most `limit` bytes.
    async fn get(
        &self,
        what: &'static str,
        url: &str,
        limit: usize,
    ) -> Result<Vec<u8>, FetchError> {
        let failed = |why: String| FetchError::Http {
            what,
            url: url.to_string(),
            why,
        };
        let mut response = self
            .client
            .get(url)
            .header(http::header::ACCEPT, "application/json")
            .send()
            .await
            .map_err(|e| failed(error_chain(&e)))?;
        if !response.status().is_success() {
            return Err(failed(format!("status {}", response.status())));
        }
        let mut body = Vec::new();
        while let Some(chunk) = response
            .chunk()
            .await
            .map_err(|e| failed(error_chain(&e)))?
        {
            if body.len() + chunk.len() > limit {
                return Err(failed(format!("larger than {limit} bytes")));
            }
            body.extend_from_slice(&chunk);
        }
        Ok(body)
    }
}

#[cfg(test)]
mod tests;
