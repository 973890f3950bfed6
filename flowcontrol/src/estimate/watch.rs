//! The open watches by (group, resource, namespace) (upstream `watchTracker`): a write is
//! deemed to interest the watches of its resource across all namespaces plus those of its
//! namespace.

use std::collections::BTreeMap;
use std::sync::Arc;

use prometheus::core::{Collector, Desc, Describer};
use prometheus::proto::MetricFamily;
use prometheus::{IntGaugeVec, Opts};

use super::table::{Key, Table};
use super::{RequestKind, RequestShape};

/// Open watches per (group, resource, namespace), bounded. `Send + Sync`.
///
/// Upstream also counts watches of one object by name (for writes of that object only);
/// apiagg does not count them (they add little to any write, and one key per watched object
/// would crowd the table). When more keys than [`WatchCounts::MAX_KEYS`] have open watches,
/// the key with the fewest is forgotten; its later closes are then ignored.
#[derive(Clone)]
pub struct WatchCounts {
    table: Arc<Table<u64>>,
}

/// An open watch, counted until dropped (drop it when the watch ends).
#[must_use = "the watch is counted until the guard is dropped"]
pub struct WatchGuard {
    counted: Option<Counted>,
}

/// What a guard decrements: the table and the key's names, concatenated (one allocation),
/// with the lengths of the group and the resource.
struct Counted {
    table: Arc<Table<u64>>,
    names: Box<str>,
    group: usize,
    resource: usize,
}

impl std::fmt::Debug for WatchGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WatchGuard")
            .field("counted", &self.counted.is_some())
            .finish()
    }
}

impl Default for WatchCounts {
    fn default() -> Self {
        WatchCounts::new()
    }
}

impl WatchCounts {
    /// Most (group, resource, namespace) keys with open watches counted.
    pub const MAX_KEYS: usize = 16_384;

    /// No watches.
    pub fn new() -> WatchCounts {
        WatchCounts {
            table: Arc::new(Table::new(Self::MAX_KEYS)),
        }
    }

    /// Counts a watch of `shape` (a watch of a collection; others are not counted) until the
    /// returned guard is dropped. Allocates the key's names once per watch.
    pub fn opened(&self, shape: &RequestShape<'_>) -> WatchGuard {
        if shape.kind != RequestKind::Watch || shape.single || shape.resource.is_empty() {
            return WatchGuard { counted: None };
        }
        let key = Key::new(shape.group, shape.resource, shape.namespace);
        self.table
            .update(&key, |n| Some(n.unwrap_or(0).saturating_add(1)), |n| *n);
        let names = [shape.group, shape.resource, shape.namespace].concat();
        WatchGuard {
            counted: Some(Counted {
                table: self.table.clone(),
                names: names.into(),
                group: shape.group.len(),
                resource: shape.resource.len(),
            }),
        }
    }

    /// The open watches a write of `shape` interests: those of its resource in every
    /// namespace, plus those of its namespace.
    pub fn interested(&self, shape: &RequestShape<'_>) -> u64 {
        let all = self.count(shape.group, shape.resource, "");
        if shape.namespace.is_empty() {
            return all;
        }
        all.saturating_add(self.count(shape.group, shape.resource, shape.namespace))
    }

    /// Open watches of exactly (group, resource, namespace); `""` is the cluster-wide ones.
    pub fn count(&self, group: &str, resource: &str, namespace: &str) -> u64 {
        self.table
            .get(&Key::new(group, resource, namespace))
            .unwrap_or(0)
    }

    /// Open watches summed per (group, resource), every namespace together.
    fn by_resource(&self) -> BTreeMap<(String, String), u64> {
        let mut out: BTreeMap<(String, String), u64> = BTreeMap::new();
        self.table.for_each(|group, resource, _, n| {
            if n > 0 {
                *out.entry((group.to_string(), resource.to_string()))
                    .or_default() += n;
            }
        });
        out
    }

    /// Keys held (tests).
    #[cfg(test)]
    pub(crate) fn keys(&self) -> usize {
        self.table.len()
    }
}

impl Drop for WatchGuard {
    fn drop(&mut self) {
        if let Some(Counted {
            table,
            names,
            group,
            resource,
        }) = self.counted.take()
        {
            let (group, rest) = names.split_at(group);
            let (resource, namespace) = rest.split_at(resource);
            let key = Key::new(group, resource, namespace);
            // The last close removes the key; a key forgotten meanwhile stays forgotten.
            table.update(
                &key,
                |n| n.and_then(|n| n.checked_sub(1)).filter(|&n| n > 0),
                |n| *n,
            );
        }
    }
}

/// `apiagg_open_watches{group,resource}`, read from the counts when scraped (nothing on the
/// request path). Its series are bounded by the table's keys.
pub(crate) struct OpenWatches {
    counts: WatchCounts,
    opts: Opts,
    desc: Desc,
}

impl OpenWatches {
    /// The collector of `counts`.
    pub(crate) fn new(counts: WatchCounts) -> prometheus::Result<OpenWatches> {
        let opts = Opts::new(
            "apiagg_open_watches",
            "Watches open through apiagg and admitted by flow control, by group and resource \
             (every namespace together).",
        )
        .variable_labels(vec!["group".into(), "resource".into()]);
        let desc = opts.describe()?;
        Ok(OpenWatches { counts, opts, desc })
    }
}

impl Collector for OpenWatches {
    fn desc(&self) -> Vec<&Desc> {
        vec![&self.desc]
    }

    fn collect(&self) -> Vec<MetricFamily> {
        let Ok(gauges) = IntGaugeVec::new(self.opts.clone(), &["group", "resource"]) else {
            return Vec::new();
        };
        for ((group, resource), n) in self.counts.by_resource() {
            let n = i64::try_from(n).unwrap_or(i64::MAX);
            gauges.with_label_values(&[&group, &resource]).set(n);
        }
        gauges.collect()
    }
}
