//! Running the kubectl plugin (`kubectl-bloodraven`, crate `kubectl/`) as
//! an on-call engineer would: the real binary as a subprocess, on a
//! kubeconfig (the run's admin one, or a ServiceAccount's), its standard
//! output, standard error and exit code captured; and readers of the
//! tables it prints.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding, RoleRef, Subject};
use kube::Api;
use kube::api::{ObjectMeta, PostParams};
use tokio::io::AsyncReadExt as _;

/// Path of the plugin binary: `BLOODRAVEN_KUBECTL_BIN` (hack/e2e.sh builds
/// it and sets it), else the workspace's debug build.
pub fn bin() -> PathBuf {
    std::env::var_os("BLOODRAVEN_KUBECTL_BIN")
        .map_or_else(|| crate::repo_root().join("target/debug/kubectl-bloodraven"), PathBuf::from)
}

/// The run's admin kubeconfig (system:masters, user `bloodraven-admin`).
pub fn admin_kubeconfig() -> PathBuf {
    crate::e2e_dir().join("control-plane/kubeconfig")
}

/// How long one plugin command may run before the test gives up on it.
const COMMAND_LIMIT: Duration = Duration::from_secs(240);

/// The plugin as one user runs it: `--kubeconfig`, `--operator-namespace`
/// (where the test's operators keep the deploy Leases), and an optional
/// `--context`.
#[derive(Clone, Debug)]
pub struct Plugin {
    /// `--kubeconfig`.
    pub kubeconfig: PathBuf,
    /// `--operator-namespace`.
    pub operator_namespace: String,
    /// `--context`, when set.
    pub context: Option<String>,
}

/// What one command did.
#[derive(Clone, Debug)]
pub struct Output {
    /// The arguments after the global flags.
    pub args: Vec<String>,
    /// Exit code (-1: ended by a signal).
    pub code: i32,
    /// Standard output.
    pub stdout: String,
    /// Standard error.
    pub stderr: String,
}

/// `text`, or its head and tail and how many lines it has when it is long
/// (a failure message that holds megabytes helps nobody).
fn shortened(text: &str) -> String {
    const KEEP: usize = 3000;
    let chars: Vec<char> = text.chars().collect();
    if chars.len() <= 2 * KEEP {
        return text.to_owned();
    }
    let head: String = chars[..KEEP].iter().collect();
    let tail: String = chars[chars.len() - KEEP..].iter().collect();
    format!("{head}\n[… {} lines in all …]\n{tail}", text.lines().count())
}

impl std::fmt::Display for Output {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "kubectl bloodraven {}: exit {}\n--- stdout:\n{}--- stderr:\n{}---",
            self.args.join(" "),
            self.code,
            shortened(&self.stdout),
            shortened(&self.stderr)
        )
    }
}

impl Output {
    /// Panics unless the command exited with `code`; returns itself.
    #[track_caller]
    pub fn expect_code(&self, code: i32) -> &Output {
        assert_eq!(self.code, code, "unexpected exit code:\n{self}");
        self
    }

    /// Panics unless standard output holds each of `texts`.
    #[track_caller]
    pub fn stdout_has(&self, texts: &[&str]) -> &Output {
        for t in texts {
            assert!(self.stdout.contains(t), "{t:?} not on standard output:\n{self}");
        }
        self
    }

    /// Panics unless standard error holds each of `texts`.
    #[track_caller]
    pub fn stderr_has(&self, texts: &[&str]) -> &Output {
        for t in texts {
            assert!(self.stderr.contains(t), "{t:?} not on standard error:\n{self}");
        }
        self
    }

    /// Standard output parsed as JSON.
    #[track_caller]
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| panic!("standard output is not JSON ({e}):\n{self}"))
    }

    /// Standard output parsed as YAML.
    #[track_caller]
    pub fn yaml(&self) -> serde_json::Value {
        serde_saphyr::from_str(&self.stdout).unwrap_or_else(|e| panic!("standard output is not YAML ({e}):\n{self}"))
    }
}

impl Plugin {
    /// As the run's admin.
    pub fn admin(operator_namespace: &str) -> Plugin {
        Plugin { kubeconfig: admin_kubeconfig(), operator_namespace: operator_namespace.to_owned(), context: None }
    }

    /// The same with another kubeconfig.
    #[must_use]
    pub fn with_kubeconfig(&self, kubeconfig: PathBuf) -> Plugin {
        Plugin { kubeconfig, ..self.clone() }
    }

    /// The same with `--context`.
    #[must_use]
    pub fn with_context(&self, context: &str) -> Plugin {
        Plugin { context: Some(context.to_owned()), ..self.clone() }
    }

    fn command(&self, args: &[&str]) -> tokio::process::Command {
        let mut c = tokio::process::Command::new(bin());
        c.arg("--kubeconfig").arg(&self.kubeconfig).arg("--operator-namespace").arg(&self.operator_namespace);
        if let Some(ctx) = &self.context {
            c.arg("--context").arg(ctx);
        }
        c.args(args)
            // Only the flags say where to connect and where the leases are.
            .env_remove("KUBECONFIG")
            .env_remove("BLOODRAVEN_NAMESPACE")
            // Colour is for terminals: a pipe gets none, NO_COLOR or not.
            .env_remove("NO_COLOR")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        c
    }

