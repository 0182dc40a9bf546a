//! The real `bloodraven-operator` binary as a child process, running under
//! its own ServiceAccount token with exactly the chart's RBAC rules.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding, RoleRef, Subject};
use kube::api::{Api, ObjectMeta, PostParams};
use serde::Deserialize;
use tokio::process::{Child, Command};

use crate::{Cluster, TestNamespace, e2e_dir, free_port, repo_root};

/// The operators' log filter unless E2E_OPERATOR_LOG says otherwise.
const DEFAULT_LOG: &str = "info,bloodraven_operator::failover=debug,bloodraven_operator::controller::database=debug,kube_runtime::controller=debug";

/// Label every e2e group carries; its value selects the test's operators.
pub const E2E_LABEL: &str = "bloodraven.shipstream.io/e2e";

/// Leader-election timings for a test (seconds).
#[derive(Clone, Copy, Debug)]
pub struct LeaderTimings {
    /// `--lease-duration-seconds`.
    pub lease_duration: u64,
    /// `--renew-deadline-seconds`.
    pub renew_deadline: u64,
    /// `--retry-period-seconds`.
    pub retry_period: u64,
}

impl Default for LeaderTimings {
    /// Shorter than production's 15/10/2 so that takeover tests are quick;
    /// the same ordering (retry < renew deadline < lease duration). Each
    /// attempt may take one retry period: at 1 s, a debug-build operator
    /// among three parallel tests on two cores timed out a renewal now and
    /// then, and two in a row lost the Lease in the middle of tests that are
    /// not about leadership.
    fn default() -> Self {
        LeaderTimings { lease_duration: 10, renew_deadline: 8, retry_period: 2 }
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RbacFile {
    cluster_rules: Vec<PolicyRule>,
    namespace_rules: Vec<PolicyRule>,
}

/// One running operator process.
#[derive(Debug)]
pub struct Operator {
    child: Option<Child>,
    /// Identity (leader Lease holder) of this process.
    pub identity: String,
    /// Plain HTTP port (metrics, health).
    pub plain_port: u16,
    /// Port of its loopback probe listener (`--probe-addr`).
    pub probe_port: u16,
    /// Log file.
    pub log: PathBuf,
}

async fn create_or_exists<K>(api: &Api<K>, obj: &K)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    match api.create(&PostParams::default(), obj).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 409 => {}
        Err(e) => panic!("failed to create {obj:?}: {e}"),
    }
}

/// Creates the operator's ServiceAccount in `ns` with the chart's RBAC, and
/// writes a kubeconfig holding a fresh token for it. Returns its path.
pub async fn operator_kubeconfig(cluster: &Cluster, ns: &TestNamespace) -> PathBuf {
    grant_operator_rbac(cluster, &ns.name).await;
    kubeconfig_for(cluster, &ns.name, "bloodraven-operator").await
}

/// Writes a kubeconfig holding a fresh token (1 h) of ServiceAccount
/// `namespace/sa_name`. Returns its path.
pub async fn kubeconfig_for(cluster: &Cluster, namespace: &str, sa_name: &str) -> PathBuf {
    let c = cluster.client.clone();
    let request = TokenRequest {
        spec: TokenRequestSpec { audiences: Vec::new(), expiration_seconds: Some(3600), ..TokenRequestSpec::default() },
        ..TokenRequest::default()
    };
    let token = Api::<ServiceAccount>::namespaced(c, namespace)
        .create_token_request(sa_name, &PostParams::default(), &request)
        .await
        .unwrap()
        .status
        .unwrap()
        .token;
    let path = e2e_dir().join(format!("kubeconfig-{sa_name}-{namespace}"));
    let kubeconfig = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "e2e", "cluster": {"server": cluster.url, "certificate-authority": cluster.ca_path}}],
        "users": [{"name": sa_name, "user": {"token": token}}],
        "contexts": [{"name": "e2e", "context": {"cluster": "e2e", "user": sa_name, "namespace": namespace}}],
        "current-context": "e2e",
    });
    std::fs::write(&path, serde_saphyr::to_string(&kubeconfig).unwrap()).unwrap();
    path
}

