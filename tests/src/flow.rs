//! API Priority and Fairness objects for the suites that need small, predictable levels.

/// A `Limited` PriorityLevelConfiguration with one seat's worth of shares, lending and
/// borrowing nothing, answering beyond its seats as `response` says (a YAML flow mapping).
pub fn level(name: &str, response: &str) -> String {
    format!(
        "apiVersion: flowcontrol.apiserver.k8s.io/v1\nkind: PriorityLevelConfiguration\n\
         metadata: {{name: {name}}}\nspec:\n  type: Limited\n  limited:\n    \
         nominalConcurrencyShares: 1\n    lendablePercent: 0\n    borrowingLimitPercent: 0\n    \
         limitResponse: {response}\n---\n"
    )
}

/// A FlowSchema sending every request of `group` to `level`, one flow per user.
pub fn schema(name: &str, group: &str, level: &str) -> String {
    format!(
        "apiVersion: flowcontrol.apiserver.k8s.io/v1\nkind: FlowSchema\nmetadata: {{name: {name}}}\n\
         spec:\n  priorityLevelConfiguration: {{name: {level}}}\n  matchingPrecedence: 500\n  \
         distinguisherMethod: {{type: ByUser}}\n  rules:\n  - subjects: [{{kind: Group, group: {{name: {group}}}}}]\n    \
         resourceRules: [{{verbs: ['*'], apiGroups: ['*'], resources: ['*'], namespaces: ['*'], clusterScope: true}}]\n    \
         nonResourceRules: [{{verbs: ['*'], nonResourceURLs: ['*']}}]\n---\n"
    )
}

/// A queuing `limitResponse` with one queue per flow (a hand of one): shuffle sharding with
/// larger hands lets two flows share queues, and then fairness between them is only
/// approximate, as upstream.
pub const QUEUE_PER_FLOW: &str =
    "{type: Queue, queuing: {queues: 64, handSize: 1, queueLengthLimit: 100}}";

/// The flags that make the levels above one seat each: the server's concurrency limits.
pub const SMALL_SERVER: [&str; 4] = [
    "--max-requests-inflight",
    "100",
    "--max-mutating-requests-inflight",
    "100",
];
