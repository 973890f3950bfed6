//! Input: the config file. [`ConfigFiles`] is what the file watcher re-reads every reload
//! interval (the config, the APIService files it names, the client certificates and the
//! delegate's token): a rotated delegate token is used from the next request; a changed config
//! or certificate wakes the config task, as SIGHUP does. The task loads it: a change that parses
//! and loads replaces the [`Loaded`] value, one that does not is logged (once per content) and
//! counted, and the previous config keeps serving.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use apiagg_config::Sources;
use tokio::signal::unix::{signal, Signal, SignalKind};
use tokio::sync::{watch, Notify};

use super::inputs::{delegate_names, fingerprints, proxy_identity, Backends, Loaded};
use super::Error;
use crate::backends::{HealthBook, Names, Reload};
use apiagg_observe::Metrics;

/// Upper bound of resolving the delegate's host names.
pub(super) const RESOLVE_TIMEOUT: Duration = Duration::from_secs(5);

/// The config input.
pub(super) struct ConfigFile {
    pub path: PathBuf,
    pub health: Arc<HealthBook>,
    pub metrics: Arc<Metrics>,
    /// What the file watcher sees of the files.
    pub files: Arc<ConfigFiles>,
}

/// The config file and the files it names, as the file watcher sees them.
pub struct ConfigFiles {
    path: PathBuf,
    /// The config that serves (for the credential files it names) and the sources last seen;
    /// `None` until the first config is installed.
    state: Mutex<Option<(Arc<Loaded>, Sources)>>,
    /// Signalled when a round finds the config or a client certificate changed.
    wake: Notify,
}

impl ConfigFiles {
    /// The files of the config at `path`, watched once [`ConfigFiles::serving`] says what serves.
    pub(super) fn new(path: PathBuf) -> Arc<ConfigFiles> {
        Arc::new(ConfigFiles {
            path,
            state: Mutex::new(None),
            wake: Notify::new(),
        })
    }

    /// `loaded` serves now (its sources count as seen the first time).
    pub(super) fn serving(&self, loaded: Arc<Loaded>) {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        match &mut *state {
            Some((serving, _)) => *serving = loaded,
            None => {
                let sources = loaded.sources.clone();
                *state = Some((loaded, sources));
            }
        }
    }
}

impl Reload for ConfigFiles {
    type Error = Error;

    fn name(&self) -> String {
        format!("config {}", self.path.display())
    }

    /// Refreshes the delegate's token; wakes the config task when the config's files or the
    /// client certificates changed. Unreadable files are the error (said once by the watcher).
    fn reload(&self) -> Result<bool, Error> {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let Some((loaded, seen)) = &mut *state else {
            return Ok(false);
        };
        let sources = Sources::read(&self.path)?;
        let config_changed = sources != *seen;
        *seen = sources;
        let token_changed = match loaded
            .backends
            .delegate
            .as_ref()
            .and_then(|d| d.token.clone())
        {
            Some(token) => token.refresh().map_err(Error::DelegateToken)?,
            None => false,
        };
        let config = &loaded.config;
        let proxy = proxy_identity(config)?;
        let certificates_changed =
            fingerprints(config, proxy.as_deref())? != loaded.backends.fingerprints;
        if config_changed || certificates_changed {
            self.wake.notify_one();
        }
        Ok(config_changed || certificates_changed || token_changed)
    }
}

/// What the task remembers between ticks.
struct Seen {
    /// The last bytes read, accepted or not (a rejected content is logged once).
    sources: Sources,
    /// The last credential problem logged (each is logged once, when it changes).
    credential_problem: Option<String>,
}

impl ConfigFile {
    /// SIGHUP, taken over now (before the task runs, so a SIGHUP never finds its default
    /// action of ending the process); `None` when it cannot be.
    pub fn hangups() -> Option<Signal> {
        match signal(SignalKind::hangup()) {
            Ok(s) => Some(s),
            Err(e) => {
                tracing::warn!("cannot watch SIGHUP: {e}");
                None
            }
        }
    }

