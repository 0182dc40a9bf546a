//! A host agent, as a site's host runs one: the Jobs of an ordered update
//! or a restore-in-place run in Pods, and a real update that restarts the
//! server (a package upgrade, a configuration change) asks the host to do
//! it. The agent listens on the node's address; a Job asks
//! `GET /<action>?site=<site>` with curl, and the agent answers `200` once
//! the test has done the action on the real site, or `500` when the test
//! says it failed. Each request reaches the test as an [`AgentRequest`].

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::{mpsc, oneshot};

/// One request of a Job.
#[derive(Debug)]
pub struct AgentRequest {
    /// The path's action (`update`, `restore`, ...).
    pub action: String,
    /// The `site` parameter.
    pub site: String,
    /// The `request` parameter (the Job's `BLOODRAVEN_REQUEST_ID`).
    pub request: String,
    /// The answer: `Ok` is `200`, `Err(why)` is `500` with `why`.
    pub reply: oneshot::Sender<Result<(), String>>,
}

/// The agent: its address for the Jobs, and the requests they send.
#[derive(Debug)]
pub struct HostAgent {
    /// `host:port` the Jobs reach it at.
    pub address: String,
    /// The requests, in arrival order.
    pub requests: mpsc::Receiver<AgentRequest>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for HostAgent {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl HostAgent {
    /// Starts the agent on `addr` (the node's address, which Pods reach).
    pub async fn start(addr: &str) -> HostAgent {
        let listener = TcpListener::bind(format!("{addr}:0")).await.expect("bind the host agent");
        let address = format!("{addr}:{}", listener.local_addr().unwrap().port());
        let (tx, requests) = mpsc::channel(16);
        let task = tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                let tx = tx.clone();
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 4096];
                    let n = stream.read(&mut buf).await.unwrap_or(0);
                    let head = String::from_utf8_lossy(&buf[..n]).into_owned();
                    let path = head.split_whitespace().nth(1).unwrap_or("/").to_owned();
                    let (action, query) = path.trim_start_matches('/').split_once('?').unwrap_or((&path, ""));
                    let param = |name: &str| {
                        let found = query.split('&').find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='));
                        found.unwrap_or_default().to_owned()
                    };
                    let (site, request) = (param("site"), param("request"));
                    let (reply, answer) = oneshot::channel();
                    let asked =
                        AgentRequest { action: action.trim_start_matches('/').to_owned(), site, request, reply };
                    let outcome = match tx.send(asked).await {
                        Ok(()) => answer.await.unwrap_or_else(|_| Err("the test dropped the request".into())),
                        Err(_) => Err("the test no longer listens".into()),
                    };
                    let (status, body) = match outcome {
                        Ok(()) => ("200 OK", "ok\n".to_owned()),
                        Err(why) => ("500 Internal Server Error", format!("{why}\n")),
                    };
                    let response = format!(
                        "HTTP/1.1 {status}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                        body.len()
                    );
                    let _ = stream.write_all(response.as_bytes()).await;
                });
            }
        });
        HostAgent { address, requests, task }
    }

    /// Answers every request from now on, in a task, by making its site
    /// stand alone (replication stopped and forgotten), as a restore that
    /// loaded a backup leaves it; `seen` is told of each request first.
    pub fn serve_stand_alone(
        mut self,
        pair: &crate::SitePair,
        seen: impl Fn(&AgentRequest) + Send + 'static,
    ) -> tokio::task::JoinHandle<()> {
        let (flavor, dir) = (pair.flavor, pair.dir().to_path_buf());
        tokio::spawn(async move {
            while let Some(req) = self.requests.recv().await {
                seen(&req);
                let (dir, site) = (dir.clone(), req.site.clone());
                let done = tokio::task::spawn_blocking(move || {
                    crate::sites::sql_command(flavor, &dir, &site, flavor.stand_alone())
                        .status()
                        .map_err(|e| e.to_string())
                })
                .await
                .unwrap_or_else(|e| Err(e.to_string()));
                let _ = req.reply.send(match done {
                    Ok(s) if s.success() => Ok(()),
                    other => Err(format!("{other:?}")),
                });
            }
        })
    }

    /// The next request, within `timeout`; panics when none comes.
    pub async fn next(&mut self, timeout: std::time::Duration) -> AgentRequest {
        tokio::time::timeout(timeout, self.requests.recv())
            .await
            .unwrap_or_else(|_| panic!("no Job asked the host agent within {timeout:?}"))
            .expect("the host agent stopped")
    }
}

/// The script of a Job that asks the agent at `address` to do `action` on
/// its site (`$BLOODRAVEN_SITE`), printing its environment first (kept in
/// the Job's log), and fails when the agent answers anything but `200`.
pub fn job_script(address: &str, action: &str) -> String {
    format!(
        "env | grep ^BLOODRAVEN_ | sort; \
         curl -fsS --max-time 600 \"http://{address}/{action}?site=$BLOODRAVEN_SITE&role=$BLOODRAVEN_SITE_ROLE&request=$BLOODRAVEN_REQUEST_ID\""
    )
}

/// A namespace for the Jobs of a request, labelled by the cluster admin to
/// allow them (`bloodraven.shipstream.io/site-jobs: allowed`) for every
/// group (`bloodraven.shipstream.io/site-jobs-groups: "*"`).
pub async fn jobs_namespace(cluster: &crate::Cluster, prefix: &str) -> crate::TestNamespace {
    jobs_namespace_for(cluster, prefix, "*").await
}

/// A namespace for the Jobs of the requests of `groups` (comma-separated).
pub async fn jobs_namespace_for(cluster: &crate::Cluster, prefix: &str, groups: &str) -> crate::TestNamespace {
    use kube::api::{Patch, PatchParams};
    let ns = cluster.namespace(prefix).await;
    let api: kube::Api<k8s_openapi::api::core::v1::Namespace> = kube::Api::all(cluster.client.clone());
    let patch = serde_json::json!({"metadata": {
        "labels": {"bloodraven.shipstream.io/site-jobs": "allowed"},
        "annotations": {"bloodraven.shipstream.io/site-jobs-groups": groups},
    }});
    api.patch(&ns.name, &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
    ns
}
