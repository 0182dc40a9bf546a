//! Builders and readers shared by the e2e tests.

use std::time::Duration;

use bloodraven_api::v1alpha1::{
    AllowedDatabases, Condition, DatabaseNamespaces, FailoverPolicy, MysqlFailoverGroup, MysqlFailoverGroupSpec,
    MysqlFailoverGroupStatus, NamespacesFrom, Site,
};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};
use kube::api::{Api, ListParams, ObjectMeta, PostParams};

use crate::Cluster;
use crate::operator::E2E_LABEL;

/// Lets MysqlDatabases of the namespaces `names` attach to a group.
pub fn allow_namespaces(names: &[&str]) -> AllowedDatabases {
    AllowedDatabases {
        namespaces: DatabaseNamespaces {
            from: NamespacesFrom::Selector,
            selector: Some(LabelSelector {
                match_expressions: Some(vec![LabelSelectorRequirement {
                    key: "kubernetes.io/metadata.name".into(),
                    operator: "In".into(),
                    values: Some(names.iter().map(|n| (*n).to_owned()).collect()),
                }]),
                match_labels: None,
            }),
        },
        ..AllowedDatabases::default()
    }
}

/// A group labelled for the test's operators, probing every second, that
/// lets MysqlDatabases of the test's namespace (`label`) attach.
pub fn group(name: &str, label: &str, sites: Vec<Site>, initial: &str) -> MysqlFailoverGroup {
    MysqlFailoverGroup {
        metadata: ObjectMeta {
            name: Some(name.into()),
            labels: Some([(E2E_LABEL.to_owned(), label.to_owned())].into()),
            ..ObjectMeta::default()
        },
        spec: MysqlFailoverGroupSpec {
            sites,
            initial_active_site: initial.into(),
            failover: FailoverPolicy {
                probe_interval_seconds: 1,
                probe_timeout_seconds: 2,
                ..FailoverPolicy::default()
            },
            planned_failover: None,
            ordered_update: None,
            restore_in_place: None,
            allowed_databases: allow_namespaces(&[label]),
        },
        status: None,
    }
}

/// Creates a group.
pub async fn create_group(cluster: &Cluster, group: &MysqlFailoverGroup) {
    cluster.groups().create(&PostParams::default(), group).await.unwrap();
}

/// The condition of `type_` in `status`, if present.
pub fn condition<'a>(status: &'a MysqlFailoverGroupStatus, type_: &str) -> Option<&'a Condition> {
    status.conditions.iter().find(|c| c.type_ == type_)
}

/// Waits until the group's status satisfies `check` (which explains what it
/// saw when it does not), and returns that status.
pub async fn wait_status<F>(
    cluster: &Cluster,
    name: &str,
    what: &str,
    timeout: Duration,
    check: F,
) -> MysqlFailoverGroupStatus
where
    F: Fn(&MysqlFailoverGroupStatus) -> Result<(), String>,
{
    let api = cluster.groups();
    let check_once = || {
        let api = api.clone();
        let check = &check;
        async move {
            let group = api.get(name).await.map_err(|e| e.to_string())?;
            let status = group.status.unwrap_or_default();
            match check(&status) {
                Ok(()) => Ok(status),
                Err(why) => Err(format!("{why}; status: {}", serde_json::to_string(&status).unwrap_or_default())),
            }
        }
    };
    crate::wait::wait_for_or(what, timeout, check_once, || operator_log_tails(name, 25)).await
}

/// The last `lines` lines of the logs of the operators that serve group
/// `name` (`NAMESPACE-SUFFIX`: their logs are `logs/NAMESPACE-*.log`), each
/// line cut to its message and fields: a status that stopped moving says
/// little without what the operator last did.
pub fn operator_log_tails(name: &str, lines: usize) -> String {
    use std::fmt::Write as _;
    let Some((namespace, _)) = name.rsplit_once('-') else { return String::new() };
    let dir = crate::e2e_dir().join("logs");
    let mut logs: Vec<_> = std::fs::read_dir(&dir)
        .map(|d| {
            d.filter_map(Result::ok)
                .map(|e| e.path())
                .filter(|p| {
                    p.file_name().and_then(|f| f.to_str()).is_some_and(|f| f.starts_with(&format!("{namespace}-")))
                })
                .collect()
        })
        .unwrap_or_default();
    logs.sort();
    let mut out = String::new();
    for log in logs {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        let _ = write!(out, "\n--- the last {lines} lines of {}:", log.display());
        for line in &all[all.len().saturating_sub(lines)..] {
            let short = match serde_json::from_str::<serde_json::Value>(line) {
                Ok(serde_json::Value::Object(mut m)) => {
                    for noise in ["target", "spans", "span", "threadId"] {
                        m.remove(noise);
                    }
                    serde_json::Value::Object(m).to_string()
                }
                _ => (*line).to_owned(),
            };
            out.push('\n');
            out.push_str(&short.chars().take(400).collect::<String>());
        }
    }
    out
}

