//! Tracing setup: text or JSON lines, filtered by `RUST_LOG` (default `info`).

use tracing_subscriber::{EnvFilter, fmt, prelude::*};

use crate::config::LogFormat;

/// Installs the global tracing subscriber.
pub fn init(format: LogFormat) -> anyhow::Result<()> {
    // kube_client at error: when it cannot decode a response it logs the
    // whole body at warn (an object left by a CRD downgrade: kilobytes to
    // megabytes per line); the error itself reaches the operator, which
    // logs it bounded.
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new("info,kube_runtime=warn,kube_client=error,mysql_async=warn"));
    let registry = tracing_subscriber::registry().with(filter);
    let result = match format {
        LogFormat::Json => registry.with(fmt::layer().json().flatten_event(true).with_current_span(false)).try_init(),
        LogFormat::Text => registry.with(fmt::layer()).try_init(),
    };
    result.map_err(|e| anyhow::anyhow!("failed to install the tracing subscriber: {e}"))
}
