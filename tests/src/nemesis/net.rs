//! The nemesis' network: who can reach whom, and how well.
//!
//! - Each site runs in a network namespace of its own (`NetNs`), joined to
//!   this one by a veth pair; the two reach each other through this
//!   namespace, which forwards between the links.
//! - The operators, the clients (this process, the writers and the deploy
//!   clients it starts) and the kube-apiserver stay here. Each operator
//!   runs in a cgroup (v2) of its own, and this process and its other
//!   children in the clients' one, so that an nftables rule can tell whose
//!   packet it is (`socket cgroupv2`).
//! - A partition is a pair of drop rules in one nftables table of the
//!   run's own; a slow link is `tc netem` on both ends of a site's veth
//!   pair. Everything is undone on drop, and by [`Net::heal`].

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use super::schedule::{Endpoint, Site};
use crate::netns::NetNs;

/// The cgroup v2 hierarchy. On a hybrid host it is mounted at
/// `/sys/fs/cgroup/unified`; nftables names a cgroup by its path under
/// `/sys/fs/cgroup`, so the rules say `unified/…` there.
fn cgroup2_root() -> (PathBuf, &'static str) {
    if Path::new("/sys/fs/cgroup/unified/cgroup.procs").exists() {
        (PathBuf::from("/sys/fs/cgroup/unified"), "unified/")
    } else {
        (PathBuf::from("/sys/fs/cgroup"), "")
    }
}

/// The nftables table, in a site's own namespace, of a lossy link.
const LOSSY_TABLE: &str = "bl_nemesis_lossy";

fn run(program: &str, args: &[&str]) -> Result<(), String> {
    let out = Command::new(program).args(args).output().map_err(|e| format!("{program}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!("{program} {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim()))
    }
}

fn must(program: &str, args: &[&str]) {
    if let Err(e) = run(program, args) {
        panic!("{e}");
    }
}

/// The run's cgroups: one per operator replica and one for the clients.
#[derive(Debug)]
pub struct Cgroups {
    /// `bl-nemesis-<tag>` under the v2 root.
    dir: PathBuf,
    /// The same as nftables names it.
    nft_prefix: String,
}

impl Cgroups {
    fn create(tag: &str) -> Cgroups {
        let (root, nft) = cgroup2_root();
        let name = format!("bl-nemesis-{tag}");
        let dir = root.join(&name);
        for member in ["clients", "operator-1", "operator-2"] {
            std::fs::create_dir_all(dir.join(member))
                .unwrap_or_else(|e| panic!("cannot create cgroup {}/{member} (root is needed): {e}", dir.display()));
        }
        Cgroups { dir, nft_prefix: format!("{nft}{name}") }
    }

    /// The cgroup's `cgroup.procs` of `member` (`clients`, `operator-1`, …):
    /// a process that writes its pid there before it opens a socket is
    /// that member's for every rule.
    pub fn procs(&self, member: &str) -> PathBuf {
        self.dir.join(member).join("cgroup.procs")
    }

    /// A command prefix that moves the process into `member`'s cgroup and
    /// then becomes the command (`sh -c 'echo $$ > …; exec "$@"'`).
    pub fn wrapper(&self, member: &str) -> Vec<String> {
        vec![
            "/bin/sh".into(),
            "-c".into(),
            format!("echo $$ > {} && exec \"$@\"", self.procs(member).display()),
            "cgroup-wrapper".into(),
        ]
    }

    /// Moves this very process (and the children it starts from now on).
    pub fn join(&self, member: &str) {
        std::fs::write(self.procs(member), std::process::id().to_string())
            .unwrap_or_else(|e| panic!("cannot join cgroup {member}: {e}"));
    }

    fn nft_path(&self, member: &str) -> String {
        format!("{}/{member}", self.nft_prefix)
    }
}

impl Drop for Cgroups {
    fn drop(&mut self) {
        // A cgroup is removed once empty; members left move to the parent.
        let parent = self.dir.parent().map(|p| p.join("cgroup.procs"));
        for member in ["clients", "operator-1", "operator-2"] {
            if let (Some(parent), Ok(pids)) = (&parent, std::fs::read_to_string(self.procs(member))) {
                for pid in pids.lines() {
                    let _ = std::fs::write(parent, pid);
                }
            }
            let _ = std::fs::remove_dir(self.dir.join(member));
        }
        let _ = std::fs::remove_dir(&self.dir);
    }
}

