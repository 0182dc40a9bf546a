//! `bloodraven-webhook`: install the crypto provider, parse flags, start
//! tracing, run. Everything else is in the library.

use clap::Parser;

use bloodraven_webhook::{Cli, Command};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    // One rustls crypto provider for the whole process (ring).
    if rustls::crypto::ring::default_provider().install_default().is_err() {
        anyhow::bail!("failed to install the ring crypto provider: another one is installed");
    }
    let cli = Cli::parse();
    match cli.command {
        Some(Command::Probe(args)) => std::process::exit(args.run().await),
        Some(Command::Configurations(args)) => {
            print!("{}", bloodraven_webhook::print_configurations(&args)?);
            Ok(())
        }
        None => {
            bloodraven_telemetry::init(cli.serve.log_format, bloodraven_telemetry::Process::Service)?;
            bloodraven_webhook::run(cli.serve).await
        }
    }
}