/// Creates ServiceAccount `bloodraven-operator` in `namespace` and grants it
/// exactly the chart's RBAC (a ClusterRole named after the namespace, and a
/// Role in it).
pub async fn grant_operator_rbac(cluster: &Cluster, namespace: &str) {
    grant_rbac(cluster, namespace, "bloodraven-operator", "charts/bloodraven/files/operator-rbac.yaml").await;
}

/// Creates ServiceAccount `sa_name` in `namespace` and grants it exactly the
/// rules of `rbac_file` (relative to the repository: `clusterRules` in a
/// ClusterRole `<sa_name>-<namespace>`, `namespaceRules` in a Role
/// `<sa_name>` in `namespace`).
pub async fn grant_rbac(cluster: &Cluster, namespace: &str, sa_name: &str, rbac_file: &str) {
    let rbac: RbacFile =
        serde_saphyr::from_str(&std::fs::read_to_string(repo_root().join(rbac_file)).unwrap()).unwrap();
    let c = cluster.client.clone();
    let meta = |name: &str, namespace: Option<&str>| ObjectMeta {
        name: Some(name.into()),
        namespace: namespace.map(Into::into),
        ..ObjectMeta::default()
    };
    let subject = Subject {
        kind: "ServiceAccount".into(),
        name: sa_name.into(),
        namespace: Some(namespace.to_owned()),
        ..Subject::default()
    };
    let cluster_role = format!("{sa_name}-{namespace}");
    create_or_exists(
        &Api::<ServiceAccount>::namespaced(c.clone(), namespace),
        &ServiceAccount { metadata: meta(sa_name, Some(namespace)), ..ServiceAccount::default() },
    )
    .await;
    create_or_exists(
        &Api::<ClusterRole>::all(c.clone()),
        &ClusterRole { metadata: meta(&cluster_role, None), rules: Some(rbac.cluster_rules), ..ClusterRole::default() },
    )
    .await;
    create_or_exists(
        &Api::<ClusterRoleBinding>::all(c.clone()),
        &ClusterRoleBinding {
            metadata: meta(&cluster_role, None),
            role_ref: RoleRef {
                api_group: "rbac.authorization.k8s.io".into(),
                kind: "ClusterRole".into(),
                name: cluster_role.clone(),
            },
            subjects: Some(vec![subject.clone()]),
        },
    )
    .await;
    if rbac.namespace_rules.is_empty() {
        return;
    }
    create_or_exists(
        &Api::<Role>::namespaced(c.clone(), namespace),
        &Role { metadata: meta(sa_name, Some(namespace)), rules: Some(rbac.namespace_rules) },
    )
    .await;
    create_or_exists(
        &Api::<RoleBinding>::namespaced(c.clone(), namespace),
        &RoleBinding {
            metadata: meta(sa_name, Some(namespace)),
            role_ref: RoleRef {
                api_group: "rbac.authorization.k8s.io".into(),
                kind: "Role".into(),
                name: sa_name.into(),
            },
            subjects: Some(vec![subject]),
        },
    )
    .await;
}

/// Path of the operator binary (`make test` builds it first).
pub fn operator_bin() -> PathBuf {
    std::env::var_os("BLOODRAVEN_OPERATOR_BIN")
        .map_or_else(|| repo_root().join("target/debug/bloodraven-operator"), PathBuf::from)
}

impl Operator {
    /// The process's peak resident memory so far (KiB), while it runs.
    pub fn memory_peak_kib(&self) -> Option<u64> {
        crate::memory_peak_kib(self.child.as_ref()?.id()?)
    }

    /// Starts an operator in `ns` managing groups labelled `E2E_LABEL=label`.
    pub async fn start(
        cluster: &Cluster,
        ns: &TestNamespace,
        label: &str,
        name: &str,
        timings: LeaderTimings,
    ) -> Operator {
        Self::start_with(cluster, ns, label, name, timings, &[]).await
    }

    /// As [`Operator::start`], with extra flags.
    pub async fn start_with(
        cluster: &Cluster,
        ns: &TestNamespace,
        label: &str,
        name: &str,
        timings: LeaderTimings,
        extra: &[String],
    ) -> Operator {
        let kubeconfig = operator_kubeconfig(cluster, ns).await;
        Self::start_wrapped(&kubeconfig, ns, label, name, timings, extra, &[])
    }

