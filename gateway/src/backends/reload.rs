//! The one mechanism for files apiagg re-reads when they change (the config and the credential
//! files it names, CA bundles, token files, serving certificates, flow-control objects, the audit
//! policy): each is a [`Reload`] (a [`WatchedFile`] when applying the file is all there is to
//! it), and the file watcher (`controllers/files.rs`) re-reads them all every reload interval,
//! logs what changed or broke (once per problem) and publishes certificate expiry. The last good
//! value keeps serving when a file turns bad.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use apiagg_observe::CertificateKind;

/// Something read from files that are re-read when they change. The last good value keeps
/// serving when a file turns bad.
pub trait Reload: Send + Sync {
    /// Why the files cannot be used now; the module's own error, so callers and tests see
    /// the variant (the file watcher sees it boxed in a [`ReloadError`]).
    type Error: std::error::Error + Send + Sync + 'static;
    /// What it is, for logs (`CA /etc/apiagg/ca.crt`).
    fn name(&self) -> String;
    /// Re-reads the files; `Ok(true)` when something changed.
    fn reload(&self) -> Result<bool, Self::Error>;
    /// The certificates it serves with now, for `apiagg_certificate_expiration_timestamp_seconds`:
    /// their kind and earliest `notAfter` (Unix seconds); `None` when it holds no certificate.
    fn expiry(&self) -> Option<(CertificateKind, i64)> {
        None
    }
}

/// Why a [`Reloadable`] could not be re-read: the error of the [`Reload`] behind it, boxed (its
/// type belongs to a higher layer). Retryable: the file watcher reads the files again on its
/// next round, and the last good value serves meanwhile.
#[derive(Debug, thiserror::Error)]
#[error(transparent)]
pub struct ReloadError(Box<dyn std::error::Error + Send + Sync>);

/// [`Reload`] with its error type erased, so that one file watcher holds them all.
trait ErasedReload: Send + Sync {
    fn name(&self) -> String;
    fn reload(&self) -> Result<bool, ReloadError>;
    fn expiry(&self) -> Option<(CertificateKind, i64)>;
}

impl<T: Reload> ErasedReload for T {
    fn name(&self) -> String {
        Reload::name(self)
    }
    fn reload(&self) -> Result<bool, ReloadError> {
        Reload::reload(self).map_err(|e| ReloadError(Box::new(e)))
    }
    fn expiry(&self) -> Option<(CertificateKind, i64)> {
        Reload::expiry(self)
    }
}

/// The outcomes of a file's reloads as kube-apiserver counts them in its
/// `…_config_controller_automatic_reloads_total`: every change that serves is a success, and a
/// failure is counted once until the problem changes (the file watcher re-reads every round).
#[derive(Default)]
pub struct ReloadCounter {
    failed: Mutex<Option<String>>,
}

impl ReloadCounter {
    /// Counts `result` with `count(success)` when it is news; returns `result`.
    pub fn count<E: std::fmt::Display>(
        &self,
        result: Result<bool, E>,
        count: impl Fn(bool),
    ) -> Result<bool, E> {
        let mut failed = self.failed.lock().unwrap_or_else(|e| e.into_inner());
        match &result {
            Ok(true) => {
                count(true);
                *failed = None;
            }
            Ok(false) => {}
            Err(e) => {
                let message = e.to_string();
                if failed.as_deref() != Some(&message) {
                    count(false);
                    *failed = Some(message);
                }
            }
        }
        result
    }
}

/// Any shared [`Reload`], as the file watcher holds it (cheap to clone).
#[derive(Clone)]
pub struct Reloadable(Arc<dyn ErasedReload>);

impl<T: Reload + 'static> From<Arc<T>> for Reloadable {
    fn from(item: Arc<T>) -> Reloadable {
        Reloadable(item)
    }
}

impl Reloadable {
    /// What it is, for logs.
    pub fn name(&self) -> String {
        self.0.name()
    }

    /// Re-reads the files; `Ok(true)` when something changed.
    pub fn reload(&self) -> Result<bool, ReloadError> {
        self.0.reload()
    }

    /// The kind and earliest `notAfter` of the certificates it serves with now.
    pub fn expiry(&self) -> Option<(CertificateKind, i64)> {
        self.0.expiry()
    }
}

impl std::fmt::Debug for Reloadable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Reloadable").field(&self.name()).finish()
    }
}

