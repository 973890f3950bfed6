//! Where events go: one bounded queue per backend. Emitting never waits: a full queue drops the
//! event and counts it (as upstream's buffered backend does). Each backend's writer runs on a
//! thread of its own with a small tokio runtime, so a slow disk or a dead webhook never takes a
//! request worker's time. Also the audit metrics, with kube-apiserver's names.

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use prometheus::{IntCounter, IntCounterVec, Opts, Registry};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;

use super::event::Event;
use super::policy::Level;
use super::AuditError;

/// Audit metrics.
#[derive(Clone)]
pub(super) struct AuditMetrics {
    /// `apiserver_audit_event_total`: events generated and sent to the backends.
    pub events: IntCounter,
    /// `apiserver_audit_error_total{plugin}`: events that failed to be audited.
    pub errors: IntCounterVec,
    /// `apiserver_audit_level_total{level}`: policy levels, one per request.
    levels: [IntCounter; 4],
    /// `apiagg_audit_events_dropped_total{backend,reason}`.
    pub dropped: IntCounterVec,
}

impl AuditMetrics {
    pub fn register(registry: &Registry) -> Result<AuditMetrics, AuditError> {
        let events = IntCounter::new(
            "apiserver_audit_event_total",
            "Counter of audit events generated and sent to the audit backend.",
        )?;
        registry.register(Box::new(events.clone()))?;
        let vec = |name: &str, help: &str, labels: &[&str]| -> Result<_, AuditError> {
            let counter = IntCounterVec::new(Opts::new(name, help), labels)?;
            registry.register(Box::new(counter.clone()))?;
            Ok(counter)
        };
        let errors = vec(
            "apiserver_audit_error_total",
            "Counter of audit events that failed to be audited properly. Plugin identifies the plugin affected by the error.",
            &["plugin"],
        )?;
        let level = vec(
            "apiserver_audit_level_total",
            "Counter of policy levels for audit events (1 per request).",
            &["level"],
        )?;
        let dropped = vec(
            "apiagg_audit_events_dropped_total",
            "Audit events not written by a backend, by reason (queue_full, shutdown, send_failed, write_failed).",
            &["backend", "reason"],
        )?;
        let levels = Level::ALL.map(|l| level.with_label_values(&[l.as_str()]));
        Ok(AuditMetrics {
            events,
            errors,
            levels,
            dropped,
        })
    }

    /// The counter of requests at `level`.
    pub fn level(&self, level: Level) -> &IntCounter {
        &self.levels[level as usize]
    }

    /// Counts `n` events a backend could not write: `apiserver_audit_error_total{plugin}` and
    /// `apiagg_audit_events_dropped_total{backend,reason}`.
    pub fn failed(&self, plugin: &str, backend: &str, reason: &str, n: u64) {
        self.errors.with_label_values(&[plugin]).inc_by(n);
        self.dropped.with_label_values(&[backend, reason]).inc_by(n);
    }
}

/// The sending end of one backend's queue.
struct Queue {
    tx: mpsc::Sender<Arc<Event>>,
    /// `error_total{plugin="buffered"}`, resolved.
    buffered_errors: IntCounter,
    /// `dropped{backend,reason="queue_full"}`, resolved.
    full: IntCounter,
    /// `dropped{backend,reason="shutdown"}`, resolved.
    closed: IntCounter,
}

/// The backends' queues, shared by every [`RequestAudit`](super::RequestAudit).
pub(super) struct Sink {
    queues: Vec<Queue>,
    pub metrics: AuditMetrics,
    /// Captured bodies are kept up to this many bytes.
    pub body_limit: usize,
    /// Bytes of bodies that events waiting for (or being written by) the backends may hold.
    pub budget: Arc<Budget>,
}

impl Sink {
    pub fn new(metrics: AuditMetrics, body_limit: usize, body_budget: usize) -> Sink {
        Sink {
            queues: Vec::new(),
            metrics,
            body_limit,
            budget: Budget::new(body_budget),
        }
    }

    /// Adds a backend named `name` (`log`, `webhook`) with a queue of `capacity` events; the
    /// receiving end goes to its writer.
    pub fn add_queue(&mut self, name: &str, capacity: usize) -> mpsc::Receiver<Arc<Event>> {
        let (tx, rx) = mpsc::channel(capacity.max(1));
        let dropped = |reason| self.metrics.dropped.with_label_values(&[name, reason]);
        self.queues.push(Queue {
            tx,
            buffered_errors: self.metrics.errors.with_label_values(&["buffered"]),
            full: dropped("queue_full"),
            closed: dropped("shutdown"),
        });
        rx
    }

    /// Hands `event` to every backend without waiting.
    pub fn emit(&self, event: Event) {
        self.metrics.events.inc();
        let event = Arc::new(event);
        for queue in &self.queues {
            match queue.tx.try_send(event.clone()) {
                Ok(()) => {}
                Err(mpsc::error::TrySendError::Full(_)) => {
                    queue.buffered_errors.inc();
                    queue.full.inc();
                }
                Err(mpsc::error::TrySendError::Closed(_)) => {
                    queue.buffered_errors.inc();
                    queue.closed.inc();
                }
            }
        }
    }
}

