//! The availability controller's pure step: verdicts, conditions and their transitions. No
//! socket, no runtime.

use std::collections::BTreeMap;

use apiagg_config::{ApiServiceEntry, Backend, Endpoint, Origin, RemoteBackend, Unresolved};

use super::conditions::{evaluate, verdict, Evaluation, Observed, Verdict};
use super::now_rfc3339;
use crate::state::{ApiServiceStatus, Condition, EndpointStatus};

const THEN: &str = "2030-01-01T00:00:00Z";
const NOW: &str = "2030-01-02T00:00:00Z";

fn local(name: &str) -> ApiServiceEntry {
    ApiServiceEntry {
        name: name.into(),
        group: "apps".into(),
        version: "v1".into(),
        group_priority_minimum: 17800,
        version_priority: 15,
        backend: Backend::Delegate,
        origin: Origin::Delegate,
    }
}

fn remote(name: &str, endpoints: Result<Vec<Endpoint>, Unresolved>) -> ApiServiceEntry {
    ApiServiceEntry {
        name: name.into(),
        group: "wardle.example.com".into(),
        version: "v1".into(),
        group_priority_minimum: 1000,
        version_priority: 15,
        backend: Backend::Remote(RemoteBackend {
            namespace: "test".into(),
            service: "wardle".into(),
            port: 443,
            server_name: "wardle.test.svc".into(),
            ca_bundle: None,
            insecure_skip_tls_verify: true,
            endpoints,
            watch_list: Default::default(),
        }),
        origin: Origin::Api,
    }
}

/// A remote APIService whose Service resolved to one endpoint.
fn resolved(name: &str) -> ApiServiceEntry {
    let endpoint = Endpoint {
        url: "https://10.0.0.1:443".into(),
        tls: true,
        host: "10.0.0.1".into(),
        port: 443,
    };
    remote(name, Ok(vec![endpoint]))
}

fn endpoint(url: &str, healthy: bool, error: Option<&str>) -> EndpointStatus {
    EndpointStatus {
        url: url.into(),
        healthy,
        error: error.map(String::from),
    }
}

fn observed(entry: &ApiServiceEntry, endpoints: Option<Vec<EndpointStatus>>) -> Observed<'_> {
    Observed {
        entry,
        endpoints,
        broken: None,
        probed: true,
    }
}

fn verdict_of(o: &Observed<'_>) -> (&'static str, &'static str, String) {
    let Verdict {
        status,
        reason,
        message,
    } = verdict(o);
    (status, reason, message)
}

#[test]
fn local_apiservices_are_always_available() {
    let entry = local("v1.apps");
    assert_eq!(
        verdict_of(&observed(&entry, None)),
        (
            "True",
            "Local",
            "Local APIServices are always available".into()
        )
    );
    let evaluation = evaluate(&[observed(&entry, None)], &BTreeMap::new(), NOW);
    let status = &evaluation.updates[0].status;
    assert_eq!(status.service, "Local");
    assert!(status.endpoints.is_empty());
}

#[test]
fn one_healthy_endpoint_passes_and_none_fails_with_the_last_error() {
    let entry = resolved("v1.wardle.example.com");
    let a = "https://10.0.0.1:443";
    let b = "https://10.0.0.2:443";
    let some_healthy = observed(
        &entry,
        Some(vec![
            endpoint(a, false, Some("a refused")),
            endpoint(b, true, None),
        ]),
    );
    assert_eq!(
        verdict_of(&some_healthy),
        ("True", "Passed", "all checks passed".into())
    );
    let none_healthy = observed(
        &entry,
        Some(vec![
            endpoint(a, false, Some("a refused")),
            endpoint(b, false, Some("b timed out")),
        ]),
    );
    assert_eq!(
        verdict_of(&none_healthy),
        ("False", "FailedDiscoveryCheck", "b timed out".into())
    );
    // The last endpoint that has an error names it; without any error, a generic message.
    let first_only = observed(
        &entry,
        Some(vec![
            endpoint(a, false, Some("a refused")),
            endpoint(b, false, None),
        ]),
    );
    assert_eq!(verdict_of(&first_only).2, "a refused");
    let no_error = observed(&entry, Some(vec![endpoint(a, false, None)]));
    assert_eq!(verdict_of(&no_error).2, "all endpoints failed");
}

#[test]
fn an_unresolved_service_says_why() {
    let not_found = remote(
        "v1.wardle.example.com",
        Err(Unresolved::not_found("test", "wardle")),
    );
    assert_eq!(
        verdict_of(&observed(&not_found, None)),
        (
            "False",
            "ServiceNotFound",
            "service/wardle in \"test\" is not present".into()
        )
    );
    let unknown = remote(
        "v1.wardle.example.com",
        Err(Unresolved {
            status: "Unknown",
            reason: "ServiceAccessError",
            message: "cannot be checked".into(),
        }),
    );
    // The resolution decides even when an upstream is somehow there.
    let o = observed(
        &unknown,
        Some(vec![endpoint("https://10.0.0.1:443", true, None)]),
    );
    assert_eq!(
        verdict_of(&o),
        ("Unknown", "ServiceAccessError", "cannot be checked".into())
    );
}

