//! Tracing setup shared by every Bloodraven binary: text or JSON lines on
//! stderr, one event per line, filtered by `RUST_LOG` (default `info`, with
//! the chatty dependencies turned down). Log lines carry named fields
//! (`group`, `site`, `operation_id`, …), never values spliced into the
//! message.

use tracing_subscriber::{EnvFilter, fmt, prelude::*};

/// Log output format (flag `--log-format`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line, with named fields.
    Json,
}

/// Errors installing the subscriber.
#[derive(Debug, thiserror::Error)]
#[error("failed to install the tracing subscriber: {0}")]
pub struct TelemetryError(String);

/// The default filter when `RUST_LOG` is unset or empty.
pub const DEFAULT_FILTER: &str = "info,kube_runtime=warn,mysql_async=warn";

/// Installs the global tracing subscriber; fails if one is installed.
pub fn init(format: LogFormat) -> Result<(), TelemetryError> {
    let registry = tracing_subscriber::registry().with(filter(std::env::var("RUST_LOG").ok().as_deref()));
    let result = match format {
        LogFormat::Json => registry.with(fmt::layer().json().flatten_event(true).with_current_span(false)).try_init(),
        LogFormat::Text => registry.with(fmt::layer()).try_init(),
    };
    result.map_err(|e| TelemetryError(e.to_string()))
}

/// The filter for a `RUST_LOG` value. `kube_client` stays at `error` unless
/// the value names it: when it cannot decode a response it logs the whole
/// body at warn (an object left by a CRD downgrade: kilobytes to megabytes
/// per line), and the error itself reaches the caller, which logs it
/// bounded. That holds under a `RUST_LOG` that does not name kube_client
/// too (`RUST_LOG=info` brought the kilobyte lines back). An unparsable
/// value falls back to `info`.
fn filter(rust_log: Option<&str>) -> EnvFilter {
    match rust_log.filter(|v| !v.trim().is_empty()) {
        Some(spec) => {
            let filter = EnvFilter::try_new(spec).unwrap_or_else(|_| EnvFilter::new("info"));
            if spec.contains("kube_client") { filter } else { filter.add_directive(quiet_kube_client()) }
        }
        None => EnvFilter::new(DEFAULT_FILTER).add_directive(quiet_kube_client()),
    }
}

/// `kube_client=error`.
fn quiet_kube_client() -> tracing_subscriber::filter::Directive {
    "kube_client=error".parse().unwrap_or_else(|_| tracing::Level::ERROR.into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kube_client_stays_quiet_unless_named() {
        for (rust_log, quiet) in [
            (None, true),
            (Some(""), true),
            (Some("info"), true),
            (Some("debug,kube_client=debug"), false),
            (Some("not a filter ==="), true),
        ] {
            let text = filter(rust_log).to_string();
            assert_eq!(text.contains("kube_client=error"), quiet, "{rust_log:?}: {text}");
        }
    }
}
