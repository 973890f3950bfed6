//! Layer 2: auditing (`audit.k8s.io/v1`): the policy decides a level per request, events are
//! handed to the log and webhook backends through bounded queues.
