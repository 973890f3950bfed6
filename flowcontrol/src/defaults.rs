//! kube-apiserver's built-in configuration (`k8s.io/apiserver/pkg/apis/flowcontrol/bootstrap`,
//! as of Kubernetes 1.37, which no longer has 1.2x's `endpoint-controller` and
//! `workload-leader-election` flow schemas): the mandatory objects (`exempt` and `catch-all`,
//! always in force) and the suggested ones (in force unless an object of the same name is
//! given; not added to a cluster's objects, see `config::from_cluster`).

use std::collections::BTreeMap;

use k8s_openapi::api::flowcontrol::v1::{
    ExemptPriorityLevelConfiguration, FlowDistinguisherMethod, FlowSchema, FlowSchemaSpec,
    GroupSubject, LimitResponse, LimitedPriorityLevelConfiguration, NonResourcePolicyRule,
    PolicyRulesWithSubjects, PriorityLevelConfiguration, PriorityLevelConfigurationReference,
    PriorityLevelConfigurationSpec, QueuingConfiguration, ResourcePolicyRule,
    ServiceAccountSubject, Subject, UserSubject,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::objects::Object;

/// Name of the mandatory exempt priority level and flow schema.
pub const EXEMPT: &str = "exempt";
/// Name of the mandatory catch-all priority level and flow schema.
pub const CATCH_ALL: &str = "catch-all";

const ALL: &str = "*";
const KUBE_SYSTEM: &str = "kube-system";
const CONTROLLER_MANAGER: &str = "system:kube-controller-manager";
const SCHEDULER: &str = "system:kube-scheduler";
const NODES: &str = "system:nodes";
const MASTERS: &str = "system:masters";
const AUTHENTICATED: &str = "system:authenticated";
const UNAUTHENTICATED: &str = "system:unauthenticated";
const SERVICE_ACCOUNTS: &str = "system:serviceaccounts";
const CORE: &str = "";
const COORDINATION: &str = "coordination.k8s.io";
const BY_USER: Option<&str> = Some("ByUser");
const BY_NAMESPACE: Option<&str> = Some("ByNamespace");

/// The mandatory objects: priority levels `exempt` and `catch-all`, flow schemas `exempt`
/// and `catch-all`.
pub fn mandatory() -> Vec<Object> {
    vec![
        Object::PriorityLevel(exempt_level()),
        limited(CATCH_ALL, 5, 0, None),
        schema(EXEMPT, EXEMPT, 1, None, groups(&[MASTERS]), everything()),
        schema(
            CATCH_ALL,
            CATCH_ALL,
            10000,
            BY_USER,
            everyone(),
            everything(),
        ),
    ]
}

/// The mandatory `exempt` priority level.
pub fn exempt_level() -> PriorityLevelConfiguration {
    PriorityLevelConfiguration {
        metadata: meta(EXEMPT),
        spec: Some(PriorityLevelConfigurationSpec {
            type_: "Exempt".into(),
            exempt: Some(ExemptPriorityLevelConfiguration {
                nominal_concurrency_shares: Some(0),
                lendable_percent: Some(0),
            }),
            limited: None,
        }),
        status: None,
    }
}

/// The suggested objects.
pub fn suggested() -> Vec<Object> {
    let kube_system_all = service_accounts(&[ALL]);
    let leases = resources(
        &["get", "create", "update"],
        COORDINATION,
        &["leases"],
        &[ALL],
    );
    let mut leader_subjects = users(&[CONTROLLER_MANAGER, SCHEDULER]);
    leader_subjects.extend(kube_system_all.clone());
    let node_high = vec![
        cluster_resources(&[ALL], CORE, &["nodes", "nodes/status"]),
        resources(&[ALL], COORDINATION, &["leases"], &[ALL]),
    ];
    let probes = NonResourcePolicyRule {
        verbs: vec!["get".into()],
        non_resource_urls: strings(&["/healthz", "/readyz", "/livez"]),
    };
    vec![
        limited("system", 30, 33, Some((64, 6, 50))),
        limited("node-high", 40, 25, Some((64, 6, 50))),
        limited("leader-election", 10, 0, Some((16, 4, 50))),
        limited("workload-high", 40, 50, Some((128, 6, 50))),
        limited("workload-low", 100, 90, Some((128, 6, 50))),
        limited("global-default", 20, 50, Some((128, 6, 50))),
        schema(
            "probes",
            EXEMPT,
            2,
            None,
            everyone(),
            (vec![], vec![probes]),
        ),
        schema(
            "system-leader-election",
            "leader-election",
            100,
            BY_USER,
            leader_subjects,
            (vec![leases], vec![]),
        ),
        schema(
            "system-node-high",
            "node-high",
            400,
            BY_USER,
            groups(&[NODES]),
            (node_high, vec![]),
        ),
        schema(
            "system-nodes",
            "system",
            500,
            BY_USER,
            groups(&[NODES]),
            everything(),
        ),
        schema(
            "kube-controller-manager",
            "workload-high",
            800,
            BY_NAMESPACE,
            users(&[CONTROLLER_MANAGER]),
            everything(),
        ),
        schema(
            "kube-scheduler",
            "workload-high",
            800,
            BY_NAMESPACE,
            users(&[SCHEDULER]),
            everything(),
        ),
        schema(
            "kube-system-service-accounts",
            "workload-high",
            900,
            BY_NAMESPACE,
            kube_system_all,
            everything(),
        ),
        schema(
            "service-accounts",
            "workload-low",
            9000,
            BY_USER,
            groups(&[SERVICE_ACCOUNTS]),
            everything(),
        ),
        schema(
            "global-default",
            "global-default",
            9900,
            BY_USER,
            everyone(),
            everything(),
        ),
    ]
}

/// Metadata of a built-in object (upstream marks them for automatic update).
fn meta(name: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.into()),
        annotations: Some(BTreeMap::from([(
            "apf.kubernetes.io/autoupdate-spec".to_string(),
            "true".to_string(),
        )])),
        ..ObjectMeta::default()
    }
}

