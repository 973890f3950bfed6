//! The flow-control metrics, with upstream's names, labels and buckets. Label values are the
//! names of configured objects only (a closed set); every (schema, level) pair's series are
//! resolved once at configure time, so a request touches only atomics.

use prometheus::{
    Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts,
    Registry,
};

/// `apiserver_flowcontrol_request_wait_duration_seconds` buckets (upstream).
const WAIT_BUCKETS: [f64; 13] = [
    0.0, 0.005, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 15.0, 30.0,
];
/// `apiserver_flowcontrol_work_estimated_seats` buckets (upstream's, although lists may now
/// take up to 100 seats: the last bucket counts them all).
const SEATS_BUCKETS: [f64; 4] = [1.0, 2.0, 4.0, 10.0];
const PAIR: [&str; 2] = ["flow_schema", "priority_level"];

/// Why a request was not served (the `reason` label and [`super::Rejection::reason`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// The chosen queue was at `queueLengthLimit`.
    QueueFull,
    /// A `Reject` level was at its limit.
    ConcurrencyLimit,
    /// The request waited the whole request wait limit.
    TimeOut,
    /// The client went away while the request waited.
    Cancelled,
}

impl Reason {
    /// Every reason, in the order of [`Series::rejected`].
    pub const ALL: [Reason; 4] = [
        Reason::QueueFull,
        Reason::ConcurrencyLimit,
        Reason::TimeOut,
        Reason::Cancelled,
    ];

    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::QueueFull => "queue-full",
            Reason::ConcurrencyLimit => "concurrency-limit",
            Reason::TimeOut => "time-out",
            Reason::Cancelled => "cancelled",
        }
    }
}

/// The metric families.
pub struct Metrics {
    rejected: IntCounterVec,
    dispatched: IntCounterVec,
    inqueue: IntGaugeVec,
    inqueue_seats: IntGaugeVec,
    executing: IntGaugeVec,
    seats: IntGaugeVec,
    in_use: IntGaugeVec,
    wait: HistogramVec,
    estimated: HistogramVec,
    no_accommodation: IntCounterVec,
    nominal: IntGaugeVec,
    current: IntGaugeVec,
    utilization: HistogramVec,
}

/// The series of one (flow schema, priority level) pair.
#[derive(Clone)]
pub struct Series {
    /// `apiserver_flowcontrol_dispatched_requests_total`
    pub dispatched: IntCounter,
    /// `apiserver_flowcontrol_rejected_requests_total`, by [`Reason::ALL`].
    pub rejected: [IntCounter; 4],
    /// `apiserver_flowcontrol_current_inqueue_requests`
    pub inqueue: IntGauge,
    /// `apiserver_flowcontrol_current_inqueue_seats`
    pub inqueue_seats: IntGauge,
    /// `apiserver_flowcontrol_current_executing_requests` (requests in their execution phase)
    pub executing: IntGauge,
    /// `apiserver_flowcontrol_current_executing_seats` (seats taken, lingering ones included)
    pub seats: IntGauge,
    /// `apiserver_flowcontrol_request_concurrency_in_use` (deprecated upstream; the same value)
    pub in_use: IntGauge,
    /// `apiserver_flowcontrol_request_wait_duration_seconds{execute="true"}`
    pub waited_and_ran: Histogram,
    /// `apiserver_flowcontrol_request_wait_duration_seconds{execute="false"}`
    pub waited_in_vain: Histogram,
    /// `apiserver_flowcontrol_work_estimated_seats`
    pub estimated: Histogram,
    /// `apiserver_flowcontrol_request_dispatch_no_accommodation_total`
    pub no_accommodation: IntCounter,
}

impl Series {
    /// The rejection counter of `reason`.
    pub fn rejected(&self, reason: Reason) -> &IntCounter {
        &self.rejected[reason as usize]
    }

    /// A request asking for `seats` seats joined a queue.
    pub fn queued(&self, seats: u32) {
        self.inqueue.inc();
        self.inqueue_seats.add(i64::from(seats));
    }

    /// A request asking for `seats` seats left its queue.
    pub fn unqueued(&self, seats: u32) {
        self.inqueue.dec();
        self.inqueue_seats.sub(i64::from(seats));
    }

    /// A request started executing on `seats` seats.
    pub fn started(&self, seats: u32) {
        self.dispatched.inc();
        self.executing.inc();
        self.occupy(i64::from(seats));
    }

    /// `delta` seats were taken (or given back, when negative).
    pub fn occupy(&self, delta: i64) {
        self.seats.add(delta);
        self.in_use.add(delta);
    }
}

/// The series of one priority level.
#[derive(Clone)]
pub struct LevelGauges {
    /// `apiserver_flowcontrol_nominal_limit_seats`
    pub nominal: IntGauge,
    /// `apiserver_flowcontrol_current_limit_seats`
    pub current: IntGauge,
    /// `apiserver_flowcontrol_priority_level_seat_utilization{phase="executing"}`: the
    /// executing seats over the limit, sampled every 100 ms (each observation stands for the
    /// 100 ms around it; upstream weighs each value by the nanoseconds it held).
    pub utilization: Histogram,
}

/// Upstream's buckets of the seat utilization (k8s.io/apiserver's
/// `pkg/util/flowcontrol/metrics/metrics.go`).
const UTILIZATION_BUCKETS: [f64; 13] = [
    0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.99, 1.0,
];

