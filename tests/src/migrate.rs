//! The real `bloodraven-migrate` binary against a real MariaDB or MySQL site: a
//! schema `app` with a migration account (`migrator`: all on `app.*`,
//! `PROCESS` to see other sessions) and an application account (`appuser`)
//! whose sessions play the live traffic, revision directories, and runs as
//! child processes with their logs kept in files.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use mysql_async::prelude::Queryable as _;
use tokio::process::{Child, Command};

use crate::{SitePair, e2e_dir, repo_root};

/// Path of the runner (`hack/e2e.sh` exports a private copy).
pub fn migrate_bin() -> PathBuf {
    std::env::var_os("BLOODRAVEN_MIGRATE_BIN")
        .map_or_else(|| repo_root().join("target/debug/bloodraven-migrate"), PathBuf::from)
}

/// Exit codes of `bloodraven-migrate` (migrate/src/apply.rs `exit`).
pub mod exit {
    /// A revision failed with its own error.
    pub const FAILED: i32 = 1;
    /// The history refuses: dirty, checksum, order.
    pub const REFUSED: i32 = 3;
    /// Lock contention on every attempt, or `--on-blocker fail`.
    pub const CONTENTION: i32 = 4;
    /// The connection was lost.
    pub const CONNECTION_LOST: i32 = 5;
    /// Fenced: sidecar, or a read-only site.
    pub const FENCED: i32 = 6;
    /// Left a revision dirty.
    pub const DIRTY: i32 = 7;
    /// Not started: `--require-lease` and no sidecar socket.
    pub const NO_LEASE: i32 = 8;
}

const MIGRATOR_PW: &str = "migrator-e2e-pw";
const APP_PW: &str = "appuser-e2e-pw";

/// Schema `app` on a pair's primary `iad`, with its two accounts.
#[derive(Debug)]
pub struct AppDb<'a> {
    /// The pair.
    pub pair: &'a SitePair,
    /// The migration account's URL (`mysql://migrator:…@host:port/app`).
    pub url: String,
    /// The application account's URL.
    pub app_url: String,
}

impl<'a> AppDb<'a> {
    /// Creates schema `app`, table `orders (id, v, w)` with rows 1 and 2,
    /// and the accounts; with `mdl_info`, makes metadata-lock holders
    /// visible to the runner (MariaDB: loads `metadata_lock_info`; MySQL:
    /// lets it read `performance_schema`).
    pub fn create(pair: &'a SitePair, mdl_info: bool) -> AppDb<'a> {
        let host = &pair.iad_host;
        pair.sql(
            "iad",
            &format!(
                "CREATE DATABASE app; \
                 CREATE TABLE app.orders (id INT PRIMARY KEY, v INT NOT NULL DEFAULT 0, w INT NOT NULL DEFAULT 0) ENGINE=InnoDB; \
                 INSERT INTO app.orders (id, v) VALUES (1, 1), (2, 2); \
                 CREATE USER 'migrator'@'{host}' IDENTIFIED BY '{MIGRATOR_PW}'; \
                 GRANT ALL ON app.* TO 'migrator'@'{host}'; GRANT PROCESS ON *.* TO 'migrator'@'{host}'; \
                 CREATE USER 'appuser'@'{host}' IDENTIFIED BY '{APP_PW}'; GRANT ALL ON app.* TO 'appuser'@'{host}';"
            ),
        );
        if mdl_info {
            match pair.flavor {
                crate::sites::Flavor::MariaDb => pair.sql("iad", "INSTALL SONAME 'metadata_lock_info'"),
                // MySQL always keeps metadata locks in performance_schema;
                // the runner's account needs to read them.
                crate::sites::Flavor::MySql => {
                    pair.sql("iad", &format!("GRANT SELECT ON performance_schema.* TO 'migrator'@'{host}'"))
                }
            };
        }
        let url = |user: &str, pw: &str| format!("mysql://{user}:{pw}@{host}:{}/app", pair.iad_port);
        AppDb { pair, url: url("migrator", MIGRATOR_PW), app_url: url("appuser", APP_PW) }
    }

    /// A session of the application account (live traffic).
    pub async fn app(&self) -> mysql_async::Conn {
        let opts = mysql_async::OptsBuilder::from_opts(mysql_async::Opts::from_url(&self.app_url).unwrap())
            .prefer_socket(false);
        mysql_async::Conn::new(opts).await.unwrap()
    }

    /// One value of `sql` run as root on iad (trimmed output).
    pub fn value(&self, sql: &str) -> String {
        self.pair.sql("iad", sql).trim().to_owned()
    }

    /// `state ddl_started attempts` of revision `version`, or empty when no row.
    pub fn history(&self, version: u64) -> String {
        // No history table (nothing ever ran): no row either.
        let exists = self.value(
            "SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = 'app' AND TABLE_NAME = 'bloodraven_schema_history'",
        );
        if exists == "0" {
            return String::new();
        }
        self.value(&format!(
            "SELECT CONCAT_WS(' ', state, ddl_started, attempts) FROM app.bloodraven_schema_history WHERE version = {version}"
        ))
    }

    /// Waits until session `id` is no longer in the server's process list.
    pub async fn wait_session_gone(&self, id: u64, timeout: Duration) {
        let sql = format!("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID = {id}");
        crate::wait_for(&format!("session {id} to end on the server"), timeout, || {
            let n = self.value(&sql);
            async move { if n == "0" { Ok(()) } else { Err(format!("session {id} still listed")) } }
        })
        .await;
    }

    /// Waits until a session of `user` runs a query containing `text` (e.g. `SLEEP`); returns its id.
    pub async fn wait_running(&self, user: &str, text: &str, timeout: Duration) -> u64 {
        let sql = format!(
            "SELECT ID FROM information_schema.PROCESSLIST WHERE USER = '{user}' AND INFO LIKE '%{text}%' AND ID <> CONNECTION_ID()"
        );
        crate::wait_for(&format!("{user} to run {text}"), timeout, || {
            let out = self.value(&sql);
            let id: u64 = out.lines().next().and_then(|l| l.trim().parse().ok()).unwrap_or(0);
            async move { if id > 0 { Ok(id) } else { Err(out) } }
        })
        .await
    }
}

/// A revision directory.
#[derive(Debug)]
pub struct Revisions {
    /// The folder.
    pub dir: PathBuf,
}

impl Revisions {
    /// A new empty folder for test `name`.
    pub fn new(name: &str) -> Revisions {
        let dir = e2e_dir().join("migrate").join(format!("{name}-{}", crate::suffix()));
        std::fs::create_dir_all(&dir).unwrap();
        Revisions { dir }
    }

