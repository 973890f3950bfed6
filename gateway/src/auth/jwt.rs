//! Structured authentication (`--authentication-config`, kube-apiserver's
//! `AuthenticationConfiguration`): JWT issuers tried by the token's `iss`, and the anonymous
//! rule with the paths it opens. The file is re-read when it changes (the file watcher's
//! rounds): a bad file keeps the previous configuration and says why in the log and in
//! `apiserver_authentication_config_controller_automatic_reloads_total{status="failure"}`.
//! Validation itself (fields, CEL, tokens, claims) lives in `apiagg-authn`.

mod issuer;
mod metrics;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use apiagg_authn::jwt::untrusted_issuer;
use apiagg_authn::validate::Anonymous;
use apiagg_authn::ValidationErrors;
use arc_swap::ArcSwap;
use tokio::sync::{watch, Semaphore};

pub use self::issuer::{Issuer, IssuerRefusal};
pub use self::metrics::{Attempt, AuthnMetrics};
use super::user::User;
use crate::backends::{Reload, ReloadCounter};

/// Signature checks that may run at once, on the blocking pool: half the cores, so that a flood
/// of forged tokens (each costs a signature check, a few hundred microseconds) never takes
/// every core from the requests in flight.
fn verifying_at_once() -> usize {
    std::thread::available_parallelism().map_or(1, |n| (n.get() / 2).max(1))
}

/// Why the authentication configuration file cannot be used. At start the gateway does not
/// start; on a reload the previous configuration keeps serving. Not retryable until the file
/// changes.
#[derive(Debug, thiserror::Error)]
pub enum AuthnConfigError {
    /// The file cannot be read.
    #[error("authentication config {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not a valid `AuthenticationConfiguration`.
    #[error("authentication config {}: {errors}", path.display())]
    Invalid {
        /// The file.
        path: PathBuf,
        /// Every problem, with its field.
        errors: ValidationErrors,
    },
    /// Both the config file's `authentication.anonymous` and this file's `anonymous` are set
    /// (kube-apiserver refuses `--anonymous-auth` beside the file's `anonymous` too).
    #[error("authentication config {}: anonymous: Forbidden: the config file's authentication.anonymous is set too; set it in one place", path.display())]
    AnonymousTwice {
        /// The file.
        path: PathBuf,
    },
    /// An issuer's certificate authority cannot be used by the HTTP client.
    #[error("authentication config {}: jwt[{index}].issuer.certificateAuthority: {why}", path.display())]
    Client {
        /// The file.
        path: PathBuf,
        /// Which issuer.
        index: usize,
        /// Why.
        why: String,
    },
}

/// A running issuer: its fetch loop ends when this is dropped.
struct Running {
    issuer: Arc<Issuer>,
    stop: watch::Sender<()>,
    started: std::sync::atomic::AtomicBool,
}

/// One loaded file.
struct Active {
    issuers: Vec<Running>,
    anonymous: Option<Anonymous>,
}

/// The file and what it configures now.
pub struct StructuredAuthn {
    path: PathBuf,
    active: ArcSwap<Active>,
    last: Mutex<Vec<u8>>,
    anonymous_in_config: bool,
    metrics: AuthnMetrics,
    verifying: Arc<Semaphore>,
    /// Reloads counted as kube-apiserver counts them.
    reloads: ReloadCounter,
}

impl StructuredAuthn {
    /// Reads and validates the file (it must be valid now). `anonymous_in_config`: the config
    /// file sets `authentication.anonymous` itself.
    pub fn load(
        path: &Path,
        anonymous_in_config: bool,
        metrics: AuthnMetrics,
    ) -> Result<StructuredAuthn, AuthnConfigError> {
        let structured = StructuredAuthn {
            path: path.to_path_buf(),
            active: ArcSwap::from_pointee(Active {
                issuers: Vec::new(),
                anonymous: None,
            }),
            last: Mutex::new(Vec::new()),
            anonymous_in_config,
            metrics,
            verifying: Arc::new(Semaphore::new(verifying_at_once())),
            reloads: ReloadCounter::default(),
        };
        structured.read()?;
        Ok(structured)
    }

