//! Tracing setup shared by every Bloodraven binary: text or JSON lines, one
//! event per line, filtered by `RUST_LOG`. Log lines carry named fields
//! (`group`, `site`, `operation_id`, …), never values spliced into the
//! message.
//!
//! Two kinds of process log differently, and [`Process`] says which one is
//! starting:
//!
//! - [`Process::Service`] (the operator, the webhook): lines on standard
//!   output, where the container runtime collects them; default filter
//!   [`SERVICE_FILTER`], an unparsable `RUST_LOG` falls back to `info`, and
//!   `kube_client` stays at `error` unless `RUST_LOG` names it (see
//!   [`service_filter`]).
//! - [`Process::Command`] (the sidecar, the migration runner): lines on
//!   standard error, because standard output carries the sidecar's final
//!   record and the runner's `status` and `diagnose`; colours only when standard error is a terminal; `RUST_LOG`
//!   as tracing-subscriber reads it, else [`COMMAND_FILTER`].
//!
//! This crate depends on nothing but tracing and clap, so a binary that
//! links no Kubernetes client (the migration runner) can use it.

use tracing_subscriber::{EnvFilter, fmt, prelude::*};

/// Log output format (flag `--log-format`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line, with named fields.
    Json,
}

/// Which kind of process starts (see the crate header).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Process {
    /// A long-running server (operator, webhook): standard output.
    Service,
    /// A command whose standard output carries its result (sidecar,
    /// migration runner): standard error.
    Command,
}

/// Errors installing the subscriber.
#[derive(Debug, thiserror::Error)]
#[error("failed to install the tracing subscriber: {0}")]
pub struct TelemetryError(String);

/// A service's filter when `RUST_LOG` is unset or empty.
pub const SERVICE_FILTER: &str = "info,kube_runtime=warn,mysql_async=warn";

/// A command's filter when `RUST_LOG` is unset or unparsable.
pub const COMMAND_FILTER: &str = "info,mysql_async=warn";

/// Installs the global tracing subscriber for `process`; fails if one is
/// installed.
pub fn init(format: LogFormat, process: Process) -> Result<(), TelemetryError> {
    let result = match process {
        Process::Service => {
            let registry =
                tracing_subscriber::registry().with(service_filter(std::env::var("RUST_LOG").ok().as_deref()));
            match format {
                LogFormat::Json => {
                    registry.with(fmt::layer().json().flatten_event(true).with_current_span(false)).try_init()
                }
                LogFormat::Text => registry.with(fmt::layer()).try_init(),
            }
        }
        Process::Command => {
            let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(COMMAND_FILTER));
            let registry = tracing_subscriber::registry().with(filter);
            match format {
                LogFormat::Json => registry
                    .with(fmt::layer().json().flatten_event(true).with_current_span(false).with_writer(std::io::stderr))
                    .try_init(),
                LogFormat::Text => {
                    use std::io::IsTerminal as _;
                    let ansi = std::io::stderr().is_terminal();
                    registry.with(fmt::layer().with_ansi(ansi).with_writer(std::io::stderr)).try_init()
                }
            }
        }
    };
    result.map_err(|e| TelemetryError(e.to_string()))
}

/// A service's filter for a `RUST_LOG` value. `kube_client` stays at
/// `error` unless the value names it: when it cannot decode a response it
/// logs the whole body at warn (an object left by a CRD downgrade:
/// kilobytes to megabytes per line), and the error itself reaches the
/// caller, which logs it bounded. That holds under a `RUST_LOG` that does
/// not name kube_client too (`RUST_LOG=info` brought the kilobyte lines
/// back). An unparsable value falls back to `info`.
fn service_filter(rust_log: Option<&str>) -> EnvFilter {
    match rust_log.filter(|v| !v.trim().is_empty()) {
        Some(spec) => {
            let filter = EnvFilter::try_new(spec).unwrap_or_else(|_| EnvFilter::new("info"));
            if spec.contains("kube_client") { filter } else { filter.add_directive(quiet_kube_client()) }
        }
        None => EnvFilter::new(SERVICE_FILTER).add_directive(quiet_kube_client()),
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
            let text = service_filter(rust_log).to_string();
            assert_eq!(text.contains("kube_client=error"), quiet, "{rust_log:?}: {text}");
        }
    }
}
