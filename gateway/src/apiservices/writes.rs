//! The writes: create, update (PUT, main resource and `/status`), the four patch formats with
//! server-side apply among them, delete and deletecollection. The options, the strategy, field
//! ownership and unknown-field warnings come from the strategy crate; this file only reads the
//! request and talks to the store, re-reading on a concurrent write.

use apiagg_apis::Reason;
use std::sync::Arc;
use std::time::Duration;

use apiagg_config::refuse_owned;
use apiagg_strategy::managed_fields::Subresource;
use apiagg_strategy::{self as strategy, PatchKind, Prepared, Verb, WriteError, WriteOptions};
use serde_json::{json, Value};

use super::answers::{
    deleted, done, generated_name, new_uid, now, resource_version_required, status, store_error,
    uid_precondition_failed, unavailable, warned, write_error,
};
use super::dry_run::dry_run;
use super::media::{self, BodyFormat};
use super::query::Query;
use super::work::{self, WorkError};
use super::{Answer, Api, ApiRequest, LocalGroupVersion};
use apiagg_store::{revision_of, StoreError};

/// The checked options of a write, or the 422 that refuses them.
fn options(verb: Verb, query: &Query, req: &ApiRequest<'_>) -> Result<WriteOptions, Answer> {
    WriteOptions::check(
        verb,
        query.field_manager.as_deref(),
        query.force.as_deref(),
        query.field_validation.as_deref(),
        req.user_agent,
    )
    .map_err(|e| write_error(WriteError::Options(e)))
}

fn subresource(status_only: bool) -> Subresource {
    if status_only {
        Subresource::Status
    } else {
        Subresource::Main
    }
}

/// Upper bound of one patch or apply (it runs off the async workers).
const WORK_BUDGET: Duration = Duration::from_secs(5);

/// Seconds a write waits for the delegate's group-versions (`Retry-After`).
const DELEGATE_RETRY_AFTER: u32 = 1;

/// Runs a patch, an apply or a YAML decode on the patch threads within [`WORK_BUDGET`]: past
/// it a 504 Status, a full line a 429, a lost job a 500.
async fn off_thread<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, WriteError> + Send + 'static,
) -> Result<Result<T, WriteError>, Answer> {
    work::run(WORK_BUDGET, work).await.map_err(|e| {
        let text = e.to_string();
        match e {
            WorkError::Timeout(_) => status(Reason::Timeout, &text, None),
            WorkError::Busy => status(Reason::TooManyRequests, &text, None),
            WorkError::Lost => status(Reason::InternalError, &text, None),
        }
    })
}

/// The options and the body of a create or an update. JSON is read here (its size is its
/// cost); YAML, whose aliases can multiply it, is decoded by the strategy's bounded decoder on
/// the patch threads, as an apply is.
async fn read(
    verb: Verb,
    query: &Query,
    req: &ApiRequest<'_>,
) -> Result<(WriteOptions, Value), Answer> {
    let format = media::body_format(req.content_type)?;
    let options = options(verb, query, req)?;
    let value = match format {
        BodyFormat::Json => serde_json::from_slice(req.body)
            .map_err(|e| status(Reason::BadRequest, &format!("invalid JSON: {e}"), None))?,
        BodyFormat::Yaml => {
            let body = req.body.to_vec();
            off_thread(move || strategy::yaml_body(&body))
                .await?
                .map_err(write_error)?
        }
    };
    Ok((options, value))
}

