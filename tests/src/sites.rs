//! Sites for one test: a primary `iad` and a replica `pdx` replicating
//! from it with GTIDs, of the run's flavor ([`Flavor::of_run`]: MariaDB
//! started by `hack/mariadb.sh`, MySQL by `hack/mysql.sh`, the same
//! commands), stopped (and their processes gone) when the pair is dropped.
//!
//! What the two flavors say differently (replication statements, GTID
//! positions, semi-sync variables) is asked through the pair's methods, so
//! a test reads the same on both.

use std::path::{Path, PathBuf};
use std::process::Command;

use bloodraven_api::v1alpha1::{SecretRef, Site};

use crate::{e2e_dir, free_port, repo_root};

/// The server flavor a run's sites are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flavor {
    /// MariaDB (10.11 from Debian 12): the default.
    MariaDb,
    /// MySQL (9.7 from Debian's sid archive, in a root of its own).
    MySql,
}

impl Flavor {
    /// The flavor of this run: `E2E_FLAVOR` (`mariadb`, the default, or
    /// `mysql`); `hack/e2e.sh` runs the files that touch SQL once per flavor.
    ///
    /// # Panics
    /// On any other value: a typo must not silently test the default.
    pub fn of_run() -> Flavor {
        match std::env::var("E2E_FLAVOR").as_deref() {
            Err(_) | Ok("" | "mariadb") => Flavor::MariaDb,
            Ok("mysql") => Flavor::MySql,
            Ok(other) => panic!("E2E_FLAVOR={other:?}: use mariadb or mysql"),
        }
    }

    /// The flavors a benchmark runs, in order: `BENCH_FLAVORS` (names
    /// separated by spaces), by default both.
    ///
    /// # Panics
    /// On an unknown name.
    pub fn of_bench() -> Vec<Flavor> {
        std::env::var("BENCH_FLAVORS")
            .unwrap_or_else(|_| "mariadb mysql".to_owned())
            .split_whitespace()
            .map(|f| match f {
                "mariadb" => Flavor::MariaDb,
                "mysql" => Flavor::MySql,
                other => panic!("BENCH_FLAVORS: unknown flavor {other:?} (mariadb, mysql)"),
            })
            .collect()
    }

    /// Its name, as `E2E_FLAVOR` spells it.
    pub fn name(self) -> &'static str {
        match self {
            Flavor::MariaDb => "mariadb",
            Flavor::MySql => "mysql",
        }
    }

    fn script(self) -> PathBuf {
        repo_root().join(format!("hack/{}.sh", self.name()))
    }

    /// The statements that set a replica's apply delay to `seconds`.
    pub fn set_delay(self, seconds: u32) -> String {
        match self {
            Flavor::MariaDb => format!("STOP SLAVE; CHANGE MASTER TO MASTER_DELAY = {seconds}; START SLAVE"),
            Flavor::MySql => {
                format!("STOP REPLICA; CHANGE REPLICATION SOURCE TO SOURCE_DELAY = {seconds}; START REPLICA")
            }
        }
    }

    /// The statements a restore tool runs before it replays a backup on a
    /// replica: replication stopped and forgotten, so the restored server
    /// stands alone (MySQL's `super_read_only` lifted for root; `read_only`
    /// stays on, so clients still cannot write).
    pub fn stand_alone(self) -> &'static str {
        match self {
            Flavor::MariaDb => "STOP SLAVE; RESET SLAVE ALL",
            Flavor::MySql => "SET GLOBAL super_read_only = 0; STOP REPLICA; RESET REPLICA ALL",
        }
    }

    /// Semi-sync's names: (primary switch, replica switch, primary status,
    /// primary's count of acknowledged transactions).
    pub fn semi_sync_names(self) -> (&'static str, &'static str, &'static str, &'static str) {
        match self {
            Flavor::MariaDb => (
                "rpl_semi_sync_master_enabled",
                "rpl_semi_sync_slave_enabled",
                "Rpl_semi_sync_master_status",
                "Rpl_semi_sync_master_yes_tx",
            ),
            Flavor::MySql => (
                "rpl_semi_sync_source_enabled",
                "rpl_semi_sync_replica_enabled",
                "Rpl_semi_sync_source_status",
                "Rpl_semi_sync_source_yes_tx",
            ),
        }
    }
}

