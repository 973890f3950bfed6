//! Endpoint health: the availability controller is its one writer (its probes, and the
//! failures the request path reports, as envoy's workers report outlier events to its main
//! thread); the request path reads a flag. Kept per endpoint identity so a config reload does not
//! forget what is known about a backend.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use arc_swap::ArcSwapOption;
use dashmap::DashMap;
use tokio::sync::futures::Notified;
use tokio::sync::{mpsc, Notify};

use super::slots::Slots;
use super::watch_list::WatchListSupport;
use apiagg_apis::WatchListMode;

/// Health of one backend endpoint.
pub struct EndpointHealth {
    healthy: AtomicBool,
    /// A probe has passed, or a probe or a request has failed, since the record was made: the
    /// health is no longer only the default.
    judged: AtomicBool,
    last_error: ArcSwapOption<String>,
    /// Probes failed in a row (reset by a success).
    failed_probes: AtomicU32,
    /// Requests in flight to this endpoint.
    pub slots: Arc<Slots>,
    /// Woken when the endpoint is ejected: requests still waiting for its answer may go
    /// elsewhere.
    ejected: Notify,
}

impl Default for EndpointHealth {
    fn default() -> Self {
        EndpointHealth {
            healthy: AtomicBool::new(true),
            judged: AtomicBool::new(false),
            last_error: ArcSwapOption::empty(),
            failed_probes: AtomicU32::new(0),
            slots: Arc::default(),
            ejected: Notify::new(),
        }
    }
}

impl EndpointHealth {
    /// Whether requests may go to this endpoint.
    pub fn is_healthy(&self) -> bool {
        self.healthy.load(Ordering::Acquire)
    }

    /// Whether the endpoint is healthy because a probe passed (not only by default, as a new
    /// endpoint is until its first probe).
    pub fn passed_probe(&self) -> bool {
        self.judged.load(Ordering::Acquire) && self.is_healthy()
    }

    /// Marks the endpoint healthy (a probe passed); returns whether that changed anything.
    pub fn mark_healthy(&self) -> bool {
        self.judged.store(true, Ordering::Release);
        self.failed_probes.store(0, Ordering::Relaxed);
        self.last_error.store(None);
        !self.healthy.swap(true, Ordering::AcqRel)
    }

    /// Marks the endpoint failed with `error`; returns whether it was healthy before.
    pub fn mark_failed(&self, error: String) -> bool {
        self.judged.store(true, Ordering::Release);
        self.last_error.store(Some(Arc::new(error)));
        let was_healthy = self.healthy.swap(false, Ordering::AcqRel);
        if was_healthy {
            self.ejected.notify_waiters();
        }
        was_healthy
    }

    /// Completes when the endpoint is ejected after this call (create it, then check
    /// [`Self::is_healthy`]: an ejection in between is not missed).
    pub fn ejected(&self) -> Notified<'_> {
        self.ejected.notified()
    }

    /// A probe failed: the endpoint is marked failed once `threshold` probes in a row have
    /// failed (one slow answer does not eject an endpoint that serves traffic fine); returns
    /// whether that changed it.
    pub fn probe_failed(&self, error: String, threshold: u32) -> bool {
        let in_a_row = self.failed_probes.fetch_add(1, Ordering::Relaxed) + 1;
        if in_a_row < threshold.max(1) {
            return false;
        }
        self.mark_failed(error)
    }

    /// Probes failed in a row (reset by a passing probe).
    pub fn failed_probes(&self) -> u32 {
        self.failed_probes.load(Ordering::Relaxed)
    }

    /// The last failure, if the endpoint is failed.
    pub fn last_error(&self) -> Option<Arc<String>> {
        self.last_error.load_full()
    }
}

/// Reported failures waiting for the availability controller at most; past it a report is
/// dropped (the controller is behind, and its next probe sees the failure).
const FAILURES: usize = 1024;

/// A failure a request saw on an endpoint, reported to the availability controller.
pub struct Failure {
    /// The endpoint's health.
    pub health: Arc<EndpointHealth>,
    /// The APIService or delegate label, for the log.
    pub backend: String,
    /// The endpoint's URL, for the log.
    pub url: String,
    /// What went wrong (the endpoint's `last_error`).
    pub message: String,
}

/// Every endpoint's health, keyed by the endpoint's connection identity (its pool key), and
/// every APIService's requests in flight, keyed by its name.
pub struct HealthBook {
    endpoints: DashMap<u64, Arc<EndpointHealth>>,
    apiservices: DashMap<String, Arc<Slots>>,
    /// Every APIService's streaming-list support, with the endpoint set it was learned for.
    watch_lists: DashMap<String, Arc<WatchListSupport>>,
    /// Failures seen on the proxy path, to the availability controller.
    failures: mpsc::Sender<Failure>,
    /// Their receiving end, until the availability controller takes it.
    reported: Mutex<Option<mpsc::Receiver<Failure>>>,
}

