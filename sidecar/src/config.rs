//! Flags (each also read from an environment variable) and their checks.
//! Durations are decimal seconds (`--grace 2.5`).

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

use crate::lease::ending::BoundaryMode;
use crate::lease::machine::{Timing, TimingError};
use crate::socket::OutcomeResult;

/// Log output format: shared by every binary (`bloodraven-telemetry`).
pub use bloodraven_telemetry::LogFormat;

/// `bloodraven-sidecar`: holds the deploy API's migration mutex and
/// failover-hold around a migration and fences it when authority is lost.
#[derive(Debug, Parser)]
#[command(name = "bloodraven-sidecar", version, about, long_about = None)]
pub struct Cli {
    /// Log format (lines on standard error).
    #[arg(long, env = "BLOODRAVEN_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text, global = true)]
    pub log_format: LogFormat,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Native sidecar of a migration Job Pod: acquire both leases, keep them,
    /// serve the local socket; the startup probe (`probe`) passes once it serves,
    /// and the migration's wrapper waits on the socket until both are held.
    Hold(HoldArgs),
    /// Hold the leases around CMD (a pipeline outside the cluster): exits with
    /// CMD's result, or a fence code.
    Run(RunArgs),
    /// Entrypoint wrapper of the migration container: starts CMD only with
    /// the sidecar's permission, fences it, exits with the sidecar's verdict.
    Exec(ExecArgs),
    /// Report the DDL boundary or the outcome to the sidecar.
    Mark(MarkArgs),
    /// Exit 0 when the migration may take its next step now (both leases held,
    /// time left before the fence deadline), 1 otherwise.
    Permit(SocketArgs),
    /// Startup probe: exit 0 once the sidecar serves its socket (the wrapper is
    /// installed by then), 1 otherwise; prints where the run stands.
    Probe(SocketArgs),
    /// Copy this program into DIR (a volume shared with the migration
    /// container, whose image does not have it), for the `exec` wrapper.
    Install(InstallArgs),
}

/// `install`.
#[derive(Debug, Args)]
pub struct InstallArgs {
    /// The directory (created if missing); the program lands in
    /// DIR/bloodraven-sidecar, and `bloodraven-migrate` (when it is beside
    /// the program) in DIR/bloodraven-migrate.
    pub dir: PathBuf,
}

/// Parses decimal seconds (`10`, `2.5`) into a duration of at most a day.
pub fn seconds(text: &str) -> Result<Duration, String> {
    let v: f64 = text.trim().parse().map_err(|_| format!("`{text}` is not a number of seconds"))?;
    if !v.is_finite() || !(0.0..=86_400.0).contains(&v) {
        return Err(format!("`{text}` is not between 0 and 86400 seconds"));
    }
    Ok(Duration::from_secs_f64(v))
}

/// A termination-message path where `none` means none.
pub fn optional_path(path: &std::path::Path) -> Option<PathBuf> {
    if path.as_os_str() == "none" { None } else { Some(path.to_owned()) }
}

impl LeaseArgs {
    /// Where the CA bundle comes from (clap makes exactly one of `--ca` and
    /// `BLOODRAVEN_CA_PEM` present).
    pub fn ca_source(&self) -> crate::client::CaSource {
        match (&self.ca, &self.ca_pem) {
            (Some(path), _) => crate::client::CaSource::File(path.clone()),
            (None, pem) => crate::client::CaSource::Pem(pem.clone().unwrap_or_default()),
        }
    }
}