    /// Runs `kubectl bloodraven ARGS` to its end. Its output is not a
    /// terminal, so it holds no escape sequence (colour).
    pub async fn run(&self, args: &[&str]) -> Output {
        let out = self.spawn(args).finish(COMMAND_LIMIT).await;
        assert!(!out.stdout.contains('\x1b') && !out.stderr.contains('\x1b'), "escape sequences in a pipe:\n{out}");
        out
    }

    /// Starts `kubectl bloodraven ARGS` (`--watch`, `--wait`), its output
    /// collected as it comes.
    pub fn spawn(&self, args: &[&str]) -> Running {
        let mut child = self
            .command(args)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run {} (is BLOODRAVEN_KUBECTL_BIN set?): {e}", bin().display()));
        // Bytes, decoded when read: a command that prints a lot (a loop
        // gone wrong) must not cost a copy of everything per read.
        let collect = |mut pipe: Box<dyn tokio::io::AsyncRead + Unpin + Send>| {
            let bytes = Arc::new(Mutex::new(Vec::new()));
            let into = bytes.clone();
            let task = tokio::spawn(async move {
                let mut buf = [0_u8; 8192];
                loop {
                    match pipe.read(&mut buf).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => into.lock().unwrap().extend_from_slice(&buf[..n]),
                    }
                }
            });
            (bytes, task)
        };
        let (stdout, out_task) = collect(Box::new(child.stdout.take().unwrap()));
        let (stderr, err_task) = collect(Box::new(child.stderr.take().unwrap()));
        Running {
            args: args.iter().map(|a| (*a).to_owned()).collect(),
            child,
            stdout,
            stderr,
            tasks: vec![out_task, err_task],
        }
    }
}

/// A plugin command still running.
#[derive(Debug)]
pub struct Running {
    args: Vec<String>,
    child: tokio::process::Child,
    stdout: Arc<Mutex<Vec<u8>>>,
    stderr: Arc<Mutex<Vec<u8>>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Running {
    /// Its standard output so far.
    pub fn stdout(&self) -> String {
        String::from_utf8_lossy(&self.stdout.lock().unwrap()).into_owned()
    }

    /// Its standard error so far.
    pub fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.stderr.lock().unwrap()).into_owned()
    }

    /// Waits until `check` accepts its standard output so far; returns what
    /// `check` returned.
    pub async fn wait_stdout<T>(&self, what: &str, timeout: Duration, check: impl Fn(&str) -> Result<T, String>) -> T {
        crate::wait_for(what, timeout, || async {
            let out = self.stdout();
            check(&out).map_err(|why| format!("{why}\n--- stdout so far:\n{out}--- stderr:\n{}", self.stderr()))
        })
        .await
    }

    async fn output(mut self, code: i32) -> Output {
        for t in self.tasks.drain(..) {
            let _ = tokio::time::timeout(Duration::from_secs(10), t).await;
        }
        Output { args: self.args.clone(), code, stdout: self.stdout(), stderr: self.stderr() }
    }

    /// Waits up to `limit` for it to exit (else kills it and panics).
    pub async fn finish(mut self, limit: Duration) -> Output {
        if let Ok(status) = tokio::time::timeout(limit, self.child.wait()).await {
            let code = status.unwrap().code().unwrap_or(-1);
            return self.output(code).await;
        }
        let _ = self.child.kill().await;
        let out = self.output(-1).await;
        panic!("still running after {limit:?}, killed:\n{out}");
    }

    /// Sends it SIGINT (Ctrl-C) and waits up to `limit` for it to exit.
    pub async fn interrupt(self, limit: Duration) -> Output {
        let pid = self.child.id().expect("still running").to_string();
        let sent = std::process::Command::new("kill").args(["-INT", &pid]).status().unwrap();
        assert!(sent.success(), "kill -INT {pid}");
        self.finish(limit).await
    }

    /// Kills it (a `--watch` has no end of its own) and returns what it printed.
    pub async fn kill(mut self) -> Output {
        let _ = self.child.kill().await;
        self.output(-1).await
    }
}