impl Default for HealthBook {
    fn default() -> Self {
        let (failures, reported) = mpsc::channel(FAILURES);
        HealthBook {
            endpoints: DashMap::new(),
            apiservices: DashMap::new(),
            watch_lists: DashMap::new(),
            failures,
            reported: Mutex::new(Some(reported)),
        }
    }
}

impl HealthBook {
    /// Reports a failure seen on the proxy path; the availability controller ejects the
    /// endpoint and publishes it without waiting for its next probe. Never waits.
    pub fn report(&self, failure: Failure) {
        let _ = self.failures.try_send(failure);
    }

    /// The reported failures, for the availability controller (the first caller only).
    pub fn take_reports(&self) -> Option<mpsc::Receiver<Failure>> {
        self.reported
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
    }

    /// The health record of an endpoint, created healthy on first sight.
    pub fn endpoint(&self, key: u64) -> Arc<EndpointHealth> {
        self.endpoints.entry(key).or_default().clone()
    }

    /// The in-flight count of an APIService's backend, created on first sight.
    pub fn apiservice_slots(&self, name: &str) -> Arc<Slots> {
        if let Some(slots) = self.apiservices.get(name) {
            return slots.clone();
        }
        self.apiservices
            .entry(name.to_string())
            .or_default()
            .clone()
    }

    /// What is known of an APIService's streaming lists for the endpoint set `fingerprint` in
    /// the `configured` mode; another endpoint set or mode starts unknown.
    pub fn watch_list(
        &self,
        name: &str,
        fingerprint: u64,
        configured: WatchListMode,
    ) -> Arc<WatchListSupport> {
        if let Some(known) = self.watch_lists.get(name) {
            if known.describes(fingerprint, configured) {
                return known.clone();
            }
        }
        let fresh = Arc::new(WatchListSupport::new(fingerprint, configured));
        self.watch_lists.insert(name.to_string(), fresh.clone());
        fresh
    }

    /// Forgets endpoints no longer in use: not in `live` (the keys of the routes just
    /// probed) and held by no route table (one built while they were probed may be published
    /// later: its endpoints keep what is known of them).
    pub fn retain(&self, live: &std::collections::HashSet<u64>) {
        self.endpoints
            .retain(|k, health| live.contains(k) || Arc::strong_count(health) > 1);
    }

    /// Forgets the counts of APIServices no longer routed (a count in use stays with the
    /// requests holding it).
    pub fn retain_apiservices(&self, live: &std::collections::HashSet<&str>) {
        self.apiservices.retain(|k, _| live.contains(k.as_str()));
        self.watch_lists.retain(|k, _| live.contains(k.as_str()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probes_must_fail_in_a_row_to_eject() {
        let health = EndpointHealth::default();
        assert!(!health.probe_failed("slow".into(), 3));
        assert!(!health.probe_failed("slow".into(), 3));
        assert!(!health.mark_healthy(), "still healthy: nothing to flip");
        assert!(!health.probe_failed("slow".into(), 3));
        assert!(!health.probe_failed("slow".into(), 3));
        assert!(health.is_healthy());
        assert!(
            health.probe_failed("slow".into(), 3),
            "the third in a row ejects"
        );
        assert!(!health.is_healthy());
        assert!(health.mark_healthy());
        assert!(
            health.mark_failed("refused".into()),
            "a passive failure ejects at once"
        );
    }

    #[test]
    fn a_new_endpoint_is_healthy_but_has_passed_no_probe() {
        let health = EndpointHealth::default();
        assert!(health.is_healthy() && !health.passed_probe());
        assert!(!health.probe_failed("slow".into(), 3));
        assert!(!health.passed_probe(), "a slow answer passes nothing");
        assert!(!health.mark_healthy());
        assert!(health.passed_probe());
        assert!(health.mark_failed("refused".into()));
        assert!(!health.passed_probe());
    }

    #[test]
    fn a_record_a_route_table_holds_is_kept_when_another_tables_keys_are_retained() {
        let book = HealthBook::default();
        let held = book.endpoint(1);
        drop(book.endpoint(2));
        held.mark_failed("refused".into());
        book.retain(&std::collections::HashSet::new());
        assert!(
            !book.endpoint(1).is_healthy(),
            "the held record and its failure stay"
        );
        drop(held);
        book.retain(&std::collections::HashSet::new());
        assert!(book.endpoint(1).is_healthy(), "no longer held: forgotten");
        assert!(book.endpoint(2).is_healthy());
    }

    #[tokio::test]
    async fn an_ejection_wakes_who_waits_from_before_it_only() {
        let health = EndpointHealth::default();
        let waiting = health.ejected();
        assert!(health.mark_failed("silent".into()));
        // Created before the ejection and polled after it: completes.
        tokio::time::timeout(std::time::Duration::from_secs(1), waiting)
            .await
            .expect("the ejection wakes a waiter registered before it");
        // Failing an endpoint already out is no new ejection.
        let late = health.ejected();
        assert!(!health.mark_failed("still silent".into()));
        let woken = tokio::time::timeout(std::time::Duration::from_millis(20), late).await;
        assert!(woken.is_err(), "no ejection happened after it was created");
    }
}
