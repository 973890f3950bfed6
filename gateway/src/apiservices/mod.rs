//! Layer 2: the `apiregistration.k8s.io/v1` REST API — `apiservices` and `apiservices/status`:
//! list (selectors, `limit`/`continue`, Table), get, watch here; create, update, the four patch
//! formats (server-side apply with field ownership), delete and deletecollection in `writes`.
//! Strategy, patches and `managedFields` come from the strategy crate; the objects from the
//! [`Store`]. APIServices of the config file are listed too, read-only.

mod answers;
mod discovery;
mod dry_run;
mod media;
mod openapi;
mod query;
mod schemas;
mod table;
mod watch;
mod work;
mod writes;

use apiagg_apis::Reason;
use std::sync::Arc;

use apiagg_apis::Failure;
use apiagg_config::LocalGroupVersion;
use apiagg_requestinfo::RequestInfo;
use serde_json::{json, Value};

use self::query::Query;
use apiagg_store::{Store, StoreError};

pub use self::discovery::{discovery_entry, resource_list};
pub use self::media::cbor_answer;
pub use self::openapi::{v2_spec, v3_document, V3_KEY};
pub use self::watch::WatchStream;

use self::answers::{details, done, status, store_error};

/// The group apiagg serves itself.
pub const GROUP: &str = "apiregistration.k8s.io";
/// The route key of the API (`<group>/<version>`).
pub use apiagg_apis::GROUP_VERSION;
/// The annotation on APIServices declared in the config file.
pub const DECLARED_BY: &str = "apiagg.io/declared-in";

/// A request for the API, as the request path read it.
pub struct ApiRequest<'a> {
    /// HTTP method.
    pub method: &'a str,
    /// The request's one parse (path under `/apis/apiregistration.k8s.io/v1`, verb, query).
    pub info: &'a RequestInfo<'a>,
    /// `Accept`.
    pub accept: &'a str,
    /// `Content-Type`.
    pub content_type: &'a str,
    /// The body (already capped).
    pub body: &'a [u8],
    /// `User-Agent`: the field manager of a write that names none.
    pub user_agent: &'a str,
}

/// What to answer.
pub enum Answer {
    /// A complete JSON answer.
    Done {
        /// Status code.
        code: u16,
        /// JSON body.
        body: Vec<u8>,
        /// One `Warning: 299 - "<text>"` header each (unknown fields under `fieldValidation=Warn`).
        warnings: Vec<String>,
    },
    /// A watch stream.
    Watch(Box<WatchStream>),
    /// A failure `Status`, sent with `Retry-After` when it has one.
    Failed {
        /// What the Status says.
        failure: Failure,
        /// Seconds for `Retry-After`.
        retry_after: Option<u32>,
    },
}

/// The API over a store, with the config file's APIServices (status filled in) beside it.
pub struct Api<'a> {
    /// Where API-registered APIServices live.
    pub store: &'a dyn Store,
    /// APIServices declared in the config file (read-only here).
    pub declared: &'a [Value],
    /// The group-versions the delegate serves; `None` while they are not known (a delegate is
    /// configured but not read yet): route-changing writes wait for them.
    pub delegate_groups: Option<&'a [LocalGroupVersion]>,
}

impl Api<'_> {
    /// Answers one request.
    pub async fn handle(&self, req: &ApiRequest<'_>) -> Answer {
        let query = match Query::from_params(&req.info.query) {
            Ok(query) => query,
            Err(e) => return status(Reason::BadRequest, &e.to_string(), None),
        };
        if let Err(refused) = media::negotiate(req.accept) {
            return refused;
        }
        let info = req.info;
        if !info.namespace.is_empty() {
            // APIServices are cluster-scoped.
            return status(
                Reason::NotFound,
                "the server could not find the requested resource",
                None,
            );
        }
        let parts: Vec<&str> = info.parts.split('/').collect();
        match (req.method, parts.as_slice()) {
            ("GET", [""]) => done(200, &resource_list()),
            ("GET", ["apiservices"]) if info.verb == "watch" => self.watch(&query).await,
            ("GET", ["apiservices"]) => self.list(&query, req.accept).await,
            ("POST", ["apiservices"]) => self.create(req, &query).await,
            ("DELETE", ["apiservices"]) => self.delete_collection(&query).await,
            ("GET", ["apiservices", name]) => self.get(name, req.accept).await,
            ("GET", ["apiservices", name, "status"]) => self.get(name, "").await,
            ("PUT", ["apiservices", name]) => self.replace(name, false, req, &query).await,
            ("PUT", ["apiservices", name, "status"]) => self.replace(name, true, req, &query).await,
            ("PATCH", ["apiservices", name]) => self.patch(name, false, req, &query).await,
            ("PATCH", ["apiservices", name, "status"]) => self.patch(name, true, req, &query).await,
            ("DELETE", ["apiservices", name]) => self.delete(name, &query).await,
            // `status` is the only subresource; any other is unknown for every verb.
            (_, ["apiservices", _, sub, ..]) if *sub != "status" || parts.len() > 3 => status(
                Reason::NotFound,
                "the server could not find the requested resource",
                Some(json!({})),
            ),
            (_, ["apiservices", ..]) | (_, [""]) => status(
                Reason::MethodNotAllowed,
                &format!("{} is not supported on this path", req.method),
                None,
            ),
            _ => status(
                Reason::NotFound,
                "the server could not find the requested resource",
                None,
            ),
        }
    }

    fn declared(&self, name: &str) -> Option<&Value> {
        self.declared.iter().find(|o| o["metadata"]["name"] == name)
    }

    /// The refusal of a write to a declared (or the delegate's) APIService. A stored object of
    /// the same name comes first: one an owner displaces can always be changed or removed.
    fn read_only(&self, name: &str) -> Option<Answer> {
        if self.store.get(name).is_some() {
            return None;
        }
        self.declared(name).map(|o| {
            let file = o["metadata"]["annotations"][DECLARED_BY].as_str().unwrap_or("the config file");
            let message = format!("apiservices.apiregistration.k8s.io {name:?} is declared in {file} and read-only through the API: change it there");
            status(Reason::MethodNotAllowed, &message, Some(details(name)))
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

    /// The stored object first (so one that is displaced can always be seen), else the declared
    /// or the delegate's.
    async fn get(&self, name: &str, accept: &str) -> Answer {
        let object = match self.store.get(name) {
            Some(o) => (*o).clone(),
            None => match self.declared(name) {
                Some(o) => o.clone(),
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
        Answer::Watch(Box::new(WatchStream::new(first, watch, query.clone())))
    }
}
