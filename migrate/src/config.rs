//! Flags, their environment variables, and the checked settings.
//!
//! Every flag also reads an environment variable, so the same behaviour
//! applies when a person runs the runner by hand in a pod (docs/migrate.md,
//! "Settings"). The chart's `migrationJob.*` values map to the
//! `BLOODRAVEN_MIGRATION_*` variables (docs/migrate.md).
//!
//! Secrets: the database URL (`--database-url`, `DATABASE_URL`) may carry
//! the password; clap is told never to print the environment values, the
//! URL is never logged (only user, host, port and schema are), and the
//! password may instead come from a file (`--password-file`).

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};

/// `bloodraven-migrate`: MySQL/MariaDB revisions under live traffic.
#[derive(Debug, Parser)]
#[command(name = "bloodraven-migrate", version, about, long_about = None)]
pub struct Cli {
    /// Log format on standard error.
    #[arg(long, env = "BLOODRAVEN_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text, global = true)]
    pub log_format: LogFormat,
    /// The subcommand.
    #[command(subcommand)]
    pub command: Command,
}

/// Log output format: shared by every binary (`bloodraven-telemetry`).
pub use bloodraven_telemetry::LogFormat;

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Apply the pending revisions of a directory, one commit per revision.
    Apply(ApplyArgs),
    /// Print the history table beside the directory's revisions.
    Status(StatusArgs),
    /// Settle a dirty (`started`) revision after a person checked the schema.
    Resolve(ResolveArgs),
    /// Print open and idle transactions with their age, and the lock-wait graph.
    Diagnose(DbArgs),
    /// Adopt a schema another tool migrated: record that every revision up
    /// to V is in place, so `apply` starts above it (Flyway's `baseline`).
    Baseline(BaselineArgs),
}

/// Where the database is.
#[derive(Clone, Debug, Args)]
pub struct DbArgs {
    /// `mysql://user[:password]@host:port/schema` (query options as
    /// mysql_async reads them, e.g. `?require_ssl=true`). Never logged.
    #[arg(long, env = "DATABASE_URL", hide_env_values = true)]
    pub database_url: Option<String>,
    /// A file holding the URL (a mounted Secret; the sidecar's
    /// `--db-url-file` reads the same file).
    #[arg(long, env = "BLOODRAVEN_DB_URL_FILE", conflicts_with = "database_url")]
    pub database_url_file: Option<PathBuf>,
    /// A file holding the password (overrides one in the URL; one
    /// trailing newline is ignored).
    #[arg(long, env = "DATABASE_PASSWORD_FILE")]
    pub password_file: Option<PathBuf>,
    /// Seconds to wait for the connection to open.
    #[arg(long, env = "BLOODRAVEN_MIGRATION_CONNECT_TIMEOUT", default_value_t = 10)]
    pub connect_timeout: u64,
}

/// `apply`.
#[derive(Clone, Debug, Args)]
pub struct ApplyArgs {
    /// The directory of `V<n>__<description>.sql` files.
    #[arg(long, env = "BLOODRAVEN_MIGRATION_DIR")]
    pub dir: PathBuf,
    /// The database.
    #[command(flatten)]
    pub db: DbArgs,
    /// The retry and lock settings.
    #[command(flatten)]
    pub tuning: TuningArgs,
    /// What to do when the pre-flight look finds sessions holding or
    /// waiting for locks on a DDL statement's tables.
    #[arg(long, env = "BLOODRAVEN_MIGRATION_ON_BLOCKER", value_enum, default_value_t = OnBlocker::Proceed)]
    pub on_blocker: OnBlocker,
    /// The sidecar's local socket. Default: `/run/bloodraven/sidecar.sock`
    /// when it (or its directory, an injected Job's emptyDir) exists;
    /// otherwise the runner runs alone and says so.
    #[arg(long, env = "BLOODRAVEN_SOCKET")]
    pub socket: Option<PathBuf>,
    /// Refuse to start — exit 8, the database untouched (no connection at
    /// all) — when no sidecar socket is found (see `--socket`): the run is
    /// meant to be fenced by the deploy-lease sidecar and must not migrate
    /// alone. The webhook sets it on the migration container it wraps; a
    /// person at a terminal leaves it off.
    #[arg(long, env = bloodraven_api::names::inject::REQUIRE_LEASE_ENV)]
    pub require_lease: bool,
    /// Apply from the first revision even though another migration tool's
    /// history table (`flyway_schema_history`, `schema_migrations`, …) is
    /// in the schema and this runner's history is empty. Without it such a
    /// run is refused: the schema was most likely migrated by that tool,
    /// and `baseline` is the way to adopt it.
    #[arg(long, env = "BLOODRAVEN_MIGRATION_IGNORE_FOREIGN_HISTORY")]
    pub ignore_foreign_history: bool,
    /// Leave the server's lock timeouts in place instead of setting the
    /// session's (for `make bench-migrate`'s comparison only).
    #[arg(long, hide = true)]
    pub server_lock_timeouts: bool,
}

