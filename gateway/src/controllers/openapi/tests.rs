//! The OpenAPI controller's pure steps: which sources a round downloads, and what the published
//! documents are merged from. No socket.

use std::sync::Arc;
use std::time::Duration;

use apiagg_openapi_merge::{PreparedV2, V3Served};
use bytes::Bytes;
use serde_json::json;
use tokio::time::Instant;

use super::download::V3State;
use super::inputs::{merge_inputs, DELEGATE_SPEC};
use super::plan::{plan, Plan, Scope};
use super::sources::{delegate_identity, LocalSource, ServiceSource, Sources};
use crate::backends::fixtures::{table, CONFIG};
use crate::controllers::targets::ServiceKey;

fn key(name: &str) -> ServiceKey {
    ("test".into(), name.into(), 443)
}

fn failing() -> ServiceSource {
    let mut source = ServiceSource::default();
    source.backoff.failed();
    source
}

/// `(label, run)` of every Service of a plan.
fn runs(plan: &Plan) -> Vec<(String, bool)> {
    plan.services
        .iter()
        .map(|s| (s.target.label(), s.run))
        .collect()
}

#[test]
fn the_first_round_reads_the_delegate_alone_and_keeps_every_service() {
    let routes = table(CONFIG, &[("apps", "v1")]);
    let mut sources = Sources::default();
    sources.services.insert(key("gone"), failing());
    let plan = plan(&routes, &sources, Scope::Delegate, Instant::now());
    assert!(plan.services.is_empty() && !plan.drop_others);
    let delegate = plan.delegate.expect("a delegate");
    assert!(delegate.fresh && delegate.run);
    assert!(routes
        .delegate
        .is_some_and(|d| Arc::ptr_eq(&d, &delegate.upstream)));
    assert_eq!(delegate.identity, "10.0.0.9 10.0.0.9:6443");
}

#[test]
fn a_full_round_reads_every_source() {
    let routes = table(CONFIG, &[("apps", "v1")]);
    let delegate = routes.delegate.as_deref().expect("a delegate");
    let mut sources = Sources {
        local: Some(LocalSource {
            identity: delegate_identity(delegate),
            ..LocalSource::default()
        }),
        ..Sources::default()
    };
    sources
        .services
        .insert(key("flunder"), ServiceSource::default());
    let plan = plan(&routes, &sources, Scope::All, Instant::now());
    assert!(plan.drop_others);
    assert_eq!(
        runs(&plan),
        [
            ("test/wardle:443".into(), true),
            ("test/flunder:443".into(), true),
            ("test/nowhere:443".into(), true),
        ]
    );
    let delegate = plan.delegate.expect("a delegate");
    assert!(!delegate.fresh && delegate.run);
}

#[test]
fn a_retry_round_reads_only_the_failing_sources_that_are_due() {
    let routes = table(CONFIG, &[("apps", "v1")]);
    let delegate = routes.delegate.as_deref().expect("a delegate");
    let mut local = LocalSource {
        identity: delegate_identity(delegate),
        ..LocalSource::default()
    };
    let mut sources = Sources::default();
    sources.services.insert(key("wardle"), failing());
    sources
        .services
        .insert(key("flunder"), ServiceSource::default());
    sources.local = Some(LocalSource {
        identity: local.identity.clone(),
        ..LocalSource::default()
    });
    // Before the retry time nothing is due; a Service never read waits for a full round.
    let plan_now = plan(&routes, &sources, Scope::Due, Instant::now());
    assert!(runs(&plan_now).iter().all(|(_, run)| !run));
    assert!(plan_now.delegate.is_some_and(|d| !d.run && !d.fresh));
    let later = Instant::now() + Duration::from_secs(120);
    let plan_later = plan(&routes, &sources, Scope::Due, later);
    assert_eq!(
        runs(&plan_later),
        [
            ("test/wardle:443".into(), true),
            ("test/flunder:443".into(), false),
            ("test/nowhere:443".into(), false),
        ]
    );
    assert!(plan_later.delegate.is_some_and(|d| !d.run));
    // A failing delegate is retried; another delegate starts over at once.
    local.backoff.failed();
    sources.local = Some(local);
    assert!(plan(&routes, &sources, Scope::Due, later)
        .delegate
        .is_some_and(|d| d.run && !d.fresh));
    if let Some(l) = sources.local.as_mut() {
        l.identity = "another".into();
    }
    assert!(plan(&routes, &sources, Scope::Due, Instant::now())
        .delegate
        .is_some_and(|d| d.run && d.fresh));
    // Without a delegate there is none to read.
    let (_, without) = CONFIG.split_once('\n').expect("two lines");
    assert!(plan(&table(without, &[]), &sources, Scope::All, later)
        .delegate
        .is_none());
}

