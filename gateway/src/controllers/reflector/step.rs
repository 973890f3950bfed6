//! The reflector's decisions as one pure step, as kube-runtime's `watcher` step: the state (the
//! last resourceVersion, the backoff, the problem last reported) and what the loop saw → what
//! the loop does next. The loop in `mod.rs` only performs the I/O the step asks for.

use std::time::Duration;

use serde_json::Value;

use super::super::backoff::Backoff;
use super::Change;
use crate::backends::FetchError;

/// The first delay after a failure.
pub(super) const FIRST_DELAY: Duration = Duration::from_millis(200);
/// The longest delay after failures.
pub(super) const MAX_DELAY: Duration = Duration::from_secs(30);
/// A watch whose stream closes sooner than this after it opened is a failure (a delegate that
/// ends watches at once must not make the reflector a busy loop).
pub(super) const SHORTEST_WATCH: Duration = Duration::from_secs(1);

/// What the loop saw since the last step.
#[derive(Debug)]
pub(super) enum Seen<'a> {
    /// The loop starts, or a backoff delay has passed: read again.
    Ready,
    /// A full list was read (and handed to the follower) at this resourceVersion.
    Listed(String),
    /// One decoded event of the open watch at `path`.
    Event { path: &'a str, event: Value },
    /// The open watch at `path` ended (its stream closed or its deadline passed) `lasted` after
    /// it opened.
    Closed { path: &'a str, lasted: Duration },
    /// The open watch brought nothing, not even a bookmark, for too long (a lost connection).
    Silent,
    /// The server answered a watch with 410 Gone: the resourceVersion is too old.
    Gone,
    /// A request failed (connect, status, body, decode).
    Failed(FetchError),
}

/// What the loop does next.
#[derive(Debug, PartialEq)]
pub(super) enum Next {
    /// List the collection from the start (page by page), then report [`Seen::Listed`].
    List,
    /// Open a watch from this resourceVersion.
    Watch {
        /// The resourceVersion to watch from.
        from: String,
    },
    /// Hand this change to the follower, then read the open watch on.
    Apply(Change),
    /// Read the open watch on (a bookmark or an event that changes nothing).
    ReadOn,
    /// Close what is open, wait this long, then report [`Seen::Ready`].
    Backoff(Duration),
}

/// A change of the reflector's health, for the follower's logs (reported only when it changes).
#[derive(Debug, PartialEq)]
pub(super) enum Report {
    /// The reflector fails, with why (a new reason).
    Failing(String),
    /// The reflector reads again after a failure.
    Recovered,
}

/// The outcome of one step.
#[derive(Debug, PartialEq)]
pub(super) struct Step {
    /// What the loop does next.
    pub next: Next,
    /// A change of health to report first, if any.
    pub report: Option<Report>,
}

/// The reflector's state between steps.
#[derive(Debug)]
pub(super) struct Reflector {
    /// The resourceVersion of the last list, event or bookmark; `None` means "list again".
    version: Option<String>,
    backoff: Backoff,
    /// The problem last reported, until a success clears it.
    problem: Option<String>,
}

impl Default for Reflector {
    fn default() -> Self {
        Reflector {
            version: None,
            backoff: Backoff::new(FIRST_DELAY, MAX_DELAY),
            problem: None,
        }
    }
}

impl Reflector {
    /// The resourceVersion the next watch starts from (`None`: the next read is a list).
    #[cfg(test)]
    pub(super) fn version(&self) -> Option<&str> {
        self.version.as_deref()
    }

    /// Decides what follows `seen`.
    pub(super) fn step(&mut self, seen: Seen<'_>) -> Step {
        match seen {
            Seen::Ready => self.read(None),
            Seen::Listed(version) => {
                self.version = Some(version);
                self.succeeded()
            }
            Seen::Event { path, event } => self.event(path, event),
            Seen::Closed { path, lasted } if lasted < SHORTEST_WATCH => {
                self.failed(FetchError::Invalid {
                    url: path.to_string(),
                    message: "the watch ended at once".into(),
                })
            }
            // The watch's time was up (or it went silent): watch again from the last version.
            Seen::Closed { .. } | Seen::Silent => self.succeeded(),
            Seen::Gone => self.expired(),
            Seen::Failed(error) => self.failed(error),
        }
    }

    /// One event of the open watch: a change is applied, anything else (a bookmark) only
    /// advances the version; an `ERROR` ends the watch.
    fn event(&mut self, path: &str, mut event: Value) -> Step {
        let object = event["object"].take();
        let deleted = match event["type"].as_str().unwrap_or("") {
            "ERROR" if object["code"].as_u64() == Some(410) => return self.expired(),
            "ERROR" => {
                let message = object["message"].as_str().unwrap_or("watch error");
                return self.failed(FetchError::Invalid {
                    url: path.to_string(),
                    message: message.to_string(),
                });
            }
            "ADDED" | "MODIFIED" => false,
            "DELETED" => true,
            _ => {
                self.remember(&object);
                return Step {
                    next: Next::ReadOn,
                    report: None,
                };
            }
        };
        self.remember(&object);
        Step {
            next: Next::Apply(Change { object, deleted }),
            report: None,
        }
    }

    fn remember(&mut self, object: &Value) {
        if let Some(rv) = object["metadata"]["resourceVersion"].as_str() {
            self.version = Some(rv.to_string());
        }
    }

    /// A read succeeded: the backoff starts over, a reported problem is over, read on.
    fn succeeded(&mut self) -> Step {
        self.backoff.succeeded();
        let report = self.problem.take().map(|_| Report::Recovered);
        self.read(report)
    }

    /// The version is too old (410): list again at once; health is unchanged.
    fn expired(&mut self) -> Step {
        self.version = None;
        self.read(None)
    }

    /// A read failed: wait (longer each time), reporting the reason when it is new; the
    /// version stays, so the next read is the same one.
    fn failed(&mut self, error: FetchError) -> Step {
        let message = error.to_string();
        let report = if self.problem.as_deref() == Some(message.as_str()) {
            None
        } else {
            self.problem = Some(message.clone());
            Some(Report::Failing(message))
        };
        Step {
            next: Next::Backoff(self.backoff.failed()),
            report,
        }
    }

    /// The next read: a list without a version, else a watch from it.
    fn read(&self, report: Option<Report>) -> Step {
        let next = match &self.version {
            None => Next::List,
            Some(from) => Next::Watch { from: from.clone() },
        };
        Step { next, report }
    }
}