    /// Keeps `loaded` current until every receiver is gone: loads what the file watcher found
    /// changed; `hangup` forces a reload.
    pub async fn run(self, loaded: watch::Sender<Arc<Loaded>>, mut hangup: Option<Signal>) {
        let mut seen = Seen {
            sources: loaded.borrow().sources.clone(),
            credential_problem: None,
        };
        loop {
            let forced = tokio::select! {
                () = self.files.wake.notified() => false,
                _ = async {
                    match hangup.as_mut() {
                        Some(h) => { h.recv().await; }
                        None => std::future::pending::<()>().await,
                    }
                } => true,
                () = loaded.closed() => return,
            };
            let current = loaded.borrow().clone();
            if let Some(next) = self.poll_config(&current, &mut seen, forced).await {
                self.files.serving(next.clone());
                loaded.send_replace(next);
            }
            let current = loaded.borrow().clone();
            if let Some(next) = self.poll_credentials(&current, &mut seen).await {
                self.files.serving(next.clone());
                loaded.send_replace(next);
            }
        }
    }

    /// Reads the files; a new [`Loaded`] when they changed (or when `forced`, SIGHUP) and load.
    async fn poll_config(
        &self,
        current: &Loaded,
        seen: &mut Seen,
        forced: bool,
    ) -> Option<Arc<Loaded>> {
        let sources = match Sources::read(&self.path) {
            Ok(s) => s,
            Err(e) => {
                if forced {
                    self.record::<()>(&Err(e.into()));
                }
                return None;
            }
        };
        if !forced && sources == seen.sources {
            return None;
        }
        if forced {
            tracing::info!("SIGHUP: reloading the config");
        }
        seen.sources = sources.clone();
        let result = self.load(current, sources).await;
        self.record(&result);
        let loaded = result.ok()?;
        tracing::info!(
            apiservices = loaded.config.api_services.len(),
            "config reloaded"
        );
        Some(Arc::new(loaded))
    }

    /// Parses `sources` and loads what they name; on error nothing changes.
    async fn load(&self, current: &Loaded, sources: Sources) -> Result<Loaded, Error> {
        let config = sources.parse()?;
        let serving = &current.config;
        if config.listen != serving.listen || config.tls != serving.tls {
            tracing::warn!("listen and tls changes take effect only after a restart");
        }
        if config.authentication != serving.authentication {
            tracing::warn!("authentication changes take effect only after a restart");
        }
        let names = Names::resolve(&delegate_names(&config), RESOLVE_TIMEOUT).await;
        let backends = Backends::load(&config, &self.health, &names)?;
        Ok(Loaded {
            sources,
            config: Arc::new(config),
            backends,
        })
    }

    /// Re-reads the client certificates: a rotated certificate gives a new [`Loaded`]. A broken
    /// file keeps the last good credentials.
    async fn poll_credentials(&self, current: &Loaded, seen: &mut Seen) -> Option<Arc<Loaded>> {
        let config = &current.config;
        let mut problem = None;
        let now = proxy_identity(config).and_then(|proxy| fingerprints(config, proxy.as_deref()));
        let mut next = None;
        match now {
            Ok(now) if now != current.backends.fingerprints => {
                let names = Names::resolve(&delegate_names(config), RESOLVE_TIMEOUT).await;
                match Backends::load(config, &self.health, &names) {
                    Ok(backends) => {
                        tracing::info!("client certificates changed: routes rebuilt");
                        next = Some(Arc::new(Loaded {
                            sources: current.sources.clone(),
                            config: config.clone(),
                            backends,
                        }));
                    }
                    Err(e) => problem = Some(e.to_string()),
                }
            }
            Ok(_) => {}
            Err(e) => problem = Some(e.to_string()),
        }
        if problem != seen.credential_problem {
            match &problem {
                Some(p) => tracing::warn!("credentials not reloaded, the previous ones serve: {p}"),
                None if seen.credential_problem.is_some() => {
                    tracing::info!("credentials readable again")
                }
                None => {}
            }
            seen.credential_problem = problem;
        }
        next
    }

    /// Logs a rejected reload and counts the outcome.
    fn record<T>(&self, result: &Result<T, Error>) {
        if let Err(e) = result {
            tracing::error!(config = %self.path.display(), "config rejected, the previous config keeps serving: {e}");
        }
        count(&self.metrics, result);
    }
}

/// Counts the outcome of a load in the reload metrics.
pub(super) fn count<T>(metrics: &Metrics, result: &Result<T, Error>) {
    let (label, ok) = if result.is_ok() {
        ("success", 1)
    } else {
        ("failure", 0)
    };
    metrics.reloads.with_label_values(&[label]).inc();
    metrics.last_reload_ok.set(ok);
}
