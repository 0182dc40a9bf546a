//! `bloodraven-migrate`: install the crypto provider, parse flags, start
//! tracing, run on a current-thread runtime (one connection, one socket),
//! exit with the run's code.

use clap::Parser;

fn main() {
    // One rustls crypto provider for the process (ring, the workspace's).
    let _ = rustls::crypto::ring::default_provider().install_default();
    let cli = bloodraven_migrate::config::Cli::parse();
    // Lines on standard error: standard output carries `status` and `diagnose`.
    let _ = bloodraven_telemetry::init(cli.log_format, bloodraven_telemetry::Process::Command);
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("bloodraven-migrate: failed to start the runtime: {e}");
            std::process::exit(bloodraven_migrate::apply::exit::USAGE);
        }
    };
    let code = runtime.block_on(bloodraven_migrate::run(cli));
    runtime.shutdown_timeout(std::time::Duration::from_millis(100));
    std::process::exit(code);
}