/// A check: condition `type_` has `status` (and `reason`, when given).
pub fn has_condition(
    s: &MysqlFailoverGroupStatus,
    type_: &str,
    status: &str,
    reason: Option<&str>,
) -> Result<(), String> {
    match condition(s, type_) {
        Some(c) if c.status == status && reason.is_none_or(|r| c.reason == r) => Ok(()),
        Some(c) => Err(format!("{type_} is {} ({})", c.status, c.reason)),
        None => Err(format!("no {type_} condition")),
    }
}

/// A check: the decision names `site` at `generation` (whatever the sites show).
pub fn is_active_at(s: &MysqlFailoverGroupStatus, site: &str, generation: i64) -> Result<(), String> {
    match (s.active_site.as_deref(), s.topology_generation) {
        (Some(a), Some(g)) if a == site && g == generation => Ok(()),
        other => Err(format!("activeSite, topologyGeneration = {other:?}")),
    }
}

/// A check: bootstrapped at `site` with generation `generation`, Ready and stable.
pub fn is_ready_at(s: &MysqlFailoverGroupStatus, site: &str, generation: i64) -> Result<(), String> {
    if s.active_site.as_deref() != Some(site) || s.topology_generation != Some(generation) {
        return Err(format!("activeSite {:?} generation {:?}", s.active_site, s.topology_generation));
    }
    has_condition(s, "Ready", "True", None)?;
    if s.stable != Some(true) {
        return Err(format!("stable {:?} ({:?})", s.stable, s.unstable_reason));
    }
    Ok(())
}

/// Events about the cluster-scoped group `name` (recorded in `default`).
pub async fn group_events(cluster: &Cluster, name: &str) -> Vec<Event> {
    let api: Api<Event> = Api::namespaced(cluster.client.clone(), "default");
    let lp = ListParams::default().fields(&format!("regarding.name={name}"));
    api.list(&lp).await.map(|l| l.items).unwrap_or_default()
}

/// Waits until group `name` has, for each of `facts`, its own Event with
/// `reason` whose note holds every text of that fact; returns the notes in
/// the order of `facts`. Each Event answers one fact only, so one Event
/// whose series was extended by a later fact never passes.
pub async fn wait_events(cluster: &Cluster, name: &str, reason: &str, facts: &[&[&str]]) -> Vec<String> {
    crate::wait_for(&format!("an Event {reason} for each of {facts:?}"), std::time::Duration::from_secs(30), || async {
        let events = group_events(cluster, name).await;
        let mut notes: Vec<String> = events
            .iter()
            .filter(|e| e.reason.as_deref() == Some(reason))
            .map(|e| e.note.clone().unwrap_or_default())
            .collect();
        let mut found = Vec::new();
        for texts in facts {
            let Some(i) = notes.iter().position(|n| texts.iter().all(|t| n.contains(t))) else {
                return Err(format!("no {reason} Event names {texts:?}; notes: {notes:?}"));
            };
            found.push(notes.remove(i));
        }
        Ok(found)
    })
    .await
}

/// The decision record of `group` (a ConfigMap in the operator's
/// `namespace`), if there is one.
pub async fn decision_record(
    cluster: &Cluster,
    namespace: &str,
    group: &str,
) -> Option<k8s_openapi::api::core::v1::ConfigMap> {
    let records: Api<k8s_openapi::api::core::v1::ConfigMap> = Api::namespaced(cluster.client.clone(), namespace);
    let lp = ListParams::default().labels("bloodraven.shipstream.io/record=topology");
    let list = records.list(&lp).await.expect("list the decision records");
    list.items.into_iter().find(|c| c.data.as_ref().and_then(|d| d.get("group")).map(String::as_str) == Some(group))
}