/// The lease settings shared by `hold` and `run`.
#[derive(Clone, Debug, Args)]
pub struct LeaseArgs {
    /// Deploy API base, `https://host:8443` (with or without `/deploy/v1`).
    #[arg(long, env = "BLOODRAVEN_URL")]
    pub url: String,
    /// CA bundle (PEM file) the deploy API's certificate must chain to; nothing else is trusted.
    #[arg(long, env = "BLOODRAVEN_CA", required_unless_present = "ca_pem", conflicts_with = "ca_pem")]
    pub ca: Option<PathBuf>,
    /// The same bundle as PEM text (the webhook injects it this way).
    #[arg(long, env = "BLOODRAVEN_CA_PEM", hide_env_values = true)]
    pub ca_pem: Option<String>,
    /// File holding the ServiceAccount token (audience `bloodraven-deploy`); re-read for every request.
    #[arg(long, env = "BLOODRAVEN_TOKEN_FILE", default_value = "/var/run/secrets/bloodraven/token")]
    pub token_file: PathBuf,
    /// The MysqlFailoverGroup.
    #[arg(long, env = "BLOODRAVEN_GROUP")]
    pub group: String,
    /// The MysqlDatabase's name (the lease's `instance`; not the SQL schema).
    #[arg(long, env = "BLOODRAVEN_INSTANCE")]
    pub instance: String,
    /// The operationId (1–128 of `[A-Za-z0-9._:-]`); default: the Job's UID, else (run only) a random UUID.
    #[arg(long, env = "BLOODRAVEN_OPERATION_ID")]
    pub operation_id: Option<String>,
    /// The Job's UID (downward API: `metadata.labels['batch.kubernetes.io/controller-uid']`).
    #[arg(long, env = "BLOODRAVEN_JOB_UID")]
    pub job_uid: Option<String>,
    /// Lease TTL in seconds, in [5, 120]; each lease is renewed every ttl/3.
    #[arg(long, env = "BLOODRAVEN_TTL", default_value_t = 30, allow_negative_numbers = true)]
    pub ttl: u64,
    /// Seconds between SIGTERM and SIGKILL of the migration. SIGTERM is sent
    /// at the confirmed expiry minus this, so SIGKILL lands by the expiry.
    #[arg(long, env = "BLOODRAVEN_GRACE", value_parser = seconds, default_value = "10", allow_negative_numbers = true)]
    pub grace: Duration,
    /// Longest wait for one answer of the deploy API, seconds.
    #[arg(long, env = "BLOODRAVEN_REQUEST_TIMEOUT", value_parser = seconds, default_value = "5", allow_negative_numbers = true)]
    pub request_timeout: Duration,
    /// How long to keep asking for the leases (409 held, 423, errors), seconds.
    #[arg(long, env = "BLOODRAVEN_ACQUIRE_TIMEOUT", value_parser = seconds, default_value = "600", allow_negative_numbers = true)]
    pub acquire_timeout: Duration,
    /// Longest wait between two asks while another operation holds the mutex, seconds.
    #[arg(long, env = "BLOODRAVEN_ACQUIRE_POLL", value_parser = seconds, default_value = "1", allow_negative_numbers = true)]
    pub acquire_poll: Duration,
    /// Learn of a revocation only at the next renewal (no watch). For
    /// benchmarks that compare against the watch; never needed otherwise.
    #[arg(long, env = "BLOODRAVEN_NO_WATCH", hide = true)]
    pub no_watch: bool,
    /// How the DDL boundary is learnt: `at-start` takes the migration to be in
    /// DDL from its start until it reports `ddl-finished`; `reported` only from its reports.
    #[arg(long, env = "BLOODRAVEN_DDL_BOUNDARY", value_enum, default_value_t = BoundaryMode::AtStart)]
    pub ddl_boundary: BoundaryMode,
    /// File holding `mysql://user:password@host:port/schema`: detect the DDL
    /// boundary from the database too (optional).
    #[arg(long, env = "BLOODRAVEN_DB_URL_FILE")]
    pub db_url_file: Option<PathBuf>,
}

/// `hold`.
#[derive(Debug, Args)]
pub struct HoldArgs {
    /// Lease settings.
    #[command(flatten)]
    pub lease: LeaseArgs,
    /// The local socket (in an emptyDir shared with the migration container).
    #[arg(long, env = "BLOODRAVEN_SOCKET", default_value = bloodraven_api::socket::DEFAULT_SOCKET)]
    pub socket: PathBuf,
    /// State file (no token in it) that tells a restarted sidecar this Pod's run began.
    #[arg(long, env = "BLOODRAVEN_STATE_FILE", default_value = "/run/bloodraven/sidecar-state.json")]
    pub state_file: PathBuf,
    /// Termination message path (`none` for none).
    #[arg(long, env = "BLOODRAVEN_TERMINATION_LOG", default_value = "/dev/termination-log")]
    pub termination_log: PathBuf,
    /// Before anything else, copy this program (and `bloodraven-migrate`)
    /// into DIR, as `install` does: the injected sidecar puts the `exec`
    /// wrapper in the shared volume itself, before its socket serves (so
    /// before its startup probe can pass and the migration container starts). A failed copy
    /// ends the sidecar (exit 2) before any lease is asked for.
    #[arg(long, env = "BLOODRAVEN_INSTALL_DIR", value_name = "DIR")]
    pub install: Option<PathBuf>,
}