fn v2_doc(paths: &[&str]) -> serde_json::Value {
    let paths: serde_json::Map<String, serde_json::Value> = paths
        .iter()
        .map(|p| {
            (
                p.to_string(),
                json!({"get": {"responses": {"200": {"description": "ok"}}}}),
            )
        })
        .collect();
    json!({"swagger": "2.0", "info": {"title": "t", "version": "v"}, "paths": paths})
}

fn v3(key: &str) -> Arc<V3Served> {
    Arc::new(V3Served::new(
        key,
        Bytes::from(json!({"openapi": "3.0.0", "paths": {}}).to_string()),
    ))
}

fn remote_spec(group: &str, version: &str) -> Arc<PreparedV2> {
    let path = format!("/apis/{group}/{version}/things");
    Arc::new(PreparedV2::remote(&v2_doc(&[&path]), group, version).expect("prepared"))
}

#[test]
fn without_documents_apiagg_describes_its_own_api() {
    let routes = table(CONFIG, &[("apps", "v1")]);
    let inputs = merge_inputs(&routes.registry, &Sources::default());
    let locals: Vec<&str> = inputs.v2.locals.iter().map(|l| l.name.as_str()).collect();
    assert_eq!(locals, ["apiagg"]);
    assert!(inputs.v2.remotes.is_empty());
    let v3: Vec<&str> = inputs.v3.iter().map(|i| i.name.as_str()).collect();
    assert_eq!(v3, ["apiagg"]);
}

#[test]
fn the_merge_takes_the_delegate_then_remote_apiservices_in_merge_order() {
    let routes = table(CONFIG, &[("apps", "v1")]);
    let delegate_spec =
        Arc::new(PreparedV2::local(&v2_doc(&["/apis/apps/v1/deployments"])).expect("prepared"));
    let local = LocalSource {
        spec: Some(Arc::clone(&delegate_spec)),
        v3: V3State::holding([
            v3("apis/apps/v1"),
            v3("apis/apiregistration.k8s.io/v1"),
            v3("apis/wardle.example.com/v1"),
            v3("api/v1"),
        ]),
        ..LocalSource::default()
    };
    let mut sources = Sources {
        local: Some(local),
        ..Sources::default()
    };
    let mut wardle = ServiceSource::default();
    for (name, version) in [
        ("v1.wardle.example.com", "v1"),
        ("v1beta1.wardle.example.com", "v1beta1"),
    ] {
        wardle
            .specs
            .insert(name.into(), remote_spec("wardle.example.com", version));
    }
    wardle.v3 = V3State::holding([v3("apis/wardle.example.com/v1beta1")]);
    let flunder = ServiceSource {
        v3: V3State::holding([v3("apis/flunder.example.com/v1")]),
        ..ServiceSource::default()
    };
    sources.services.insert(key("wardle"), wardle);
    sources.services.insert(key("flunder"), flunder);

    let inputs = merge_inputs(&routes.registry, &sources);
    let [local] = &inputs.v2.locals[..] else {
        panic!("one local document")
    };
    assert_eq!(local.name, DELEGATE_SPEC);
    assert!(Arc::ptr_eq(&local.spec, &delegate_spec));
    // A group's versions stay together (registry order would put flunder between them).
    let remotes: Vec<&str> = inputs
        .v2
        .remotes
        .iter()
        .map(|r| r.apiservice.as_str())
        .collect();
    assert_eq!(
        remotes,
        ["v1.wardle.example.com", "v1beta1.wardle.example.com"]
    );
    let v3: Vec<(&str, Vec<&str>)> = inputs
        .v3
        .iter()
        .map(|i| {
            (
                i.name.as_str(),
                i.docs.iter().map(|d| d.doc.key.as_str()).collect(),
            )
        })
        .collect();
    // The delegate's documents of remote group-versions are hidden, whether or not the
    // remote one has a document; its apiregistration.k8s.io/v1 describes apiagg's API as in
    // v2 (kube-apiserver's words for the same type).
    assert_eq!(
        v3,
        [
            (
                "delegate",
                vec!["api/v1", "apis/apiregistration.k8s.io/v1", "apis/apps/v1"]
            ),
            (
                "v1beta1.wardle.example.com",
                vec!["apis/wardle.example.com/v1beta1"]
            ),
            (
                "v1.flunder.example.com",
                vec!["apis/flunder.example.com/v1"]
            ),
        ]
    );
}
