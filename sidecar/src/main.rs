//! `bloodraven-sidecar`: install the crypto provider, parse flags, start
//! tracing, run on a current-thread runtime (a few sockets and timers; one
//! thread keeps the resident set small), exit with the run's code.

use clap::Parser as _;

fn main() {
    // One rustls crypto provider for the process (ring, the workspace's).
    let _ = rustls::crypto::ring::default_provider().install_default();
    let cli = match bloodraven_sidecar::config::Cli::try_parse() {
        Ok(cli) => cli,
        // --help and --version: their text, exit 0.
        Err(e) if !e.use_stderr() => e.exit(),
        Err(e) => {
            // Bad flags: clap's text for the person, and the final record
            // for the pipeline, which finds a line on every exit.
            let _ = e.print();
            // Only `run` and `hold` end a run; `mark` and `exec` run inside
            // the migration, whose output is the migration's own.
            let mode = std::env::args().nth(1).unwrap_or_default();
            if !matches!(mode.as_str(), "run" | "hold") {
                std::process::exit(e.exit_code());
            }
            let message = e.kind().as_str().map_or_else(|| "bad flags".to_owned(), |k| format!("bad flags: {k}"));
            bloodraven_sidecar::record::FinalRecord::not_run(e.exit_code(), &message, None).publish(None);
            std::process::exit(e.exit_code());
        }
    };
    // Lines on standard error: standard output carries the final record.
    let _ = bloodraven_telemetry::init(cli.log_format, bloodraven_telemetry::Process::Command);
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
