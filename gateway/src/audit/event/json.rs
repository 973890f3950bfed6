//! Events as JSON, field by field in kube-apiserver's order, leaving out what Go's `omitempty`
//! leaves out.

use std::net::IpAddr;
use std::sync::Arc;

use serde::ser::{SerializeMap, SerializeSeq};
use serde::{Serialize, Serializer};
use serde_json::value::RawValue;

use super::{
    micro_time, Body, Common, Event, ResponseStatus, API_VERSION, GROUP, NAME, NAMESPACE,
    REQUEST_OBJECT_ANNOTATION, RESOURCE, RESPONSE_OBJECT_ANNOTATION, SUBRESOURCE, URI, USER_AGENT,
    VERSION,
};
use crate::audit::request::Identity;

/// An event as JSON; `typed` adds `kind` and `apiVersion` (a log line has them, the items of an
/// `EventList` do not).
pub struct Json<'a> {
    pub event: &'a Event,
    pub typed: bool,
}

impl Serialize for Json<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let e = self.event;
        let c = &*e.common;
        let mut map = serializer.serialize_map(None)?;
        if self.typed {
            map.serialize_entry("kind", "Event")?;
            map.serialize_entry("apiVersion", API_VERSION)?;
        }
        map.serialize_entry("level", e.level.as_str())?;
        map.serialize_entry("auditID", c.id.as_str())?;
        map.serialize_entry("stage", e.stage.as_str())?;
        map.serialize_entry("requestURI", c.field(URI))?;
        map.serialize_entry("verb", &*c.verb)?;
        map.serialize_entry("user", &User(&*c.user))?;
        if let Some(user) = &e.impersonated {
            map.serialize_entry("impersonatedUser", &User(&**user))?;
        }
        if !c.source_ips.is_empty() {
            map.serialize_entry("sourceIPs", &Ips(&c.source_ips))?;
        }
        non_empty(&mut map, "userAgent", c.field(USER_AGENT))?;
        if c.resource_request {
            map.serialize_entry("objectRef", &ObjectRef(c))?;
        }
        if let Some(status) = &e.status {
            map.serialize_entry("responseStatus", &Status(status))?;
        }
        let (request, response) = (body(&e.request_object), body(&e.response_object));
        if let Some(Ok(raw)) = request {
            map.serialize_entry("requestObject", raw)?;
        }
        if let Some(Ok(raw)) = response {
            map.serialize_entry("responseObject", raw)?;
        }
        let received = micro_time(c.received);
        map.serialize_entry("requestReceivedTimestamp", &format_args!("{received}"))?;
        let stage = micro_time(e.stage_time);
        map.serialize_entry("stageTimestamp", &format_args!("{stage}"))?;
        let mut notes: Vec<(&str, &str)> = e
            .annotations
            .iter()
            .map(|(k, v)| (*k, v.as_str()))
            .collect();
        if let Some(Err(why)) = request {
            notes.push((REQUEST_OBJECT_ANNOTATION, why));
        }
        if let Some(Err(why)) = response {
            notes.push((RESPONSE_OBJECT_ANNOTATION, why));
        }
        if !notes.is_empty() {
            notes.sort_by(|a, b| a.0.cmp(b.0));
            map.serialize_entry("annotations", &Pairs(&notes))?;
        }
        map.end()
    }
}

fn body(body: &Option<Arc<Body>>) -> Option<Result<&RawValue, &str>> {
    body.as_deref().map(Body::rendered)
}

fn non_empty<M: SerializeMap>(map: &mut M, key: &str, value: &str) -> Result<(), M::Error> {
    if value.is_empty() {
        return Ok(());
    }
    map.serialize_entry(key, value)
}

/// `authentication.k8s.io/v1` `UserInfo`.
struct User<'a>(&'a dyn Identity);

impl Serialize for User<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(None)?;
        non_empty(&mut map, "username", self.0.username())?;
        non_empty(&mut map, "uid", self.0.uid())?;
        if !self.0.groups().is_empty() {
            map.serialize_entry("groups", self.0.groups())?;
        }
        let extra = self.0.extra();
        if !extra.is_empty() {
            let mut sorted: Vec<&(String, Vec<String>)> = extra.iter().collect();
            sorted.sort_by(|a, b| a.0.cmp(&b.0));
            map.serialize_entry("extra", &Pairs(&sorted))?;
        }
        map.end()
    }
}

/// Key-value pairs written as a JSON object, in the given order.
struct Pairs<'a, T>(&'a [T]);

impl<K: Serialize, V: Serialize> Serialize for Pairs<'_, (K, V)> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(self.0.len()))?;
        for (k, v) in self.0 {
            map.serialize_entry(k, v)?;
        }
        map.end()
    }
}

impl<K: Serialize, V: Serialize> Serialize for Pairs<'_, &(K, V)> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(self.0.len()))?;
        for (k, v) in self.0.iter().copied() {
            map.serialize_entry(k, v)?;
        }
        map.end()
    }
}

struct Ips<'a>(&'a [IpAddr]);

impl Serialize for Ips<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut seq = serializer.serialize_seq(Some(self.0.len()))?;
        for ip in self.0 {
            seq.serialize_element(&format_args!("{ip}"))?;
        }
        seq.end()
    }
}

struct ObjectRef<'a>(&'a Common);

impl Serialize for ObjectRef<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let c = self.0;
        let mut map = serializer.serialize_map(None)?;
        non_empty(&mut map, "resource", c.field(RESOURCE))?;
        non_empty(&mut map, "namespace", c.field(NAMESPACE))?;
        non_empty(&mut map, "name", c.field(NAME))?;
        non_empty(&mut map, "apiGroup", c.field(GROUP))?;
        non_empty(&mut map, "apiVersion", c.field(VERSION))?;
        non_empty(&mut map, "subresource", c.field(SUBRESOURCE))?;
        map.end()
    }
}

/// `metav1.Status` as upstream writes it in events: `metadata` always, `code` unless 0.
struct Status<'a>(&'a ResponseStatus);

impl Serialize for Status<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(None)?;
        map.serialize_entry("metadata", &Pairs::<(&str, &str)>(&[]))?;
        if let Some(summary) = &self.0.summary {
            non_empty(&mut map, "status", &summary.status)?;
            non_empty(&mut map, "message", &summary.message)?;
            non_empty(&mut map, "reason", &summary.reason)?;
        }
        if self.0.code != 0 {
            map.serialize_entry("code", &self.0.code)?;
        }
        map.end()
    }
}

/// `audit.k8s.io/v1` `EventList`, the body of a webhook request.
pub struct EventList<'a>(pub &'a [Arc<Event>]);

impl Serialize for EventList<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        struct Items<'a>(&'a [Arc<Event>]);
        impl Serialize for Items<'_> {
            fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                let mut seq = serializer.serialize_seq(Some(self.0.len()))?;
                for event in self.0 {
                    seq.serialize_element(&Json {
                        event,
                        typed: false,
                    })?;
                }
                seq.end()
            }
        }
        let mut map = serializer.serialize_map(Some(4))?;
        map.serialize_entry("kind", "EventList")?;
        map.serialize_entry("apiVersion", API_VERSION)?;
        map.serialize_entry("metadata", &Pairs::<(&str, &str)>(&[]))?;
        map.serialize_entry("items", &Items(self.0))?;
        map.end()
    }
}
