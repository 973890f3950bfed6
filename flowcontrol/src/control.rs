//! [`FlowControl`]: the configuration in force (an `ArcSwap` snapshot, one writer), the
//! request path's `admit`, the periodic seat borrowing and the debug dump.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use arc_swap::ArcSwap;
use http::HeaderValue;
use sha2::{Digest, Sha256};

use super::admission::{Admission, Binding, Decision, Rejection, Seat, Waiter};
use super::clock::Clock;
use super::config::{self, Mode, Report};
use super::error::{ConfigError, Error};
use super::estimate::{OpenWatches, WorkEstimate, WorkEstimator};
use super::level::{Level, Slow, Work};
use super::matcher::{Distinguisher, Request, RuleSet};
use super::metrics::Metrics;
use super::objects::Object;
use super::seats::{self, Demand};

/// Process-wide flow-control settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settings {
    /// The server's concurrency limit: `--max-requests-inflight` +
    /// `--max-mutating-requests-inflight` (upstream 400 + 200).
    pub total_seats: u32,
    /// How long a request may wait in a queue (upstream: a quarter of the 60 s request
    /// timeout, 15 s).
    pub request_wait_limit: Duration,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            total_seats: 600,
            request_wait_limit: Duration::from_secs(15),
        }
    }
}

/// API Priority and Fairness for the request path. `Send + Sync`; share it as an `Arc`.
pub struct FlowControl {
    settings: Settings,
    metrics: Metrics,
    pub(super) snapshot: ArcSwap<Snapshot>,
    writer: Mutex<Writer>,
    clock: Clock,
    estimator: WorkEstimator,
}

/// The configuration the request path reads.
pub(super) struct Snapshot {
    pub(super) schemas: Box<[Schema]>,
    /// Index of `catch-all` in `schemas` (for a request no schema matches).
    fallback: usize,
}

pub(super) struct Schema {
    rules: Box<[RuleSet]>,
    distinguisher: Distinguisher,
    pub(super) decision: Decision,
}

/// What only the writer (configure, maintenance) touches.
#[derive(Default)]
pub(super) struct Writer {
    pub(super) levels: BTreeMap<String, Managed>,
    /// Removed levels that may still hold seats or waiters.
    pub(super) retired: Vec<Weak<Level>>,
}

/// A configured level and its seat bookkeeping.
pub(super) struct Managed {
    pub(super) level: Arc<Level>,
    pub(super) nominal: u32,
    pub(super) lendable: u32,
    pub(super) borrowing: Option<u32>,
    pub(super) demand: Demand,
}

impl Snapshot {
    #[inline]
    fn classify(&self, request: &Request<'_>) -> &Schema {
        let matched = self
            .schemas
            .iter()
            .find(|s| s.rules.iter().any(|r| r.matches(request)));
        matched.unwrap_or(&self.schemas[self.fallback])
    }
}

impl FlowControl {
    /// Flow control with the built-in configuration, its metrics registered in `registry`.
    pub fn new(settings: Settings, registry: &prometheus::Registry) -> Result<FlowControl, Error> {
        FlowControl::with_clock(settings, registry, Clock::System)
    }

    pub(super) fn with_clock(
        settings: Settings,
        registry: &prometheus::Registry,
        clock: Clock,
    ) -> Result<FlowControl, Error> {
        if settings.total_seats == 0 {
            return Err(Error::NoSeats);
        }
        let estimator = WorkEstimator::new();
        let open_watches = OpenWatches::new(estimator.watches().clone())?;
        registry.register(Box::new(open_watches))?;
        let flow = FlowControl {
            settings,
            metrics: Metrics::new(registry)?,
            snapshot: ArcSwap::from_pointee(Snapshot {
                schemas: Box::default(),
                fallback: 0,
            }),
            writer: Mutex::new(Writer::default()),
            clock,
            estimator,
        };
        flow.configure(Vec::new())?;
        Ok(flow)
    }

    pub(super) fn writer(&self) -> MutexGuard<'_, Writer> {
        self.writer.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The work estimator: learns list sizes and open watches, estimates a request's seats.
    pub fn estimator(&self) -> &WorkEstimator {
        &self.estimator
    }

