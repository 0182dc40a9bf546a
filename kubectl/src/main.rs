//! `kubectl bloodraven`: what an on-call engineer reaches for, on the
//! user's own kubeconfig and RBAC (no deploy token).
//!
//! - `status [GROUP]`: one screen per group (sites, roles, lag, GTID
//!   positions, the generation, conditions, live leases, the operation in
//!   flight and why the group is not stable), one line per group without a
//!   name; `-o json|yaml`, `--watch`.
//! - `switchover GROUP --to SITE [--wait]`: writes a planned failover
//!   request with a fresh request id and follows it to `Completed` or
//!   `Failed`; the exit code says which.
//! - `wait GROUP`: the same following for an operation started another
//!   way (an ordered update, a restore-in-place, a pipeline's switchover).
//! - `leases GROUP`, `revoke GROUP --reason`, `verify-schema GROUP`.
//! - `explain GROUP`: why a switchover is deferred, why automatic failover
//!   is held, why a MysqlDatabase is not authoritative, which accounts
//!   write through `read_only`.
//!
//! Exit codes: 0 done; 1 failed or refused (by the operator, the API
//! server or RBAC); 2 bad usage; 3 `--wait`/`--timeout` ran out while the
//! operation went on. docs/kubectl-plugin.md has the reference.

mod explain;
mod kube_ctx;
mod leases;
mod operation;
mod output;
mod requests;
mod status;

use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

use crate::output::Format;

/// Exit code of a failed or refused operation.
pub(crate) const EXIT_FAILED: u8 = 1;
/// Exit code when `--timeout` ran out while the operation went on.
pub(crate) const EXIT_TIMEOUT: u8 = 3;

#[derive(Debug, Parser)]
#[command(
    name = "kubectl-bloodraven",
    bin_name = "kubectl bloodraven",
    version,
    about = "Bloodraven failover groups from kubectl: status, switchover, wait, leases, revoke, verify-schema, explain"
)]
struct Cli {
    #[command(flatten)]
    global: Global,
    #[command(subcommand)]
    command: Command,
}

/// The flags kubectl users expect on every command.
#[derive(Debug, Args, Clone)]
pub(crate) struct Global {
    /// Path to the kubeconfig file (default: $KUBECONFIG, then ~/.kube/config, then in-cluster).
    #[arg(long, global = true, value_name = "PATH")]
    pub kubeconfig: Option<std::path::PathBuf>,
    /// The kubeconfig context to use.
    #[arg(long, global = true, value_name = "NAME")]
    pub context: Option<String>,
    /// Namespace of MysqlDatabases (`explain`; default: the context's).
    #[arg(short = 'n', long, global = true, value_name = "NAMESPACE")]
    pub namespace: Option<String>,
    /// Namespace the operator runs in, where it keeps the deploy Leases.
    #[arg(
        long,
        global = true,
        env = "BLOODRAVEN_NAMESPACE",
        default_value = bloodraven_api::names::DEFAULT_NAMESPACE,
        value_name = "NAMESPACE"
    )]
    pub operator_namespace: String,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// One screen per group; one line per group without a name.
    Status {
        /// The MysqlFailoverGroup (cluster-scoped).
        #[arg(value_parser = parse_group)]
        group: Option<String>,
        /// Output format: json or yaml (default: human-readable).
        #[arg(short = 'o', long, value_enum)]
        output: Option<Format>,
        /// Print again whenever something changes (the group, its leases).
        #[arg(short = 'w', long)]
        watch: bool,
    },
    /// Move the primary to SITE (a planned failover) and, with --wait, follow it.
    Switchover {
        /// The MysqlFailoverGroup.
        #[arg(value_parser = parse_group)]
        group: String,
        /// The site to promote.
        #[arg(long, value_name = "SITE")]
        to: String,
        /// Follow the request until it completes or fails; the exit code says which.
        #[arg(long)]
        wait: bool,
        /// How long --wait follows before exiting 3 (the request goes on), e.g. 90s, 10m.
        #[arg(long, default_value = "10m", value_parser = parse_duration)]
        timeout: Duration,
        /// The request id to write (default: a fresh one). A new id is a new request.
        #[arg(long, value_name = "ID")]
        request_id: Option<String>,
    },
    /// Follow an operation started another way (an ordered update, a restore-in-place, a pipeline's switchover) to its end.
    Wait {
        /// The MysqlFailoverGroup.
        #[arg(value_parser = parse_group)]
        group: String,
        /// The request to follow (default: the one in flight, else one requested and not yet taken up).
        #[arg(long, value_name = "ID")]
        request_id: Option<String>,
        /// How long to follow before exiting 3 (the operation goes on), e.g. 90s, 10m.
        #[arg(long, default_value = "30m", value_parser = parse_duration)]
        timeout: Duration,
    },
    /// The group's deploy leases: live grants, revocations, pending schema verifications.
    Leases {
        /// The MysqlFailoverGroup.
        #[arg(value_parser = parse_group)]
        group: String,
        /// Output format: json or yaml (default: a table).
        #[arg(short = 'o', long, value_enum)]
        output: Option<Format>,
    },
    /// Revoke every deploy lease of the group (reason OperatorRevoked) and wait for the operator to act.
    Revoke {
        /// The MysqlFailoverGroup.
        #[arg(value_parser = parse_group)]
        group: String,
        /// Why, in words; it is shown in the operator's Events.
        #[arg(long, value_name = "TEXT")]
        reason: String,
        /// How long to wait for the operator to act before exiting 3.
        #[arg(long, default_value = "60s", value_parser = parse_duration)]
        timeout: Duration,
    },
    /// Say the schema was checked after a migration ended inside its DDL (clears SchemaVerificationRequired).
    VerifySchema {
        /// The MysqlFailoverGroup.
        #[arg(value_parser = parse_group)]
        group: String,
        /// The operationIds verified (see `leases`); none: list what awaits verification.
        operations: Vec<String>,
        /// Every operation that awaits verification.
        #[arg(long, conflicts_with = "operations")]
        all: bool,
        /// How long to wait for the operator to act before exiting 3.
        #[arg(long, default_value = "60s", value_parser = parse_duration)]
        timeout: Duration,
    },
    /// Answers to on-call's questions about the group, in words.
    Explain {
        /// The MysqlFailoverGroup.
        #[arg(value_parser = parse_group)]
        group: String,
    },
}

