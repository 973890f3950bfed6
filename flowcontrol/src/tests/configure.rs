//! The configuration: loading, defaults, mandatory objects, validation, nominal seats,
//! metrics and the dump.

use super::{builtin, classify, objects};
use crate::{effective, parse_objects, ConfigError, Object};

#[test]
fn builtin_levels_get_upstreams_nominal_seats() {
    let flow = builtin(600);
    let expected = [
        ("catch-all", 13),
        ("exempt", 0),
        ("global-default", 49),
        ("leader-election", 25),
        ("node-high", 98),
        ("system", 74),
        ("workload-high", 98),
        ("workload-low", 245),
    ];
    for (level, seats) in expected {
        assert_eq!(flow.nominal_limit(level), Some(seats), "{level}");
        assert_eq!(flow.current_limit(level), Some(seats), "{level}");
    }
}

#[test]
fn the_builtin_set_is_complete_and_valid() {
    let compiled = effective(Vec::new()).expect("builtin");
    let schemas: Vec<&str> = compiled.schemas.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(
        schemas,
        [
            "exempt",
            "probes",
            "system-leader-election",
            "system-node-high",
            "system-nodes",
            "kube-controller-manager",
            "kube-scheduler",
            "kube-system-service-accounts",
            "service-accounts",
            "global-default",
            "catch-all",
        ]
    );
    assert_eq!(compiled.levels.len(), 8);
    assert_eq!(compiled.report.suggested_added, 15);
    assert!(compiled.report.dangling.is_empty() && compiled.report.overridden.is_empty());
}

#[test]
fn mandatory_objects_win_and_suggested_ones_yield() {
    let yaml = r#"
apiVersion: flowcontrol.apiserver.k8s.io/v1
kind: FlowSchema
metadata: {name: exempt, uid: 11111111-2222-3333-4444-555555555555}
spec:
  matchingPrecedence: 1
  priorityLevelConfiguration: {name: exempt}
  rules: [{subjects: [{kind: User, user: {name: everyone-is-admin}}], nonResourceRules: [{verbs: ["*"], nonResourceURLs: ["*"]}]}]
---
apiVersion: flowcontrol.apiserver.k8s.io/v1
kind: PriorityLevelConfiguration
metadata: {name: exempt}
spec: {type: Exempt, exempt: {nominalConcurrencyShares: 10, lendablePercent: 50}}
---
apiVersion: flowcontrol.apiserver.k8s.io/v1
kind: PriorityLevelConfiguration
metadata: {name: global-default}
spec:
  type: Limited
  limited: {nominalConcurrencyShares: 1, limitResponse: {type: Reject}}
"#;
    let flow = super::builtin(600);
    let report = flow.configure(objects(yaml)).expect("configure");
    assert_eq!(report.overridden, ["FlowSchema exempt"]);
    // The given uid is kept, the built-in spec is used: admins only.
    let d = super::decide(&flow, "admin", &["system:masters"], "GET", "/api");
    assert_eq!(d.flow_schema_uid(), "11111111-2222-3333-4444-555555555555");
    let other = classify(
        &flow,
        "everyone-is-admin",
        &["system:authenticated"],
        "GET",
        "/api",
    );
    assert_eq!(other.0, "global-default");
    // The exempt level's shares are the user's to set; the given global-default replaced the
    // suggested one (shares 1 of 5+10+1+10+40+30+40+100 = 236).
    assert_eq!(flow.nominal_limit("exempt"), Some(26));
    assert_eq!(flow.nominal_limit("global-default"), Some(3));
}

#[test]
fn dangling_schemas_are_skipped_and_reported() {
    let yaml = r#"
apiVersion: flowcontrol.apiserver.k8s.io/v1
kind: FlowSchema
metadata: {name: lost}
spec:
  matchingPrecedence: 10
  priorityLevelConfiguration: {name: nowhere}
  rules: [{subjects: [{kind: Group, group: {name: "*"}}], nonResourceRules: [{verbs: ["*"], nonResourceURLs: ["*"]}]}]
"#;
    let flow = super::builtin(600);
    let report = flow.configure(objects(yaml)).expect("configure");
    assert_eq!(
        report.dangling,
        [("lost".to_string(), "nowhere".to_string())]
    );
    assert!(report.to_string().contains("FlowSchema \"lost\" skipped"));
    let got = classify(&flow, "alice", &["system:authenticated"], "GET", "/version");
    assert_eq!(got.0, "global-default");
}

