//! Tracing (`--tracing-config-file`): the file read and checked before serving (a bad file
//! stops the start, naming the file and the field), then the process's tracer.

use std::path::Path;
use std::sync::Arc;

use anyhow::Context;

use crate::state::Gateway;
use apiagg_observe::{load_tracing, Tracer};

/// The tracer the file at `path` asks for, its counters in `gateway`'s metrics.
pub fn tracer(path: &Path, gateway: &Gateway) -> anyhow::Result<Arc<Tracer>> {
    let settings = load_tracing(path)?;
    let tracer = Tracer::start(&settings, gateway.metrics.registry()).context("tracing")?;
    tracing::info!(
        endpoint = settings.endpoint,
        sampling_rate_per_million = settings.sampling_rate_per_million,
        "tracing is on"
    );
    Ok(tracer)
}