    /// Classifies a request and decides whether it runs now on one seat, waits or is
    /// rejected. No lock and no allocation unless it has to queue.
    #[inline]
    pub fn admit(&self, request: &Request<'_>) -> Admission {
        self.admit_estimated(request, &WorkEstimate::ONE)
    }

    /// [`FlowControl::admit`] for a request of the given work (see
    /// [`WorkEstimator::estimate`]). Its level first narrows it (at most 15% of its nominal
    /// limit and `nominal / handSize` seats per request for queuing levels; final seats beyond
    /// that, or beyond the current limit, last longer instead); the [`Seat`] then holds that
    /// many seats. A request wider than the whole limit runs when the level has no seat taken.
    /// No lock and no allocation when its seats are free and nobody waits.
    #[inline]
    pub fn admit_estimated(&self, request: &Request<'_>, estimate: &WorkEstimate) -> Admission {
        let snapshot = self.snapshot.load();
        let schema = snapshot.classify(request);
        let decision = schema.decision.clone();
        let level = decision.level();
        let series = decision.series();
        if level.exempt {
            series.estimated.observe(f64::from(estimate.max_seats()));
            series.dispatched.inc();
            return Admission::Exempt(decision);
        }
        let work = level.work(estimate);
        series.estimated.observe(f64::from(work.seats));
        if level.try_acquire(work.seats) {
            return Admission::Run(started(decision, work));
        }
        let flow = schema.distinguisher.of(request);
        self.admit_slow(decision, flow, work)
    }

    #[cold]
    fn admit_slow(&self, decision: Decision, flow: &str, work: Work) -> Admission {
        let level = decision.level().clone();
        let hash = || flow_hash(decision.flow_schema(), flow);
        match level.admit_slow(hash, &decision, work) {
            Slow::Run => Admission::Run(started(decision, work)),
            Slow::Wait {
                queue,
                id,
                arrived,
                grant,
            } => {
                let limit = self.settings.request_wait_limit;
                let waiter = Waiter::new(decision, (queue, id), arrived, limit, (grant, work));
                Admission::Wait(waiter)
            }
            Slow::Reject(reason) => {
                let series = decision.series();
                series.rejected(reason).inc();
                series.waited_in_vain.observe(0.0);
                let retry_after = level.rejected(reason);
                Admission::Rejected(Rejection {
                    reason: reason.as_str(),
                    decision,
                    retry_after,
                })
            }
        }
    }

    /// Replaces the configuration by `objects` plus the built-in objects (see
    /// [`config::effective`]). Levels that stay keep their seats and queues; removed levels
    /// serve what they hold and go; seats are always released to the level they came from.
    /// On error nothing changes.
    pub fn configure(&self, objects: Vec<Object>) -> Result<Report, ConfigError> {
        self.install(config::effective(objects)?)
    }

    /// [`Flow::configure`] with a cluster's objects: the suggested ones it lacks are not
    /// added (see [`config::from_cluster`]).
    pub fn configure_from_cluster(&self, objects: Vec<Object>) -> Result<Report, ConfigError> {
        self.install(config::from_cluster(objects)?)
    }