/// A MysqlFailoverGroup's name: a DNS-1123 subdomain (lower-case letters,
/// digits, `-` and `.`, at most 253 characters, starting and ending with a
/// letter or digit). Anything else is refused before a request is made:
/// a `/` would otherwise address another resource (`NAME/status`).
fn parse_group(s: &str) -> Result<String, String> {
    let ok = (1..=253).contains(&s.len())
        && s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
        && s.starts_with(|c: char| c.is_ascii_alphanumeric())
        && s.ends_with(|c: char| c.is_ascii_alphanumeric())
        && s.split('.').all(|label| !label.is_empty() && label.len() <= 63);
    if ok {
        Ok(s.to_owned())
    } else {
        Err(format!("{} is not a MysqlFailoverGroup name (a DNS-1123 subdomain)", output::printable(&format!("{s:?}"))))
    }
}

/// `90s`, `10m`, `1h`, or plain seconds.
fn parse_duration(s: &str) -> Result<Duration, String> {
    let (digits, unit) = s.trim().split_at(s.trim().find(|c: char| !c.is_ascii_digit()).unwrap_or(s.trim().len()));
    let n: u64 = digits.parse().map_err(|_| format!("{s:?} is not a duration such as 90s, 10m or 1h"))?;
    let secs = match unit {
        "" | "s" => n,
        "m" => n.saturating_mul(60),
        "h" => n.saturating_mul(3600),
        _ => return Err(format!("{s:?}: the unit must be s, m or h")),
    };
    if secs == 0 || secs > 24 * 3600 {
        return Err(format!("{s:?}: between 1s and 24h"));
    }
    Ok(Duration::from_secs(secs))
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: cannot start: {e}");
            return ExitCode::from(EXIT_FAILED);
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("error: {}", output::printable(&format!("{e:#}")));
            ExitCode::from(EXIT_FAILED)
        }
    }
}

async fn run(cli: Cli) -> anyhow::Result<u8> {
    let ctx = kube_ctx::Ctx::connect(&cli.global).await?;
    match cli.command {
        Command::Status { group, output, watch } => status::run(&ctx, group.as_deref(), output, watch).await,
        Command::Switchover { group, to, wait, timeout, request_id } => {
            requests::switchover(&ctx, &group, &to, request_id, wait.then_some(timeout)).await
        }
        Command::Wait { group, request_id, timeout } => {
            requests::wait(&ctx, &group, request_id.as_deref(), timeout).await
        }
        Command::Leases { group, output } => leases::run(&ctx, &group, output).await,
        Command::Revoke { group, reason, timeout } => requests::revoke(&ctx, &group, &reason, timeout).await,
        Command::VerifySchema { group, operations, all, timeout } => {
            requests::verify_schema(&ctx, &group, &operations, all, timeout).await
        }
        Command::Explain { group } => explain::run(&ctx, &group).await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("10m"), Ok(Duration::from_secs(600)));
        assert_eq!(parse_duration("2h"), Ok(Duration::from_secs(7200)));
        assert_eq!(parse_duration("45"), Ok(Duration::from_secs(45)));
        for bad in ["", "0s", "s", "-1s", "5d", "25h", "1.5m", "99999999999999999999s"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn group_names() {
        for good in ["g", "playground", "team-a.prod-1", &"a".repeat(63)] {
            assert_eq!(parse_group(good).as_deref(), Ok(good), "{good}");
        }
        for bad in [
            "",
            "G",
            "g/status",
            "..",
            ".",
            "x/../g",
            "-g",
            "g-",
            "a..b",
            "g\u{1b}[2J",
            &"a".repeat(64),
            &"a.".repeat(127),
        ] {
            assert!(parse_group(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn the_command_line_is_consistent() {
        use clap::CommandFactory as _;
        Cli::command().debug_assert();
    }
}