/// Two servers of the run's flavor on loopback: `iad` (server_id 1,
/// writable) and `pdx` (server_id 2, read-only, replicating from iad).
#[derive(Debug)]
pub struct SitePair {
    dir: PathBuf,
    /// The servers' flavor.
    pub flavor: Flavor,
    /// Where iad listens (127.0.0.1, or an address in its own network namespace).
    pub iad_host: String,
    /// Where pdx listens (127.0.0.1, or the node's bridge address).
    pub pdx_host: String,
    /// Port of iad.
    pub iad_port: u16,
    /// Port of pdx.
    pub pdx_port: u16,
    /// Where each site runs, for the scripts (`BLOODRAVEN_SITE_NETNS`,
    /// `BLOODRAVEN_SITE_ADDR`): a restart must start it where it was.
    placement: Vec<(&'static str, Vec<(&'static str, String)>)>,
}

fn script(flavor: Flavor, args: &[&str]) -> Result<String, String> {
    script_env(flavor, args, &[])
}

fn script_env(flavor: Flavor, args: &[&str], env: &[(&str, &str)]) -> Result<String, String> {
    let path = flavor.script();
    let out = Command::new(&path)
        .args(args)
        .envs(env.iter().copied())
        .output()
        .map_err(|e| format!("failed to run {}: {e}", path.display()))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!(
            "hack/{}.sh {args:?} failed: {}\n{}",
            flavor.name(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

/// A template data folder shared by every pair of the run and flavor
/// (built once; the scripts' `template` serialises concurrent builders
/// with a lock).
fn shared_template(flavor: Flavor) -> PathBuf {
    let dir = e2e_dir().join(flavor.name()).join("_shared");
    script(flavor, &["template", dir.to_str().unwrap()]).unwrap();
    dir.join("template")
}

/// A new folder for a pair of `test`, linked to the shared template.
fn pair_dir(flavor: Flavor, test: &str) -> PathBuf {
    // Short folder names: the socket path must stay under 108 bytes.
    let dir = e2e_dir().join(flavor.name()).join(format!("{}-{}", &test[..test.len().min(12)], crate::suffix()));
    std::fs::create_dir_all(&dir).unwrap();
    // A link, not a copy: every pair reads the one template, and only the
    // sites' own data folders take room per test.
    std::os::unix::fs::symlink(shared_template(flavor), dir.join("template")).unwrap();
    dir
}

/// The scripts' environment of a site in network namespace `ns`.
fn in_netns(ns: &crate::netns::NetNs) -> Vec<(&'static str, String)> {
    vec![("BLOODRAVEN_SITE_NETNS", ns.name.clone()), ("BLOODRAVEN_SITE_ADDR", ns.ns_ip.clone())]
}

impl SitePair {
    /// Starts a replicating pair in its own folder, of the run's flavor.
    pub fn start(test: &str) -> SitePair {
        SitePair::start_as(test, Flavor::of_run())
    }

    /// Starts a replicating pair of `flavor` in its own folder (the
    /// benchmarks run both flavors in one process).
    pub fn start_as(test: &str, flavor: Flavor) -> SitePair {
        let dir = pair_dir(flavor, test);
        let (iad_port, pdx_port) = (free_port(), free_port());
        let pair = SitePair {
            dir,
            flavor,
            iad_host: "127.0.0.1".into(),
            pdx_host: "127.0.0.1".into(),
            iad_port,
            pdx_port,
            placement: Vec::new(),
        };
        pair.run(&["pair", pair.dir_str(), &iad_port.to_string(), &pdx_port.to_string()]).unwrap();
        pair
    }

    /// A pair whose primary iad runs in the network namespace `ns`
    /// (listening on `ns.ns_ip`), so that `ns.cut()` partitions it from
    /// the operator and from pdx while its unix socket still serves local
    /// clients; pdx replicates from it over the link.
    pub fn start_in_netns(test: &str, ns: &crate::netns::NetNs) -> SitePair {
        let flavor = Flavor::of_run();
        let dir = pair_dir(flavor, test);
        let (iad_port, pdx_port) = (free_port(), free_port());
        let pair = SitePair {
            dir,
            flavor,
            iad_host: ns.ns_ip.clone(),
            pdx_host: "127.0.0.1".into(),
            iad_port,
            pdx_port,
            placement: vec![("iad", in_netns(ns))],
        };
        let d = pair.dir_str();
        pair.run_env(
            &["start", d, "iad", &iad_port.to_string(), "1"],
            &[("BLOODRAVEN_SITE_NETNS", ns.name.as_str()), ("BLOODRAVEN_SITE_ADDR", ns.ns_ip.as_str())],
        )
        .unwrap();
        pair.run(&["sql", d, "iad", "SET GLOBAL read_only=0"]).unwrap();
        pair.run(&["start", d, "pdx", &pdx_port.to_string(), "2"]).unwrap();
        pair.run_env(
            &["replicate", d, "pdx", &iad_port.to_string()],
            &[("BLOODRAVEN_PRIMARY_HOST", ns.ns_ip.as_str())],
        )
        .unwrap();
        pair
    }

    /// A pair of `flavor` whose sites each run in a network namespace of
    /// their own (`iad` in `iad_ns`, `pdx` in `pdx_ns`), so that either
    /// link can be cut or slowed; pdx replicates from iad through this
    /// namespace (which must forward between the two links).
    pub fn start_in_two_netns(
        test: &str,
        flavor: Flavor,
        iad_ns: &crate::netns::NetNs,
        pdx_ns: &crate::netns::NetNs,
    ) -> SitePair {
        let dir = pair_dir(flavor, test);
        let (iad_port, pdx_port) = (free_port(), free_port());
        let pair = SitePair {
            dir,
            flavor,
            iad_host: iad_ns.ns_ip.clone(),
            pdx_host: pdx_ns.ns_ip.clone(),
            iad_port,
            pdx_port,
            placement: vec![("iad", in_netns(iad_ns)), ("pdx", in_netns(pdx_ns))],
        };
        pair.restart("iad", false);
        pair.restart("pdx", true);
        pair.replicate("pdx", iad_port);
        pair
    }

    /// A pair whose two sites listen on `addr` (the node's bridge address,
    /// `BLOODRAVEN_NODE_ADDRESS`), so that Pods reach them, as they reach
    /// external MySQL servers in production.
    pub fn start_on(test: &str, addr: &str) -> SitePair {
        let flavor = Flavor::of_run();
        let dir = pair_dir(flavor, test);
        let (iad_port, pdx_port) = (free_port(), free_port());
        let on = vec![("BLOODRAVEN_SITE_ADDR", addr.to_owned())];
        let pair = SitePair {
            dir,
            flavor,
            iad_host: addr.into(),
            pdx_host: addr.into(),
            iad_port,
            pdx_port,
            placement: vec![("iad", on.clone()), ("pdx", on)],
        };
        let d = pair.dir_str();
        let on = [("BLOODRAVEN_SITE_ADDR", addr)];
        pair.run_env(&["start", d, "iad", &iad_port.to_string(), "1"], &on).unwrap();
        pair.run(&["sql", d, "iad", "SET GLOBAL read_only=0"]).unwrap();
        pair.run_env(
            &["start", d, "pdx", &pdx_port.to_string(), "2"],
            &[("BLOODRAVEN_SITE_ADDR", addr), ("BLOODRAVEN_SITE_READ_ONLY", "1")],
        )
        .unwrap();
        pair.run_env(&["replicate", d, "pdx", &iad_port.to_string()], &[("BLOODRAVEN_PRIMARY_HOST", addr)]).unwrap();
        pair
    }

    /// A replicating pair on loopback whose servers have `server_id`s
    /// `ids` (iad, pdx) instead of 1 and 2: another group's servers, as an
    /// organisation that numbers its servers uniquely runs them.
    pub fn start_with_ids(test: &str, ids: (u32, u32)) -> SitePair {
        let flavor = Flavor::of_run();
        let dir = pair_dir(flavor, test);
        let (iad_port, pdx_port) = (free_port(), free_port());
        let pair = SitePair {
            dir,
            flavor,
            iad_host: "127.0.0.1".into(),
            pdx_host: "127.0.0.1".into(),
            iad_port,
            pdx_port,
            placement: Vec::new(),
        };
        let d = pair.dir_str();
        pair.run(&["start", d, "iad", &iad_port.to_string(), &ids.0.to_string()]).unwrap();
        pair.run(&["sql", d, "iad", "SET GLOBAL read_only=0"]).unwrap();
        pair.run_env(
            &["start", d, "pdx", &pdx_port.to_string(), &ids.1.to_string()],
            &[("BLOODRAVEN_SITE_READ_ONLY", "1")],
        )
        .unwrap();
        pair.run(&["replicate", d, "pdx", &iad_port.to_string()]).unwrap();
        pair
    }

    fn run(&self, args: &[&str]) -> Result<String, String> {
        script(self.flavor, args)
    }

    fn run_env(&self, args: &[&str], env: &[(&str, &str)]) -> Result<String, String> {
        script_env(self.flavor, args, env)
    }

    fn dir_str(&self) -> &str {
        self.dir.to_str().unwrap()
    }

    /// The folder of this pair.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Runs SQL as root on `site` (`iad` or `pdx`) and returns its output.
    pub fn sql(&self, site: &str, sql: &str) -> String {
        self.run(&["sql", self.dir_str(), site, sql]).unwrap()
    }

    /// The command that runs SQL as root on `site`, to spawn (a session
    /// kept open, a sampler on another thread).
    pub fn sql_command(&self, site: &str, sql: &str) -> Command {
        sql_command(self.flavor, &self.dir, site, sql)
    }

    /// Runs SQL as root on `site`; its output, or the client's error.
    pub fn try_sql(&self, site: &str, sql: &str) -> Result<String, String> {
        self.run(&["sql", self.dir_str(), site, sql])
    }

    /// Stops `site`'s server (clean shutdown).
    pub fn stop(&self, site: &str) {
        self.run(&["stop", self.dir_str(), site]).unwrap();
    }

    /// Kills `site`'s server with SIGKILL (no shutdown at all: a crash).
    /// Sends `signal` (`STOP`, `CONT`) to `site`'s server: a paused server
    /// keeps its connections and its role, and answers again, unchanged,
    /// when continued.
    pub fn signal(&self, site: &str, signal: &str) {
        let pid_file = self.dir.join("sites").join(site).join("mysqld.pid");
        let pid = std::fs::read_to_string(&pid_file).unwrap();
        let status = Command::new("kill").args([&format!("-{signal}"), pid.trim()]).status().unwrap();
        assert!(status.success(), "kill -{signal} {} failed", pid.trim());
    }

    pub fn kill9(&self, site: &str) {
        let pid_file = self.dir.join("sites").join(site).join("mysqld.pid");
        let pid = std::fs::read_to_string(&pid_file).unwrap();
        let status = Command::new("kill").args(["-9", pid.trim()]).status().unwrap();
        assert!(status.success(), "kill -9 {} failed", pid.trim());
        // Gone before the caller goes on.
        for _ in 0..100 {
            if !std::path::Path::new(&format!("/proc/{}", pid.trim())).exists() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        panic!("the server of {site} (pid {}) survived SIGKILL", pid.trim());
    }

    /// Waits (at most `timeout`) until `site` is read-only (`true`) or
    /// writable (`false`).
    pub async fn wait_read_only(&self, site: &str, read_only: bool, timeout: std::time::Duration) {
        let want = if read_only { "1" } else { "0" };
        let what = format!("{site} to be {}", if read_only { "read-only" } else { "writable" });
        crate::wait_for(&what, timeout, || async {
            let ro = self.sql(site, "SELECT @@read_only");
            if ro.trim() == want { Ok(()) } else { Err(ro) }
        })
        .await;
    }

    /// Silently drops the replication traffic of `replica` (its receiver's
    /// TCP connection to the other site), as a link that loses packets
    /// would: both replication threads keep saying they run, and the
    /// server's own lag figure stays 0, while nothing arrives. Undone when
    /// the block is dropped.
    pub fn block_replication(&self, replica: &str) -> ReplicationBlock {
        let source = if replica == "iad" { "pdx" } else { "iad" };
        let pid_file = self.dir.join("sites").join(replica).join("mysqld.pid");
        let pid = std::fs::read_to_string(&pid_file).unwrap().trim().to_owned();
        let filter = format!("( dport = :{} )", self.port(source));
        let out = Command::new("ss").args(["-Htnp", "state", "established", &filter]).output().unwrap();
        let listing = String::from_utf8_lossy(&out.stdout).into_owned();
        // Lines: Recv-Q Send-Q Local:Port Peer:Port users:(("mariadbd",pid=N,fd=M)) (or "mysqld")
        let mut rules = Vec::new();
        for line in listing.lines().filter(|l| l.contains(&format!("pid={pid},"))) {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let (local, peer) = (fields[2], fields[3]);
            let split = |a: &str| a.rsplit_once(':').map(|(h, p)| (h.to_owned(), p.to_owned())).unwrap();
            let ((lh, lp), (ph, pp)) = (split(local), split(peer));
            for (sh, sp, dh, dp) in [(&lh, &lp, &ph, &pp), (&ph, &pp, &lh, &lp)] {
                rules.push(vec![
                    "INPUT".to_owned(),
                    "-p".into(),
                    "tcp".into(),
                    "-s".into(),
                    sh.clone(),
                    "--sport".into(),
                    sp.clone(),
                    "-d".into(),
                    dh.clone(),
                    "--dport".into(),
                    dp.clone(),
                    "-j".into(),
                    "DROP".into(),
                ]);
            }
        }
        assert!(
            !rules.is_empty(),
            "no replication connection of {replica} (pid {pid}) to port {}: {listing}",
            self.port(source)
        );
        for rule in &rules {
            let status = Command::new("iptables").arg("-I").args(rule).status().unwrap();
            assert!(status.success(), "iptables -I {rule:?}");
        }
        ReplicationBlock { rules }
    }

    /// The port of `site`.
    pub fn port(&self, site: &str) -> u16 {
        if site == "iad" { self.iad_port } else { self.pdx_port }
    }

    /// Starts `site`'s server again on its port (same data); `read_only`
    /// says whether it comes back read-only (a server forgets a runtime
    /// `SET GLOBAL read_only` across a restart).
    pub fn restart(&self, site: &str, read_only: bool) {
        self.restart_with(site, read_only, "");
    }

    /// The scripts' environment that puts `site` where it runs, with `more`.
    fn placed<'a>(&'a self, site: &str, more: &[(&'a str, &'a str)]) -> Vec<(&'a str, &'a str)> {
        let mut env: Vec<(&str, &str)> = self
            .placement
            .iter()
            .filter(|(s, _)| *s == site)
            .flat_map(|(_, vars)| vars.iter().map(|(k, v)| (*k, v.as_str())))
            .collect();
        env.extend_from_slice(more);
        env
    }

    /// Starts `site`'s server again (stopped before) with more server
    /// options, `args` (split at spaces; e.g. MariaDB's `--version=…`).
    pub fn restart_with(&self, site: &str, read_only: bool, args: &str) {
        let (port, id) = if site == "iad" { (self.iad_port, "1") } else { (self.pdx_port, "2") };
        let ro = if read_only { "1" } else { "0" };
        let env = self.placed(site, &[("BLOODRAVEN_SITE_READ_ONLY", ro), ("BLOODRAVEN_SITE_ARGS", args)]);
        self.run_env(&["start", self.dir_str(), site, &port.to_string(), id], &env).unwrap();
    }

    /// A logical backup of `databases` on `site` into `file`, as a user
    /// takes one (`mariadb-dump` / `mysqldump`, without GTID state).
    pub fn dump(&self, site: &str, file: &Path, databases: &[&str]) {
        let mut args = vec!["dump", self.dir_str(), site, file.to_str().unwrap()];
        args.extend_from_slice(databases);
        self.run(&args).unwrap();
    }

    /// Makes `replica` replicate from the site on `primary_port` (GTID
    /// auto-positioning), and waits until both threads run.
    pub fn replicate(&self, replica: &str, primary_port: u16) {
        // The primary's address: the other site's, when that is its port.
        let host = match (replica, primary_port) {
            ("pdx", p) if p == self.iad_port => self.iad_host.as_str(),
            ("iad", p) if p == self.pdx_port => self.pdx_host.as_str(),
            _ => "127.0.0.1",
        };
        let env = self.placed(replica, &[("BLOODRAVEN_PRIMARY_HOST", host)]);
        self.run_env(&["replicate", self.dir_str(), replica, &primary_port.to_string()], &env).unwrap();
    }

    /// Re-clones `old` from `primary` as docs/failover.md tells a person:
    /// a dump of `databases` on `primary`, `old`'s own replication, data
    /// and GTID history dropped, the dump replayed, `old`'s GTID state set
    /// to the primary's at the dump, then replication from `primary`.
    pub fn reclone(&self, old: &str, primary: &str, databases: &[&str]) {
        let dump = self.dir().join(format!("reclone-{old}.sql"));
        self.dump(primary, &dump, databases);
        let drop = databases.iter().map(|d| format!("; DROP DATABASE IF EXISTS {d}")).collect::<Vec<_>>().concat();
        let (position, reset) = match self.flavor {
            Flavor::MariaDb => ("SELECT @@gtid_binlog_pos", "RESET MASTER; SET GLOBAL gtid_slave_pos = '{}'"),
            Flavor::MySql => (
                "SELECT REPLACE(@@gtid_executed, '\\n', '')",
                "RESET BINARY LOGS AND GTIDS; SET GLOBAL gtid_purged = '{}'",
            ),
        };
        let position = self.sql(primary, position);
        self.sql(old, &format!("{}{drop}", self.flavor.stand_alone()));
        self.load(old, &dump);
        self.sql(old, &reset.replace("{}", position.trim()));
        self.replicate(old, self.port(primary));
    }

    /// Replays the dump `file` on `site` as root (through `read_only`).
    pub fn load(&self, site: &str, file: &Path) {
        self.run(&["load", self.dir_str(), site, file.to_str().unwrap()]).unwrap();
    }

    /// Stops `site`'s replication (both threads; `STOP REPLICA` on both flavors).
    pub fn stop_replica(&self, site: &str) {
        self.sql(site, "STOP REPLICA");
    }

    /// Starts `site`'s replication again.
    pub fn start_replica(&self, site: &str) {
        self.sql(site, "START REPLICA");
    }

    /// Stops `site`'s applier only (it still receives).
    pub fn stop_applier(&self, site: &str) {
        self.sql(site, "STOP REPLICA SQL_THREAD");
    }

    /// Starts `site`'s applier again.
    pub fn start_applier(&self, site: &str) {
        self.sql(site, "START REPLICA SQL_THREAD");
    }

    /// Makes `site` apply what it receives `seconds` late (0: at once).
    pub fn set_delay(&self, site: &str, seconds: u32) {
        self.sql(site, &self.flavor.set_delay(seconds));
    }

    /// `site`'s replica status as `Field: value` lines (`\G`), empty when
    /// it replicates from nothing.
    pub fn replica_status(&self, site: &str) -> String {
        // The scripts' `sql` drops column names (batch output); the field
        // names are what is read here.
        self.run(&["sql", self.dir_str(), site, "SHOW REPLICA STATUS\\G", "--column-names"]).unwrap()
    }

    /// Whether `site` replicates from a source at all.
    pub fn replicates(&self, site: &str) -> bool {
        !self.replica_status(site).trim().is_empty()
    }

    /// `site`'s replication threads, `(receiver running, applier running)`
    /// as the server says them (`Yes`, `No`, `Connecting`); `None` when it
    /// replicates from nothing.
    pub fn replication_threads(&self, site: &str) -> Option<(String, String)> {
        let status = self.replica_status(site);
        let field = |names: &[&str]| {
            status.lines().find_map(|l| {
                let (k, v) = l.trim().split_once(": ")?;
                names.contains(&k).then(|| v.trim().to_owned())
            })
        };
        Some((
            field(&["Slave_IO_Running", "Replica_IO_Running"])?,
            field(&["Slave_SQL_Running", "Replica_SQL_Running"])?,
        ))
    }

    /// Everything `site` has, as the server spells its GTID position
    /// (MariaDB `gtid_current_pos`, MySQL `gtid_executed`).
    pub fn gtid_position(&self, site: &str) -> String {
        let sql = match self.flavor {
            Flavor::MariaDb => "SELECT @@gtid_current_pos",
            Flavor::MySql => "SELECT @@gtid_executed",
        };
        // The client's batch mode prints a newline in a value as `\n`.
        self.sql(site, sql).trim().replace("\\n", "").replace('\n', "")
    }

    /// The GTIDs `from..=to` that `site` wrote, as the operator names them
    /// in its messages (MariaDB `0-SERVER_ID-FROM..TO`, MySQL
    /// `SERVER_UUID:FROM-TO`). `site` must be up (MySQL: its UUID is read).
    pub fn gtid_range(&self, site: &str, from: u64, to: u64) -> String {
        match self.flavor {
            Flavor::MariaDb => {
                let id = self.sql(site, "SELECT @@server_id").trim().to_owned();
                if from == to { format!("0-{id}-{to}") } else { format!("0-{id}-{from}..{to}") }
            }
            Flavor::MySql => {
                let uuid = self.sql(site, "SELECT @@server_uuid").trim().to_owned();
                if from == to { format!("{uuid}:{to}") } else { format!("{uuid}:{from}-{to}") }
            }
        }
    }

    /// How many transactions `site` has: the sequence number of the test
    /// pair's one replication domain on MariaDB (its servers number the
    /// domain's transactions as one sequence), the size of `gtid_executed`
    /// on MySQL (intervals summed over every source UUID).
    pub fn transactions(&self, site: &str) -> u64 {
        count_transactions(self.flavor, &self.gtid_position(site))
    }

    /// `spec.sites` for this pair, with credentials from Secret `secret` in `namespace`.
    pub fn sites(&self, namespace: &str, secret: &str) -> Vec<Site> {
        let site = |name: &str, port| Site {
            name: name.into(),
            host: if name == "iad" { self.iad_host.clone() } else { self.pdx_host.clone() },
            port,
            credentials_secret_ref: SecretRef { namespace: namespace.into(), name: secret.into() },
        };
        vec![site("iad", self.iad_port), site("pdx", self.pdx_port)]
    }
}

impl Drop for SitePair {
    /// Stops both servers, then gives the disk back: a passing test's folder
    /// goes whole; a failing one keeps its `error.log`s (what a person
    /// reads) but not the data folders, so a suite of pairs never fills the
    /// CI machine's disk (each site's data is 25 MB or more).
    fn drop(&mut self) {
        if let Err(e) = self.run(&["down", self.dir_str()]) {
            eprintln!("warning: {e}; keeping {}", self.dir.display());
            return;
        }
        let removed = if std::thread::panicking() {
            ["iad", "pdx"]
                .iter()
                .map(|site| self.dir.join("sites").join(site).join("data"))
                .filter(|data| data.exists())
                .try_for_each(std::fs::remove_dir_all)
        } else {
            std::fs::remove_dir_all(&self.dir)
        };
        if let Err(e) = removed {
            eprintln!("warning: removing {}: {e}", self.dir.display());
        }
    }
}

/// iptables rules dropping one replica's replication traffic (see
/// [`SitePair::block_replication`]); removed on drop.
#[derive(Debug)]
pub struct ReplicationBlock {
    rules: Vec<Vec<String>>,
}

impl Drop for ReplicationBlock {
    fn drop(&mut self) {
        for rule in &self.rules {
            let _ = Command::new("iptables").arg("-D").args(rule).status();
        }
    }
}

/// The command that runs SQL as root on `site` of the pair in `dir`.
pub fn sql_command(flavor: Flavor, dir: &Path, site: &str, sql: &str) -> Command {
    let mut c = Command::new(flavor.script());
    c.args(["sql", dir.to_str().unwrap(), site, sql]);
    c
}

/// The number of transactions in a GTID position of `flavor` (see
/// [`SitePair::transactions`]); 0 for an empty one.
///
/// # Panics
/// On a position that is not one.
pub fn count_transactions(flavor: Flavor, position: &str) -> u64 {
    let position = position.trim();
    if position.is_empty() {
        return 0;
    }
    match flavor {
        // `domain-server-seq` per domain; the pairs here write domain 0 only.
        Flavor::MariaDb => position
            .split(',')
            .map(|g| {
                g.trim().rsplit('-').next().and_then(|n| n.parse::<u64>().ok()).unwrap_or_else(|| panic!("{position}"))
            })
            .max()
            .unwrap_or(0),
        // `uuid:1-5:7,uuid2:1-3`: the intervals of every UUID.
        Flavor::MySql => {
            let number = |n: &str| n.trim().parse::<u64>().unwrap_or_else(|e| panic!("{position}: {n}: {e}"));
            position
                .split(',')
                .flat_map(|set| set.trim().split(':').skip(1))
                .map(|interval| interval.split_once('-').map_or(1, |(a, b)| number(b) - number(a) + 1))
                .sum()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transactions_are_counted_in_either_flavors_positions() {
        assert_eq!(count_transactions(Flavor::MariaDb, ""), 0);
        assert_eq!(count_transactions(Flavor::MariaDb, "0-1-42"), 42);
        assert_eq!(count_transactions(Flavor::MariaDb, "0-2-7"), 7);
        assert_eq!(count_transactions(Flavor::MySql, ""), 0);
        assert_eq!(count_transactions(Flavor::MySql, "3E11FA47-71CA-11E1-9E33-C80AA9429562:1-5"), 5);
        assert_eq!(
            count_transactions(
                Flavor::MySql,
                "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5:11-12,\n4e11fa47-71ca-11e1-9e33-c80aa9429562:3"
            ),
            8
        );
    }
}
