//! The discovery controller's pure steps: what a round reads, and what it merges. No socket.

use std::collections::HashMap;
use std::sync::Arc;

use apiagg_discovery::{
    APIGroupDiscovery, APIGroupDiscoveryList, APIVersionDiscovery, Freshness, GroupMeta,
    GroupVersionEntry, Priority, Source,
};

use super::plan::{entries, plan, GvState};
use crate::backends::fixtures::{table, CONFIG};

#[test]
fn a_round_reads_every_service_once_and_the_delegates_named_group_versions() {
    let routes = table(CONFIG, &[("", "v1"), ("apps", "v1"), ("batch", "v1")]);
    let plan = plan(&routes);
    let labels: Vec<String> = plan.services.iter().map(|t| t.label()).collect();
    assert_eq!(
        labels,
        ["test/wardle:443", "test/flunder:443", "test/nowhere:443"]
    );
    let delegate = plan.delegate.expect("a delegate");
    let same = routes.delegate.as_ref();
    assert!(same.is_some_and(|d| Arc::ptr_eq(d, &delegate.upstream)));
    // The core group is not under /apis: never read as a group there.
    let legacy: Vec<(&str, &str)> = delegate
        .legacy
        .iter()
        .map(|(g, v)| (g.as_str(), v.as_str()))
        .collect();
    assert_eq!(legacy, [("apps", "v1"), ("batch", "v1")]);

    let (_, without) = CONFIG.split_once('\n').expect("two lines");
    let plan = super::plan::plan(&table(without, &[]));
    assert!(plan.delegate.is_none());
    assert_eq!(plan.services.len(), 3);
}

fn group(name: &str, versions: &[&str]) -> APIGroupDiscovery {
    APIGroupDiscovery {
        metadata: GroupMeta::named(name),
        versions: versions
            .iter()
            .map(|v| APIVersionDiscovery::empty(v))
            .collect(),
        ..Default::default()
    }
}

fn find<'a>(entries: &'a [GroupVersionEntry], group: &str, version: &str) -> &'a GroupVersionEntry {
    entries
        .iter()
        .find(|e| e.group == group && e.discovery.version == version)
        .unwrap_or_else(|| panic!("{group}/{version} is not merged"))
}

#[test]
fn the_merge_takes_the_delegates_groups_apiaggs_own_and_every_remote_apiservice() {
    let routes = table(CONFIG, &[("apps", "v1")]);
    let local = APIGroupDiscoveryList::v2(vec![
        group("apps", &["v1"]),
        group("apiregistration.k8s.io", &["v1"]),
        group("unlisted.example.com", &["v1"]),
    ]);
    let wardle = Arc::new(APIVersionDiscovery::empty("v1"));
    let flunder = Arc::new(APIVersionDiscovery::empty("v1"));
    let gvs = HashMap::from([
        (
            "v1.wardle.example.com".to_string(),
            GvState {
                cached: Some(Arc::clone(&wardle)),
                ok: true,
            },
        ),
        (
            "v1.flunder.example.com".to_string(),
            GvState {
                cached: Some(Arc::clone(&flunder)),
                ok: false,
            },
        ),
    ]);
    let merged = entries(&routes.registry, Some(&local), &gvs);
    // The delegate's group-versions with the registry's priorities, or 1000/100 unlisted.
    let apps = find(&merged, "apps", "v1");
    assert_eq!(
        (apps.source, apps.priority),
        (
            Source::Local,
            Priority {
                group: 17800,
                version: 15
            }
        )
    );
    let unlisted = find(&merged, "unlisted.example.com", "v1");
    assert_eq!(
        unlisted.priority,
        Priority {
            group: 1000,
            version: 100
        }
    );
    // apiregistration.k8s.io is apiagg's own, once.
    let own = crate::apiservices::discovery_entry().expect("apiagg's entry");
    let registration: Vec<&GroupVersionEntry> = merged
        .iter()
        .filter(|e| e.group == "apiregistration.k8s.io")
        .collect();
    assert_eq!(registration, [&own]);
    // Remote ones: current from the latest fetch, stale from a failed or missing one.
    let w = find(&merged, "wardle.example.com", "v1");
    assert_eq!(
        (w.source, w.freshness),
        (Source::Remote, Freshness::Current)
    );
    assert!(Arc::ptr_eq(&w.discovery, &wardle));
    assert_eq!(
        w.priority,
        Priority {
            group: 2000,
            version: 15
        }
    );
    let f = find(&merged, "flunder.example.com", "v1");
    assert_eq!(f.freshness, Freshness::Stale);
    assert!(Arc::ptr_eq(&f.discovery, &flunder));
    for (g, v) in [
        ("wardle.example.com", "v1beta1"),
        ("nowhere.example.com", "v1"),
    ] {
        let e = find(&merged, g, v);
        assert_eq!(e.freshness, Freshness::Stale);
        assert_eq!(*e.discovery, APIVersionDiscovery::empty(v));
    }
    assert_eq!(merged.len(), 3 + 4);

    // Without the delegate's document: apiagg's own and the remote ones.
    let merged = entries(&routes.registry, None, &HashMap::new());
    assert_eq!(merged.len(), 1 + 4);
}