impl Api<'_> {
    /// The delegate's group-versions, or the 503 a route-changing write gets while they are not
    /// known (until the first read of the delegate's `/api` and `/apis`).
    fn delegate_known(&self) -> Result<&[LocalGroupVersion], Answer> {
        self.delegate_groups.ok_or_else(|| {
            unavailable(
                "the delegate's group-versions are not known yet: APIServices cannot be written until they are, please try again",
                DELEGATE_RETRY_AFTER,
            )
        })
    }

    /// Refuses an object for a group-version Kubernetes or the delegate owns.
    fn owned(&self, name: &str, object: &Value, delegate: &[LocalGroupVersion]) -> Option<Answer> {
        let spec = &object["spec"];
        let group = spec["group"].as_str().unwrap_or("");
        let version = spec["version"].as_str().unwrap_or("");
        refuse_owned(name, group, version, delegate)
            .err()
            .map(|e| write_error(WriteError::Invalid(e)))
    }

    /// Refuses a validated object of a built-in group at once, then (once they are known, else
    /// 503) one of the delegate's group-versions.
    fn taken(&self, name: &str, object: &Value) -> Option<Answer> {
        if let Some(refused) = self.owned(name, object, &[]) {
            return Some(refused);
        }
        match self.delegate_known() {
            Ok(delegate) => self.owned(name, object, delegate),
            Err(answer) => Some(answer),
        }
    }

    /// A create in kube-apiserver's order: a name from `generateName` when none is given, the
    /// object decoded and validated, then whether the name exists and whose group it is.
    pub(super) async fn create(&self, req: &ApiRequest<'_>, query: &Query) -> Answer {
        let dry = match dry_run(query.dry_run.as_deref(), "CreateOptions") {
            Ok(dry) => dry,
            Err(answer) => return answer,
        };
        let (options, mut value) = match read(Verb::Create, query, req).await {
            Ok(read) => read,
            Err(answer) => return answer,
        };
        if let Some(meta) = value.get_mut("metadata").and_then(Value::as_object_mut) {
            let named = meta
                .get("name")
                .and_then(Value::as_str)
                .is_some_and(|n| !n.is_empty());
            let prefix = meta.get("generateName").and_then(Value::as_str);
            if let Some(prefix) = prefix.filter(|p| !named && !p.is_empty()) {
                let name = generated_name(prefix);
                meta.insert("name".into(), json!(name));
            }
        }
        let Prepared { object, warnings } =
            match strategy::create(&value, &new_uid(), &now(), &options) {
                Ok(prepared) => prepared,
                Err(e) => return write_error(e),
            };
        let name = object["metadata"]["name"]
            .as_str()
            .unwrap_or("")
            .to_string();
        if self.declared(&name).is_some() {
            return store_error(StoreError::AlreadyExists(name));
        }
        if let Some(refused) = self.taken(&name, &object) {
            return refused;
        }
        match self.commit_create(&name, object, dry).await {
            Ok(stored) => warned(201, &stored, warnings),
            Err(e) => store_error(e),
        }
    }

    /// An update (PUT) in kube-apiserver's order: the name in the body, the stored object, its
    /// UID and `resourceVersion` (required: APIServices allow no unconditional update), then
    /// validation, then whose group it is.
    pub(super) async fn replace(
        &self,
        name: &str,
        status_only: bool,
        req: &ApiRequest<'_>,
        query: &Query,
    ) -> Answer {
        if let Some(refused) = self.read_only(name) {
            return refused;
        }
        let dry = match dry_run(query.dry_run.as_deref(), "UpdateOptions") {
            Ok(dry) => dry,
            Err(answer) => return answer,
        };
        let (options, value) = match read(Verb::Update, query, req).await {
            Ok(read) => read,
            Err(answer) => return answer,
        };
        let meta = &value["metadata"];
        let message = match meta["name"].as_str().unwrap_or("") {
            "" => format!("the name of the object ({name} based on URL) was undeterminable: name must be provided"),
            sent if sent != name => format!("the name of the object ({sent}) does not match the name on the URL ({name})"),
            _ => String::new(),
        };
        if !message.is_empty() {
            return status(Reason::BadRequest, &message, None);
        }
        let Some(old) = self.store.get(name) else {
            return store_error(StoreError::NotFound(name.into()));
        };
        let stored_uid = old["metadata"]["uid"].as_str().unwrap_or("");
        let sent_uid = meta["uid"].as_str().unwrap_or("");
        if !sent_uid.is_empty() && sent_uid != stored_uid {
            return uid_precondition_failed(name, sent_uid, stored_uid);
        }
        let Some(expected) = meta["resourceVersion"].as_str().filter(|v| !v.is_empty()) else {
            return resource_version_required(name);
        };
        let expected = expected.parse().ok().filter(|v| *v == revision_of(&old));
        let Some(expected) = expected else {
            return store_error(StoreError::Conflict(name.into()));
        };
        let sub = subresource(status_only);
        let Prepared { object, warnings } =
            match strategy::update(&old, &value, sub, &now(), &options) {
                Ok(prepared) => prepared,
                Err(e) => return write_error(e),
            };
        // A `/status` update changes no route: it is not checked for owners.
        let refused = if status_only {
            None
        } else {
            self.taken(name, &object)
        };
        if let Some(refused) = refused {
            return refused;
        }
        match self.commit_update(name, object, Some(expected), dry).await {
            Ok(stored) => self.settle(name, stored, warnings, dry).await,
            Err(e) => store_error(e),
        }
    }

    pub(super) async fn patch(
        &self,
        name: &str,
        status_only: bool,
        req: &ApiRequest<'_>,
        query: &Query,
    ) -> Answer {
        if let Some(refused) = self.read_only(name) {
            return refused;
        }
        let dry = match dry_run(query.dry_run.as_deref(), "PatchOptions") {
            Ok(dry) => dry,
            Err(answer) => return answer,
        };
        let kind = match PatchKind::from_content_type(req.content_type) {
            Ok(kind) => kind,
            Err(e) => return write_error(e),
        };
        let options = match options(Verb::Patch(kind), query, req) {
            Ok(o) => o,
            Err(answer) => return answer,
        };
        let sub = subresource(status_only);
        // A `/status` patch changes no route: it neither waits nor is checked for owners.
        let delegate = match self.delegate_known() {
            _ if status_only => None,
            Ok(groups) => Some(groups),
            Err(answer) => return answer,
        };
        let body: Arc<[u8]> = Arc::from(req.body);
        // Optimistic concurrency: re-read and re-apply when another write came in between.
        for _ in 0..5 {
            let Some(old) = self.store.get(name) else {
                if kind != PatchKind::Apply || status_only {
                    return store_error(StoreError::NotFound(name.into()));
                }
                match self
                    .apply_create(name, &body, &options, delegate, dry)
                    .await
                {
                    Some(answer) => return answer,
                    None => continue,
                }
            };
            let work = {
                let (old, body, name) = (old.clone(), body.clone(), name.to_string());
                let options = options.clone();
                move || {
                    if kind == PatchKind::Apply {
                        strategy::apply(Some(&old), &body, &name, "", sub, &now(), &options)
                    } else {
                        strategy::apply_patch(&old, kind, &body).and_then(|patched| {
                            strategy::update_patched(&old, &patched, sub, &now(), &options)
                        })
                    }
                }
            };
            let next = match off_thread(work).await {
                Ok(next) => next,
                Err(answer) => return answer,
            };
            let Prepared { object, warnings } = match next {
                Ok(p) => p,
                Err(e) => return write_error(e),
            };
            if let Some(refused) = delegate.and_then(|d| self.owned(name, &object, d)) {
                return refused;
            }
            match self
                .commit_update(name, object, Some(revision_of(&old)), dry)
                .await
            {
                Ok(stored) => return self.settle(name, stored, warnings, dry).await,
                Err(StoreError::Conflict(_)) => continue,
                Err(e) => return store_error(e),
            }
        }
        store_error(StoreError::Conflict(name.into()))
    }

    /// Server-side apply of an object that does not exist yet: a create. `None` when another
    /// request created it meanwhile (apply to it then).
    async fn apply_create(
        &self,
        name: &str,
        body: &Arc<[u8]>,
        options: &WriteOptions,
        delegate: Option<&[LocalGroupVersion]>,
        dry: bool,
    ) -> Option<Answer> {
        let work = {
            let (body, name, options) = (body.clone(), name.to_string(), options.clone());
            move || {
                let uid = new_uid();
                strategy::apply(
                    None,
                    &body,
                    &name,
                    &uid,
                    Subresource::Main,
                    &now(),
                    &options,
                )
            }
        };
        let prepared = match off_thread(work).await {
            Ok(prepared) => prepared,
            Err(answer) => return Some(answer),
        };
        if let Ok(Prepared { object, .. }) = &prepared {
            let refused = delegate.and_then(|d| self.owned(name, object, d));
            if refused.is_some() {
                return refused;
            }
        }
        Some(match prepared {
            Ok(Prepared { object, warnings }) => {
                match self.commit_create(name, object, dry).await {
                    Ok(stored) => warned(201, &stored, warnings),
                    Err(StoreError::AlreadyExists(_)) => return None,
                    Err(e) => store_error(e),
                }
            }
            Err(e) => write_error(e),
        })
    }

    /// Deletes at once, or, while finalizers remain, marks the object with a
    /// `deletionTimestamp` and deletes it when an update removes the last one. A concurrent
    /// write (a status update) makes it read again.
    pub(super) async fn delete(&self, name: &str, query: &Query) -> Answer {
        if let Some(refused) = self.read_only(name) {
            return refused;
        }
        let dry = match dry_run(query.dry_run.as_deref(), "DeleteOptions") {
            Ok(dry) => dry,
            Err(answer) => return answer,
        };
        for _ in 0..5 {
            let Some(current) = self.store.get(name) else {
                return store_error(StoreError::NotFound(name.into()));
            };
            let expected = Some(revision_of(&current));
            let finalizers = current["metadata"]["finalizers"]
                .as_array()
                .is_some_and(|f| !f.is_empty());
            let result = if !finalizers {
                match self.commit_delete(name, expected, dry).await {
                    Ok(object) => return deleted(&object),
                    Err(e) => Err(e),
                }
            } else if current["metadata"].get("deletionTimestamp").is_some() {
                return done(200, &current);
            } else {
                let mut marked = (*current).clone();
                marked["metadata"]["deletionTimestamp"] = json!(now());
                marked["metadata"]["deletionGracePeriodSeconds"] = json!(0);
                self.commit_update(name, marked, expected, dry).await
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
    async fn settle(
        &self,
        name: &str,
        stored: Arc<Value>,
        warnings: Vec<String>,
        dry: bool,
    ) -> Answer {
        let terminating = stored["metadata"].get("deletionTimestamp").is_some();
        let finalizers = stored["metadata"]["finalizers"]
            .as_array()
            .is_some_and(|f| !f.is_empty());
        if !terminating || finalizers {
            return warned(200, &stored, warnings);
        }
        match (self.commit_delete(name, Some(revision_of(&stored)), dry)).await {
            Ok(last) => warned(200, &last, warnings),
            Err(e) => store_error(e),
        }
    }

    pub(super) async fn delete_collection(&self, query: &Query) -> Answer {
        let dry = match dry_run(query.dry_run.as_deref(), "DeleteOptions") {
            Ok(dry) => dry,
            Err(answer) => return answer,
        };
        let (stored, revision) = self.store.list();
        let mut deleted = Vec::new();
        for object in stored.iter().filter(|o| query.selects(o)) {
            let name = object["metadata"]["name"].as_str().unwrap_or("");
            match self.commit_delete(name, None, dry).await {
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
}