#[test]
fn a_resolved_service_without_upstream_is_broken_or_missing_endpoints() {
    let entry = resolved("v1.wardle.example.com");
    let broken = Observed {
        entry: &entry,
        endpoints: None,
        broken: Some("cannot resolve wardle.example:443: not resolved yet"),
        probed: false,
    };
    assert_eq!(
        verdict_of(&broken),
        (
            "False",
            "FailedDiscoveryCheck",
            "cannot resolve wardle.example:443: not resolved yet".into()
        )
    );
    let empty = remote("v1.wardle.example.com", Ok(Vec::new()));
    assert_eq!(
        verdict_of(&observed(&empty, None)),
        (
            "False",
            "MissingEndpoints",
            "endpoints for service/wardle in \"test\" have no addresses with port name \"\"".into()
        )
    );
    let status = &evaluate(&[observed(&empty, None)], &BTreeMap::new(), NOW).updates[0].status;
    assert_eq!(status.service, "test/wardle:443");
    assert!(status.endpoints.is_empty());
}

fn status(
    condition: (&'static str, &'static str, &str),
    since: &str,
    endpoints: Vec<EndpointStatus>,
) -> ApiServiceStatus {
    ApiServiceStatus {
        condition: Condition {
            type_: "Available",
            status: condition.0,
            last_transition_time: since.into(),
            reason: condition.1,
            message: condition.2.into(),
        },
        service: "test/wardle:443".into(),
        endpoints,
    }
}

fn previous(name: &str, status: ApiServiceStatus) -> BTreeMap<String, ApiServiceStatus> {
    BTreeMap::from([(name.to_string(), status)])
}

#[test]
fn an_unchanged_status_is_not_written_again() {
    let entry = resolved("v1.wardle.example.com");
    let healthy = vec![endpoint("https://10.0.0.1:443", true, None)];
    let before = previous(
        &entry.name,
        status(
            ("True", "Passed", "all checks passed"),
            THEN,
            healthy.clone(),
        ),
    );
    let evaluation = evaluate(&[observed(&entry, Some(healthy))], &before, NOW);
    assert_eq!(evaluation, Evaluation::default());
    assert!(!evaluation.changed());
}

#[test]
fn a_flip_stamps_the_transition_and_losing_availability_counts() {
    let entry = resolved("v1.wardle.example.com");
    let url = "https://10.0.0.1:443";
    let before = previous(
        &entry.name,
        status(
            ("True", "Passed", "all checks passed"),
            THEN,
            vec![endpoint(url, true, None)],
        ),
    );
    let failed = vec![endpoint(url, false, Some("refused"))];
    let evaluation = evaluate(&[observed(&entry, Some(failed.clone()))], &before, NOW);
    assert!(evaluation.changed());
    let update = &evaluation.updates[0];
    assert!(update.flipped && update.lost && update.told);
    assert_eq!(
        update.status,
        status(("False", "FailedDiscoveryCheck", "refused"), NOW, failed)
    );
    // Back to True: a flip, not a loss.
    let before = previous(&entry.name, update.status.clone());
    let healthy = vec![endpoint(url, true, None)];
    let evaluation = evaluate(&[observed(&entry, Some(healthy))], &before, "later");
    let update = &evaluation.updates[0];
    assert!(update.flipped && !update.lost);
    assert_eq!(update.status.condition.last_transition_time, "later");
}

#[test]
fn the_transition_time_stays_while_the_status_does() {
    let entry = resolved("v1.wardle.example.com");
    let url = "https://10.0.0.1:443";
    let before = previous(
        &entry.name,
        status(
            ("False", "FailedDiscoveryCheck", "refused"),
            THEN,
            vec![endpoint(url, false, Some("refused"))],
        ),
    );
    // Another message, same status: written and logged, not a flip, the time kept.
    let other = vec![endpoint(url, false, Some("timed out"))];
    let evaluation = evaluate(&[observed(&entry, Some(other))], &before, NOW);
    assert!(!evaluation.changed());
    let update = &evaluation.updates[0];
    assert!(!update.flipped && !update.lost && update.told);
    assert_eq!(update.status.condition.message, "timed out");
    assert_eq!(update.status.condition.last_transition_time, THEN);
    // Another reason, same status: the same.
    let empty = remote(&entry.name, Ok(Vec::new()));
    let evaluation = evaluate(&[observed(&empty, None)], &before, NOW);
    let update = &evaluation.updates[0];
    assert!(!update.flipped);
    assert_eq!(update.status.condition.reason, "MissingEndpoints");
    assert_eq!(update.status.condition.last_transition_time, THEN);
}

