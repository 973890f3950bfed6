//! Layer 2: the `apiregistration.k8s.io/v1` REST API — `apiservices` and `apiservices/status`:
//! list (selectors, `limit`/`continue`, Table), get, watch, create, update, the four patch
//! formats, delete and deletecollection. Strategy and patches come from the config crate; the
//! objects from the [`Store`]. APIServices of the config file are listed too, read-only.

mod answers;
mod discovery;
mod openapi;
mod query;
mod table;
mod watch;

use std::sync::Arc;

use apiagg_config::strategy::{self, PatchKind};
use serde_json::{json, Value};

use self::query::Query;
use crate::store::{revision_of, Store, StoreError};

pub use self::answers::now;
pub use self::discovery::{discovery_entry, resource_list};
pub use self::openapi::{v2_spec, v3_document, V3_KEY};
pub use self::watch::WatchStream;

use self::answers::{details, done, new_uid, status, store_error, strictly, write_error};

/// The group apiagg serves itself.
pub const GROUP: &str = "apiregistration.k8s.io";
/// `/apis/apiregistration.k8s.io/v1`.
pub const PREFIX: &str = "/apis/apiregistration.k8s.io/v1";
/// The annotation on APIServices declared in the config file.
pub const DECLARED_BY: &str = "apiagg.io/declared-in";

/// A request for the API, as the request path read it.
pub struct ApiRequest<'a> {
    /// HTTP method.
    pub method: &'a str,
    /// The path after [`PREFIX`] (`""`, `/apiservices`, `/apiservices/<name>[/status]`).
    pub rest: &'a str,
    /// The raw query string.
    pub query: &'a str,
    /// `Accept`.
    pub accept: &'a str,
    /// `Content-Type`.
    pub content_type: &'a str,
    /// The body (already capped).
    pub body: &'a [u8],
}

/// What to answer.
pub enum Answer {
    /// A complete JSON answer.
    Done {
        /// Status code.
        code: u16,
        /// JSON body.
        body: Vec<u8>,
    },
    /// A watch stream.
    Watch(WatchStream),
}

/// The API over a store, with the config file's APIServices (status filled in) beside it.
pub struct Api<'a> {
    /// Where API-registered APIServices live.
    pub store: &'a dyn Store,
    /// APIServices declared in the config file (read-only here).
    pub declared: &'a [Value],
}

