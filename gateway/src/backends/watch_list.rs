//! What apiagg knows of a backend's streaming lists (KEP-3157, `sendInitialEvents=true`): a
//! backend that honours them ends the initial events with a BOOKMARK annotated
//! `k8s.io/initial-events-end`, and WatchList requests pass through to it unchanged; one that
//! ignores or refuses them gets apiagg's emulation (list, then watch). apiagg learns which by a
//! probe (see `request/watch_list`) and asks again after [`RELEARN`], so an upgraded or
//! downgraded backend is noticed. An endpoint set that changes starts unknown again. The
//! APIService's `apiagg.io/watch-list` annotation may set the mode instead (`native`,
//! `emulate`): then nothing is probed.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use apiagg_apis::{WatchListMode, WATCH_LIST_ANNOTATION};

/// How long a verdict holds before the next streaming list probes again.
pub const RELEARN: Duration = Duration::from_secs(600);

/// How one streaming list is served.
#[derive(Debug)]
pub enum Plan {
    /// Passed through: the backend honours streaming lists.
    Native,
    /// apiagg lists, sends the events and the BOOKMARK, then watches.
    Emulate,
    /// A probe is due (nothing is known, or the verdict is [`RELEARN`] old): this request
    /// probes and reports what it found; meanwhile other streaming lists follow the old
    /// verdict, or are emulated when there is none.
    Probe(Probing),
}

/// The one probe in flight; dropped without a verdict (the client went away), it leaves what
/// was known before.
#[derive(Debug)]
pub struct Probing(Option<Arc<WatchListSupport>>);

impl Probing {
    /// How to serve the request while the probe runs elsewhere: `None` when nothing is known
    /// yet (the request waits for the probe).
    pub fn meanwhile(&self) -> Option<Plan> {
        let learned = self.0.as_ref()?.lock();
        learned.as_ref().map(|(_, verdict)| verdict.plan())
    }

    /// Records the probe's verdict (`None`: it said nothing).
    pub fn finish(mut self, verdict: Option<Verdict>) {
        if let Some(support) = self.0.take() {
            support.learn(verdict, Instant::now());
        }
    }
}

impl Drop for Probing {
    fn drop(&mut self) {
        if let Some(support) = self.0.take() {
            support.learn(None, Instant::now());
        }
    }
}

/// What a probe found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// The annotated BOOKMARK came.
    Honours,
    /// The stream ended or went quiet without it.
    Ignores,
    /// The backend refused `sendInitialEvents` (its status code).
    Refuses(u16),
}

impl Verdict {
    /// How streaming lists are served after this verdict.
    fn plan(&self) -> Plan {
        match self {
            Verdict::Honours => Plan::Native,
            _ => Plan::Emulate,
        }
    }
}

/// One APIService's streaming-list support, shared by every request to it.
#[derive(Debug)]
pub struct WatchListSupport {
    /// The endpoint set it was learned for.
    fingerprint: u64,
    /// What the APIService's annotation sets (`Detect`: the probe decides).
    configured: WatchListMode,
    /// A probe is in flight.
    probing: AtomicBool,
    /// The verdict is to be asked again at the next streaming list.
    stale: AtomicBool,
    /// When and what was learned last (`None`: nothing yet).
    learned: Mutex<Option<(Instant, Verdict)>>,
}

impl WatchListSupport {
    /// Nothing known, for the endpoint set `fingerprint`, in the `configured` mode.
    pub fn new(fingerprint: u64, configured: WatchListMode) -> WatchListSupport {
        WatchListSupport {
            fingerprint,
            configured,
            probing: AtomicBool::new(false),
            stale: AtomicBool::new(false),
            learned: Mutex::new(None),
        }
    }

    /// Whether it describes the endpoint set `fingerprint` in the `configured` mode.
    pub fn describes(&self, fingerprint: u64, configured: WatchListMode) -> bool {
        self.fingerprint == fingerprint && self.configured == configured
    }

    /// How the next streaming list is served; at most one request probes at a time.
    pub fn plan(self: &Arc<Self>, now: Instant) -> Plan {
        match self.configured {
            WatchListMode::Native => return Plan::Native,
            WatchListMode::Emulate => return Plan::Emulate,
            WatchListMode::Detect => {}
        }
        let learned = self.lock();
        let due = self.stale.load(Ordering::Acquire)
            || learned
                .as_ref()
                .is_none_or(|(at, _)| now.duration_since(*at) >= RELEARN);
        if due
            && self
                .probing
                .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
        {
            return Plan::Probe(Probing(Some(self.clone())));
        }
        learned
            .as_ref()
            .map_or(Plan::Emulate, |(_, verdict)| verdict.plan())
    }

    /// Records a probe's verdict (`None`: it said nothing; what was known before stays).
    fn learn(&self, verdict: Option<Verdict>, now: Instant) {
        if let Some(verdict) = verdict {
            *self.lock() = Some((now, verdict));
            self.stale.store(false, Ordering::Release);
        }
        self.probing.store(false, Ordering::Release);
    }