    /// As [`Operator::start_with`], with the operator's kubeconfig written
    /// before ([`operator_kubeconfig`]: a restart while the API server is
    /// down needs none of it), run through the command prefix `wrapper`
    /// (e.g. one that moves the process into a cgroup first).
    pub fn start_wrapped(
        kubeconfig: &std::path::Path,
        ns: &TestNamespace,
        label: &str,
        name: &str,
        timings: LeaderTimings,
        extra: &[String],
        wrapper: &[String],
    ) -> Operator {
        let plain_port = free_port();
        let probe_port = free_port();
        let identity = format!("{name}-{}", crate::suffix());
        let log = e2e_dir().join("logs").join(format!("{}-{identity}.log", ns.name));
        std::fs::create_dir_all(log.parent().unwrap()).unwrap();
        let file = std::fs::File::create(&log).unwrap();
        let bin = operator_bin();
        assert!(
            bin.exists(),
            "{} is missing: build it with `cargo build -p bloodraven-operator` (make test does)",
            bin.display()
        );
        let mut command = match wrapper.split_first() {
            Some((program, args)) => {
                let mut c = Command::new(program);
                c.args(args).arg(bin);
                c
            }
            None => Command::new(bin),
        };
        let child = command
            .args(["--namespace", &ns.name, "--identity", &identity])
            .args(["--plain-addr", &format!("127.0.0.1:{plain_port}")])
            .args(["--probe-addr", &format!("127.0.0.1:{probe_port}")])
            .args(["--group-selector", &format!("{E2E_LABEL}={label}")])
            .args(["--lease-duration-seconds", &timings.lease_duration.to_string()])
            .args(["--renew-deadline-seconds", &timings.renew_deadline.to_string()])
            .args(["--retry-period-seconds", &timings.retry_period.to_string()])
            .args(["--log-format", "json"])
            .args(extra)
            .env("KUBECONFIG", kubeconfig)
            // E2E_OPERATOR_LOG: the operators' RUST_LOG (hack/e2e.sh). By
            // default each step of the request engines too: a test that
            // times out prints the log's tail (fixtures::wait_status).
            .env("RUST_LOG", std::env::var("E2E_OPERATOR_LOG").unwrap_or_else(|_| DEFAULT_LOG.to_owned()))
            .stdin(Stdio::null())
            .stdout(file.try_clone().unwrap())
            .stderr(file)
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        Operator { child: Some(child), identity, plain_port, probe_port, log }
    }