/// `run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// Lease settings.
    #[command(flatten)]
    pub lease: LeaseArgs,
    /// The local socket; default: in a private temporary directory. CMD finds it in `BLOODRAVEN_SOCKET`.
    #[arg(long)]
    pub socket: Option<PathBuf>,
    /// Termination message path (`none`, the default outside a Pod, for none).
    #[arg(long, default_value = "none")]
    pub termination_log: PathBuf,
    /// The migration command and its arguments.
    #[arg(last = true, required = true, num_args = 1..)]
    pub command: Vec<String>,
}

/// `exec`.
#[derive(Debug, Args)]
pub struct ExecArgs {
    /// The sidecar's socket.
    #[arg(long, env = "BLOODRAVEN_SOCKET", default_value = bloodraven_api::socket::DEFAULT_SOCKET)]
    pub socket: PathBuf,
    /// How long to wait for the sidecar's socket, seconds.
    #[arg(long, env = "BLOODRAVEN_CONNECT_TIMEOUT", value_parser = seconds, default_value = "30", allow_negative_numbers = true)]
    pub connect_timeout: Duration,
    /// How long to wait for the verdict after CMD ended, seconds.
    #[arg(long, env = "BLOODRAVEN_VERDICT_TIMEOUT", value_parser = seconds, default_value = "120", allow_negative_numbers = true)]
    pub verdict_timeout: Duration,
    /// Termination message path for refusals and fences (`none` for none).
    #[arg(long, env = "BLOODRAVEN_TERMINATION_LOG", default_value = "/dev/termination-log")]
    pub termination_log: PathBuf,
    /// The migration command and its arguments.
    #[arg(last = true, required = true, num_args = 1..)]
    pub command: Vec<String>,
}

/// The socket, for the small clients.
#[derive(Debug, Args)]
pub struct SocketArgs {
    /// The sidecar's socket.
    #[arg(long, env = "BLOODRAVEN_SOCKET", default_value = bloodraven_api::socket::DEFAULT_SOCKET)]
    pub socket: PathBuf,
    /// Longest wait for the sidecar's answer, seconds (no answer: exit 1).
    #[arg(long, value_parser = seconds, default_value = "5", allow_negative_numbers = true)]
    pub timeout: Duration,
}

/// `mark`.
#[derive(Debug, Args)]
pub struct MarkArgs {
    /// The socket.
    #[command(flatten)]
    pub socket: SocketArgs,
    /// What to report.
    #[command(subcommand)]
    pub what: Mark,
}

/// What `mark` reports.
#[derive(Debug, Subcommand)]
pub enum Mark {
    /// The migration is about to send DDL.
    DdlStarted {
        /// The revision.
        #[arg(long)]
        revision: Option<String>,
    },
    /// The DDL (of one revision) committed.
    DdlFinished {
        /// The revision.
        #[arg(long)]
        revision: Option<String>,
    },
    /// The migration's outcome.
    Outcome {
        /// `succeeded` or `failed`.
        #[arg(value_enum)]
        result: OutcomeResult,
        /// The last revision applied.
        #[arg(long)]
        revision: Option<String>,
        /// The last error.
        #[arg(long)]
        error: Option<String>,
    },
}

/// Settings errors.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// Timing refused.
    #[error(transparent)]
    Timing(#[from] TimingError),
    /// A bad name.
    #[error("--{flag} `{value}` is not a Kubernetes object name (lowercase letters, digits, '-' and '.')")]
    Name {
        /// The flag.
        flag: &'static str,
        /// Its value (escaped).
        value: String,
    },
    /// A bad operationId.
    #[error("the operationId `{0}` is not 1–128 characters of [A-Za-z0-9._:-]")]
    OperationId(String),
    /// `hold` has no operationId.
    #[error("hold needs --operation-id or --job-uid (the Job's UID through the downward API)")]
    NoOperationId,
    /// `https` only.
    #[error("--url must be an https:// URL (the deploy API is served over TLS only)")]
    NotHttps,
    /// A URL that is not the deploy API's base. Its text is not repeated
    /// when it may hold a credential.
    #[error("--url {0}")]
    BadUrl(String),
}

