//! The real `bloodraven-sidecar` binary in `run` mode as a child process,
//! around a shell-script migration that leaves marker files in a work
//! directory (`$D`) and reports to the sidecar with `$S mark …`.

use std::os::unix::process::ExitStatusExt as _;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use tokio::process::{Child, Command};

use crate::deploy::{Pipeline, TlsFiles};
use crate::{e2e_dir, repo_root};

/// Path of the sidecar binary (`hack/e2e.sh` exports a private copy).
pub fn sidecar_bin() -> PathBuf {
    std::env::var_os("BLOODRAVEN_SIDECAR_BIN")
        .map_or_else(|| repo_root().join("target/debug/bloodraven-sidecar"), PathBuf::from)
}

/// One `bloodraven-sidecar run -- sh -c SCRIPT`.
#[derive(Debug)]
pub struct SidecarRun {
    child: Option<Child>,
    /// The work directory (`$D` of the script): marker files, token, logs.
    pub dir: PathBuf,
    /// The operationId.
    pub operation_id: String,
}

/// Exit codes of the sidecar (sidecar/src/lease/ending.rs `exit`).
pub mod exit {
    /// Not started: the acquire timeout passed.
    pub const NOT_STARTED_TIMEOUT: i32 = 90;
    /// Fenced before DDL.
    pub const FENCED: i32 = 92;
    /// Fenced in DDL: schema verification required.
    pub const SCHEMA_VERIFICATION_REQUIRED: i32 = 93;
    /// Not started: an earlier run's schema awaits verification.
    pub const NOT_STARTED_VERIFICATION_REQUIRED: i32 = 95;
}

impl SidecarRun {
    /// Starts `run` for `pipeline` as operation `operation_id`, with extra
    /// `flags`, around `sh -c script` (env: `D` the work dir, `S` the sidecar binary).
    pub fn start(pipeline: &Pipeline, tls: &TlsFiles, operation_id: &str, flags: &[&str], script: &str) -> SidecarRun {
        Self::start_as(pipeline, tls, "counter-app", operation_id, flags, script)
    }

    /// As [`SidecarRun::start`], for MysqlDatabase `instance`.
    pub fn start_as(
        pipeline: &Pipeline,
        tls: &TlsFiles,
        instance: &str,
        operation_id: &str,
        flags: &[&str],
        script: &str,
    ) -> SidecarRun {
        let bin = sidecar_bin();
        assert!(
            bin.exists(),
            "{} is missing: build it with `cargo build -p bloodraven-sidecar` (hack/e2e.sh does)",
            bin.display()
        );
        let dir = e2e_dir().join("sidecar").join(format!("{operation_id}-{}", crate::suffix()));
        std::fs::create_dir_all(&dir).unwrap();
        let token = dir.join("token");
        std::fs::write(&token, &pipeline.token).unwrap();
        let out = std::fs::File::create(dir.join("stdout")).unwrap();
        let err = std::fs::File::create(dir.join("stderr")).unwrap();
        let child = Command::new(&bin)
            .arg("run")
            .args(["--url", &pipeline.base, "--group", &pipeline.group, "--instance", instance])
            .args(["--operation-id", operation_id])
            .arg("--ca")
            .arg(&tls.ca)
            .arg("--token-file")
            .arg(&token)
            .args(flags)
            .args(["--", "/bin/sh", "-c", script])
            .env("D", &dir)
            .env("S", &bin)
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        SidecarRun { child: Some(child), dir, operation_id: operation_id.to_owned() }
    }

