//! Availability series of APIServices and their endpoints, and how their streaming lists are
//! served.

use super::{Metrics, REASONS};

/// The modes of `apiagg_watch_list_streams_total`.
const WATCH_LIST_MODES: [&str; 2] = ["native", "emulated"];

impl Metrics {
    /// Drops every availability series of a deleted APIService.
    pub fn forget_apiservice<'a>(&self, name: &str, endpoints: impl IntoIterator<Item = &'a str>) {
        let _ = self.unavailable.remove_label_values(&[name]);
        for reason in REASONS {
            let _ = self.unavailable_total.remove_label_values(&[name, reason]);
        }
        for url in endpoints {
            self.forget_endpoint(name, url);
        }
        for mode in WATCH_LIST_MODES {
            let _ = self.watch_list_streams.remove_label_values(&[name, mode]);
        }
    }

    /// Counts a transition of `name` from available to not available, by the new condition's
    /// `reason`; a reason outside the closed set is counted as `UnknownReason`.
    pub fn unavailable_transition(&self, name: &str, reason: &str) {
        let reason = REASONS
            .into_iter()
            .find(|r| *r == reason)
            .unwrap_or("UnknownReason");
        self.unavailable_total
            .with_label_values(&[name, reason])
            .inc();
    }

    /// Counts a streaming list to `apiservice` served `mode` (`native` or `emulated`; other
    /// values are not recorded).
    pub fn watch_list_stream(&self, apiservice: &str, mode: &str) {
        if WATCH_LIST_MODES.contains(&mode) {
            self.watch_list_streams
                .with_label_values(&[apiservice, mode])
                .inc();
        }
    }

    /// Drops the series of an endpoint the APIService no longer has.
    pub fn forget_endpoint(&self, name: &str, url: &str) {
        let _ = self.endpoint_healthy.remove_label_values(&[name, url]);
    }
}

#[cfg(test)]
mod tests {
    use super::Metrics;

    fn count(metrics: &Metrics, name: &str, reason: &str) -> u64 {
        metrics
            .unavailable_total
            .get_metric_with_label_values(&[name, reason])
            .map(|c| c.get())
            .unwrap_or(0)
    }

    #[test]
    fn transitions_count_by_a_reason_of_the_closed_set_and_go_with_the_apiservice() {
        let metrics = Metrics::new().expect("metrics");
        let name = "v1.wardle.example.com";
        metrics.unavailable_transition(name, "ServicePortError");
        metrics.unavailable_transition(name, "FailedDiscoveryCheck");
        metrics.unavailable_transition(name, "SomethingNew");
        assert_eq!(count(&metrics, name, "ServicePortError"), 1);
        assert_eq!(count(&metrics, name, "FailedDiscoveryCheck"), 1);
        assert_eq!(count(&metrics, name, "UnknownReason"), 1);
        let text = String::from_utf8(metrics.render()).expect("utf-8");
        assert!(!text.contains("SomethingNew"), "{text}");
        // Every series of a deleted APIService goes, whatever its reason.
        metrics.forget_apiservice(name, []);
        let text = String::from_utf8(metrics.render()).expect("utf-8");
        assert!(!text.contains(name), "{text}");
    }
}
