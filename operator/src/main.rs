//! `bloodraven-operator`: install the crypto provider, parse flags, start
//! tracing, run. Everything else is in the library.

use clap::Parser;

/// jemalloc, not glibc's malloc, in release builds (what users run): see the
/// note on `tikv-jemallocator` in Cargo.toml for the figures. Debug builds
/// (the e2e tests' operator) keep the system allocator: with jemalloc there
/// the tests' two-second leader Lease retries timed out far more often on
/// two cores.
#[cfg(not(debug_assertions))]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    // One rustls crypto provider for the whole process (ring), installed
    // before any TLS client (kube, mysql_async) is built.
    if rustls::crypto::ring::default_provider().install_default().is_err() {
        anyhow::bail!("failed to install the ring crypto provider: another one is installed");
    }
    // `bloodraven-operator probe PATH`: the exec probe's client, not the operator.
    if std::env::args_os().nth(1).is_some_and(|a| a == "probe") {
        let args = bloodraven_serving::admin::ProbeArgs::parse_from(std::env::args_os().skip(1));
        std::process::exit(args.run().await);
    }
    let config = bloodraven_operator::Config::parse();
    bloodraven_telemetry::init(config.log_format, bloodraven_telemetry::Process::Service)?;
    bloodraven_operator::run(config).await
}