/// The run's network: the sites' namespaces, the cgroups, the firewall table.
#[derive(Debug)]
pub struct Net {
    /// The sites' links, by site.
    pub sites: BTreeMap<&'static str, NetNs>,
    /// The cgroups.
    pub cgroups: Cgroups,
    table: String,
    /// The kube-apiserver's port (on 127.0.0.1).
    apiserver_port: u16,
    /// The partitions in force, each with its rule handles.
    cuts: Vec<(Endpoint, Endpoint)>,
    slow: Vec<Site>,
}

impl Net {
    /// Creates both sites' namespaces, the cgroups, and an empty table.
    /// Turns on IPv4 forwarding (the sites reach each other through here).
    pub fn create(tag: &str, apiserver_port: u16) -> Net {
        std::fs::write("/proc/sys/net/ipv4/ip_forward", "1").expect("cannot turn on IPv4 forwarding (root is needed)");
        let mut sites = BTreeMap::new();
        for site in Site::ALL {
            let ns = NetNs::create();
            // The other site's link is reached through this namespace.
            must("ip", &["-n", &ns.name, "route", "add", "default", "via", &ns.host_ip]);
            sites.insert(site.name(), ns);
        }
        let table = format!("bl_nemesis_{tag}");
        must("nft", &["add", "table", "inet", &table]);
        // Owned from here on: a step below that fails drops it, table included.
        let net =
            Net { sites, cgroups: Cgroups::create(tag), table, apiserver_port, cuts: Vec::new(), slow: Vec::new() };
        let table = net.table.as_str();
        must("nft", &["add", "chain", "inet", table, "out", "{ type filter hook output priority 0; policy accept; }"]);
        // (`fwd` is a keyword of nft's grammar: not a chain name.)
        must(
            "nft",
            &["add", "chain", "inet", table, "forwarded", "{ type filter hook forward priority 0; policy accept; }"],
        );
        // A host whose FORWARD policy drops (a node's CNI rules) must still
        // let the two links reach each other.
        let (iad, pdx) = (net.site_ip(Site::Iad), net.site_ip(Site::Pdx));
        let _ = run("iptables", &["-I", "FORWARD", "-s", &iad, "-d", &pdx, "-j", "ACCEPT"]);
        let _ = run("iptables", &["-I", "FORWARD", "-s", &pdx, "-d", &iad, "-j", "ACCEPT"]);
        net
    }

    /// The address a site listens on.
    pub fn site_ip(&self, site: Site) -> String {
        self.sites[site.name()].ns_ip.clone()
    }

    /// The nftables rules that cut `a` from `b`, both ways where a rule can
    /// say so: a packet of an operator or of the clients is told by its
    /// cgroup, a site's by its address, the kube-apiserver's by its port.
    fn rules(&self, a: Endpoint, b: Endpoint) -> Vec<(&'static str, String)> {
        let cg = |e: Endpoint| match e {
            Endpoint::Operator(n) => Some(self.cgroups.nft_path(&format!("operator-{n}"))),
            Endpoint::Clients => Some(self.cgroups.nft_path("clients")),
            _ => None,
        };
        let mut out = Vec::new();
        for (from, to) in [(a, b), (b, a)] {
            match (from, to) {
                (Endpoint::Site(x), Endpoint::Site(y)) => {
                    out.push(("forwarded", format!("ip saddr {} ip daddr {} drop", self.site_ip(x), self.site_ip(y))));
                }
                (e, Endpoint::Site(s)) => {
                    if let Some(path) = cg(e) {
                        out.push((
                            "out",
                            format!("socket cgroupv2 level 2 \"{path}\" ip daddr {} drop", self.site_ip(s)),
                        ));
                    }
                }
                (e, Endpoint::ApiServer) => {
                    if let Some(path) = cg(e) {
                        out.push((
                            "out",
                            format!(
                                "socket cgroupv2 level 2 \"{path}\" ip daddr 127.0.0.1 tcp dport {} drop",
                                self.apiserver_port
                            ),
                        ));
                    }
                }
                // Replies to a cut-off caller are never sent: its own
                // packets are dropped on the way out.
                _ => {}
            }
        }
        out
    }

    /// Cuts `a` from `b` (no packet passes, either way).
    pub fn cut(&mut self, a: Endpoint, b: Endpoint) {
        for (chain, rule) in self.rules(a, b) {
            let mut args = vec!["add", "rule", "inet", &self.table, chain];
            let words: Vec<&str> = rule.split(' ').collect();
            args.extend(words.iter().map(|w| w.trim_matches('"')));
            must("nft", &args);
        }
        self.cuts.push((a, b));
    }

