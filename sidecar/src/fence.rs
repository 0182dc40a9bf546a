//! Fencing the migration process: SIGTERM to the migration, SIGKILL to its
//! whole process group after the grace. The migration runs in a process
//! group of its own (the wrapper starts it so), so the SIGKILL also ends
//! anything it started: no step of it outlives the fence.

use rustix::process::{Pid, Signal, kill_process, kill_process_group};

/// A started migration process: its pid, which is also its process group.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Target(Pid);

impl Target {
    /// The target for a child started as the leader of its own process
    /// group. `None` for pids 0 and 1 (never a child of ours; `kill(-1)`
    /// would reach every process).
    pub fn new(pid: u32) -> Option<Target> {
        let raw = i32::try_from(pid).ok()?;
        if raw <= 1 {
            return None;
        }
        Pid::from_raw(raw).map(Target)
    }

    /// SIGTERM to the migration process itself (as the kubelet stops a
    /// container: its main process decides how to stop its children).
    pub fn terminate(self) {
        if let Err(e) = kill_process(self.0, Signal::TERM) {
            tracing::debug!(pid = self.0.as_raw_nonzero().get(), error = %e, "SIGTERM not delivered (already gone?)");
        }
    }

    /// SIGKILL to the whole process group (no-op when it is gone).
    pub fn kill_group(self) {
        if let Err(e) = kill_process_group(self.0, Signal::KILL) {
            tracing::debug!(pid = self.0.as_raw_nonzero().get(), error = %e, "SIGKILL not delivered (already gone?)");
        }
    }
}

/// Makes this process the reaper of its orphaned descendants, so that a
/// process the migration detached (`setsid`, a double fork) is reparented
/// to the wrapper instead of init and stays findable by
/// [`kill_descendants`]. Best effort (Linux only).
pub fn become_subreaper() {
    if let Err(e) = rustix::process::set_child_subreaper(Some(rustix::process::getpid())) {
        tracing::warn!(error = %e, "failed to become the subreaper of the migration's processes");
    }
}

/// SIGKILL to every live descendant of this process, found through
/// `/proc`, rescanning until none is left (bounded): what the process-group
/// SIGKILL misses — a process that left the group (`setsid`, `setpgid`).
/// The attack round found a `setsid` grandchild writing after its run had
/// ended "succeeded" and released its leases. Returns how many were sent.
pub fn kill_descendants() -> usize {
    let me = std::process::id();
    let mut sent = 0;
    for _ in 0..50 {
        let found = descendants(me, &processes());
        if found.is_empty() {
            break;
        }
        for pid in &found {
            if let Some(p) = i32::try_from(*pid).ok().and_then(Pid::from_raw) {
                let _ = kill_process(p, Signal::KILL);
            }
        }
        sent += found.len();
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    sent
}

/// `(pid, parent pid)` of every live process (zombies left out).
fn processes() -> Vec<(u32, u32)> {
    let Ok(dir) = std::fs::read_dir("/proc") else { return Vec::new() };
    dir.filter_map(|e| {
        let name = e.ok()?.file_name();
        let pid: u32 = name.to_str()?.parse().ok()?;
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        parse_stat(&stat).map(|ppid| (pid, ppid))
    })
    .collect()
}

/// The parent pid from a `/proc/PID/stat` line, `None` for a zombie or a
/// line that does not parse. The command name (in parentheses) may hold
/// anything, `)` and spaces included: the fields follow the last `)`.
fn parse_stat(stat: &str) -> Option<u32> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    let state = fields.next()?;
    if matches!(state, "Z" | "X" | "x") {
        return None;
    }
    fields.next()?.parse().ok()
}

/// Every pid below `root` in the `(pid, parent)` table.
fn descendants(root: u32, table: &[(u32, u32)]) -> Vec<u32> {
    let mut out = Vec::new();
    let mut frontier = vec![root];
    while let Some(parent) = frontier.pop() {
        for (pid, _) in table.iter().filter(|(pid, ppid)| *ppid == parent && *pid != root) {
            if !out.contains(pid) {
                out.push(*pid);
                frontier.push(*pid);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_lines_and_trees() {
        assert_eq!(parse_stat("42 (sh) S 7 42 42 0 -1"), Some(7));
        assert_eq!(parse_stat("42 (a) b (c) S 9 1"), Some(9), "a name with ')' and spaces");
        assert_eq!(parse_stat("42 (sh) Z 7 42"), None, "a zombie is dead already");
        assert_eq!(parse_stat("garbage"), None);
        let table = [(2, 1), (3, 2), (4, 3), (5, 1), (6, 5), (7, 4)];
        let mut below = descendants(2, &table);
        below.sort_unstable();
        assert_eq!(below, [3, 4, 7]);
        assert!(descendants(7, &table).is_empty());
    }

    #[test]
    fn never_init_or_zero() {
        assert!(Target::new(0).is_none());
        assert!(Target::new(1).is_none());
        assert!(Target::new(u32::MAX).is_none());
        assert!(Target::new(4242).is_some());
    }

    #[tokio::test]
    async fn term_then_kill_reaches_the_group() {
        use std::os::unix::process::ExitStatusExt as _;
        // A shell that ignores TERM and has a child: only the group SIGKILL ends both.
        let mut child = tokio::process::Command::new("/bin/sh")
            .args(["-c", "trap '' TERM; sleep 30 & wait"])
            .process_group(0)
            .spawn()
            .unwrap();
        let target = Target::new(child.id().unwrap()).unwrap();
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        target.terminate();
        let still = tokio::time::timeout(std::time::Duration::from_millis(500), child.wait()).await;
        assert!(still.is_err(), "the shell ignores SIGTERM");
        target.kill_group();
        let status = tokio::time::timeout(std::time::Duration::from_secs(5), child.wait()).await.unwrap().unwrap();
        assert_eq!(status.signal(), Some(9));
    }
}
