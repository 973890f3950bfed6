//! `apiserver_watch_events_total` and `apiserver_watch_events_sizes` (k8s.io/apiserver's
//! `pkg/endpoints/metrics/metrics.go`, observed per event in `pkg/endpoints/handlers/watch.go`:
//! the bytes the event takes on the wire before compression), labelled `group`, `version`,
//! `resource`. apiagg observes the events it writes itself, the APIService API's watches; a
//! proxied watch is bytes it relays, not events it reads, and the backend counts those.

use prometheus::{Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, Opts};
use prometheus::{Registry, Result};

/// Upstream's buckets: 1 KiB doubling eight times (1 KiB … 128 KiB).
const BUCKETS: [f64; 8] = [
    1024.0, 2048.0, 4096.0, 8192.0, 16384.0, 32768.0, 65536.0, 131072.0,
];
const LABELS: [&str; 3] = ["group", "version", "resource"];

/// The two metrics.
pub struct WatchEvents {
    total: IntCounterVec,
    sizes: HistogramVec,
}

/// One resource's series, resolved once per watch.
#[derive(Clone)]
pub struct WatchEventSeries {
    count: IntCounter,
    size: Histogram,
}

impl WatchEventSeries {
    /// One event of `bytes` bytes was sent.
    pub fn observe(&self, bytes: usize) {
        self.count.inc();
        self.size.observe(bytes as f64);
    }
}

impl WatchEvents {
    /// Creates and registers both metrics in `r`.
    pub fn register(r: &Registry) -> Result<WatchEvents> {
        let total = IntCounterVec::new(
            Opts::new(
                "apiserver_watch_events_total",
                "Number of events sent in watch clients",
            ),
            &LABELS,
        )?;
        let sizes = HistogramVec::new(
            HistogramOpts::new(
                "apiserver_watch_events_sizes",
                "Watch event size distribution in bytes",
            )
            .buckets(BUCKETS.to_vec()),
            &LABELS,
        )?;
        r.register(Box::new(total.clone()))?;
        r.register(Box::new(sizes.clone()))?;
        Ok(WatchEvents { total, sizes })
    }

    /// The series of a resource's watch events (the labels come from what apiagg serves: the
    /// APIService API's, or a routed group-version's resource the backend listed).
    pub fn series(&self, group: &str, version: &str, resource: &str) -> WatchEventSeries {
        let labels = [group, version, resource];
        WatchEventSeries {
            count: self.total.with_label_values(&labels),
            size: self.sizes.with_label_values(&labels),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_are_counted_and_sized_per_resource() {
        let r = Registry::new();
        let events = WatchEvents::register(&r).expect("register");
        let series = events.series("apiregistration.k8s.io", "v1", "apiservices");
        series.observe(900);
        series.observe(3000);
        let mut out = Vec::new();
        prometheus::Encoder::encode(&prometheus::TextEncoder::new(), &r.gather(), &mut out)
            .expect("encode");
        let text = String::from_utf8(out).expect("utf-8");
        let labels = r#"group="apiregistration.k8s.io",resource="apiservices",version="v1""#;
        assert!(
            text.contains(&format!("apiserver_watch_events_total{{{labels}}} 2")),
            "{text}"
        );
        let bucket = |le: &str, n: u32| {
            format!("apiserver_watch_events_sizes_bucket{{{labels},le=\"{le}\"}} {n}")
        };
        assert!(text.contains(&bucket("1024", 1)), "{text}");
        assert!(text.contains(&bucket("4096", 2)), "{text}");
        assert!(text.contains(&bucket("131072", 2)), "{text}");
    }
}