/// Checks `--url`: `https://host[:port]`, optionally followed by
/// `/deploy/v1`; nothing else. A user or password in it is refused without
/// repeating it (the token file is the only credential, and the URL is
/// logged); so are a query, a fragment and any other path, which would
/// silently send the requests elsewhere.
pub fn check_url(url: &str) -> Result<(), ConfigError> {
    if !url.starts_with("https://") {
        return Err(ConfigError::NotHttps);
    }
    let bad = |why: &str| ConfigError::BadUrl(why.to_owned());
    let parsed = reqwest::Url::parse(url).map_err(|e| ConfigError::BadUrl(format!("is not a URL: {e}")))?;
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return Err(bad("must not carry a user or password (the token file is the only credential)"));
    }
    if parsed.host_str().is_none_or(str::is_empty) {
        return Err(bad("has no host"));
    }
    if parsed.query().is_some() || parsed.fragment().is_some() {
        return Err(bad("must not have a query or a fragment"));
    }
    if !matches!(parsed.path(), "" | "/" | "/deploy/v1" | "/deploy/v1/") {
        return Err(ConfigError::BadUrl(format!(
            "path `{}` is not empty or /deploy/v1 (the base is https://host:port)",
            crate::record::bounded(parsed.path(), 64)
        )));
    }
    Ok(())
}

/// A DNS subdomain (group and MysqlDatabase names).
pub fn valid_name(s: &str) -> bool {
    (1..=253).contains(&s.len())
        && s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
        && s.as_bytes().first().is_some_and(u8::is_ascii_alphanumeric)
        && s.as_bytes().last().is_some_and(u8::is_ascii_alphanumeric)
}