    /// SIGKILL: the process gets no chance to release its Lease.
    pub async fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            child.kill().await.unwrap();
        }
    }

    /// Waits (bounded) for the process to end by itself; its exit status.
    pub async fn wait_exit(&mut self, timeout: Duration) -> Option<std::process::ExitStatus> {
        let child = self.child.as_mut()?;
        let status = tokio::time::timeout(timeout, child.wait()).await.ok()?.ok()?;
        self.child = None;
        Some(status)
    }

    /// Sends a signal by name (`STOP`, `CONT`, ...) to the process.
    pub fn signal(&self, name: &str) {
        let pid = self.child.as_ref().and_then(Child::id).expect("the operator is running").to_string();
        let ok = std::process::Command::new("kill").args([&format!("-{name}"), &pid]).status().unwrap().success();
        assert!(ok, "failed to send SIG{name}");
    }

    /// SIGTERM and wait (bounded) for a clean exit; returns whether it exited 0.
    pub async fn stop(&mut self) -> bool {
        let Some(mut child) = self.child.take() else { return false };
        let pid = child.id().unwrap().to_string();
        let _ = std::process::Command::new("kill").args(["-TERM", &pid]).status();
        if let Ok(Ok(status)) = tokio::time::timeout(Duration::from_secs(20), child.wait()).await {
            status.success()
        } else {
            let _ = child.kill().await;
            false
        }
    }

    /// When this process last probed group `name`: the newest
    /// `bloodraven_site_last_probe_timestamp_seconds` of its sites, in
    /// seconds since the epoch. The group's status is written only when it
    /// changes, so its `lastProbeTime` cannot show that probing goes on;
    /// this gauge moves every probe interval on the leader.
    pub async fn last_probe(&self, name: &str) -> Result<f64, String> {
        let metrics = self.metrics().await?;
        let prefix = format!("bloodraven_site_last_probe_timestamp_seconds{{group=\"{name}\",");
        metrics
            .lines()
            .filter(|l| l.starts_with(&prefix))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .reduce(f64::max)
            .ok_or_else(|| format!("no probe of {name} on {}", self.identity))
    }

    /// Waits until this process has probed group `name` after `after`
    /// (seconds since the epoch); returns that probe's time.
    pub async fn wait_probed_after(&self, name: &str, after: f64, timeout: Duration) -> f64 {
        crate::wait_for(&format!("a probe of {name} by {}", self.identity), timeout, || async {
            match self.last_probe(name).await {
                Ok(t) if t > after => Ok(t),
                Ok(t) => Err(format!("last probe at {t}, waiting for one after {after}")),
                Err(e) => Err(e),
            }
        })
        .await
    }

    /// The text of `/metrics`.
    pub async fn metrics(&self) -> Result<String, String> {
        let url = format!("http://127.0.0.1:{}/metrics", self.plain_port);
        let resp = reqwest::get(&url).await.map_err(|e| e.to_string())?;
        resp.text().await.map_err(|e| e.to_string())
    }

    /// GET a path on the plain port; returns the status code.
    pub async fn plain_status(&self, path: &str) -> Result<u16, String> {
        let url = format!("http://127.0.0.1:{}{path}", self.plain_port);
        Ok(reqwest::get(&url).await.map_err(|e| e.to_string())?.status().as_u16())
    }

    /// The whole log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The last lines of the log, for failure messages.
    pub fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }

    /// Peak resident set size (VmHWM) and current RSS (VmRSS) in KiB, from /proc.
    pub fn memory_kib(&self) -> Option<(u64, u64)> {
        process_memory_kib(self.child.as_ref()?.id()?)
    }

    /// CPU time the process has used so far (user + system), in seconds,
    /// from `/proc/<pid>/stat` (`utime` and `stime`, in clock ticks of
    /// `getconf CLK_TCK`).
    pub fn cpu_seconds(&self) -> Option<f64> {
        let pid = self.child.as_ref()?.id()?;
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        // Fields after the command name (which may hold spaces), from `state` (field 3).
        let rest: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
        let ticks: f64 = rest.get(11)?.parse::<f64>().ok()? + rest.get(12)?.parse::<f64>().ok()?;
        let tck = std::process::Command::new("getconf").arg("CLK_TCK").output().ok()?;
        let per_second: f64 = String::from_utf8_lossy(&tck.stdout).trim().parse().ok()?;
        Some(ticks / per_second)
    }
}

/// Peak resident set size (VmHWM) and current RSS (VmRSS) of process `pid`,
/// in KiB, from `/proc/<pid>/status`; `None` once it has ended.
pub fn process_memory_kib(pid: u32) -> Option<(u64, u64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
    };
    Some((field("VmHWM:")?, field("VmRSS:")?))
}

/// A Role `name` in `namespace` with `verbs` on `resources` of `api_group`, bound to `subject`.
pub async fn role(cluster: &Cluster, namespace: &str, name: &str, rule: (&str, &[&str], &[&str]), subject: Subject) {
    let (api_group, resources, verbs) = rule;
    let meta = ObjectMeta { name: Some(name.into()), namespace: Some(namespace.into()), ..ObjectMeta::default() };
    let rule = PolicyRule {
        api_groups: Some(vec![api_group.into()]),
        resources: Some(resources.iter().map(|v| (*v).to_owned()).collect()),
        verbs: verbs.iter().map(|v| (*v).to_owned()).collect(),
        ..PolicyRule::default()
    };
    Api::<Role>::namespaced(cluster.client.clone(), namespace)
        .create(&PostParams::default(), &Role { metadata: meta.clone(), rules: Some(vec![rule]) })
        .await
        .unwrap();
    let binding = RoleBinding {
        metadata: meta,
        role_ref: RoleRef { api_group: "rbac.authorization.k8s.io".into(), kind: "Role".into(), name: name.into() },
        subjects: Some(vec![subject]),
    };
    Api::<RoleBinding>::namespaced(cluster.client.clone(), namespace)
        .create(&PostParams::default(), &binding)
        .await
        .unwrap();
}