fn register<C: prometheus::core::Collector + Clone + 'static>(
    registry: &Registry,
    collector: C,
) -> prometheus::Result<C> {
    registry.register(Box::new(collector.clone()))?;
    Ok(collector)
}

impl Metrics {
    /// Creates the families and registers them in `registry`.
    pub fn new(registry: &Registry) -> prometheus::Result<Metrics> {
        let counter = |name: &str, help: &str, labels: &[&str]| {
            register(registry, IntCounterVec::new(Opts::new(name, help), labels)?)
        };
        let gauge = |name: &str, help: &str, labels: &[&str]| {
            register(registry, IntGaugeVec::new(Opts::new(name, help), labels)?)
        };
        let wait = HistogramVec::new(
            HistogramOpts::new(
                "apiserver_flowcontrol_request_wait_duration_seconds",
                "Length of time a request spent waiting in its queue",
            )
            .buckets(WAIT_BUCKETS.to_vec()),
            &["flow_schema", "priority_level", "execute"],
        )?;
        let utilization = HistogramVec::new(
            HistogramOpts::new(
                "apiserver_flowcontrol_priority_level_seat_utilization",
                "Observations, at the end of every nanosecond, of utilization of seats for any stage of execution (but only initial stage for WATCHes)",
            )
            .const_label("phase", "executing")
            .buckets(UTILIZATION_BUCKETS.to_vec()),
            &["priority_level"],
        )?;
        let estimated = HistogramVec::new(
            HistogramOpts::new(
                "apiserver_flowcontrol_work_estimated_seats",
                "Number of estimated seats (maximum of initial and final seats) associated with requests in API Priority and Fairness",
            )
            .buckets(SEATS_BUCKETS.to_vec()),
            &PAIR,
        )?;
        Ok(Metrics {
            rejected: counter(
                "apiserver_flowcontrol_rejected_requests_total",
                "Number of requests rejected by API Priority and Fairness subsystem",
                &["flow_schema", "priority_level", "reason"],
            )?,
            dispatched: counter(
                "apiserver_flowcontrol_dispatched_requests_total",
                "Number of requests executed by API Priority and Fairness subsystem",
                &PAIR,
            )?,
            inqueue: gauge(
                "apiserver_flowcontrol_current_inqueue_requests",
                "Number of requests currently pending in queues of the API Priority and Fairness subsystem",
                &PAIR,
            )?,
            inqueue_seats: gauge(
                "apiserver_flowcontrol_current_inqueue_seats",
                "Number of seats currently pending in queues of the API Priority and Fairness subsystem",
                &PAIR,
            )?,
            executing: gauge(
                "apiserver_flowcontrol_current_executing_requests",
                "Number of requests in initial (for a WATCH) or any (for a non-WATCH) execution stage in the API Priority and Fairness subsystem",
                &PAIR,
            )?,
            seats: gauge(
                "apiserver_flowcontrol_current_executing_seats",
                "Concurrency (number of seats) occupied by the currently executing (initial stage for a WATCH, any stage otherwise) requests in the API Priority and Fairness subsystem",
                &PAIR,
            )?,
            in_use: gauge(
                "apiserver_flowcontrol_request_concurrency_in_use",
                "Concurrency (number of seats) occupied by the currently executing (initial stage for a WATCH, any stage otherwise) requests in the API Priority and Fairness subsystem",
                &PAIR,
            )?,
            wait: register(registry, wait)?,
            estimated: register(registry, estimated)?,
            no_accommodation: counter(
                "apiserver_flowcontrol_request_dispatch_no_accommodation_total",
                "Number of times a dispatch attempt resulted in a non accommodation due to lack of available seats",
                &PAIR,
            )?,
            nominal: gauge(
                "apiserver_flowcontrol_nominal_limit_seats",
                "Nominal number of execution seats configured for each priority level",
                &["priority_level"],
            )?,
            current: gauge(
                "apiserver_flowcontrol_current_limit_seats",
                "current derived number of execution seats available to each priority level",
                &["priority_level"],
            )?,
            utilization: register(registry, utilization)?,
        })
    }

    /// The series of (`schema`, `level`).
    pub fn series(&self, schema: &str, level: &str) -> Series {
        let pair = [schema, level];
        let reason = |r: Reason| {
            self.rejected
                .with_label_values(&[schema, level, r.as_str()])
        };
        Series {
            dispatched: self.dispatched.with_label_values(&pair),
            rejected: Reason::ALL.map(reason),
            inqueue: self.inqueue.with_label_values(&pair),
            inqueue_seats: self.inqueue_seats.with_label_values(&pair),
            executing: self.executing.with_label_values(&pair),
            seats: self.seats.with_label_values(&pair),
            in_use: self.in_use.with_label_values(&pair),
            waited_and_ran: self.wait.with_label_values(&[schema, level, "true"]),
            waited_in_vain: self.wait.with_label_values(&[schema, level, "false"]),
            estimated: self.estimated.with_label_values(&pair),
            no_accommodation: self.no_accommodation.with_label_values(&pair),
        }
    }

    /// The series of `level`.
    pub fn level(&self, level: &str) -> LevelGauges {
        LevelGauges {
            nominal: self.nominal.with_label_values(&[level]),
            current: self.current.with_label_values(&[level]),
            utilization: self.utilization.with_label_values(&[level]),
        }
    }
}
