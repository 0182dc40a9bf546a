//! The connection, from the user's kubeconfig, and what an API error means
//! to the person: a refusal by RBAC names the verb and resource needed.

use anyhow::Context as _;
use bloodraven_api::v1alpha1::MysqlFailoverGroup;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client, Config};

use crate::Global;

/// A connection and the namespaces the commands use.
#[derive(Clone)]
pub(crate) struct Ctx {
    pub client: Client,
    /// `-n`, else the context's namespace.
    pub namespace: String,
    /// Where the operator keeps its deploy Leases.
    pub operator_namespace: String,
}

impl std::fmt::Debug for Ctx {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ctx").field("namespace", &self.namespace).finish_non_exhaustive()
    }
}

impl Ctx {
    /// Connects as kubectl would: `--kubeconfig`, else `$KUBECONFIG` or
    /// `~/.kube/config`, else the in-cluster ServiceAccount; `--context`
    /// picks a context.
    pub async fn connect(global: &Global) -> anyhow::Result<Ctx> {
        let options = KubeConfigOptions { context: global.context.clone(), ..KubeConfigOptions::default() };
        let config = if let Some(path) = &global.kubeconfig {
            let kubeconfig =
                Kubeconfig::read_from(path).with_context(|| format!("cannot read kubeconfig {}", path.display()))?;
            Config::from_custom_kubeconfig(kubeconfig, &options).await.context("invalid kubeconfig")?
        } else if global.context.is_some() {
            Config::from_kubeconfig(&options).await.context("cannot load the kubeconfig context")?
        } else {
            Config::infer().await.context("no kubeconfig found (set --kubeconfig or $KUBECONFIG)")?
        };
        let namespace = global.namespace.clone().unwrap_or_else(|| config.default_namespace.clone());
        let client = Client::try_from(config).context("cannot build a client from the kubeconfig")?;
        Ok(Ctx { client, namespace, operator_namespace: global.operator_namespace.clone() })
    }

    pub fn groups(&self) -> Api<MysqlFailoverGroup> {
        Api::all(self.client.clone())
    }

    /// Reads a group, or says it does not exist or may not be read.
    pub async fn group(&self, name: &str) -> anyhow::Result<MysqlFailoverGroup> {
        match self.groups().get_opt(name).await {
            Ok(Some(g)) => Ok(g),
            Ok(None) => anyhow::bail!(
                "mysqlfailovergroup {name:?} not found (kubectl get mysqlfailovergroups lists them; they are cluster-scoped)"
            ),
            Err(e) => Err(access(e, "get", "mysqlfailovergroups.bloodraven.shipstream.io", None)),
        }
    }
}

/// An API error in the person's terms: a 403 names the verb and resource
/// needed (and where), and the `kubectl auth can-i` line that checks it.
pub(crate) fn access(err: kube::Error, verb: &str, resource: &str, namespace: Option<&str>) -> anyhow::Error {
    if let kube::Error::Api(status) = &err {
        // RBAC's refusal says who "cannot" do what; any other 403 (an
        // admission webhook's, a policy's) is that refusal, said as is.
        if status.code == 403 && !status.message.contains(" cannot ") {
            return anyhow::anyhow!(
                "refused by the API server (not by RBAC): {}",
                crate::output::printable(&status.message)
            );
        }
        if status.code == 403 {
            let (place, flag) = match namespace {
                Some(ns) => (format!("in namespace {ns}"), format!(" -n {ns}")),
                None => ("cluster-wide".to_owned(), String::new()),
            };
            return anyhow::anyhow!(
                "forbidden: this needs verb {verb:?} on {resource} {place}, which your RBAC does not grant \
                 (check: kubectl auth can-i {verb} {resource}{flag})"
            );
        }
        if status.code == 401 {
            return anyhow::anyhow!("unauthorized: the API server did not accept your credentials (kubectl's context)");
        }
    }
    anyhow::Error::new(err).context(format!("{verb} {resource} failed"))
}

/// Who the API server says the user is (SelfSubjectReview), for the
/// record an annotation keeps of who acted.
pub(crate) async fn whoami(ctx: &Ctx) -> anyhow::Result<String> {
    use k8s_openapi::api::authentication::v1::SelfSubjectReview;
    let api: Api<SelfSubjectReview> = Api::all(ctx.client.clone());
    let review = api
        .create(&kube::api::PostParams::default(), &SelfSubjectReview::default())
        .await
        .map_err(|e| access(e, "create", "selfsubjectreviews.authentication.k8s.io", None))?;
    review
        .status
        .and_then(|s| s.user_info)
        .and_then(|u| u.username)
        .filter(|u| !u.is_empty())
        .context("the API server did not say who you are (SelfSubjectReview without a username)")
}
