//! MariaDB sites for one test: a primary `iad` and a replica `pdx`
//! replicating from it with GTIDs, started by `hack/mariadb.sh`, stopped
//! (and their processes gone) when the pair is dropped.

use std::path::{Path, PathBuf};
use std::process::Command;

use bloodraven_api::v1alpha1::{SecretRef, Site};

use crate::{e2e_dir, free_port, repo_root};

/// Two MariaDB servers on loopback: `iad` (server_id 1, writable) and `pdx`
/// (server_id 2, read-only, replicating from iad).
#[derive(Debug)]
pub struct SitePair {
    dir: PathBuf,
    /// Where iad listens (127.0.0.1, or an address in its own network namespace).
    pub iad_host: String,
    /// Where pdx listens (127.0.0.1, or the node's bridge address).
    pub pdx_host: String,
    /// Port of iad.
    pub iad_port: u16,
    /// Port of pdx.
    pub pdx_port: u16,
}

fn script(args: &[&str]) -> Result<String, String> {
    script_env(args, &[])
}

fn script_env(args: &[&str], env: &[(&str, &str)]) -> Result<String, String> {
    let out = Command::new(repo_root().join("hack/mariadb.sh"))
        .args(args)
        .envs(env.iter().copied())
        .output()
        .map_err(|e| format!("failed to run hack/mariadb.sh: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!(
            "hack/mariadb.sh {args:?} failed: {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

/// A template data folder shared by every pair of the run (built once;
/// `hack/mariadb.sh template` serialises concurrent builders with a lock).
fn shared_template() -> PathBuf {
    let dir = e2e_dir().join("mariadb/_shared");
    script(&["template", dir.to_str().unwrap()]).unwrap();
    dir.join("template")
}

impl SitePair {
    /// Starts a replicating pair in its own folder.
    pub fn start(test: &str) -> SitePair {
        // Short folder names: the socket path must stay under 108 bytes.
        let dir = e2e_dir().join("mariadb").join(format!("{}-{}", &test[..test.len().min(12)], crate::suffix()));
        std::fs::create_dir_all(&dir).unwrap();
        let template = shared_template();
        // A link, not a copy: every pair reads the one template (26 MB), and
        // only the sites' own data folders take room per test.
        std::os::unix::fs::symlink(&template, dir.join("template")).unwrap();
        let (iad_port, pdx_port) = (free_port(), free_port());
        let pair = SitePair { dir, iad_host: "127.0.0.1".into(), pdx_host: "127.0.0.1".into(), iad_port, pdx_port };
        script(&["pair", pair.dir_str(), &iad_port.to_string(), &pdx_port.to_string()]).unwrap();
        pair
    }

    /// A pair whose primary iad runs in the network namespace `ns`
    /// (listening on `ns.ns_ip`), so that `ns.cut()` partitions it from
    /// the operator and from pdx while its unix socket still serves local
    /// clients; pdx replicates from it over the link.
    pub fn start_in_netns(test: &str, ns: &crate::netns::NetNs) -> SitePair {
        let dir = e2e_dir().join("mariadb").join(format!("{}-{}", &test[..test.len().min(12)], crate::suffix()));
        std::fs::create_dir_all(&dir).unwrap();
        std::os::unix::fs::symlink(shared_template(), dir.join("template")).unwrap();
        let (iad_port, pdx_port) = (free_port(), free_port());
        let pair = SitePair { dir, iad_host: ns.ns_ip.clone(), pdx_host: "127.0.0.1".into(), iad_port, pdx_port };
        let d = pair.dir_str();
        script_env(
            &["start", d, "iad", &iad_port.to_string(), "1"],
            &[("BLOODRAVEN_SITE_NETNS", ns.name.as_str()), ("BLOODRAVEN_SITE_ADDR", ns.ns_ip.as_str())],
        )
        .unwrap();
        script(&["sql", d, "iad", "SET GLOBAL read_only=0"]).unwrap();
        script(&["start", d, "pdx", &pdx_port.to_string(), "2"]).unwrap();
        script_env(&["replicate", d, "pdx", &iad_port.to_string()], &[("BLOODRAVEN_PRIMARY_HOST", ns.ns_ip.as_str())])
            .unwrap();
        pair
    }

    /// A pair whose two sites listen on `addr` (the node's bridge address,
    /// `BLOODRAVEN_NODE_ADDRESS`), so that Pods reach them, as they reach
    /// external MySQL servers in production.
    pub fn start_on(test: &str, addr: &str) -> SitePair {
        let dir = e2e_dir().join("mariadb").join(format!("{}-{}", &test[..test.len().min(12)], crate::suffix()));
        std::fs::create_dir_all(&dir).unwrap();
        std::os::unix::fs::symlink(shared_template(), dir.join("template")).unwrap();
        let (iad_port, pdx_port) = (free_port(), free_port());
        let pair = SitePair { dir, iad_host: addr.into(), pdx_host: addr.into(), iad_port, pdx_port };
        let d = pair.dir_str();
        let on = [("BLOODRAVEN_SITE_ADDR", addr)];
        script_env(&["start", d, "iad", &iad_port.to_string(), "1"], &on).unwrap();
        script(&["sql", d, "iad", "SET GLOBAL read_only=0"]).unwrap();
        script_env(
            &["start", d, "pdx", &pdx_port.to_string(), "2"],
            &[("BLOODRAVEN_SITE_ADDR", addr), ("BLOODRAVEN_SITE_READ_ONLY", "1")],
        )
        .unwrap();
        script_env(&["replicate", d, "pdx", &iad_port.to_string()], &[("BLOODRAVEN_PRIMARY_HOST", addr)]).unwrap();
        pair
    }

    /// A replicating pair on loopback whose servers have `server_id`s
    /// `ids` (iad, pdx) instead of 1 and 2: another group's servers, as an
    /// organisation that numbers its servers uniquely runs them.
    pub fn start_with_ids(test: &str, ids: (u32, u32)) -> SitePair {
        let dir = e2e_dir().join("mariadb").join(format!("{}-{}", &test[..test.len().min(12)], crate::suffix()));
        std::fs::create_dir_all(&dir).unwrap();
        std::os::unix::fs::symlink(shared_template(), dir.join("template")).unwrap();
        let (iad_port, pdx_port) = (free_port(), free_port());
        let pair = SitePair { dir, iad_host: "127.0.0.1".into(), pdx_host: "127.0.0.1".into(), iad_port, pdx_port };
        let d = pair.dir_str();
        script(&["start", d, "iad", &iad_port.to_string(), &ids.0.to_string()]).unwrap();
        script(&["sql", d, "iad", "SET GLOBAL read_only=0"]).unwrap();
        script_env(
            &["start", d, "pdx", &pdx_port.to_string(), &ids.1.to_string()],
            &[("BLOODRAVEN_SITE_READ_ONLY", "1")],
        )
        .unwrap();
        script(&["replicate", d, "pdx", &iad_port.to_string()]).unwrap();
        pair
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
        script(&["sql", self.dir_str(), site, sql]).unwrap()
    }

    /// Runs SQL as root on `site`; its output, or the client's error.
    pub fn try_sql(&self, site: &str, sql: &str) -> Result<String, String> {
        script(&["sql", self.dir_str(), site, sql])
    }

    /// Stops `site`'s server (clean shutdown).
    pub fn stop(&self, site: &str) {
        script(&["stop", self.dir_str(), site]).unwrap();
    }

    /// Kills `site`'s server with SIGKILL (no shutdown at all: a crash).
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
        panic!("mariadbd of {site} (pid {}) survived SIGKILL", pid.trim());
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
        // Lines: Recv-Q Send-Q Local:Port Peer:Port users:(("mariadbd",pid=N,fd=M))
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
    /// says whether it comes back read-only (MariaDB forgets a runtime
    /// `SET GLOBAL read_only` across a restart).
    pub fn restart(&self, site: &str, read_only: bool) {
        let (port, id) = if site == "iad" { (self.iad_port, "1") } else { (self.pdx_port, "2") };
        let ro = if read_only { "1" } else { "0" };
        script_env(&["start", self.dir_str(), site, &port.to_string(), id], &[("BLOODRAVEN_SITE_READ_ONLY", ro)])
            .unwrap();
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
        if let Err(e) = script(&["down", self.dir_str()]) {
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
