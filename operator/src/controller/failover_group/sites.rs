//! Probing a group's sites: read each site's credentials Secret (through
//! the watch-backed [`super::credentials::Cache`]), then probe it, all sites
//! concurrently, each bounded by `probeTimeoutSeconds`.

use std::time::{Duration, Instant};

use bloodraven_api::names::{
    SECRET_PASSWORD_KEY, SECRET_REPLICATION_PASSWORD_KEY, SECRET_REPLICATION_USERNAME_KEY, SECRET_USERNAME_KEY,
};
use bloodraven_api::v1alpha1::{MysqlFailoverGroup, Site, reason};

use super::assess::{ProbeFailure, SiteProbe};
use crate::controller::Context;
use crate::mysql::{self, Credentials, ProbeTarget};

/// Probes every site of `group` concurrently. A site answering as another
/// server than the one it is known by comes back failed
/// (`UnexpectedServer`, [`super::identity::check`]): every caller acts on
/// these probes, so none acts on another server.
pub(crate) async fn probe_all(group: &MysqlFailoverGroup, ctx: &Context) -> Vec<SiteProbe> {
    let timeout = Duration::from_secs(u64::from(group.spec.failover.probe_timeout_seconds.clamp(1, 60)));
    let probes = futures::future::join_all(group.spec.sites.iter().map(|site| probe_site(site, ctx, timeout))).await;
    super::identity::check(&super::identity::known(group), group.decided().map(|(s, _)| s), probes)
}

/// How long [`probe_until_replicating`] waits for a repointed site's
/// replication to run: a replica on the same network connects in
/// milliseconds.
const REPOINT_SETTLE: Duration = Duration::from_secs(3);

/// Probes every site of `group` until each of `sites` (just repointed)
/// shows both replication threads running, for at most [`REPOINT_SETTLE`];
/// the last probes either way. A repointed replica's IO thread shows
/// `Connecting` for a moment, and a condition built on that moment would
/// report a stop that is not one.
pub(crate) async fn probe_until_replicating(
    group: &MysqlFailoverGroup,
    ctx: &Context,
    sites: &[String],
) -> Vec<SiteProbe> {
    let started = Instant::now();
    loop {
        let probes = probe_all(group, ctx).await;
        let settled = sites.iter().all(|site| {
            probes
                .iter()
                .find(|p| &p.site == site)
                .and_then(|p| p.outcome.as_ref().ok())
                .is_some_and(|o| o.replication.as_ref().is_some_and(|r| r.io_running && r.sql_running))
        });
        if settled || started.elapsed() >= REPOINT_SETTLE {
            return probes;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn probe_site(site: &Site, ctx: &Context, timeout: Duration) -> SiteProbe {
    let started = Instant::now();
    let outcome = match read_credentials(site, ctx).await {
        Err(failure) => Err(failure),
        Ok(creds) => {
            let target = ProbeTarget { host: site.host.clone(), port: site.port };
            mysql::probe(&target, &creds, timeout).await.map_err(|err| {
                let (reason, message) = mysql::classify(&err);
                ProbeFailure { reason, message, answered_as: None }
            })
        }
    };
    let label = if outcome.is_ok() { "ok" } else { "error" };
    ctx.metrics.probe_duration_seconds.with_label_values(&[label]).observe(started.elapsed().as_secs_f64());
    SiteProbe { site: site.name.clone(), outcome }
}

/// Reads `username` and `password` from the site's Secret. The failure
/// message names the Secret and the key, never a value.
pub(crate) async fn read_credentials(site: &Site, ctx: &Context) -> Result<Credentials, ProbeFailure> {
    read_secret(site, ctx).await.map(|(operator, _)| operator)
}

/// The replication account a replica of `site`'s server uses to connect
/// to it: `replicationUsername`/`replicationPassword` of `site`'s Secret, or
/// the operator's own account when the Secret has no such keys.
pub(crate) async fn read_replication_credentials(site: &Site, ctx: &Context) -> Result<Credentials, ProbeFailure> {
    read_secret(site, ctx).await.map(|(operator, replication)| replication.unwrap_or(operator))
}

async fn read_secret(site: &Site, ctx: &Context) -> Result<(Credentials, Option<Credentials>), ProbeFailure> {
    let r = &site.credentials_secret_ref;
    let fail = |message: String| ProbeFailure { reason: reason::CREDENTIALS_UNAVAILABLE, message, answered_as: None };
    if r.namespace != ctx.credentials_namespace {
        return Err(fail(format!(
            "Secret {}/{} is outside namespace {}, the only namespace the operator reads site credentials from (--credentials-namespace); create the Secret there",
            r.namespace, r.name, ctx.credentials_namespace
        )));
    }
    let data = match ctx.groups.credentials.get(&r.name).await {
        Ok(Some(data)) => data,
        Ok(None) => {
            return Err(fail(format!(
                "credentials Secret {}/{} not found; create it with keys username and password",
                r.namespace, r.name
            )));
        }
        Err(kube::Error::Api(s)) if s.code == 403 => {
            return Err(fail(format!("the operator may not read Secret {}/{} (RBAC forbids it)", r.namespace, r.name)));
        }
        Err(err) => return Err(fail(format!("failed to read Secret {}/{}: {err}", r.namespace, r.name))),
    };
    let field = |key: &str| -> Result<String, ProbeFailure> {
        let bytes = data.get(key).ok_or_else(|| fail(format!("Secret {}/{} has no key {key}", r.namespace, r.name)))?;
        String::from_utf8(bytes.0.clone())
            .map_err(|_| fail(format!("Secret {}/{} key {key} is not UTF-8", r.namespace, r.name)))
    };
    let operator = Credentials { username: field(SECRET_USERNAME_KEY)?, password: field(SECRET_PASSWORD_KEY)? };
    let replication = if data.contains_key(SECRET_REPLICATION_USERNAME_KEY) {
        Some(Credentials {
            username: field(SECRET_REPLICATION_USERNAME_KEY)?,
            password: field(SECRET_REPLICATION_PASSWORD_KEY)?,
        })
    } else {
        None
    };
    Ok((operator, replication))
}