/// Waits for an Event about group `name` with `reason`; returns its note.
pub async fn wait_event(cluster: &Cluster, name: &str, reason: &str) -> String {
    // Events about a cluster-scoped object are recorded in `default`.
    crate::deploy::wait_object_event(cluster, "default", name, reason).await
}

/// The usual setup of one test: its namespace, a replicating MariaDB pair,
/// the site Secret, and `operators` operator processes (named `op`, or `a`,
/// `b`, …) managing the test's groups.
#[derive(Debug)]
pub struct Scenario {
    /// The control plane.
    pub cluster: Cluster,
    /// The test's namespace (also the label value of its groups).
    pub ns: crate::TestNamespace,
    /// The MariaDB sites.
    pub pair: crate::SitePair,
    /// The operator processes.
    pub operators: Vec<crate::Operator>,
}

/// Name of the site Secret every scenario creates.
pub const SITE_SECRET: &str = "site-creds";

/// Ok when planned failover `id` completed and the group is Ready at
/// `site`, `generation`.
pub fn completed(s: &MysqlFailoverGroupStatus, id: &str, site: &str, generation: i64) -> Result<(), String> {
    match &s.planned_failover {
        Some(p) if p.request_id == id && p.phase == "Completed" => is_ready_at(s, site, generation),
        other => Err(format!("{other:?}")),
    }
}

impl Scenario {
    /// The decision record ConfigMap of `group` (in the test's namespace,
    /// which is the operators' namespace).
    pub async fn record_of(&self, group: &str) -> k8s_openapi::api::core::v1::ConfigMap {
        let records: Api<k8s_openapi::api::core::v1::ConfigMap> =
            Api::namespaced(self.cluster.client.clone(), &self.ns.name);
        let lp = ListParams::default().labels("bloodraven.shipstream.io/record=topology");
        records
            .list(&lp)
            .await
            .unwrap()
            .items
            .into_iter()
            .find(|c| c.data.as_ref().and_then(|d| d.get("group")).map(String::as_str) == Some(group))
            .unwrap()
    }

    /// Requests a planned failover of `group` to `target` (`requestId` `id`).
    pub async fn request_failover(&self, group: &str, target: &str, id: &str) {
        let patch = serde_json::json!({"spec": {"plannedFailover": {"targetSite": target, "requestId": id}}});
        self.cluster
            .groups()
            .patch(group, &kube::api::PatchParams::default(), &kube::api::Patch::Merge(&patch))
            .await
            .unwrap();
    }

    /// Sets up the namespace `<prefix>-<random>`, the pair, the Secret and the operators.
    pub async fn start(prefix: &str, operators: usize, timings: crate::operator::LeaderTimings) -> Scenario {
        Scenario::start_as(prefix, operators, timings, crate::sites::Flavor::of_run()).await
    }

    /// [`Scenario::start`] with a pair of `flavor`.
    pub async fn start_as(
        prefix: &str,
        operators: usize,
        timings: crate::operator::LeaderTimings,
        flavor: crate::sites::Flavor,
    ) -> Scenario {
        let cluster = Cluster::connect().await;
        let ns = cluster.namespace(prefix).await;
        let pair = crate::SitePair::start_as(prefix, flavor);
        ns.credentials_secret(SITE_SECRET, "bloodraven", crate::cluster::OPERATOR_DB_PASSWORD).await;
        let mut started = Vec::new();
        for i in 0..operators {
            let name = if operators == 1 { "op".to_owned() } else { char::from(b'a' + i as u8).to_string() };
            started.push(crate::Operator::start(&cluster, &ns, &ns.name, &name, timings).await);
        }
        Scenario { cluster, ns, pair, operators: started }
    }

    /// Creates the group `<namespace>-<suffix>` on the pair with `initial`
    /// as initialActiveSite, and returns its name.
    pub async fn group(&self, suffix: &str, initial: &str) -> String {
        let name = format!("{}-{suffix}", self.ns.name);
        create_group(&self.cluster, &group(&name, &self.ns.name, self.pair.sites(&self.ns.name, SITE_SECRET), initial))
            .await;
        name
    }

    /// Creates a group and waits until it is bootstrapped at iad, generation 1.
    pub async fn bootstrapped_group(&self, suffix: &str) -> String {
        let name = self.group(suffix, "iad").await;
        wait_status(&self.cluster, &name, "bootstrap to generation 1", Duration::from_secs(60), |s| {
            is_ready_at(s, "iad", 1)
        })
        .await;
        name
    }

