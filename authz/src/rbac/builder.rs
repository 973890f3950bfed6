//! The one writer's side: objects in, a fresh [`Policy`] out after each change, sharing with
//! the previous one everything the change did not touch.

use std::collections::HashSet;
use std::sync::Arc;

use serde_json::Value;

use super::objects::{Entry, ObjectError, RbacKind, RbacObject};
use super::policy::{BindingEntry, Policy, Posting, RoleEntry, Scope};
use super::sharded::ShardedMap;
use super::subjects::{subject_key, SubjectKey};

/// Follows the cluster's RBAC objects (apply, remove, relist) and publishes [`Policy`]
/// snapshots. Owned by one writer (the watch loop); readers hold the published `Arc<Policy>`s.
///
/// A change copies only the shards of the maps it touches (one namespace's maps for a Role or
/// RoleBinding), so its cost does not grow with the whole cluster; applying an object equal to
/// the one held changes nothing.
#[derive(Debug, Clone, Default)]
pub struct PolicyBuilder {
    policy: Policy,
}

impl PolicyBuilder {
    /// A builder holding no object.
    pub fn new() -> Self {
        PolicyBuilder::default()
    }

    /// The policy as it stands, to publish (cheap: shares everything with the builder).
    pub fn snapshot(&self) -> Arc<Policy> {
        Arc::new(self.policy.clone())
    }

    /// Adds or replaces one object (a watch's ADDED or MODIFIED).
    pub fn apply(&mut self, object: RbacObject) -> Result<(), ObjectError> {
        let entry = object.into_entry()?;
        self.apply_entry(entry);
        Ok(())
    }

    /// [`apply`](Self::apply) for an object read from JSON with its `kind` field.
    pub fn apply_json(&mut self, value: Value) -> Result<(), ObjectError> {
        self.apply(RbacObject::from_json(value)?)
    }

    /// Removes one object (a watch's DELETED); `namespace` is ignored for the cluster-wide
    /// kinds. Returns whether it was there.
    pub fn remove(&mut self, kind: RbacKind, namespace: &str, name: &str) -> bool {
        match kind {
            RbacKind::ClusterRole => self.policy.cluster.roles.remove(name).is_some(),
            RbacKind::ClusterRoleBinding => remove_binding(&mut self.policy.cluster, name),
            RbacKind::Role | RbacKind::RoleBinding => {
                let held = self.policy.namespaces.get(namespace).is_some_and(|scope| {
                    if kind == RbacKind::Role {
                        scope.roles.get(name).is_some()
                    } else {
                        scope.bindings.get(name).is_some()
                    }
                });
                if held {
                    self.change_namespace(namespace, |scope| {
                        if kind == RbacKind::Role {
                            scope.roles.remove(name);
                        } else {
                            remove_binding(scope, name);
                        }
                    });
                }
                held
            }
        }
    }

    /// [`remove`](Self::remove) for the object a DELETED event carries.
    pub fn remove_object(&mut self, object: &RbacObject) -> bool {
        self.remove(object.kind(), object.namespace(), object.name())
    }

    /// Replaces every object of `kind` with `objects` (a relist). Every object is checked first:
    /// on an error nothing changes. Objects equal to the ones held keep being shared.
    pub fn replace_all(
        &mut self,
        kind: RbacKind,
        objects: impl IntoIterator<Item = RbacObject>,
    ) -> Result<(), ObjectError> {
        let mut entries = Vec::new();
        for object in objects {
            if object.kind() != kind {
                return Err(ObjectError::WrongKind {
                    expected: kind,
                    found: object.kind().as_str().into(),
                });
            }
            entries.push(object.into_entry()?);
        }
        let kept: HashSet<(&str, &str)> = entries.iter().map(entry_key).collect();
        for (namespace, name) in self.held(kind) {
            if !kept.contains(&(&*namespace, &*name)) {
                self.remove(kind, &namespace, &name);
            }
        }
        for entry in entries {
            self.apply_entry(entry);
        }
        Ok(())
    }

    /// The (namespace, name) of every held object of `kind`.
    fn held(&self, kind: RbacKind) -> Vec<(Arc<str>, Arc<str>)> {
        let names_in = |scope: &Scope| -> Vec<Arc<str>> {
            if matches!(kind, RbacKind::Role | RbacKind::ClusterRole) {
                scope.roles.iter().map(|(name, _)| name.clone()).collect()
            } else {
                scope
                    .bindings
                    .iter()
                    .map(|(name, _)| name.clone())
                    .collect()
            }
        };
        let mut held = Vec::new();
        if kind.is_namespaced() {
            for (namespace, scope) in self.policy.namespaces.iter() {
                held.extend(names_in(scope).into_iter().map(|n| (namespace.clone(), n)));
            }
        } else {
            let cluster: Arc<str> = Arc::from("");
            held.extend(
                names_in(&self.policy.cluster)
                    .into_iter()
                    .map(|n| (cluster.clone(), n)),
            );
        }
        held
    }

