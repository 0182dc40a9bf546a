//! `bloodraven-sidecar`: install the crypto provider, parse flags, start
//! tracing, run on a current-thread runtime (a few sockets and timers; one
//! thread keeps the resident set small), exit with the run's code.

use clap::Parser;

fn main() {
    // One rustls crypto provider for the process (ring, the workspace's).
    let _ = rustls::crypto::ring::default_provider().install_default();
    let cli = bloodraven_sidecar::config::Cli::parse();
    bloodraven_sidecar::init_tracing(cli.log_format);
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("bloodraven-sidecar: failed to start the runtime: {e}");
            std::process::exit(bloodraven_sidecar::lease::ending::exit::SIDECAR_FAILED);
        }
    };
    let code = runtime.block_on(bloodraven_sidecar::run(cli));
    // Pending tasks (the socket server) end with the process.
    runtime.shutdown_timeout(std::time::Duration::from_millis(100));
    std::process::exit(code);
}
