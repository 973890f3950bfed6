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
