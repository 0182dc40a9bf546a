//! A network namespace joined to this one by a veth pair, for putting a
//! MariaDB site where a partition can cut it off: `cut` takes the host side
//! of the link down (the operator and the other site lose it; clients on
//! its unix socket, "local" ones, still reach it), `heal` brings it back.
//! Needs root and iproute2 (`ip`). Removed on drop.

use std::process::Command;

/// A network namespace `bl-<tag>` with address `ns_ip`, reached from here at `host_ip`.
#[derive(Debug)]
pub struct NetNs {
    /// Namespace name.
    pub name: String,
    host_if: String,
    /// The address of this side of the link.
    pub host_ip: String,
    /// The address inside the namespace (where a site listens).
    pub ns_ip: String,
}

fn ip(args: &[&str]) {
    let out = Command::new("ip").args(args).output().expect("iproute2 (ip) is needed for partition tests");
    assert!(out.status.success(), "ip {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

impl NetNs {
    /// Creates the namespace and the link (a /30 in 10.128.0.0/9 chosen at random).
    pub fn create() -> NetNs {
        let tag = crate::suffix();
        let n: u32 = u32::from_str_radix(&tag, 16).unwrap_or(1) % (1 << 14);
        let (b, c) = (128 + (n >> 8) % 128, (n & 0xff) & 0xfc);
        let ns = NetNs {
            name: format!("bl-{tag}"),
            host_if: format!("bh-{tag}"),
            host_ip: format!("10.{b}.{c}.1"),
            ns_ip: format!("10.{b}.{c}.2"),
        };
        let peer = format!("bn-{tag}");
        ip(&["netns", "add", &ns.name]);
        ip(&["link", "add", &ns.host_if, "type", "veth", "peer", "name", &peer]);
        ip(&["link", "set", &peer, "netns", &ns.name]);
        ip(&["addr", "add", &format!("{}/30", ns.host_ip), "dev", &ns.host_if]);
        ip(&["link", "set", &ns.host_if, "up"]);
        ip(&["-n", &ns.name, "addr", "add", &format!("{}/30", ns.ns_ip), "dev", &peer]);
        ip(&["-n", &ns.name, "link", "set", &peer, "up"]);
        ip(&["-n", &ns.name, "link", "set", "lo", "up"]);
        ns
    }

    /// Cuts the namespace off (no answer at all, as a dead network).
    pub fn cut(&self) {
        ip(&["link", "set", &self.host_if, "down"]);
    }

    /// Joins it again.
    pub fn heal(&self) {
        ip(&["link", "set", &self.host_if, "up"]);
    }

    /// This side's end of the veth pair.
    pub fn host_if(&self) -> &str {
        &self.host_if
    }

    /// The namespace's end of the veth pair.
    pub fn peer_if(&self) -> String {
        format!("bn-{}", self.name.trim_start_matches("bl-"))
    }
}

impl Drop for NetNs {
    fn drop(&mut self) {
        // Deleting the namespace deletes its end of the pair, and with it ours.
        let _ = Command::new("ip").args(["netns", "del", &self.name]).status();
        let _ = Command::new("ip").args(["link", "del", &self.host_if]).status();
    }
}

fn iptables(args: &[&str]) -> bool {
    Command::new("iptables").args(args).status().is_ok_and(|s| s.success())
}

/// iptables rules inserted for a test; deleted on drop.
#[derive(Debug)]
pub struct Rules(Vec<Vec<String>>);

impl Rules {
    fn insert(rules: Vec<Vec<String>>) -> Rules {
        for rule in &rules {
            let mut args = vec!["-I"];
            args.extend(rule.iter().map(String::as_str));
            assert!(iptables(&args), "iptables -I {rule:?}");
        }
        Rules(rules)
    }
}

impl Drop for Rules {
    fn drop(&mut self) {
        for rule in &self.0 {
            let mut args = vec!["-D"];
            args.extend(rule.iter().map(String::as_str));
            let _ = iptables(&args);
        }
    }
}

impl NetNs {
    /// Routes `a` and `b` to each other through this namespace: a default
    /// route in each via its link, IPv4 forwarding on, and FORWARD rules
    /// that accept between them (a node's CNI rules may drop by default).
    pub fn route_between(a: &NetNs, b: &NetNs) -> Rules {
        std::fs::write("/proc/sys/net/ipv4/ip_forward", "1").expect("cannot turn on IPv4 forwarding (root is needed)");
        for ns in [a, b] {
            ip(&["-n", &ns.name, "route", "add", "default", "via", &ns.host_ip]);
        }
        let accept = |from: &NetNs, to: &NetNs| {
            ["FORWARD", "-s", &from.ns_ip, "-d", &to.ns_ip, "-j", "ACCEPT"].map(str::to_owned).to_vec()
        };
        Rules::insert(vec![accept(a, b), accept(b, a)])
    }

    /// Cuts this namespace's TCP `port` off from the processes of this one
    /// (the operator, clients over TCP) and only from them: their packets
    /// are dropped on the way out (OUTPUT), while traffic forwarded between
    /// namespaces (another namespace's replica) passes. Healed on drop.
    pub fn cut_from_host(&self, port: u16) -> Rules {
        let port = port.to_string();
        Rules::insert(vec![
            ["OUTPUT", "-d", &self.ns_ip, "-p", "tcp", "--dport", &port, "-j", "DROP"].map(str::to_owned).to_vec(),
        ])
    }
}