    /// Installs `compiled` (see [`Flow::configure`]).
    fn install(&self, compiled: config::Compiled) -> Result<Report, ConfigError> {
        let mut writer = self.writer();
        let shares: Vec<u32> = compiled.levels.iter().map(|l| l.shares).collect();
        let nominal = seats::nominal_limits(self.settings.total_seats, &shares);
        let mut old = std::mem::take(&mut writer.levels);
        let mut levels = Vec::with_capacity(compiled.levels.len());
        for (spec, nominal) in compiled.levels.iter().zip(nominal) {
            let exempt = spec.mode == Mode::Exempt;
            let kept = match old.remove(&spec.name) {
                Some(m) if m.level.exempt == exempt => Some((m.level, m.demand, Some(m.nominal))),
                Some(m) => {
                    if exempt {
                        // Limited → exempt: whoever waits may run now.
                        m.level.set_limit(u32::MAX);
                    }
                    retire(&mut writer.retired, &m.level);
                    None
                }
                None => None,
            };
            let (level, demand, was) = match kept {
                Some(kept) => kept,
                None => {
                    let gauges = self.metrics.level(&spec.name);
                    let clock = self.clock.clone();
                    let level = Arc::new(Level::new(&spec.name, exempt, gauges, clock));
                    (level, Demand::default(), None)
                }
            };
            level.configure(spec.mode, nominal);
            let lendable = seats::percent_of(nominal, spec.lendable_percent);
            let borrowing = spec
                .borrowing_limit_percent
                .map(|p| seats::percent_of(nominal, p));
            level.gauges.nominal.set(i64::from(nominal));
            if was != Some(nominal) {
                // Unchanged levels keep what borrowing gave them until the next adjustment.
                level.set_limit(nominal);
            }
            if exempt {
                level.gauges.current.set(i64::from(nominal - lendable));
            }
            writer.levels.insert(
                spec.name.clone(),
                Managed {
                    level: level.clone(),
                    nominal,
                    lendable,
                    borrowing,
                    demand,
                },
            );
            levels.push(level);
        }
        for (_, removed) in old {
            retire(&mut writer.retired, &removed.level);
        }
        writer.retired.retain(|w| w.strong_count() > 0);
        let mut schemas = Vec::with_capacity(compiled.schemas.len());
        let mut fallback = 0;
        for spec in compiled.schemas {
            let level_spec = &compiled.levels[spec.level];
            if spec.name == super::defaults::CATCH_ALL {
                fallback = schemas.len();
            }
            let binding = Binding {
                schema_header: header(&spec.uid),
                level_header: header(&level_spec.uid),
                series: self.metrics.series(&spec.name, &level_spec.name),
                schema: spec.name.into(),
                schema_uid: spec.uid.into(),
                level_uid: level_spec.uid.as_str().into(),
                level: levels[spec.level].clone(),
            };
            schemas.push(Schema {
                rules: spec.rules.into(),
                distinguisher: spec.distinguisher,
                decision: Decision::new(binding),
            });
        }
        self.snapshot.store(Arc::new(Snapshot {
            schemas: schemas.into(),
            fallback,
        }));
        Ok(compiled.report)
    }

    /// The current limit of level `name` (tests and diagnostics).
    #[cfg(test)]
    pub fn current_limit(&self, name: &str) -> Option<u32> {
        self.writer().levels.get(name).map(|m| m.level.limit())
    }

    /// The nominal limit of level `name`.
    #[cfg(test)]
    pub fn nominal_limit(&self, name: &str) -> Option<u32> {
        self.writer().levels.get(name).map(|m| m.nominal)
    }

    /// The level `name` (tests).
    #[cfg(test)]
    pub(super) fn level(&self, name: &str) -> Option<Arc<Level>> {
        self.writer().levels.get(name).map(|m| m.level.clone())
    }
}

/// Marks a level no longer configured; it serves what it holds.
fn retire(retired: &mut Vec<Weak<Level>>, level: &Arc<Level>) {
    level.quiescing.store(true, Relaxed);
    retired.push(Arc::downgrade(level));
}

/// Seats taken without waiting, counted.
#[inline]
fn started(decision: Decision, work: Work) -> Seat {
    let series = decision.series();
    series.started(work.seats);
    series.waited_and_ran.observe(0.0);
    Seat::new(decision, None, work)
}

/// Upstream's flow id hash: SHA-256 of `<schema> NUL <distinguisher>`, first 8 bytes little
/// endian (so the same flow lands in the same queues as in kube-apiserver).
pub fn flow_hash(schema: &str, distinguisher: &str) -> u64 {
    let mut hasher = Sha256::new();
    hasher.update(schema.as_bytes());
    hasher.update([0u8]);
    hasher.update(distinguisher.as_bytes());
    let digest = hasher.finalize();
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    u64::from_le_bytes(first)
}

/// A header value of a validated uid (printable ASCII).
fn header(uid: &str) -> HeaderValue {
    HeaderValue::from_str(uid).unwrap_or_else(|_| HeaderValue::from_static("invalid"))
}

#[cfg(test)]
impl FlowControl {
    /// The decision `admit` would take, without taking a seat.
    pub(super) fn classify(&self, request: &Request<'_>) -> Decision {
        self.snapshot.load().classify(request).decision.clone()
    }

    pub(super) fn reason_count(&self, schema: &str, reason: super::metrics::Reason) -> u64 {
        let snapshot = self.snapshot.load();
        let found = snapshot
            .schemas
            .iter()
            .find(|s| s.decision.flow_schema() == schema);
        found.map_or(0, |s| s.decision.series().rejected(reason).get())
    }
}