    /// The `run` process's pid.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().and_then(Child::id).expect("the sidecar is running")
    }

    /// Sends a signal by name (`STOP`, `CONT`, `KILL`, `TERM`) to the `run` process.
    pub fn signal(&self, name: &str) {
        let ok =
            std::process::Command::new("kill").args([&format!("-{name}"), &self.pid().to_string()]).status().unwrap();
        assert!(ok.success(), "failed to send SIG{name}");
    }

    /// Waits for the exit code (bounded).
    pub async fn wait(&mut self, timeout: Duration) -> i32 {
        let child = self.child.as_mut().expect("running");
        let status = tokio::time::timeout(timeout, child.wait())
            .await
            .unwrap_or_else(|_| panic!("the sidecar did not end within {timeout:?}; log:\n{}", self.log()))
            .unwrap();
        self.child = None;
        status.code().unwrap_or_else(|| 128 + status.signal().unwrap_or(0))
    }

    /// Peak (VmHWM) and current (VmRSS) resident set of the `run` process, KiB.
    pub fn memory_kib(&self) -> Option<(u64, u64)> {
        crate::operator::process_memory_kib(self.pid())
    }

    /// Whether marker file `name` holds a complete line. Not mere existence:
    /// the shell's `>>` creates the file before it writes the stamp, and a
    /// reader between the two saw an empty marker (the sidecar benchmark
    /// failed parsing one under load).
    pub fn has(&self, name: &str) -> bool {
        self.read(name).ends_with('\n')
    }

    /// Whether marker file `name` was created at all, written or not (for
    /// "never started" checks, where a half-written marker counts).
    pub fn created(&self, name: &str) -> bool {
        self.dir.join(name).exists()
    }

    /// Contents of marker file `name` (empty when missing).
    pub fn read(&self, name: &str) -> String {
        std::fs::read_to_string(self.dir.join(name)).unwrap_or_default()
    }

    /// Waits until marker file `name` holds a complete line (see [`SidecarRun::has`]).
    pub async fn wait_for_marker(&self, name: &str, timeout: Duration) {
        crate::wait_for(&format!("marker {name} of {}", self.operation_id), timeout, || async move {
            if self.has(name) { Ok(()) } else { Err(format!("log:\n{}", self.log())) }
        })
        .await;
    }

    /// The sidecar's log (standard error), for failure messages.
    pub fn log(&self) -> String {
        let text = std::fs::read_to_string(self.dir.join("stderr")).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(40)..].join("\n")
    }

    /// The sidecar's whole log (standard error).
    pub fn full_log(&self) -> String {
        std::fs::read_to_string(self.dir.join("stderr")).unwrap_or_default()
    }

    /// The final record: the JSON line on standard output.
    pub fn record(&self) -> serde_json::Value {
        let text = std::fs::read_to_string(self.dir.join("stdout")).unwrap_or_default();
        text.lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .find(|v| v["record"] == "bloodraven-sidecar")
            .unwrap_or_else(|| panic!("no final record on standard output:\n{text}\nlog:\n{}", self.log()))
    }
}

/// Milliseconds since the epoch, as the marker files record them (`date +%s%N` / 1e6).
pub fn now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

/// A shell snippet that appends the current time in ms to `$D/NAME`.
pub fn stamp(name: &str) -> String {
    format!("echo $(( $(date +%s%N) / 1000000 )) >> \"$D/{name}\"")
}

/// The live leases of the group, as `(kind, operationId, ddlState)`.
pub async fn leases(pipeline: &Pipeline) -> Vec<(String, String, String)> {
    let r = pipeline.get().await;
    assert_eq!(r.status, 200, "{r:?}");
    r.body["leases"]
        .as_array()
        .map(|ls| {
            ls.iter()
                .map(|l| {
                    let s = |k: &str| l[k].as_str().unwrap_or_default().to_owned();
                    (s("kind"), s("operationId"), s("ddlState"))
                })
                .collect()
        })
        .unwrap_or_default()
}

/// A TCP proxy on 127.0.0.1 in front of the deploy API that can be told
/// to stop answering: it keeps accepting and reading, but forwards nothing
/// either way (answers delayed forever, as a broken middlebox would).
#[derive(Debug)]
pub struct Proxy {
    /// `127.0.0.1:PORT`.
    pub addr: String,
    blackhole: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl Proxy {
    /// Starts a proxy to `upstream` (`host:port`).
    pub async fn start(upstream: String) -> Proxy {
        use std::sync::atomic::Ordering;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let blackhole = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = blackhole.clone();
        tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                let upstream = upstream.clone();
                let flag = flag.clone();
                tokio::spawn(async move {
                    if flag.load(Ordering::SeqCst) {
                        // Hold the connection; answer nothing.
                        let mut sink = tokio::io::sink();
                        let _ = tokio::io::copy(&mut client, &mut sink).await;
                        return;
                    }
                    let Ok(mut server) = tokio::net::TcpStream::connect(&upstream).await else { return };
                    let (mut cr, mut cw) = client.split();
                    let (mut sr, mut sw) = server.split();
                    // Forward in both directions until the switch flips; then drop everything.
                    let open = || {
                        let flag = flag.clone();
                        move || !flag.load(Ordering::SeqCst)
                    };
                    let up = relay(&mut cr, &mut sw, open());
                    let down = relay(&mut sr, &mut cw, open());
                    let _ = tokio::join!(up, down);
                });
            }
        });
        Proxy { addr, blackhole }
    }

    /// From now on, nothing passes (open connections included).
    pub fn blackhole(&self) {
        self.blackhole.store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

/// Copies `from` to `to` while `open()`; afterwards reads are dropped.
async fn relay(
    from: &mut (impl tokio::io::AsyncRead + Unpin),
    to: &mut (impl tokio::io::AsyncWrite + Unpin),
    open: impl Fn() -> bool,
) {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let Ok(n) = from.read(&mut buf).await else { return };
        if n == 0 {
            let _ = to.shutdown().await;
            return;
        }
        if open() && to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}