impl LeaseArgs {
    /// Checks the settings; returns the timing and the operationId
    /// (`random_ok`: `run` may make one up).
    pub fn check(&self, random_ok: bool) -> Result<(Timing, String), ConfigError> {
        let ms = |d: Duration| d.as_millis() as u64;
        let timing = Timing::new(self.ttl, ms(self.request_timeout), ms(self.grace))?;
        check_url(&self.url)?;
        for (flag, value) in [("group", &self.group), ("instance", &self.instance)] {
            if !valid_name(value) {
                return Err(ConfigError::Name { flag, value: crate::record::bounded(value, 64) });
            }
        }
        let op = match (&self.operation_id, &self.job_uid) {
            (Some(op), _) => op.clone(),
            (None, Some(uid)) if !uid.is_empty() => uid.clone(),
            _ if random_ok => uuid::Uuid::new_v4().to_string(),
            _ => return Err(ConfigError::NoOperationId),
        };
        if !crate::wire::valid_operation_id(&op) {
            return Err(ConfigError::OperationId(crate::record::bounded(&op, 64)));
        }
        Ok((timing, op))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(extra: &[&str]) -> Result<LeaseArgs, clap::Error> {
        #[derive(Debug, Parser)]
        struct T {
            #[command(flatten)]
            lease: LeaseArgs,
        }
        let mut args = vec!["t", "--url", "https://h:8443", "--ca", "/ca", "--group", "g", "--instance", "counter-app"];
        args.extend_from_slice(extra);
        T::try_parse_from(args).map(|t| t.lease)
    }

    #[test]
    fn defaults_are_the_issue_s() {
        let l = lease(&[]).unwrap();
        assert_eq!((l.ttl, l.grace, l.acquire_timeout), (30, Duration::from_secs(10), Duration::from_secs(600)));
        let (timing, op) = l.check(true).unwrap();
        assert_eq!((timing.ttl, timing.interval), (30_000, 10_000));
        assert!(uuid::Uuid::parse_str(&op).is_ok(), "{op}");
        assert!(matches!(l.check(false), Err(ConfigError::NoOperationId)));
        let l = lease(&["--job-uid", "0b5e7c1a-0000-4000-8000-000000000001"]).unwrap();
        assert_eq!(l.check(false).unwrap().1, "0b5e7c1a-0000-4000-8000-000000000001");
    }

    #[test]
    fn bad_settings_are_refused_with_a_reason() {
        for (flags, want) in [
            (&["--ttl", "200"][..], "outside [5, 120]"),
            (&["--ttl", "5"][..], "leaves"),
            (&["--ttl", "30", "--grace", "16"][..], "lower --request-timeout or --grace"),
            (&["--operation-id", "has space"][..], "operationId"),
            (&["--request-timeout", "0"][..], "more than 0"),
        ] {
            let e = lease(flags).unwrap().check(true).unwrap_err().to_string();
            assert!(e.contains(want), "{flags:?}: {e}");
        }
        for bad in ["-1", "abc", "NaN", "1e9"] {
            assert!(lease(&["--grace", bad]).is_err(), "{bad}");
        }
        assert!(lease(&["--ttl", "5", "--grace", "1", "--request-timeout", "1"]).unwrap().check(true).is_ok());
        let mut l = lease(&[]).unwrap();
        l.url = "http://h:8443".into();
        assert!(matches!(l.check(true), Err(ConfigError::NotHttps)));
        l.url = "https://h".into();
        l.group = "Bad_Group".into();
        assert!(l.check(true).unwrap_err().to_string().contains("--group"));
    }

    /// Attack round: a user and password in `--url` were accepted and
    /// logged in the "starting" line; a path, query or fragment sent every
    /// request elsewhere; an empty host retried until the acquire timeout.
    #[test]
    fn urls_are_the_deploy_api_s_base_and_nothing_else() {
        for good in ["https://h:8443", "https://h:8443/", "https://10.0.0.1:8443/deploy/v1", "https://b.svc/deploy/v1/"]
        {
            assert!(check_url(good).is_ok(), "{good}");
        }
        for (bad, want) in [
            ("http://h:8443", "https://"),
            ("ftp://h", "https://"),
            ("https://user:hunter2@h:8443", "user or password"),
            ("https://hunter2@h:8443", "user or password"),
            ("https://h:8443/deploy/v2", "path"),
            ("https://h:8443/other", "path"),
            ("https://h:8443?x=1", "query"),
            ("https://h:8443#f", "fragment"),
            ("https://", "URL"),
            ("https:// h", "URL"),
        ] {
            let e = check_url(bad).unwrap_err().to_string();
            assert!(e.contains(want), "{bad}: {e}");
            assert!(!e.contains("hunter2"), "{bad}: {e}");
        }
        let mut l = lease(&[]).unwrap();
        l.url = "https://u:hunter2@h".into();
        assert!(!l.check(true).unwrap_err().to_string().contains("hunter2"));
    }

    #[test]
    fn negative_numbers_are_refused_with_the_flag_s_reason() {
        for (flag, want) in [("--ttl", "invalid digit"), ("--grace", "between 0 and 86400")] {
            let e = lease(&[flag, "-1"]).unwrap_err().to_string();
            assert!(e.contains(flag) && e.contains(want), "{flag}: {e}");
        }
    }

    #[test]
    fn run_needs_a_command_and_exec_takes_one() {
        let cli = Cli::try_parse_from(["s", "exec", "--", "sh", "-c", "exit 3"]).unwrap();
        match cli.command {
            Command::Exec(e) => assert_eq!(e.command, ["sh", "-c", "exit 3"]),
            other => panic!("{other:?}"),
        }
        let e =
            Cli::try_parse_from(["s", "run", "--url", "https://h", "--ca", "/c", "--group", "g", "--instance", "i"]);
        assert!(e.is_err());
        let cli = Cli::try_parse_from(["s", "exec", "--termination-log", "none", "--", "true"]).unwrap();
        match cli.command {
            Command::Exec(e) => assert_eq!(optional_path(&e.termination_log), None),
            other => panic!("{other:?}"),
        }
        let cli = Cli::try_parse_from(["s", "mark", "outcome", "failed", "--error", "boom"]).unwrap();
        assert!(matches!(
            cli.command,
            Command::Mark(MarkArgs { what: Mark::Outcome { result: OutcomeResult::Failed, .. }, .. })
        ));
    }
}
