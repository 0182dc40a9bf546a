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

    /// SIGTERM, for forwarding a stop the wrapper itself was sent.
    pub fn forward_term(self) {
        self.terminate();
    }

    /// SIGKILL to the whole process group (no-op when it is gone).
    pub fn kill_group(self) {
        if let Err(e) = kill_process_group(self.0, Signal::KILL) {
            tracing::debug!(pid = self.0.as_raw_nonzero().get(), error = %e, "SIGKILL not delivered (already gone?)");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