    /// A streaming list passed through was refused (400 or 422) the way a backend without
    /// them refuses it: the next one probes again. The answer alone decides nothing: a client
    /// sends what options it likes, and must not switch an APIService's mode with them; the
    /// probe asks with options of apiagg's own.
    pub fn recheck(&self) {
        self.stale.store(true, Ordering::Release);
    }

    /// For `/debug/apiagg/status`: `mode` (`native`, `emulated`, `unknown`), and what was
    /// learned and how long ago.
    pub fn describe(&self, now: Instant) -> serde_json::Value {
        let set = |mode: &str| {
            let reason = format!("set by the {WATCH_LIST_ANNOTATION} annotation");
            serde_json::json!({ "mode": mode, "reason": reason })
        };
        match self.configured {
            WatchListMode::Native => return set("native"),
            WatchListMode::Emulate => return set("emulated"),
            WatchListMode::Detect => {}
        }
        let learned = self.lock();
        let Some((at, verdict)) = learned.as_ref() else {
            return serde_json::json!({ "mode": "unknown" });
        };
        let mode = match verdict {
            Verdict::Honours => "native",
            _ => "emulated",
        };
        let reason = match verdict {
            Verdict::Honours => {
                "the backend ends its initial events with the annotated BOOKMARK".to_string()
            }
            Verdict::Ignores => {
                "the backend ignores sendInitialEvents (no annotated BOOKMARK)".to_string()
            }
            Verdict::Refuses(code) => format!("the backend refuses sendInitialEvents ({code})"),
        };
        serde_json::json!({
            "mode": mode,
            "reason": reason,
            "learnedSecondsAgo": now.duration_since(*at).as_secs(),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<(Instant, Verdict)>> {
        self.learned.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(plan: &Plan) -> &'static str {
        match plan {
            Plan::Native => "native",
            Plan::Emulate => "emulate",
            Plan::Probe(_) => "probe",
        }
    }

    fn probe(support: &Arc<WatchListSupport>, now: Instant) -> Probing {
        match support.plan(now) {
            Plan::Probe(probing) => probing,
            other => panic!("expected a probe, got {other:?}"),
        }
    }

    #[test]
    fn one_request_probes_and_the_others_emulate_meanwhile() {
        let support = Arc::new(WatchListSupport::new(1, WatchListMode::Detect));
        let now = Instant::now();
        let probing = probe(&support, now);
        assert!(probing.meanwhile().is_none());
        assert_eq!(name(&support.plan(now)), "emulate");
        probing.finish(Some(Verdict::Honours));
        assert_eq!(name(&support.plan(now)), "native");
        assert_eq!(support.describe(now)["mode"], "native");
    }

    #[test]
    fn verdicts_are_asked_again_after_relearn() {
        let support = Arc::new(WatchListSupport::new(1, WatchListMode::Detect));
        let now = Instant::now();
        support.learn(Some(Verdict::Ignores), now);
        assert_eq!(name(&support.plan(now + RELEARN / 2)), "emulate");
        let later = now + RELEARN;
        let probing = probe(&support, later);
        assert_eq!(probing.meanwhile().as_ref().map(name), Some("emulate"));
        assert_eq!(name(&support.plan(later)), "emulate");
        // A probe that says nothing (its client went away) keeps the old verdict.
        drop(probing);
        assert_eq!(support.describe(later)["mode"], "emulated");
    }

    #[test]
    fn an_inconclusive_first_probe_leaves_it_unknown() {
        let support = Arc::new(WatchListSupport::new(1, WatchListMode::Detect));
        let now = Instant::now();
        probe(&support, now).finish(None);
        assert_eq!(support.describe(now)["mode"], "unknown");
        assert_eq!(name(&support.plan(now)), "probe");
    }

    #[test]
    fn the_annotation_decides_without_a_probe() {
        let now = Instant::now();
        for (mode, plan, shown) in [
            (WatchListMode::Native, "native", "native"),
            (WatchListMode::Emulate, "emulate", "emulated"),
        ] {
            let support = Arc::new(WatchListSupport::new(1, mode));
            assert_eq!(name(&support.plan(now)), plan);
            support.recheck();
            assert_eq!(name(&support.plan(now + RELEARN)), plan);
            let described = support.describe(now);
            assert_eq!(described["mode"], shown);
            assert!(described["reason"]
                .as_str()
                .is_some_and(|r| r.contains(WATCH_LIST_ANNOTATION)));
        }
    }

    #[test]
    fn a_refusal_seen_on_the_proxy_path_makes_the_next_request_probe_again() {
        let support = Arc::new(WatchListSupport::new(1, WatchListMode::Detect));
        let now = Instant::now();
        probe(&support, now).finish(Some(Verdict::Honours));
        support.recheck();
        // The request that probes keeps the old verdict meanwhile; only the probe decides.
        let probing = probe(&support, now);
        assert_eq!(probing.meanwhile().as_ref().map(name), Some("native"));
        probing.finish(Some(Verdict::Refuses(422)));
        assert_eq!(name(&support.plan(now)), "emulate");
        let described = support.describe(now);
        assert_eq!(described["mode"], "emulated");
        assert!(described["reason"]
            .as_str()
            .is_some_and(|r| r.contains("422")));
    }
}