/// Creates ServiceAccount `namespace/name`, grants it exactly
/// `cluster_rules` (a ClusterRole and binding `plugin-<name>-<namespace>`)
/// and `namespace_rules` in namespace `rules_namespace` (a Role and binding
/// of the same name), and returns a kubeconfig holding a fresh token of it.
pub async fn kubeconfig_with_rules(
    cluster: &crate::Cluster,
    namespace: &str,
    name: &str,
    cluster_rules: Vec<PolicyRule>,
    rules_namespace: &str,
    namespace_rules: Vec<PolicyRule>,
) -> PathBuf {
    crate::deploy::service_account(cluster, namespace, name).await;
    let role_name = format!("plugin-{name}-{namespace}");
    let meta = |ns: Option<&str>| ObjectMeta {
        name: Some(role_name.clone()),
        namespace: ns.map(str::to_owned),
        ..ObjectMeta::default()
    };
    let subjects = Some(vec![Subject {
        kind: "ServiceAccount".into(),
        name: name.into(),
        namespace: Some(namespace.into()),
        ..Subject::default()
    }]);
    let role_ref = |kind: &str| RoleRef {
        api_group: "rbac.authorization.k8s.io".into(),
        kind: kind.into(),
        name: role_name.clone(),
    };
    let pp = PostParams::default();
    let c = cluster.client.clone();
    let role = ClusterRole { metadata: meta(None), rules: Some(cluster_rules), ..ClusterRole::default() };
    Api::<ClusterRole>::all(c.clone()).create(&pp, &role).await.unwrap();
    let binding =
        ClusterRoleBinding { metadata: meta(None), role_ref: role_ref("ClusterRole"), subjects: subjects.clone() };
    Api::<ClusterRoleBinding>::all(c.clone()).create(&pp, &binding).await.unwrap();
    if !namespace_rules.is_empty() {
        let role = Role { metadata: meta(Some(rules_namespace)), rules: Some(namespace_rules) };
        Api::<Role>::namespaced(c.clone(), rules_namespace).create(&pp, &role).await.unwrap();
        let binding = RoleBinding { metadata: meta(Some(rules_namespace)), role_ref: role_ref("Role"), subjects };
        Api::<RoleBinding>::namespaced(c, rules_namespace).create(&pp, &binding).await.unwrap();
    }
    crate::operator::kubeconfig_for(cluster, namespace, name).await
}

/// A rule: `verbs` on `resources` of API group `group`.
pub fn rule(group: &str, resources: &[&str], verbs: &[&str]) -> PolicyRule {
    PolicyRule {
        api_groups: Some(vec![group.to_owned()]),
        resources: Some(resources.iter().map(|r| (*r).to_owned()).collect()),
        verbs: verbs.iter().map(|v| (*v).to_owned()).collect(),
        ..PolicyRule::default()
    }
}

/// The rows of the first table in `text` whose header line's words begin
/// with `headers`, as `HEADER → cell` (cells cut at the header's columns,
/// as kubectl-style tables are aligned); the table ends at an empty line.
pub fn table(text: &str, headers: &[&str]) -> Vec<BTreeMap<String, String>> {
    let lines: Vec<&str> = text.lines().collect();
    let Some(at) = lines.iter().position(|l| {
        let words: Vec<&str> = l.split_whitespace().collect();
        words.len() >= headers.len() && words.iter().zip(headers).all(|(w, h)| w == h)
    }) else {
        return Vec::new();
    };
    let header: Vec<char> = lines[at].chars().collect();
    // Each column: its name and where it starts (a word after spaces).
    let mut columns: Vec<(String, usize)> = Vec::new();
    let mut i = 0;
    while i < header.len() {
        if header[i] != ' ' && (i == 0 || header[i - 1] == ' ') {
            let end = (i..header.len()).find(|&j| header[j] == ' ').unwrap_or(header.len());
            columns.push((header[i..end].iter().collect(), i));
            i = end;
        } else {
            i += 1;
        }
    }
    let mut rows = Vec::new();
    for line in &lines[at + 1..] {
        if line.trim().is_empty() {
            break;
        }
        let chars: Vec<char> = line.chars().collect();
        let mut row = BTreeMap::new();
        for (n, (name, start)) in columns.iter().enumerate() {
            let end = columns.get(n + 1).map_or(chars.len(), |c| c.1).min(chars.len());
            let cell: String = chars.get(*start..end).map(|c| c.iter().collect()).unwrap_or_default();
            row.insert(name.clone(), cell.trim().to_owned());
        }
        rows.push(row);
    }
    rows
}

/// The row of `table` whose column `column` is `value`.
pub fn row<'a>(
    table: &'a [BTreeMap<String, String>],
    column: &str,
    value: &str,
) -> Option<&'a BTreeMap<String, String>> {
    table.iter().find(|r| r.get(column).map(String::as_str) == Some(value))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_are_read_by_their_columns() {
        let text = "Sites:\n  SITE   ENDPOINT         ROLE      REACHABLE            LAG\n  iad    127.0.0.1:3306   primary   yes                  -\n  pdx    127.0.0.1:3307   replica   no (SiteUnreachable)\n\nConditions:\n";
        let t = table(text, &["SITE", "ENDPOINT"]);
        assert_eq!(t.len(), 2);
        assert_eq!(row(&t, "SITE", "pdx").unwrap()["REACHABLE"], "no (SiteUnreachable)");
        assert_eq!(row(&t, "SITE", "pdx").unwrap()["LAG"], "");
        assert_eq!(row(&t, "SITE", "iad").unwrap()["ROLE"], "primary");
        assert!(table(text, &["KIND"]).is_empty());
    }
}