    /// Creates a group with a short detection budget (probes every 1 s,
    /// 1 s timeout, 3 misses: 3 s), waits for its bootstrap at iad, and
    /// returns its name.
    pub async fn quick_group(&self, suffix: &str) -> String {
        let name = self.group(suffix, "iad").await;
        let patch = serde_json::json!({"spec": {"failover": {"probeIntervalSeconds": 1, "failureThreshold": 3, "probeTimeoutSeconds": 1}}});
        self.cluster
            .groups()
            .patch(&name, &kube::api::PatchParams::default(), &kube::api::Patch::Merge(&patch))
            .await
            .unwrap();
        wait_status(&self.cluster, &name, "bootstrap", Duration::from_secs(90), |s| is_ready_at(s, "iad", 1)).await;
        name
    }

    /// As [`Scenario::quick_group`], with semi-sync on and `more` merged
    /// into `spec.failover`; waits until semi-sync is active at iad with
    /// the operator's own server timeout (it never falls back by itself)
    /// and pdx counted there as acknowledging (a replica that connected
    /// before the primary's side was on acknowledges from a later event).
    pub async fn semi_sync_group(&self, suffix: &str, more: serde_json::Value) -> String {
        let name = self.group(suffix, "iad").await;
        let mut failover = serde_json::json!({"probeIntervalSeconds": 1, "failureThreshold": 3, "probeTimeoutSeconds": 1, "semiSync": true});
        if let (Some(f), Some(m)) = (failover.as_object_mut(), more.as_object()) {
            f.extend(m.clone());
        }
        let patch = serde_json::json!({"spec": {"failover": failover}});
        self.cluster
            .groups()
            .patch(&name, &kube::api::PatchParams::default(), &kube::api::Patch::Merge(&patch))
            .await
            .unwrap();
        let t = Duration::from_secs(240);
        wait_status(&self.cluster, &name, "bootstrap", t, |s| is_ready_at(s, "iad", 1)).await;
        let (switch, _, status, _) = self.pair.flavor.semi_sync_names();
        let timeout = switch.replace("enabled", "timeout");
        let clients = status.replace("status", "clients");
        crate::wait::wait_for(
            "semi-sync active at iad with the operator's timeout and pdx acknowledging",
            t,
            || async {
                // A commit, so that a replica waiting for the primary's side
                // to be on sees an event that asks for its acknowledgement.
                self.pair.sql("iad", "CREATE DATABASE IF NOT EXISTS semi_sync_probe");
                let on = self.pair.sql("iad", &format!("SHOW GLOBAL STATUS LIKE '{status}'"));
                let n = self.pair.sql("iad", &format!("SHOW GLOBAL STATUS LIKE '{clients}'"));
                let ms = self.pair.sql("iad", &format!("SELECT @@{timeout}"));
                match (on.split_whitespace().nth(1), n.split_whitespace().nth(1), ms.trim()) {
                    (Some("ON"), Some("1"), "4294967295") => Ok(()),
                    other => Err(format!("{other:?}")),
                }
            },
        )
        .await;
        name
    }

    /// An application account `w` that may write database `db` (created
    /// on `site`, with a table `w (i INT PRIMARY KEY)`), which the
    /// operator may end the sessions of; and a connection as it over TCP.
    pub async fn writer_account(&self, site: &str, db: &str) -> (mysql_async::Opts, mysql_async::Conn) {
        self.pair.sql(
            site,
            &format!(
                "CREATE DATABASE {db}; CREATE TABLE {db}.w (i INT PRIMARY KEY); \
                 CREATE USER 'w'@'127.0.0.1' IDENTIFIED BY 'w-pw'; GRANT INSERT, SELECT ON {db}.* TO 'w'@'127.0.0.1'"
            ),
        );
        let url = format!("mysql://w:w-pw@127.0.0.1:{}/{db}", self.pair.port(site));
        let opts: mysql_async::Opts =
            mysql_async::OptsBuilder::from_opts(mysql_async::Opts::from_url(&url).unwrap()).prefer_socket(false).into();
        let conn = mysql_async::Conn::new(opts.clone()).await.unwrap();
        (opts, conn)
    }

    /// The first (or only) operator.
    pub fn operator(&self) -> &crate::Operator {
        &self.operators[0]
    }
}