    /// Ends every partition: flushes both chains.
    pub fn heal_partitions(&mut self) {
        for chain in ["out", "forwarded"] {
            must("nft", &["flush", "chain", "inet", &self.table, chain]);
        }
        self.cuts.clear();
    }

    /// Ends the partition of `a` and `b`, keeping the others.
    pub fn heal(&mut self, a: Endpoint, b: Endpoint) {
        let keep: Vec<(Endpoint, Endpoint)> = self.cuts.iter().copied().filter(|&c| c != (a, b)).collect();
        self.heal_partitions();
        for (x, y) in keep {
            self.cut(x, y);
        }
    }

    /// Makes `site`'s link slow and lossy, both ways: netem on each end of
    /// its veth pair. A kernel without netem (`CONFIG_NET_SCH_NETEM` unset,
    /// as on the VMs CI runs on) gets the nearest it has: a token bucket
    /// narrow enough that a burst queues for up to `delay_ms` (the delay of
    /// a saturated link, not a fixed one), and the loss as an nftables rule
    /// in the site's namespace that drops that share of its packets at
    /// random, both ways.
    pub fn slow(&mut self, site: Site, delay_ms: u32, loss_percent: u32) {
        let ns = &self.sites[site.name()];
        let (delay, jitter, loss) =
            (format!("{delay_ms}ms"), format!("{}ms", delay_ms / 4), format!("{loss_percent}%"));
        let peer = ns.peer_if();
        let netem = ["root", "netem", "delay", &delay, &jitter, "loss", &loss];
        let host: Vec<&str> = ["qdisc", "replace", "dev", ns.host_if()].into_iter().chain(netem).collect();
        if run("tc", &host).is_ok() {
            let inside: Vec<&str> =
                ["-n", &ns.name, "qdisc", "replace", "dev", &peer].into_iter().chain(netem).collect();
            must("tc", &inside);
        } else {
            let tbf = ["root", "tbf", "rate", "1mbit", "burst", "16kb", "latency", &delay];
            let host: Vec<&str> = ["qdisc", "replace", "dev", ns.host_if()].into_iter().chain(tbf).collect();
            let inside: Vec<&str> = ["-n", &ns.name, "qdisc", "replace", "dev", &peer].into_iter().chain(tbf).collect();
            must("tc", &host);
            must("tc", &inside);
            if loss_percent > 0 {
                let in_ns = |args: &[&str]| {
                    let all: Vec<&str> =
                        ["netns", "exec", &ns.name, "nft"].into_iter().chain(args.iter().copied()).collect();
                    must("ip", &all);
                };
                in_ns(&["add", "table", "inet", LOSSY_TABLE]);
                let share = loss_percent.min(100).to_string();
                for (chain, hook) in [("in", "input"), ("out", "output")] {
                    let spec = format!("{{ type filter hook {hook} priority 0; policy accept; }}");
                    in_ns(&["add", "chain", "inet", LOSSY_TABLE, chain, &spec]);
                    in_ns(&[
                        "add",
                        "rule",
                        "inet",
                        LOSSY_TABLE,
                        chain,
                        "numgen",
                        "random",
                        "mod",
                        "100",
                        "<",
                        &share,
                        "drop",
                    ]);
                }
            }
        }
        self.slow.push(site);
    }

    /// Gives `site`'s link back its speed.
    pub fn fast(&mut self, site: Site) {
        let ns = &self.sites[site.name()];
        let _ = run("tc", &["qdisc", "del", "dev", ns.host_if(), "root"]);
        let _ = run("tc", &["-n", &ns.name, "qdisc", "del", "dev", &ns.peer_if(), "root"]);
        let _ = run("ip", &["netns", "exec", &ns.name, "nft", "delete", "table", "inet", LOSSY_TABLE]);
        self.slow.retain(|s| *s != site);
    }

    /// Ends every partition and every slow link.
    pub fn heal_all(&mut self) {
        self.heal_partitions();
        for site in self.slow.clone() {
            self.fast(site);
        }
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        let _ = run("nft", &["delete", "table", "inet", &self.table]);
        let (iad, pdx) = (self.site_ip(Site::Iad), self.site_ip(Site::Pdx));
        let _ = run("iptables", &["-D", "FORWARD", "-s", &iad, "-d", &pdx, "-j", "ACCEPT"]);
        let _ = run("iptables", &["-D", "FORWARD", "-s", &pdx, "-d", &iad, "-j", "ACCEPT"]);
    }
}