/// The four tuning settings (docs/migrate.md, "Settings").
#[derive(Clone, Debug, Args)]
pub struct TuningArgs {
    /// Session `lock_wait_timeout` and `innodb_lock_wait_timeout`: how long
    /// one statement waits for a lock. Seconds, `5` or `5s`, in [1, 3600]
    /// (chart `migrationJob.lockTimeout`).
    #[arg(long, env = "BLOODRAVEN_MIGRATION_LOCK_TIMEOUT", default_value = "5s", value_parser = parse_seconds)]
    pub lock_timeout: u64,
    /// Attempts per revision before the run fails, ≥ 1 (chart `migrationJob.maxAttempts`).
    #[arg(long, env = "BLOODRAVEN_MIGRATION_MAX_ATTEMPTS", default_value_t = 20)]
    pub max_attempts: u32,
    /// Lower bound of the jittered backoff, seconds, ≥ 1 (chart `migrationJob.retryMinSeconds`).
    #[arg(long, env = "BLOODRAVEN_MIGRATION_RETRY_MIN_SECONDS", default_value_t = 3)]
    pub retry_min_seconds: u64,
    /// Upper bound of the jittered backoff, seconds (chart `migrationJob.retryMaxSeconds`).
    #[arg(long, env = "BLOODRAVEN_MIGRATION_RETRY_MAX_SECONDS", default_value_t = 15)]
    pub retry_max_seconds: u64,
}

/// `status`.
#[derive(Clone, Debug, Args)]
pub struct StatusArgs {
    /// Also compare with this directory (pending, changed checksums).
    #[arg(long, env = "BLOODRAVEN_MIGRATION_DIR")]
    pub dir: Option<PathBuf>,
    /// The database.
    #[command(flatten)]
    pub db: DbArgs,
}

/// `resolve V --applied|--rolled-back`.
#[derive(Clone, Debug, Args)]
#[command(group(clap::ArgGroup::new("verdict").required(true).args(["applied", "rolled_back"])))]
pub struct ResolveArgs {
    /// The dirty revision's version (`3` or `V3`).
    #[arg(value_parser = parse_version)]
    pub version: u64,
    /// A person checked: the revision's changes are all in place.
    #[arg(long)]
    pub applied: bool,
    /// A person checked: none of its changes are in place (undone by
    /// hand); the next `apply` runs it again.
    #[arg(long)]
    pub rolled_back: bool,
    /// The database.
    #[command(flatten)]
    pub db: DbArgs,
}

/// `baseline V`.
#[derive(Clone, Debug, Args)]
pub struct BaselineArgs {
    /// The newest revision another tool applied (`7` or `V7`, ≥ 1): every
    /// revision up to it counts as in place and is never run.
    #[arg(value_parser = parse_baseline_version)]
    pub version: u64,
    /// What the history row says (at most 200 characters).
    #[arg(long, default_value = "baseline")]
    pub description: String,
    /// Also list the directory's revisions the baseline covers and those
    /// `apply` will run.
    #[arg(long, env = "BLOODRAVEN_MIGRATION_DIR")]
    pub dir: Option<PathBuf>,
    /// Take the baseline even though the schema holds no table (without it
    /// that is refused: most likely a wrong `--database-url`).
    #[arg(long)]
    pub allow_empty_schema: bool,
    /// The database.
    #[command(flatten)]
    pub db: DbArgs,
}

/// `--on-blocker`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum OnBlocker {
    /// Log the blockers and send the DDL anyway: it queues behind them
    /// (stalling readers of the table) for at most the lock timeout.
    Proceed,
    /// Do not queue while blockers are seen: wait for them to leave, up to
    /// the lock timeout; still there, the attempt counts as lock
    /// contention (retried with backoff) without ever having stalled readers.
    Wait,
    /// Fail the run at once, naming the blockers.
    Fail,
}

/// Parses `5`, `5s` as seconds in [1, 3600].
pub fn parse_seconds(s: &str) -> Result<u64, String> {
    let digits = s.trim().strip_suffix('s').unwrap_or(s.trim());
    let n: u64 = digits.parse().map_err(|_| format!("`{s}` is not a number of seconds (e.g. 5 or 5s)"))?;
    if (1..=3600).contains(&n) { Ok(n) } else { Err(format!("{n} s is outside [1, 3600]")) }
}