fn error_of(yaml: &str) -> String {
    match parse_objects(yaml).and_then(|o| effective(o).map(|_| ())) {
        Ok(()) => panic!("accepted: {yaml}"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn invalid_objects_are_refused_with_the_object_and_field_named() {
    let level = |spec: &str| {
        format!("apiVersion: flowcontrol.apiserver.k8s.io/v1\nkind: PriorityLevelConfiguration\nmetadata: {{name: bad}}\nspec: {spec}\n")
    };
    let schema = |spec: &str| {
        format!("apiVersion: flowcontrol.apiserver.k8s.io/v1\nkind: FlowSchema\nmetadata: {{name: bad}}\nspec: {spec}\n")
    };
    let cases = [
        (level("{type: Limited}"), "spec.limited: Required value"),
        (level("{type: Sometimes}"), "spec.type: Unsupported value"),
        (level("{type: Limited, limited: {lendablePercent: 101, limitResponse: {type: Reject}}}"), "lendablePercent: Invalid value: 101"),
        (level("{type: Limited, limited: {limitResponse: {type: Queue, queuing: {queues: 4, handSize: 5}}}}"), "should not be greater than queues"),
        (level("{type: Limited, limited: {limitResponse: {type: Queue, queuing: {queues: 128, handSize: 10}}}}"), "required entropy bits"),
        (level("{type: Limited, limited: {limitResponse: {type: Queue}}}"), "queuing: Required value"),
        (level("{type: Limited, limited: {nominalConcurrencyShares: -1, limitResponse: {type: Reject}}}"), "non-negative"),
        (schema("{priorityLevelConfiguration: {name: x}, matchingPrecedence: 10001}"), "matchingPrecedence: Invalid value: 10001"),
        (schema("{priorityLevelConfiguration: {name: x}, rules: [{subjects: []}]}"), "spec.rules[0].rules.subjects: Required value"),
        (schema("{priorityLevelConfiguration: {name: x}, rules: [{subjects: [{kind: Robot}], nonResourceRules: [{verbs: [get], nonResourceURLs: [/x]}]}]}"), "subjects.kind: Unsupported value"),
        (schema("{priorityLevelConfiguration: {name: x}, rules: [{subjects: [{kind: Group, group: {name: g}}]}]}"), "at least one of resourceRules and nonResourceRules"),
        (schema("{priorityLevelConfiguration: {name: x}, rules: [{subjects: [{kind: Group, group: {name: g}}], resourceRules: [{verbs: [get], apiGroups: [''], resources: [pods]}]}]}"), "must supply at least one namespace"),
        (schema("{priorityLevelConfiguration: {name: x}, rules: [{subjects: [{kind: Group, group: {name: g}}], nonResourceRules: [{verbs: [get], nonResourceURLs: ['/a*']}]}]}"), "wildcard can only do suffix glob matching"),
        (schema("{priorityLevelConfiguration: {name: x}, distinguisherMethod: {type: ByColour}}"), "distinguisherMethod.type"),
    ];
    for (yaml, wanted) in cases {
        let message = error_of(&yaml);
        assert!(message.contains("\"bad\""), "{message}");
        assert!(message.contains(wanted), "{message} lacks {wanted}");
    }
    let twice = format!(
        "{}---\n{}",
        level("{type: Exempt}"),
        level("{type: Exempt}")
    );
    assert!(error_of(&twice).contains("given more than once"));
}

#[test]
fn the_loader_reads_v1_v1beta3_and_lists() {
    let yaml = r#"
apiVersion: flowcontrol.apiserver.k8s.io/v1beta3
kind: PriorityLevelConfiguration
metadata: {name: old}
spec: {type: Limited, limited: {nominalConcurrencyShares: 0, limitResponse: {type: Reject}}}
---
---
apiVersion: v1
kind: List
items:
- apiVersion: flowcontrol.apiserver.k8s.io/v1
  kind: FlowSchema
  metadata: {name: listed}
  spec: {priorityLevelConfiguration: {name: old}}
"#;
    let objects = parse_objects(yaml).expect("parse");
    assert_eq!(objects.len(), 2);
    let Object::PriorityLevel(pl) = &objects[0] else {
        panic!("{objects:?}")
    };
    let limited = pl.spec.as_ref().and_then(|s| s.limited.as_ref());
    // v1beta3's zero meant "default" (30).
    assert_eq!(limited.and_then(|l| l.nominal_concurrency_shares), None);
    assert_eq!(objects[1].name(), "listed");
    assert_eq!(objects[1].kind(), "FlowSchema");

    let wrong =
        "apiVersion: flowcontrol.apiserver.k8s.io/v1beta1\nkind: FlowSchema\nmetadata: {name: a}\n";
    assert!(matches!(
        parse_objects(wrong),
        Err(ConfigError::ApiVersion { index: 0, .. })
    ));
    let kind = "apiVersion: flowcontrol.apiserver.k8s.io/v1\nkind: Pod\n";
    assert!(matches!(parse_objects(kind), Err(ConfigError::Kind { .. })));
    let broken = "apiVersion: flowcontrol.apiserver.k8s.io/v1\nkind: FlowSchema\nspec: [1]\n";
    assert!(matches!(
        parse_objects(broken),
        Err(ConfigError::Parse { index: 0, .. })
    ));
}

#[test]
fn the_file_source_names_the_file() {
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("apf.yaml");
    std::fs::write(
        &path,
        "kind: Pod\napiVersion: flowcontrol.apiserver.k8s.io/v1\n",
    )
    .expect("write");
    let err = crate::from_file(&path).expect_err("a Pod");
    assert!(err.to_string().contains("apf.yaml: document 0"), "{err}");
    let missing = crate::from_file(&dir.path().join("none.yaml"));
    assert!(matches!(missing, Err(ConfigError::Read { .. })));
}

#[test]
fn metrics_carry_upstream_names_and_the_dump_lists_levels() {
    let registry = prometheus::Registry::new();
    let flow = crate::FlowControl::new(Default::default(), &registry).expect("fc");
    let seat = super::decide(&flow, "alice", &["system:authenticated"], "GET", "/api");
    drop(seat);
    // One utilization sample while alice's request holds a seat, one after.
    let info = apiagg_requestinfo::RequestInfo::new("GET", "/api", None).expect("info");
    let groups = vec!["system:authenticated".to_string()];
    let request = crate::Request {
        user: "alice",
        groups: &groups,
        info: &info,
    };
    let admission = flow.admit(&request);
    assert!(matches!(admission, crate::Admission::Run(_)), "alice runs");
    flow.sample_demand();
    drop(admission);
    flow.sample_demand();
    let mut text = Vec::new();
    let families = registry.gather();
    prometheus::Encoder::encode(&prometheus::TextEncoder::new(), &families, &mut text)
        .expect("encode");
    let text = String::from_utf8(text).expect("utf-8");
    for line in [
        "apiserver_flowcontrol_nominal_limit_seats{priority_level=\"workload-low\"} 245",
        "apiserver_flowcontrol_current_limit_seats{priority_level=\"global-default\"} 49",
        "apiserver_flowcontrol_dispatched_requests_total{flow_schema=\"global-default\",priority_level=\"global-default\"} 1",
        "apiserver_flowcontrol_request_wait_duration_seconds_bucket{execute=\"true\",flow_schema=\"probes\",priority_level=\"exempt\",le=\"0.005\"} 0",
        // Upstream's name, constant label and buckets; one observation per sample.
        "apiserver_flowcontrol_priority_level_seat_utilization_bucket{phase=\"executing\",priority_level=\"global-default\",le=\"0.95\"} 2",
        "apiserver_flowcontrol_priority_level_seat_utilization_count{phase=\"executing\",priority_level=\"global-default\"} 2",
    ] {
        assert!(text.contains(line), "missing {line}");
    }
    // The seat alice held while the first sample was taken shows in its level's sum.
    let held = text
        .lines()
        .filter_map(|l| l.strip_prefix("apiserver_flowcontrol_priority_level_seat_utilization_sum"))
        .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
        .any(|sum| sum > 0.0);
    assert!(held, "no level's utilization saw alice's seat");
    let dump = flow.dump_priority_levels();
    let mut lines = dump.lines();
    let header = lines.next().expect("header");
    assert!(
        header.starts_with("PriorityLevelName, ActiveQueues, IsIdle,"),
        "{header}"
    );
    assert!(dump.contains("\nworkload-low,"), "{dump}");
    assert_eq!(dump.lines().count(), 9);
}

#[test]
fn every_field_error_keeps_its_wording() {
    let object = |kind: &str, metadata: &str, spec: &str| {
        format!("apiVersion: flowcontrol.apiserver.k8s.io/v1\nkind: {kind}\nmetadata: {metadata}\n{spec}\n")
    };
    let level = |spec: &str| {
        object(
            "PriorityLevelConfiguration",
            "{name: bad}",
            &format!("spec: {spec}"),
        )
    };
    let schema = |spec: &str| object("FlowSchema", "{name: bad}", &format!("spec: {spec}"));
    let rule = |rule: &str| {
        schema(&format!(
            "{{priorityLevelConfiguration: {{name: x}}, rules: [{rule}]}}"
        ))
    };
    let group = "subjects: [{kind: Group, group: {name: g}}]";
    let cases: Vec<(String, &str)> = vec![
        (
            object("PriorityLevelConfiguration", "{uid: x}", "spec: {type: Exempt}"),
            r#"PriorityLevelConfiguration "": metadata.name: Required value"#,
        ),
        (
            object("PriorityLevelConfiguration", "{name: bad}", ""),
            r#"PriorityLevelConfiguration "bad": spec: Required value"#,
        ),
        (
            object("PriorityLevelConfiguration", "{name: bad, uid: 'a b'}", "spec: {type: Exempt}"),
            r#"PriorityLevelConfiguration "bad": metadata.uid: Invalid value: "a b": must be printable ASCII"#,
        ),
        (
            level("{type: Exempt, limited: {}}"),
            r#"PriorityLevelConfiguration "bad": spec.limited: Forbidden: must be nil if the type is not Limited"#,
        ),
        (
            level("{type: Exempt, exempt: {lendablePercent: 101}}"),
            r#"PriorityLevelConfiguration "bad": spec.exempt.lendablePercent: Invalid value: 101: must be between 0 and 100, inclusive"#,
        ),
        (
            level("{type: Limited, exempt: {}}"),
            r#"PriorityLevelConfiguration "bad": spec.exempt: Forbidden: must be nil if the type is Limited"#,
        ),
        (
            level("{type: Limited}"),
            r#"PriorityLevelConfiguration "bad": spec.limited: Required value"#,
        ),
        (
            level("{type: Limited, limited: {lendablePercent: 101, limitResponse: {type: Reject}}}"),
            r#"PriorityLevelConfiguration "bad": spec.limited.lendablePercent: Invalid value: 101: must be between 0 and 100, inclusive"#,
        ),
        (
            level("{type: Limited, limited: {borrowingLimitPercent: -1, limitResponse: {type: Reject}}}"),
            r#"PriorityLevelConfiguration "bad": spec.limited.borrowingLimitPercent: Invalid value: -1: must be between 0 and 100, inclusive"#,
        ),
        (
            level("{type: Limited, limited: {}}"),
            r#"PriorityLevelConfiguration "bad": spec.limited.limitResponse: Required value"#,
        ),
        (
            level("{type: Limited, limited: {limitResponse: {type: Reject, queuing: {}}}}"),
            r#"PriorityLevelConfiguration "bad": spec.limited.limitResponse.queuing: Forbidden: must be nil if limited.limitResponse.type is not Limited"#,
        ),
        (
            level("{type: Limited, limited: {limitResponse: {type: Queue}}}"),
            r#"PriorityLevelConfiguration "bad": spec.limited.limitResponse.queuing: Required value: must not be empty if limited.limitResponse.type is Limited"#,
        ),
        (
            level("{type: Limited, limited: {limitResponse: {type: Queue, queuing: {queues: -1}}}}"),
            r#"PriorityLevelConfiguration "bad": spec.limited.limitResponse.queuing.queues: Invalid value: -1: must be positive"#,
        ),
        (
            level("{type: Limited, limited: {limitResponse: {type: Queue, queuing: {queues: 4, handSize: 5}}}}"),
            r#"PriorityLevelConfiguration "bad": spec.limited.limitResponse.queuing.handSize: Invalid value: 5: should not be greater than queues (4)"#,
        ),
        (
            level("{type: Limited, limited: {limitResponse: {type: Queue, queuing: {queues: 128, handSize: 10}}}}"),
            r#"PriorityLevelConfiguration "bad": spec.limited.limitResponse.queuing.handSize: Invalid value: 10: required entropy bits of deckSize 128 and handSize 10 should not be greater than 60"#,
        ),
        (
            level("{type: Limited, limited: {limitResponse: {type: Drop}}}"),
            r#"PriorityLevelConfiguration "bad": spec.limited.limitResponse.type: Unsupported value: "Drop": supported values: "Queue", "Reject""#,
        ),
        (
            level("{type: Sometimes}"),
            r#"PriorityLevelConfiguration "bad": spec.type: Unsupported value: "Sometimes": supported values: "Exempt", "Limited""#,
        ),
        (
            level("{type: Limited, limited: {nominalConcurrencyShares: -1, limitResponse: {type: Reject}}}"),
            r#"PriorityLevelConfiguration "bad": spec.limited.nominalConcurrencyShares: Invalid value: -1: must be a non-negative integer"#,
        ),
        (
            object("FlowSchema", "{name: bad}", ""),
            r#"FlowSchema "bad": spec: Required value"#,
        ),
        (
            schema("{priorityLevelConfiguration: {name: x}, matchingPrecedence: 10001}"),
            r#"FlowSchema "bad": spec.matchingPrecedence: Invalid value: 10001: must be between 1 and 10000, inclusive"#,
        ),
        (
            schema("{priorityLevelConfiguration: {name: ''}}"),
            r#"FlowSchema "bad": spec.priorityLevelConfiguration.name: Required value"#,
        ),
        (
            schema("{priorityLevelConfiguration: {name: x}, distinguisherMethod: {type: ByColour}}"),
            r#"FlowSchema "bad": spec.distinguisherMethod.type: Unsupported value: "ByColour": supported values: "ByNamespace", "ByUser""#,
        ),
        (
            rule("{subjects: []}"),
            r#"FlowSchema "bad": spec.rules[0].rules.subjects: Required value"#,
        ),
        (
            rule("{subjects: [{kind: Robot}], nonResourceRules: [{verbs: [get], nonResourceURLs: [/x]}]}"),
            r#"FlowSchema "bad": spec.rules[0].subjects.kind: Unsupported value: "Robot": supported values: "Group", "ServiceAccount", "User""#,
        ),
        (
            rule("{subjects: [{kind: User}], nonResourceRules: [{verbs: [get], nonResourceURLs: [/x]}]}"),
            r#"FlowSchema "bad": spec.rules[0].subjects.user.name: Required value"#,
        ),
        (
            rule("{subjects: [{kind: Group, group: {name: ''}}], nonResourceRules: [{verbs: [get], nonResourceURLs: [/x]}]}"),
            r#"FlowSchema "bad": spec.rules[0].subjects.group.name: Required value"#,
        ),
        (
            rule("{subjects: [{kind: ServiceAccount}], nonResourceRules: [{verbs: [get], nonResourceURLs: [/x]}]}"),
            r#"FlowSchema "bad": spec.rules[0].subjects.serviceAccount: Required value"#,
        ),
        (
            rule("{subjects: [{kind: ServiceAccount, serviceAccount: {namespace: '', name: a}}], nonResourceRules: [{verbs: [get], nonResourceURLs: [/x]}]}"),
            r#"FlowSchema "bad": spec.rules[0].subjects.serviceAccount.namespace: Required value"#,
        ),
        (
            rule("{subjects: [{kind: ServiceAccount, serviceAccount: {namespace: n, name: ''}}], nonResourceRules: [{verbs: [get], nonResourceURLs: [/x]}]}"),
            r#"FlowSchema "bad": spec.rules[0].subjects.serviceAccount.name: Required value"#,
        ),
        (
            rule(&format!("{{{group}}}")),
            r#"FlowSchema "bad": spec.rules[0].rules: Required value: at least one of resourceRules and nonResourceRules has to be non-empty"#,
        ),
        (
            rule(&format!("{{{group}, resourceRules: [{{verbs: [], apiGroups: [''], resources: [pods], clusterScope: true}}]}}")),
            r#"FlowSchema "bad": spec.rules[0].resourceRules.verbs: Required value"#,
        ),
        (
            rule(&format!("{{{group}, resourceRules: [{{verbs: ['*', get], apiGroups: [''], resources: [pods], clusterScope: true}}]}}")),
            r#"FlowSchema "bad": spec.rules[0].resourceRules.verbs: if '*' is present, must not specify other values"#,
        ),
        (
            rule(&format!("{{{group}, resourceRules: [{{verbs: [get], apiGroups: [''], resources: [pods]}}]}}")),
            r#"FlowSchema "bad": spec.rules[0].resourceRules.namespaces: Required value: resource rules that are not cluster scoped must supply at least one namespace"#,
        ),
        (
            rule(&format!("{{{group}, resourceRules: [{{verbs: [get], apiGroups: [''], resources: [pods], namespaces: []}}]}}")),
            r#"FlowSchema "bad": spec.rules[0].resourceRules.namespaces: Required value: resource rules that are not cluster scoped must supply at least one namespace"#,
        ),
        (
            rule(&format!("{{{group}, nonResourceRules: [{{verbs: [get], nonResourceURLs: [healthz]}}]}}")),
            r#"FlowSchema "bad": spec.rules[0].nonResourceRules.nonResourceURLs: Invalid value: "healthz": must start with slash"#,
        ),
        (
            rule(&format!("{{{group}, nonResourceRules: [{{verbs: [get], nonResourceURLs: ['/a b']}}]}}")),
            r#"FlowSchema "bad": spec.rules[0].nonResourceRules.nonResourceURLs: Invalid value: "/a b": must not contain white-space"#,
        ),
        (
            rule(&format!("{{{group}, nonResourceRules: [{{verbs: [get], nonResourceURLs: ['/a//b']}}]}}")),
            r#"FlowSchema "bad": spec.rules[0].nonResourceRules.nonResourceURLs: Invalid value: "/a//b": must not contain double slash"#,
        ),
        (
            rule(&format!("{{{group}, nonResourceRules: [{{verbs: [get], nonResourceURLs: ['/a*']}}]}}")),
            r#"FlowSchema "bad": spec.rules[0].nonResourceRules.nonResourceURLs: Invalid value: "/a*": wildcard can only do suffix glob matching"#,
        ),
    ];
    let mut wrong = Vec::new();
    for (yaml, wanted) in &cases {
        let message = error_of(yaml);
        if message != *wanted {
            wrong.push(format!("{message}\n  wanted {wanted}"));
        }
    }
    assert!(wrong.is_empty(), "\n{}", wrong.join("\n"));
}

#[test]
fn a_clusters_objects_are_taken_as_given_without_our_suggested_ones() {
    // A cluster whose kube-apiserver keeps a smaller suggested set (or whose admin deleted
    // one): only its objects and the mandatory ones are in force.
    let compiled = crate::config::from_cluster(Vec::new()).expect("mandatory only");
    let schemas: Vec<&str> = compiled.schemas.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(schemas, ["exempt", "catch-all"]);
    assert_eq!(compiled.report.suggested_added, 0);
}