/// A bound on the memory captured bodies hold while their events are queued: a full queue of
/// large bodies could otherwise hold `buffer_size` × 2 × `body_limit` bytes.
pub(super) struct Budget {
    left: AtomicUsize,
}

impl Budget {
    /// A budget of `bytes`.
    pub fn new(bytes: usize) -> Arc<Budget> {
        Arc::new(Budget {
            left: AtomicUsize::new(bytes),
        })
    }

    /// Takes `n` bytes from the budget until the reservation is dropped; `None` when fewer are
    /// left.
    pub fn reserve(self: &Arc<Self>, n: usize) -> Option<Reservation> {
        self.left
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |left| {
                left.checked_sub(n)
            })
            .ok()?;
        Some(Reservation {
            budget: self.clone(),
            n,
        })
    }
}

/// Bytes taken from a [`Budget`], given back when dropped.
pub(super) struct Reservation {
    budget: Arc<Budget>,
    n: usize,
}

impl Drop for Reservation {
    fn drop(&mut self) {
        self.budget.left.fetch_add(self.n, Ordering::AcqRel);
    }
}

/// What a writer is told at shutdown: write everything queued, giving up at the deadline.
pub(super) type Stop = watch::Receiver<Option<Instant>>;

/// A running writer: how to stop it and learn that it is done.
pub(super) struct Writer {
    name: &'static str,
    stop: watch::Sender<Option<Instant>>,
    done: oneshot::Receiver<()>,
}

/// Runs `work` on a new thread named `apiagg-audit-<name>` with a current-thread runtime of
/// its own. `work` gets the stop signal; it must return once it has written what was queued.
pub(super) fn spawn_writer<F, Fut>(name: &'static str, work: F) -> Result<Writer, AuditError>
where
    F: FnOnce(Stop) -> Fut + Send + 'static,
    Fut: Future<Output = ()> + 'static,
{
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(AuditError::Thread)?;
    let (stop, stopped) = watch::channel(None);
    let (finished, done) = oneshot::channel();
    std::thread::Builder::new()
        .name(format!("apiagg-audit-{name}"))
        .spawn(move || {
            runtime.block_on(work(stopped));
            let _ = finished.send(());
        })
        .map_err(AuditError::Thread)?;
    Ok(Writer { name, stop, done })
}

/// The writers of an auditor, taken once by shutdown.
#[derive(Default)]
pub(super) struct Writers(Mutex<Vec<Writer>>);

impl Writers {
    pub fn push(&self, writer: Writer) {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(writer);
    }

    /// Tells every writer to write what is queued within `timeout`, and waits for them (at most
    /// `timeout`). Writers not done by then are left behind (their events are counted as dropped
    /// once they give up).
    pub async fn shutdown(&self, timeout: Duration) {
        let writers = std::mem::take(&mut *self.0.lock().unwrap_or_else(|e| e.into_inner()));
        let deadline = Instant::now() + timeout;
        for writer in &writers {
            let _ = writer.stop.send(Some(deadline));
        }
        for writer in writers {
            if tokio::time::timeout_at(deadline, writer.done)
                .await
                .is_err()
            {
                tracing::warn!(
                    backend = writer.name,
                    ?timeout,
                    "audit backend did not finish writing queued events in time"
                );
            }
        }
    }
}

/// How often a writer looks for queued events. Waiting on the queue instead would make every
/// event wake the writer's thread from the request path (about a thousand instructions per
/// event there, measured); looking every 10 ms costs nothing per request and 100 wake-ups a
/// second in all.
const POLL: Duration = Duration::from_millis(10);

/// A writer's clock for [`next_event`].
pub(super) fn poll_clock() -> tokio::time::Interval {
    let mut clock = tokio::time::interval(POLL);
    clock.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    clock
}

/// The next queued event, looking every [`POLL`]; `None` once every sender is gone. Safe to
/// cancel (in `select!`): no event is taken until it is returned.
pub(super) async fn next_event(
    events: &mut mpsc::Receiver<Arc<Event>>,
    clock: &mut tokio::time::Interval,
) -> Option<Arc<Event>> {
    loop {
        match events.try_recv() {
            Ok(event) => return Some(event),
            Err(mpsc::error::TryRecvError::Disconnected) => return None,
            Err(mpsc::error::TryRecvError::Empty) => {
                clock.tick().await;
            }
        }
    }
}

/// Resolves when the stop signal is given (or its sender is gone); returns the deadline.
pub(super) async fn stopped(stop: &mut Stop) -> Instant {
    loop {
        if let Some(deadline) = *stop.borrow_and_update() {
            return deadline;
        }
        if stop.changed().await.is_err() {
            return Instant::now();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reservations_are_bounded_and_given_back() {
        let budget = Budget::new(10);
        let six = budget.reserve(6).expect("fits");
        assert!(budget.reserve(5).is_none());
        let four = budget.reserve(4).expect("fits");
        assert!(budget.reserve(1).is_none());
        drop(six);
        assert!(budget.reserve(6).is_some());
        drop(four);
        assert!(budget.reserve(10).is_some());
    }
}