    /// Writes `V<version>__<description>.sql`.
    pub fn add(&self, version: u64, description: &str, sql: &str) -> &Self {
        std::fs::write(self.dir.join(format!("V{version}__{description}.sql")), sql).unwrap();
        self
    }
}

impl Drop for Revisions {
    /// A passing test's folder goes; a failing one keeps its logs.
    fn drop(&mut self) {
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// One `bloodraven-migrate` process.
#[derive(Debug)]
pub struct Run {
    child: Option<Child>,
    log: PathBuf,
}

impl Run {
    /// Starts `bloodraven-migrate ARGS` with `env`, logs in the revision folder.
    pub fn start(revs: &Revisions, args: &[&str], env: &[(&str, &str)]) -> Run {
        let bin = migrate_bin();
        assert!(
            bin.exists(),
            "{} is missing: build it with `cargo build -p bloodraven-migrate` (hack/e2e.sh does)",
            bin.display()
        );
        let log = revs.dir.join(format!("run-{}.log", crate::suffix()));
        let err = std::fs::File::create(&log).unwrap();
        let out = err.try_clone().unwrap();
        let child = Command::new(&bin)
            .args(args)
            .env_remove("DATABASE_URL")
            .env_remove("BLOODRAVEN_SOCKET")
            .envs(env.iter().copied())
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        Run { child: Some(child), log }
    }

    /// `bloodraven-migrate ARGS` to its end (bounded by `timeout`): (exit code, all output).
    pub async fn to_end(revs: &Revisions, args: &[&str], timeout: Duration) -> (i32, String) {
        let mut r = Run::start(revs, args, &[]);
        let code = r.wait(timeout).await;
        (code, r.log())
    }

    /// `apply --dir` the folder against `url`, with extra flags.
    pub fn apply(revs: &Revisions, url: &str, flags: &[&str]) -> Run {
        let dir = revs.dir.to_str().unwrap().to_owned();
        let args: Vec<&str> =
            ["apply", "--dir", dir.as_str(), "--database-url", url].into_iter().chain(flags.iter().copied()).collect();
        Run::start(revs, &args, &[])
    }

    /// Waits for the exit code (bounded); a signal counts as 128 + its number.
    pub async fn wait(&mut self, timeout: Duration) -> i32 {
        use std::os::unix::process::ExitStatusExt as _;
        let child = self.child.as_mut().expect("running");
        let status = tokio::time::timeout(timeout, child.wait())
            .await
            .unwrap_or_else(|_| panic!("bloodraven-migrate did not end within {timeout:?}; log:\n{}", self.log()))
            .unwrap();
        self.child = None;
        status.code().unwrap_or_else(|| 128 + status.signal().unwrap_or(0))
    }

    /// Sends SIGTERM (the sidecar's fence) and leaves the process to end.
    pub fn terminate(&self) {
        let pid = self.child.as_ref().and_then(Child::id).expect("running");
        let ok = std::process::Command::new("kill").args(["-TERM", &pid.to_string()]).status().unwrap().success();
        assert!(ok, "kill -TERM {pid} failed");
    }

    /// SIGKILL.
    pub async fn kill9(&mut self) {
        let child = self.child.as_mut().expect("running");
        child.kill().await.unwrap();
        self.child = None;
    }

    /// The whole log (standard error and output).
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// How many log lines contain `text`.
    pub fn count(&self, text: &str) -> usize {
        self.log().lines().filter(|l| l.contains(text)).count()
    }

    /// Waits until at least `n` log lines contain `text`.
    pub async fn wait_lines(&self, text: &str, n: usize, timeout: Duration) {
        crate::wait_for(&format!("{n} log lines with `{text}`"), timeout, || async move {
            if self.count(text) >= n { Ok(()) } else { Err(self.log()) }
        })
        .await;
    }
}

/// Runs `sql` on `conn`, failing the test on error.
pub async fn exec(conn: &mut mysql_async::Conn, sql: &str) {
    conn.query_drop(sql).await.unwrap_or_else(|e| panic!("{sql}: {e}"));
}