    fn apply_entry(&mut self, entry: Entry) {
        match entry {
            Entry::ClusterRole { name, role } => {
                put_role(&mut self.policy.cluster.roles, name, role)
            }
            Entry::Role {
                namespace,
                name,
                role,
            } => {
                let unchanged = self
                    .policy
                    .namespaces
                    .get(&namespace)
                    .and_then(|scope| scope.roles.get(&name))
                    .is_some_and(|held| **held == *role);
                if !unchanged {
                    self.change_namespace(&namespace, |scope| {
                        put_role(&mut scope.roles, name, role)
                    });
                }
            }
            Entry::Binding(binding) if binding.namespace.is_empty() => {
                put_binding(&mut self.policy.cluster, binding)
            }
            Entry::Binding(binding) => {
                let namespace = binding.namespace.clone();
                let unchanged = self
                    .policy
                    .namespaces
                    .get(&namespace)
                    .and_then(|scope| scope.bindings.get(&binding.name))
                    .is_some_and(|held| **held == *binding);
                if !unchanged {
                    self.change_namespace(&namespace, |scope| put_binding(scope, binding));
                }
            }
        }
    }

    /// Runs `change` on the namespace's scope (copied first when shared), dropping the scope
    /// when it is left empty.
    fn change_namespace(&mut self, namespace: &str, change: impl FnOnce(&mut Scope)) {
        let scope = self.policy.namespaces.get_or_insert_default(namespace);
        change(Arc::make_mut(scope));
        if scope.is_empty() {
            self.policy.namespaces.remove(namespace);
        }
    }
}

fn entry_key(entry: &Entry) -> (&str, &str) {
    match entry {
        Entry::Role {
            namespace, name, ..
        } => (namespace, name),
        Entry::ClusterRole { name, .. } => ("", name),
        Entry::Binding(binding) => (&binding.namespace, &binding.name),
    }
}

fn put_role(roles: &mut ShardedMap<Arc<RoleEntry>>, name: Arc<str>, role: Arc<RoleEntry>) {
    if roles.get(&name).is_some_and(|held| **held == *role) {
        return;
    }
    roles.insert(name, role);
}

fn put_binding(scope: &mut Scope, binding: Arc<BindingEntry>) {
    if let Some(held) = scope.bindings.get(&binding.name) {
        if **held == *binding {
            return;
        }
        let held = held.clone();
        unindex(scope, &held);
    }
    index(scope, &binding);
    scope.bindings.insert(binding.name.clone(), binding);
}

fn remove_binding(scope: &mut Scope, name: &str) -> bool {
    match scope.bindings.remove(name) {
        Some(held) => {
            unindex(scope, &held);
            true
        }
        None => false,
    }
}

/// The postings map and key a subject is filed under.
fn postings_for<'s>(
    scope: &'s mut Scope,
    key: &SubjectKey,
) -> (&'s mut ShardedMap<Arc<Vec<Posting>>>, String) {
    match key {
        SubjectKey::UserName(name) => (&mut scope.by_user, name.clone()),
        SubjectKey::Group(name) => (&mut scope.by_group, name.clone()),
    }
}

fn index(scope: &mut Scope, binding: &Arc<BindingEntry>) {
    for (position, subject) in binding.subjects.iter().enumerate() {
        let Some(key) = subject_key(subject, &binding.namespace) else {
            continue;
        };
        let (map, key) = postings_for(scope, &key);
        let postings = Arc::make_mut(map.get_or_insert_default(&key));
        let order = postings
            .binary_search_by(|p| (&*p.binding.name, p.subject).cmp(&(&*binding.name, position)));
        if let Err(at) = order {
            postings.insert(
                at,
                Posting {
                    binding: binding.clone(),
                    subject: position,
                },
            );
        }
    }
}

fn unindex(scope: &mut Scope, binding: &BindingEntry) {
    for (position, subject) in binding.subjects.iter().enumerate() {
        let Some(key) = subject_key(subject, &binding.namespace) else {
            continue;
        };
        let (map, key) = postings_for(scope, &key);
        let Some(postings) = map.get_mut(&key) else {
            continue;
        };
        let postings = Arc::make_mut(postings);
        postings.retain(|p| !(*p.binding.name == *binding.name && p.subject == position));
        if postings.is_empty() {
            map.remove(&key);
        }
    }
}
