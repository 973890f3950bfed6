//! The OpenAPI controller's first pure step: which sources a round downloads, from the route
//! table, what is known of each source and the round's scope.

use std::sync::Arc;

use tokio::time::Instant;

use super::sources::{delegate_identity, Sources};
use crate::backends::{RouteTable, Upstream};
use crate::controllers::backoff::Backoff;
use crate::controllers::targets::{targets, Target};

/// Which sources a round downloads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// The delegate only (the first round, so readiness waits for nothing else).
    Delegate,
    /// Every source.
    All,
    /// Only the failing sources whose retry is due.
    Due,
}

/// One backend Service of a round.
pub struct ServiceRead {
    /// The Service and the APIServices it serves.
    pub target: Target,
    /// Whether it is downloaded this round (otherwise its documents stay as they are).
    pub run: bool,
}

/// The delegate's part of a round.
pub struct DelegateRead {
    /// Its endpoints.
    pub upstream: Arc<Upstream>,
    /// Which delegate it is (its server name and endpoints).
    pub identity: String,
    /// No documents of this delegate are kept (none yet, or another delegate's): start over.
    pub fresh: bool,
    /// Whether it is downloaded this round.
    pub run: bool,
}

/// What one round downloads.
pub struct Plan {
    /// Every Service behind a remote APIService, in registry order (none in the delegate-only
    /// round).
    pub services: Vec<ServiceRead>,
    /// The delegate, when one is configured.
    pub delegate: Option<DelegateRead>,
    /// Whether what is known of Services not in `services` is dropped (every round but the
    /// delegate-only one).
    pub drop_others: bool,
}

/// What a round of `scope` downloads at `now`: every source in a full round, only the failing
/// ones whose retry is due otherwise; the delegate also in its own round and whenever it is new.
/// A Service that appears between full rounds waits for the next one (route changes start one).
pub fn plan(routes: &RouteTable, sources: &Sources, scope: Scope, now: Instant) -> Plan {
    let due =
        |backoff: Option<&Backoff>| scope == Scope::All || backoff.is_some_and(|b| b.due(now));
    let services = match scope {
        Scope::Delegate => Vec::new(),
        Scope::All | Scope::Due => targets(routes)
            .into_iter()
            .map(|target| {
                let run = due(sources.services.get(&target.key).map(|s| &s.backoff));
                ServiceRead { target, run }
            })
            .collect(),
    };
    let delegate = routes.delegate.as_ref().map(|upstream| {
        let identity = delegate_identity(upstream);
        let kept = sources.local.as_ref().filter(|l| l.identity == identity);
        let fresh = kept.is_none();
        let run = fresh || scope == Scope::Delegate || due(kept.map(|l| &l.backoff));
        DelegateRead {
            upstream: Arc::clone(upstream),
            identity,
            fresh,
            run,
        }
    });
    Plan {
        services,
        delegate,
        drop_others: scope != Scope::Delegate,
    }
}