/// Parses `3` or `V3`.
pub fn parse_version(s: &str) -> Result<u64, String> {
    s.strip_prefix('V').unwrap_or(s).parse().map_err(|_| format!("`{s}` is not a version (e.g. 3 or V3)"))
}

/// Parses a baseline version: as [`parse_version`], at least 1.
pub fn parse_baseline_version(s: &str) -> Result<u64, String> {
    match parse_version(s)? {
        0 => Err("a baseline version is at least 1 (V1: the first revision is in place)".into()),
        v => Ok(v),
    }
}

/// The checked retry and lock settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tuning {
    /// Session lock waits.
    pub lock_timeout: Duration,
    /// Attempts per revision, ≥ 1.
    pub max_attempts: u32,
    /// Backoff bounds, min ≤ max.
    pub retry_min: Duration,
    /// Upper bound.
    pub retry_max: Duration,
}

impl TuningArgs {
    /// Checks the settings; the error says which and why.
    pub fn check(&self) -> Result<Tuning, String> {
        if self.max_attempts == 0 {
            return Err("--max-attempts must be at least 1".into());
        }
        if self.retry_min_seconds > self.retry_max_seconds {
            return Err(format!(
                "--retry-min-seconds ({}) is above --retry-max-seconds ({})",
                self.retry_min_seconds, self.retry_max_seconds
            ));
        }
        if self.retry_min_seconds == 0 {
            // 0 would make every retry immediate: no backoff, no jitter,
            // the lock holder hammered in a loop.
            return Err("--retry-min-seconds must be at least 1".to_owned());
        }
        if self.retry_max_seconds > 3600 {
            return Err(format!("--retry-max-seconds ({}) is above 3600", self.retry_max_seconds));
        }
        if !(1..=3600).contains(&self.lock_timeout) {
            return Err(format!("--lock-timeout ({} s) is outside [1, 3600]", self.lock_timeout));
        }
        Ok(Tuning {
            lock_timeout: Duration::from_secs(self.lock_timeout),
            max_attempts: self.max_attempts,
            retry_min: Duration::from_secs(self.retry_min_seconds),
            retry_max: Duration::from_secs(self.retry_max_seconds),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_parse_and_are_checked() {
        assert_eq!(parse_seconds("5"), Ok(5));
        assert_eq!(parse_seconds("5s"), Ok(5));
        assert!(parse_seconds("0").is_err());
        assert!(parse_seconds("5m").unwrap_err().contains("5m"));
        assert_eq!(parse_version("V7"), Ok(7));
        let t = TuningArgs { lock_timeout: 5, max_attempts: 20, retry_min_seconds: 3, retry_max_seconds: 15 };
        assert_eq!(t.check().unwrap().retry_max, Duration::from_secs(15));
        let bad = TuningArgs { retry_min_seconds: 20, ..t.clone() };
        assert!(bad.check().unwrap_err().contains("above --retry-max-seconds"));
        assert!(TuningArgs { retry_min_seconds: 0, ..t.clone() }.check().unwrap_err().contains("at least 1"));
        assert!(TuningArgs { max_attempts: 0, ..t }.check().is_err());
    }

    #[test]
    fn flags_parse_into_settings_and_resolve_needs_a_verdict() {
        let cli = Cli::try_parse_from([
            "bloodraven-migrate",
            "apply",
            "--dir",
            "/x",
            "--lock-timeout",
            "2s",
            "--max-attempts",
            "3",
            "--on-blocker",
            "fail",
        ])
        .unwrap();
        let Command::Apply(a) = cli.command else { panic!("apply") };
        assert_eq!((a.tuning.lock_timeout, a.tuning.max_attempts, a.on_blocker), (2, 3, OnBlocker::Fail));
        assert!(!a.require_lease, "off unless asked for");
        let cli = Cli::try_parse_from(["bloodraven-migrate", "apply", "--dir", "/x", "--require-lease"]).unwrap();
        let Command::Apply(a) = cli.command else { panic!("apply") };
        assert!(a.require_lease);
        let cli =
            Cli::try_parse_from(["bloodraven-migrate", "baseline", "V7", "--description", "from flyway"]).unwrap();
        let Command::Baseline(b) = cli.command else { panic!("baseline") };
        assert_eq!((b.version, b.description.as_str(), b.allow_empty_schema), (7, "from flyway", false));
        let e = Cli::try_parse_from(["bloodraven-migrate", "baseline", "0"]).unwrap_err().to_string();
        assert!(e.contains("at least 1"), "{e}");
        assert!(Cli::try_parse_from(["bloodraven-migrate", "baseline"]).is_err(), "the version is required");
        let e = Cli::try_parse_from(["bloodraven-migrate", "resolve", "3"]).unwrap_err().to_string();
        assert!(e.contains("--applied") && e.contains("--rolled-back"), "{e}");
    }
}
