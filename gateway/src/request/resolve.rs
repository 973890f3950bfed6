//! Step 7 of the request path: where an authorized request goes, resolved once: what apiagg
//! answers itself (answers.rs, openapi.rs), the APIService API, a remote APIService's backend
//! (503 while none of its endpoints is available), or the delegate (404 without one, 503
//! before the mux is complete).

use std::sync::Arc;

use apiagg_requestinfo::RequestInfo;
use pingora_http::RequestHeader;

use super::answers;
use super::classify::Route;
use super::ctx::RequestCtx;
use super::openapi::{self, OpenApiPath};
use super::refusal::Refusal;
use super::reply::Reply;
use super::service::ApiaggProxy;
use super::statusz::{self, Facts};
use crate::backends::{RouteTable, Upstream};
use crate::state::OpenApiV2;
use apiagg_observe::RouteKind;

/// Where a request goes, resolved once after it was authorized.
pub(super) enum Target<'r> {
    /// apiagg answers it itself (discovery, OpenAPI, status, metrics).
    Own(RouteKind, Reply),
    /// The APIService API (apiservice_api.rs).
    ApiServiceApi,
    /// A remote APIService's backend, some endpoint of it available.
    Remote(Arc<Upstream>),
    /// A remote APIService none of whose endpoints is available (named).
    Unavailable(&'r str),
    /// The delegate kube-apiserver.
    Delegate(Arc<Upstream>),
    /// Nobody: no delegate is configured.
    Nowhere,
}

impl ApiaggProxy {
    /// Where `route` goes, in `routes`.
    pub(super) fn resolve<'r>(
        &self,
        req: &RequestHeader,
        ctx: &mut RequestCtx,
        route: Route<'_>,
        info: &RequestInfo<'_>,
        routes: &'r RouteTable,
    ) -> Target<'r> {
        if let Some((kind, reply)) = self.served_here(req, ctx, route) {
            return Target::Own(kind, reply);
        }
        // The APIService API is apiagg's own (never the delegate's).
        if info.group_version_key() == Some(crate::apiservices::GROUP_VERSION) {
            return Target::ApiServiceApi;
        }
        if let Route::GroupVersion(key) = route {
            if let Some(index) = routes.registry.index_of(key) {
                let entry = &routes.registry.entries()[index];
                if !entry.is_delegated() {
                    return match routes.upstreams.get(index).cloned().flatten() {
                        Some(upstream) if upstream.available() => Target::Remote(upstream),
                        _ => Target::Unavailable(&entry.name),
                    };
                }
            }
        }
        match routes.delegate.clone() {
            Some(delegate) => Target::Delegate(delegate),
            None => Target::Nowhere,
        }
    }

    /// 503 for an APIService that is not available, saying why.
    pub(super) fn unavailable(&self, name: &str) -> Refusal {
        let why = self.gateway.availability.guard().get(name).map_or_else(
            || "no endpoint is available".to_string(),
            |s| format!("{}: {}", s.condition.reason, s.condition.message),
        );
        Refusal::unavailable(format!("service unavailable: APIService {name}: {why}"))
    }

    /// Waits, at most `--openapi-timeout`, for the merged `/openapi/v2` when it is merged on
    /// demand and not merged now.
    pub(super) async fn openapi_v2_merged(&self) {
        let gateway = &self.gateway;
        let merged = || {
            gateway
                .openapi
                .guard()
                .as_ref()
                .is_some_and(|docs| docs.v2.is_some())
        };
        if gateway.options.openapi_v2 == OpenApiV2::OnDemand && !merged() {
            let bound = gateway.options.openapi_timeout;
            Box::pin(gateway.openapi_v2.ask_and_wait(bound, merged)).await;
        }
    }

    /// What apiagg serves itself for `route`; `None` when another server answers it.
    pub(super) fn served_here(
        &self,
        req: &RequestHeader,
        ctx: &mut RequestCtx,
        route: Route<'_>,
    ) -> Option<(RouteKind, Reply)> {
        let gateway = &self.gateway;
        let answer = match route {
            Route::Health(endpoint, check) => {
                ctx.outcome.subresource = endpoint.path();
                let reply = answers::health(req, endpoint, check, &gateway.lifecycle);
                return Some((RouteKind::Health, reply));
            }
            Route::Metrics => {
                return Some((RouteKind::Metrics, answers::metrics(&gateway.metrics)))
            }
            Route::Status => answers::status(&gateway.availability.load(), &gateway.routes.load()),
            // apiagg's own flow control; without it, the delegate's answers.
            Route::FlowDump => {
                let dump = self.flow.as_ref()?.dump_priority_levels();
                Reply::text(200, dump)
            }
            Route::Version if gateway.routes.load().delegate.is_none() => answers::version(),
            // apiagg's own z-pages, also with a delegate (its are kube-apiserver's own).
            Route::Zpage(page) => {
                let facts = Facts {
                    started: gateway.started,
                    flags: &gateway.options.flags,
                };
                statusz::answer(req, page, &facts)
            }
            Route::Apis { slash } => {
                if !slash {
                    ctx.outcome.subresource = "apis";
                }
                let options = &gateway.options.negotiate;
                answers::apis(
                    req,
                    &gateway.routes.load(),
                    &gateway.discovery,
                    options,
                    slash,
                )
            }
            Route::OpenApi(OpenApiPath::V2) if gateway.options.openapi_v2 == OpenApiV2::Off => {
                Refusal::not_found().into()
            }
            Route::OpenApi(which) => {
                // kube-apiserver 1.38 instruments the v2 path like the v3 ones.
                ctx.outcome.subresource = match which {
                    OpenApiPath::V2 => "openapi/v2",
                    OpenApiPath::V3Index => "openapi/v3",
                    OpenApiPath::V3Document(..) => "openapi/v3/",
                };
                openapi::answer(req, which, gateway.openapi.guard().as_deref())
            }
            Route::Group(group) => {
                let routes = gateway.routes.load();
                answers::group(req, &routes, &gateway.options.negotiate, group)?
            }
            Route::Version | Route::GroupVersion(_) | Route::Other => return None,
        };
        Some((RouteKind::Own, answer))
    }
}