#[test]
fn endpoint_changes_are_written_and_removed_endpoints_listed() {
    let entry = resolved("v1.wardle.example.com");
    let (a, b) = ("https://10.0.0.1:443", "https://10.0.0.2:443");
    let before = previous(
        &entry.name,
        status(
            ("True", "Passed", "all checks passed"),
            THEN,
            vec![endpoint(a, true, None), endpoint(b, true, None)],
        ),
    );
    // One of two fails: still available, but the endpoints changed.
    let one_failed = vec![endpoint(a, true, None), endpoint(b, false, Some("refused"))];
    let evaluation = evaluate(&[observed(&entry, Some(one_failed))], &before, NOW);
    let update = &evaluation.updates[0];
    assert!(!update.flipped && update.gone_endpoints.is_empty());
    assert!(!update.told, "the condition is the same: nothing to log");
    assert_eq!(update.status.condition.last_transition_time, THEN);
    // One of two is gone.
    let evaluation = evaluate(
        &[observed(&entry, Some(vec![endpoint(a, true, None)]))],
        &before,
        NOW,
    );
    assert_eq!(evaluation.updates[0].gone_endpoints, [b]);
}

#[test]
fn new_apiservices_flip_without_loss_and_deleted_ones_are_removed() {
    let entry = resolved("v1.wardle.example.com");
    let kept = local("v1.apps");
    let gone = status(("True", "Passed", "all checks passed"), THEN, Vec::new());
    let before = BTreeMap::from([
        ("v1.zz.example.com".to_string(), gone.clone()),
        ("v1.aa.example.com".to_string(), gone.clone()),
        (
            "v1.apps".to_string(),
            ApiServiceStatus {
                service: "Local".into(),
                ..status(
                    ("True", "Local", "Local APIServices are always available"),
                    THEN,
                    Vec::new(),
                )
            },
        ),
    ]);
    let evaluation = evaluate(
        &[observed(&kept, None), observed(&entry, None)],
        &before,
        NOW,
    );
    assert!(evaluation.changed());
    // The unchanged local one is not written; the new one flips (from nothing) without loss.
    assert_eq!(evaluation.updates.len(), 1);
    let update = &evaluation.updates[0];
    assert_eq!(update.name, "v1.wardle.example.com");
    assert!(update.flipped && !update.lost);
    assert_eq!(update.status.condition.status, "False");
    assert_eq!(update.status.condition.last_transition_time, NOW);
    let removed: Vec<&str> = evaluation.removed.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(removed, ["v1.aa.example.com", "v1.zz.example.com"]);
}

#[test]
fn timestamps_are_rfc3339_seconds() {
    let t = now_rfc3339();
    assert_eq!(t.len(), 20, "{t}");
    assert!(t.ends_with('Z') && t.as_bytes()[10] == b'T', "{t}");
}

#[test]
fn an_endpoint_no_probe_has_passed_yet_is_not_called_available() {
    let entry = resolved("v1.wardle.example.com");
    let url = "https://10.0.0.1:443";
    let mut unprobed = observed(&entry, Some(vec![endpoint(url, true, None)]));
    unprobed.probed = false;
    // New: no status until a probe passes (or one fails).
    let evaluation = evaluate(&[unprobed], &BTreeMap::new(), NOW);
    assert_eq!(evaluation, Evaluation::default());
    // Known: the previous status stays (not removed, not rewritten).
    let before = previous(
        &entry.name,
        status(
            ("False", "FailedDiscoveryCheck", "refused"),
            THEN,
            vec![endpoint(url, false, Some("refused"))],
        ),
    );
    let mut unprobed = observed(&entry, Some(vec![endpoint(url, true, None)]));
    unprobed.probed = false;
    assert_eq!(evaluate(&[unprobed], &before, NOW), Evaluation::default());
}

#[test]
fn an_ejected_endpoint_is_rechecked_between_rounds_for_the_first_seconds_only() {
    let health = crate::backends::EndpointHealth::default();
    assert!(
        !super::recheck(&health),
        "a healthy endpoint waits for its round"
    );
    // Ejected by the request path: no probe has failed yet.
    health.mark_failed("connection refused".into());
    assert!(super::recheck(&health));
    for _ in 1..super::RECHECKS {
        health.probe_failed("connection refused".into(), 1);
    }
    assert!(super::recheck(&health), "still within the rechecks");
    health.probe_failed("connection refused".into(), 1);
    assert!(
        !super::recheck(&health),
        "a long outage is left to the rounds"
    );
    // Back: healthy, and the next outage is rechecked again.
    health.mark_healthy();
    health.mark_failed("reset".into());
    assert!(super::recheck(&health));
    let ms = |d: std::time::Duration| d.as_millis();
    assert_eq!(
        ms(super::recheck_interval(std::time::Duration::from_millis(
            500
        ))),
        100
    );
    assert_eq!(
        ms(super::recheck_interval(std::time::Duration::from_millis(
            100
        ))),
        50
    );
}