/// A `Limited` level; `queuing` is `(queues, handSize, queueLengthLimit)`, `None` rejects.
fn limited(name: &str, shares: i32, lendable: i32, queuing: Option<(i32, i32, i32)>) -> Object {
    let limit_response = match queuing {
        Some((queues, hand_size, queue_length_limit)) => LimitResponse {
            type_: "Queue".into(),
            queuing: Some(QueuingConfiguration {
                queues: Some(queues),
                hand_size: Some(hand_size),
                queue_length_limit: Some(queue_length_limit),
            }),
        },
        None => LimitResponse {
            type_: "Reject".into(),
            queuing: None,
        },
    };
    Object::PriorityLevel(PriorityLevelConfiguration {
        metadata: meta(name),
        spec: Some(PriorityLevelConfigurationSpec {
            type_: "Limited".into(),
            limited: Some(LimitedPriorityLevelConfiguration {
                nominal_concurrency_shares: Some(shares),
                lendable_percent: Some(lendable),
                borrowing_limit_percent: None,
                limit_response: Some(limit_response),
            }),
            exempt: None,
        }),
        status: None,
    })
}

type Rules = (Vec<ResourcePolicyRule>, Vec<NonResourcePolicyRule>);

fn schema(
    name: &str,
    level: &str,
    precedence: i32,
    distinguisher: Option<&str>,
    subjects: Vec<Subject>,
    (resource_rules, non_resource_rules): Rules,
) -> Object {
    Object::FlowSchema(FlowSchema {
        metadata: meta(name),
        spec: Some(FlowSchemaSpec {
            priority_level_configuration: PriorityLevelConfigurationReference {
                name: level.into(),
            },
            matching_precedence: Some(precedence),
            distinguisher_method: distinguisher
                .map(|d| FlowDistinguisherMethod { type_: d.into() }),
            rules: Some(vec![PolicyRulesWithSubjects {
                subjects,
                resource_rules: Some(resource_rules).filter(|r| !r.is_empty()),
                non_resource_rules: Some(non_resource_rules).filter(|r| !r.is_empty()),
            }]),
        }),
        status: None,
    })
}

/// Every resource (cluster-scoped and in every namespace) and every non-resource URL.
fn everything() -> Rules {
    let resource = cluster_resources(&[ALL], ALL, &[ALL]);
    let non_resource = NonResourcePolicyRule {
        verbs: strings(&[ALL]),
        non_resource_urls: strings(&[ALL]),
    };
    (vec![resource], vec![non_resource])
}

/// `resources` of `group` in every namespace and at cluster scope.
fn cluster_resources(verbs: &[&str], group: &str, resources: &[&str]) -> ResourcePolicyRule {
    ResourcePolicyRule {
        cluster_scope: Some(true),
        ..self::resources(verbs, group, resources, &[ALL])
    }
}

fn resources(
    verbs: &[&str],
    group: &str,
    resources: &[&str],
    namespaces: &[&str],
) -> ResourcePolicyRule {
    ResourcePolicyRule {
        verbs: strings(verbs),
        api_groups: vec![group.into()],
        resources: strings(resources),
        namespaces: Some(strings(namespaces)),
        cluster_scope: Some(false),
    }
}

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| s.to_string()).collect()
}

fn everyone() -> Vec<Subject> {
    groups(&[UNAUTHENTICATED, AUTHENTICATED])
}

fn groups(names: &[&str]) -> Vec<Subject> {
    let group = |name: &&str| Subject {
        kind: "Group".into(),
        group: Some(GroupSubject {
            name: name.to_string(),
        }),
        ..Subject::default()
    };
    names.iter().map(group).collect()
}

fn users(names: &[&str]) -> Vec<Subject> {
    let user = |name: &&str| Subject {
        kind: "User".into(),
        user: Some(UserSubject {
            name: name.to_string(),
        }),
        ..Subject::default()
    };
    names.iter().map(user).collect()
}

/// Service accounts of `kube-system` (`*`: all of them).
fn service_accounts(names: &[&str]) -> Vec<Subject> {
    let account = |name: &&str| Subject {
        kind: "ServiceAccount".into(),
        service_account: Some(ServiceAccountSubject {
            namespace: KUBE_SYSTEM.into(),
            name: name.to_string(),
        }),
        ..Subject::default()
    };
    names.iter().map(account).collect()
}