/// Why a [`WatchedFile`] was not applied; what serves stays. Retryable: the file watcher tries
/// again on its next round.
#[derive(Debug, thiserror::Error)]
pub enum WatchedFileError {
    /// The file's modification time cannot be read (the file is gone, or not readable).
    #[error("{}: {error}", path.display())]
    Modified {
        /// The file.
        path: PathBuf,
        /// What reading it said (in the message, not a `source()`).
        error: std::io::Error,
    },
    /// What applies the file refused it (it cannot be read, parsed or compiled).
    #[error(transparent)]
    Apply(Box<dyn std::error::Error + Send + Sync>),
}

/// What a [`WatchedFile`] does with its file.
type ApplyFile = dyn Fn(&Path) -> Result<(), WatchedFileError> + Send + Sync;

/// A file applied again when its modification time changes (the flow-control objects, the
/// audit policy); a failure keeps what serves and is tried again when the file changes.
pub struct WatchedFile {
    what: &'static str,
    path: PathBuf,
    apply: Box<ApplyFile>,
    seen: Mutex<Option<SystemTime>>,
}

impl WatchedFile {
    /// Watches `path` (`what` names it in logs), applied by `apply` when it changes; the file
    /// as it is now counts as applied.
    pub fn watch<E: std::error::Error + Send + Sync + 'static>(
        what: &'static str,
        path: PathBuf,
        apply: impl Fn(&Path) -> Result<(), E> + Send + Sync + 'static,
    ) -> Reloadable {
        let seen = std::fs::metadata(&path).and_then(|m| m.modified()).ok();
        let file = WatchedFile {
            what,
            path,
            apply: Box::new(move |path| {
                apply(path).map_err(|e| WatchedFileError::Apply(Box::new(e)))
            }),
            seen: Mutex::new(seen),
        };
        Arc::new(file).into()
    }
}

impl Reload for WatchedFile {
    type Error = WatchedFileError;

    fn name(&self) -> String {
        format!("{} {}", self.what, self.path.display())
    }

    fn reload(&self) -> Result<bool, WatchedFileError> {
        let modified = std::fs::metadata(&self.path)
            .and_then(|m| m.modified())
            .map_err(|error| WatchedFileError::Modified {
                path: self.path.clone(),
                error,
            })?;
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        if *seen == Some(modified) {
            return Ok(false);
        }
        (self.apply)(&self.path)?;
        *seen = Some(modified);
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file that is always unreadable.
    struct Gone;

    impl Reload for Gone {
        type Error = std::io::Error;
        fn name(&self) -> String {
            "gone".into()
        }
        fn reload(&self) -> Result<bool, std::io::Error> {
            Err(std::io::Error::new(
                std::io::ErrorKind::NotFound,
                "no such file",
            ))
        }
    }

    #[test]
    fn a_reloadable_says_what_its_reload_said() {
        let item = Reloadable::from(Arc::new(Gone));
        assert_eq!(item.name(), "gone");
        assert_eq!(item.expiry(), None);
        let err = item.reload().expect_err("unreadable");
        assert_eq!(err.to_string(), "no such file");
    }

    #[test]
    fn a_watched_file_is_applied_when_it_changes_and_kept_when_apply_fails() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("objects.yaml");
        std::fs::write(&path, "good").expect("write");
        let applied = Arc::new(Mutex::new(Vec::new()));
        let seen = applied.clone();
        let file = WatchedFile::watch("objects", path.clone(), move |p: &Path| {
            let text = std::fs::read_to_string(p)?;
            if text == "bad" {
                return Err(std::io::Error::other("bad objects"));
            }
            seen.lock().expect("lock").push(text);
            Ok(())
        });
        assert!(!file.reload().expect("unchanged"), "applied at start");
        let touch = |text: &str, secs: u64| {
            std::fs::write(&path, text).expect("write");
            let when = SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(secs);
            std::fs::File::options()
                .write(true)
                .open(&path)
                .and_then(|f| f.set_modified(when))
                .expect("mtime");
        };
        touch("bad", 1_000);
        assert_eq!(
            file.reload().expect_err("refused").to_string(),
            "bad objects"
        );
        touch("better", 2_000);
        assert!(file.reload().expect("applied"));
        assert_eq!(*applied.lock().expect("lock"), ["better"]);
        std::fs::remove_file(&path).expect("remove");
        assert!(file
            .reload()
            .expect_err("gone")
            .to_string()
            .contains("objects.yaml"));
    }
}
