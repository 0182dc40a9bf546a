//! Bloodraven's deploy-lease sidecar. One lease core, two ways to run it:
//!
//! - `hold`: native sidecar of a migration Job Pod (an init container with
//!   `restartPolicy: Always`); its startup probe (`probe`) passes once its
//!   socket serves, and the migration container's entrypoint is the
//!   wrapper `exec`, which waits on the socket until both leases are held,
//!   starts the migration only with the sidecar's permission, fences it,
//!   and exits with the sidecar's verdict.
//! - `run -- CMD…`: the same around CMD, for pipelines outside the cluster.
//!
//! Layout: `lease::machine` (pure decisions: acquisition, heartbeat,
//! fence), `lease::ending` (DDL boundary, verdict, exit codes),
//! `lease::driver` (the I/O around them), `wire` (the deploy API's JSON,
//! the one module that knows it), `client` (HTTPS), `socket` (the local
//! socket's serving end; its protocol is `bloodraven_api::socket`), `exec` and `fence` (the wrapper and its signals), `ddl`
//! (optional detection from the database), `record` (termination message,
//! JSON line, state file), `modes` (the subcommands). Documented in
//! docs/sidecar.md and docs/deploy-api.md.

pub mod client;
pub mod config;
pub mod ddl;
pub mod exec;
pub mod fence;
pub mod lease;
pub mod modes;
pub mod record;
pub mod socket;
pub mod wire;

/// Runs the parsed command; returns the exit code.
pub async fn run(cli: config::Cli) -> i32 {
    use config::Command;
    match cli.command {
        Command::Hold(a) => modes::hold(a).await,
        Command::Run(a) => modes::run(a).await,
        Command::Exec(a) => modes::exec(a).await,
        Command::Mark(a) => modes::mark(a).await,
        Command::Permit(a) => modes::permit(a).await,
        Command::Probe(a) => modes::probe(a).await,
        Command::Install(a) => modes::install(&a),
    }
}