impl Api<'_> {
    /// Answers one request.
    pub async fn handle(&self, req: &ApiRequest<'_>) -> Answer {
        let query = Query::parse(req.query);
        let parts: Vec<&str> = req.rest.trim_matches('/').split('/').collect();
        match (req.method, parts.as_slice()) {
            ("GET", [""]) => done(200, &resource_list()),
            ("GET", ["apiservices"]) if query.watch => self.watch(&query).await,
            ("GET", ["apiservices"]) => self.list(&query, req.accept).await,
            ("POST", ["apiservices"]) => self.create(req.body, query.strict).await,
            ("DELETE", ["apiservices"]) => self.delete_collection(&query).await,
            ("GET", ["apiservices", name]) => self.get(name, req.accept).await,
            ("GET", ["apiservices", name, "status"]) => self.get(name, "").await,
            ("PUT", ["apiservices", name, sub @ ..]) if sub.len() <= 1 => {
                self.replace(name, sub == ["status"], req.body, query.strict)
                    .await
            }
            ("PATCH", ["apiservices", name, sub @ ..]) if sub.len() <= 1 => {
                self.patch(name, sub == ["status"], req, query.strict).await
            }
            ("DELETE", ["apiservices", name]) => self.delete(name).await,
            (_, ["apiservices", ..]) | (_, [""]) => status(
                405,
                "MethodNotAllowed",
                &format!("{} is not supported on this path", req.method),
                None,
            ),
            _ => status(
                404,
                "NotFound",
                "the server could not find the requested resource",
                None,
            ),
        }
    }

    fn declared(&self, name: &str) -> Option<&Value> {
        self.declared.iter().find(|o| o["metadata"]["name"] == name)
    }

    fn read_only(&self, name: &str) -> Option<Answer> {
        self.declared(name).map(|o| {
            let file = o["metadata"]["annotations"][DECLARED_BY].as_str().unwrap_or("the config file");
            let message = format!("apiservices.apiregistration.k8s.io {name:?} is declared in {file} and read-only through the API: change it there");
            status(405, "MethodNotAllowed", &message, Some(details(name)))
        })
    }

    fn objects(&self) -> (Vec<Value>, u64) {
        let (stored, revision) = self.store.list();
        let mut all: Vec<Value> = self.declared.to_vec();
        all.extend(stored.iter().map(|o| (**o).clone()));
        all.sort_by(|a, b| {
            a["metadata"]["name"]
                .as_str()
                .cmp(&b["metadata"]["name"].as_str())
        });
        (all, revision)
    }

    async fn list(&self, query: &Query, accept: &str) -> Answer {
        let (all, revision) = self.objects();
        let mut items: Vec<Value> = all.into_iter().filter(|o| query.selects(o)).collect();
        if let Some(after) = &query.continue_after {
            items.retain(|o| {
                o["metadata"]["name"]
                    .as_str()
                    .is_some_and(|n| n > after.as_str())
            });
        }
        let mut metadata = json!({"resourceVersion": revision.to_string()});
        if let Some(limit) = query.limit.filter(|l| *l > 0 && items.len() > *l) {
            items.truncate(limit);
            if let Some(last) = items.last().and_then(|o| o["metadata"]["name"].as_str()) {
                metadata["continue"] = json!(query::continue_token(last));
            }
        }
        if table::wanted(accept) {
            return done(200, &table::table(&items, metadata));
        }
        done(
            200,
            &json!({"kind": "APIServiceList", "apiVersion": "apiregistration.k8s.io/v1",
                "metadata": metadata, "items": items}),
        )
    }

    async fn get(&self, name: &str, accept: &str) -> Answer {
        let object = match self.declared(name) {
            Some(o) => o.clone(),
            None => match self.store.get(name) {
                Some(o) => (*o).clone(),
                None => return store_error(StoreError::NotFound(name.into())),
            },
        };
        if table::wanted(accept) {
            let revision = object["metadata"]["resourceVersion"].clone();
            return done(
                200,
                &table::table(&[object], json!({"resourceVersion": revision})),
            );
        }
        done(200, &object)
    }

    async fn create(&self, body: &[u8], strict: bool) -> Answer {
        let value: Value = match serde_json::from_slice(body) {
            Ok(v) => v,
            Err(e) => return status(400, "BadRequest", &format!("invalid JSON: {e}"), None),
        };
        if let Some(refused) = strictly(strict, &value) {
            return refused;
        }
        let name = value["metadata"]["name"].as_str().unwrap_or("").to_string();
        if self.declared(&name).is_some() {
            return store_error(StoreError::AlreadyExists(name));
        }
        match strategy::prepare_create(&value, &new_uid(), &now()) {
            Ok(object) => match self.store.create(&name, object).await {
                Ok(stored) => done(201, &stored),
                Err(e) => store_error(e),
            },
            Err(e) => write_error(&name, e),
        }
    }

    async fn replace(&self, name: &str, status_only: bool, body: &[u8], strict: bool) -> Answer {
        if let Some(refused) = self.read_only(name) {
            return refused;
        }
        let value: Value = match serde_json::from_slice(body) {
            Ok(v) => v,
            Err(e) => return status(400, "BadRequest", &format!("invalid JSON: {e}"), None),
        };
        if let Some(refused) = strictly(strict, &value) {
            return refused;
        }
        if value["metadata"]["name"]
            .as_str()
            .is_some_and(|n| n != name)
        {
            return status(
                400,
                "BadRequest",
                "the name in the body does not match the URL",
                None,
            );
        }
        let expected = value["metadata"]["resourceVersion"]
            .as_str()
            .and_then(|v| v.parse().ok());
        let Some(old) = self.store.get(name) else {
            return store_error(StoreError::NotFound(name.into()));
        };
        let next = if status_only {
            strategy::prepare_status_update(&old, &value)
        } else {
            strategy::prepare_update(&old, &value)
        };
        match next {
            Ok(object) => {
                match self
                    .store
                    .update(name, object, expected.or(Some(revision_of(&old))))
                    .await
                {
                    Ok(stored) => self.settle(name, stored).await,
                    Err(e) => store_error(e),
                }
            }
            Err(e) => write_error(name, e),
        }
    }

    async fn patch(
        &self,
        name: &str,
        status_only: bool,
        req: &ApiRequest<'_>,
        strict: bool,
    ) -> Answer {
        if let Some(refused) = self.read_only(name) {
            return refused;
        }
        let kind = match PatchKind::from_content_type(req.content_type) {
            Ok(kind) => kind,
            Err(e) => return write_error(name, e),
        };
        // Optimistic concurrency: re-read and re-apply when another write came in between.
        for _ in 0..5 {
            let Some(old) = self.store.get(name) else {
                if kind == PatchKind::Apply && !status_only {
                    return self.apply_create(name, req.body).await;
                }
                return store_error(StoreError::NotFound(name.into()));
            };
            let patched = match strategy::apply_patch(&old, kind, req.body) {
                Ok(p) => p,
                Err(e) => return write_error(name, e),
            };
            if let Some(refused) = strictly(strict, &patched) {
                return refused;
            }
            let next = if status_only {
                strategy::prepare_status_update(&old, &patched)
            } else {
                strategy::prepare_update(&old, &patched)
            };
            let object = match next {
                Ok(o) => o,
                Err(e) => return write_error(name, e),
            };
            match self
                .store
                .update(name, object, Some(revision_of(&old)))
                .await
            {
                Ok(stored) => return self.settle(name, stored).await,
                Err(StoreError::Conflict(_)) => continue,
                Err(e) => return store_error(e),
            }
        }
        store_error(StoreError::Conflict(name.into()))
    }

    /// Server-side apply of an object that does not exist yet: a create.
    async fn apply_create(&self, name: &str, body: &[u8]) -> Answer {
        let applied = match strategy::apply_patch(&json!({}), PatchKind::Apply, body) {
            Ok(v) => v,
            Err(e) => return write_error(name, e),
        };
        match strategy::prepare_create(&applied, &new_uid(), &now()) {
            Ok(object) => match self.store.create(name, object).await {
                Ok(stored) => done(201, &stored),
                Err(e) => store_error(e),
            },
            Err(e) => write_error(name, e),
        }
    }

    /// Deletes at once, or, while finalizers remain, marks the object with a
    /// `deletionTimestamp` and deletes it when an update removes the last one. A concurrent
    /// write (a status update) makes it read again.
    async fn delete(&self, name: &str) -> Answer {
        if let Some(refused) = self.read_only(name) {
            return refused;
        }
        for _ in 0..5 {
            let Some(current) = self.store.get(name) else {
                return store_error(StoreError::NotFound(name.into()));
            };
            let expected = Some(revision_of(&current));
            let finalizers = current["metadata"]["finalizers"]
                .as_array()
                .is_some_and(|f| !f.is_empty());
            let result = if !finalizers {
                self.store.delete(name, expected).await
            } else if current["metadata"].get("deletionTimestamp").is_some() {
                return done(200, &current);
            } else {
                let mut marked = (*current).clone();
                marked["metadata"]["deletionTimestamp"] = json!(now());
                marked["metadata"]["deletionGracePeriodSeconds"] = json!(0);
                self.store.update(name, marked, expected).await
            };
            match result {
                Ok(object) => return done(200, &object),
                Err(StoreError::Conflict(_)) => continue,
                Err(e) => return store_error(e),
            }
        }
        store_error(StoreError::Conflict(name.into()))
    }

    /// After a write: an object being deleted whose last finalizer is gone is deleted now.
    async fn settle(&self, name: &str, stored: Arc<Value>) -> Answer {
        let terminating = stored["metadata"].get("deletionTimestamp").is_some();
        let finalizers = stored["metadata"]["finalizers"]
            .as_array()
            .is_some_and(|f| !f.is_empty());
        if !terminating || finalizers {
            return done(200, &stored);
        }
        match self.store.delete(name, Some(revision_of(&stored))).await {
            Ok(last) => done(200, &last),
            Err(e) => store_error(e),
        }
    }

    async fn delete_collection(&self, query: &Query) -> Answer {
        let (stored, revision) = self.store.list();
        let mut deleted = Vec::new();
        for object in stored.iter().filter(|o| query.selects(o)) {
            let name = object["metadata"]["name"].as_str().unwrap_or("");
            match self.store.delete(name, None).await {
                Ok(last) => deleted.push((*last).clone()),
                Err(StoreError::NotFound(_)) => {}
                Err(e) => return store_error(e),
            }
        }
        done(
            200,
            &json!({"kind": "APIServiceList", "apiVersion": "apiregistration.k8s.io/v1",
                "metadata": {"resourceVersion": revision.to_string()}, "items": deleted}),
        )
    }

    async fn watch(&self, query: &Query) -> Answer {
        let from = query.resource_version.filter(|rv| *rv > 0);
        let initial = query.send_initial_events.unwrap_or(from.is_none());
        let watch = match self.store.watch(from) {
            Ok(w) => w,
            Err(e) => return store_error(e),
        };
        let mut first: Vec<(String, Arc<Value>)> = Vec::new();
        if initial {
            let (all, _) = self.objects();
            first.extend(
                all.into_iter()
                    .filter(|o| query.selects(o))
                    .map(|o| ("ADDED".to_string(), Arc::new(o))),
            );
        }
        Answer::Watch(WatchStream::new(first, watch, query.clone()))
    }
}
