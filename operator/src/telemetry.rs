//! Tracing setup: text or JSON lines, filtered by `RUST_LOG` (default `info`).

use tracing_subscriber::{EnvFilter, fmt, prelude::*};

use crate::config::LogFormat;

/// Installs the global tracing subscriber.
pub fn init(format: LogFormat) -> anyhow::Result<()> {
    // kube_client at error: when it cannot decode a response it logs the
    // whole body at warn (an object left by a CRD downgrade: kilobytes to
    // megabytes per line); the error itself reaches the operator, which
    // logs it bounded.
    // The same holds under a `RUST_LOG` that does not name kube_client
    // (`RUST_LOG=info` brought the kilobyte lines back): the directive is
    // added unless the user chose a level for kube_client themselves.
    let from_env = std::env::var("RUST_LOG").ok().filter(|v| !v.trim().is_empty());
    let filter = match from_env {
        Some(spec) => {
            let filter = EnvFilter::try_new(&spec).unwrap_or_else(|_| EnvFilter::new("info"));
            if spec.contains("kube_client") { filter } else { filter.add_directive(quiet_kube_client()) }
        }
        None => EnvFilter::new("info,kube_runtime=warn,mysql_async=warn").add_directive(quiet_kube_client()),
    };
    let registry = tracing_subscriber::registry().with(filter);
    let result = match format {
        LogFormat::Json => registry.with(fmt::layer().json().flatten_event(true).with_current_span(false)).try_init(),
        LogFormat::Text => registry.with(fmt::layer()).try_init(),
    };
    result.map_err(|e| anyhow::anyhow!("failed to install the tracing subscriber: {e}"))
}

/// `kube_client=error`.
fn quiet_kube_client() -> tracing_subscriber::filter::Directive {
    "kube_client=error".parse().unwrap_or_else(|_| tracing::Level::ERROR.into())
}