    /// The issuer `token` claims, when one is configured, and its verdict. `None`: the token is
    /// not a JWT of a configured issuer, and the next authenticator decides.
    pub async fn authenticate(&self, token: &str) -> Option<Result<Arc<User>, IssuerRefusal>> {
        // A token validated before is found in a cache: no decoding on the common path.
        let active = self.active.load_full();
        for running in &active.issuers {
            if let Some(user) = running.issuer.cached(token).await {
                return Some(Ok(user));
            }
        }
        let iss = untrusted_issuer(token)?;
        let issuer = active.issuers.iter().find(|r| r.issuer.url() == iss)?;
        Some(issuer.issuer.authenticate(token).await)
    }

    /// The file's anonymous rule, when it has one (for the start-up log).
    pub fn anonymous(&self) -> Option<Anonymous> {
        self.active.load().anonymous.clone()
    }

    /// Whether the file's anonymous rule lets a request for `path` in without credentials;
    /// `None` when the file has no rule (the config file's `authentication.anonymous` decides).
    pub fn admits_anonymous(&self, path: &str) -> Option<bool> {
        let active = self.active.load();
        let rule = active.anonymous.as_ref()?;
        Some(
            rule.enabled
                && rule
                    .paths
                    .as_ref()
                    .is_none_or(|paths| paths.iter().any(|p| p == path)),
        )
    }

    /// The issuer URLs, for the start-up log.
    pub fn issuers(&self) -> Vec<String> {
        let active = self.active.load();
        active
            .issuers
            .iter()
            .map(|r| r.issuer.url().to_string())
            .collect()
    }

    /// Reads the file; `Ok(true)` when it changed and now serves.
    fn read(&self) -> Result<bool, AuthnConfigError> {
        let path = self.path.clone();
        let bytes = std::fs::read(&self.path).map_err(|source| AuthnConfigError::Read {
            path: path.clone(),
            source,
        })?;
        let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        if *last == bytes {
            return Ok(false);
        }
        let loaded = apiagg_authn::load(&bytes).map_err(|errors| AuthnConfigError::Invalid {
            path: path.clone(),
            errors,
        })?;
        if loaded.anonymous.is_some() && self.anonymous_in_config {
            return Err(AuthnConfigError::AnonymousTwice { path });
        }
        let old = self.active.load();
        let mut issuers = Vec::with_capacity(loaded.jwt.len());
        for (index, config) in loaded.jwt.into_iter().enumerate() {
            let issuer = Issuer::new(config, self.verifying.clone(), self.metrics.clone())
                .map_err(|e| AuthnConfigError::Client {
                    path: path.clone(),
                    index,
                    why: e.to_string(),
                })?;
            // Keys of the same issuer keep serving until the new loop fetched its own.
            if let Some(before) = old.issuers.iter().find(|r| r.issuer.same_source(&issuer)) {
                issuer.adopt_keys(&before.issuer);
            }
            issuers.push(Running {
                issuer: Arc::new(issuer),
                stop: watch::channel(()).0,
                started: false.into(),
            });
        }
        for gone in old
            .issuers
            .iter()
            .filter(|r| !issuers.iter().any(|n| n.issuer.url() == r.issuer.url()))
        {
            self.metrics.forget(gone.issuer.hash());
        }
        self.active.store(Arc::new(Active {
            issuers,
            anonymous: loaded.anonymous,
        }));
        *last = bytes;
        drop(last);
        self.start_pending();
        Ok(true)
    }

    /// Starts the fetch loops of issuers not started yet, when a runtime runs this thread
    /// (issuers loaded at start, before the runtime, start at the file watcher's first round).
    fn start_pending(&self) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        for running in &self.active.load().issuers {
            if !running
                .started
                .swap(true, std::sync::atomic::Ordering::AcqRel)
            {
                runtime.spawn(running.issuer.clone().run(running.stop.subscribe()));
            }
        }
    }
}

impl Reload for StructuredAuthn {
    type Error = AuthnConfigError;

    fn name(&self) -> String {
        format!("authentication config {}", self.path.display())
    }

    fn reload(&self) -> Result<bool, AuthnConfigError> {
        self.start_pending();
        let result = self.read();
        self.reloads.count(result, |ok| self.metrics.reloaded(ok))
    }
}
