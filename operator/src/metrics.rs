//! Prometheus metrics, all prefixed `bloodraven_`, in one registry served on
//! the plain port's `/metrics`. Labels carry group, site and stable reasons,
//! never credentials.

use std::sync::{Arc, Mutex, PoisonError};

use prometheus::core::{Collector, Desc};
use prometheus::{GaugeVec, HistogramOpts, HistogramVec, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry};

/// The operator's metrics.
#[derive(Clone, Debug)]
pub(crate) struct Metrics {
    registry: Registry,
    /// The description of every collector registered here, so that the
    /// families can be listed before they have a series (`gather()` leaves
    /// out a labelled family with no series yet).
    descs: Arc<Mutex<Vec<Desc>>>,
    /// `bloodraven_topology_generation{group}`: the group's decided topology generation.
    pub topology_generation: IntGaugeVec,
    /// `bloodraven_site_up{group,site}`: 1 when the last probe reached the site.
    pub site_up: IntGaugeVec,
    /// `bloodraven_site_writable{group,site}`: 1 when the site accepts writes.
    pub site_writable: IntGaugeVec,
    /// `bloodraven_replication_lag_seconds{group,site}`: the replica's lag (absent when unknown).
    pub replication_lag_seconds: GaugeVec,
    /// `bloodraven_site_last_probe_timestamp_seconds{group,site}`: when the
    /// leader last probed the site (answered or not), in seconds since the
    /// epoch. It moves every probe interval, where the group's status is
    /// written only when something in it changes.
    pub site_last_probe_timestamp_seconds: GaugeVec,
    /// `bloodraven_group_stable{group}`: 1 when the group is stable.
    pub group_stable: IntGaugeVec,
    /// `bloodraven_reconcile_total{controller}`: reconciles started.
    pub reconcile_total: IntCounterVec,
    /// `bloodraven_reconcile_errors_total{controller,reason}`: reconciles that failed, by stable reason.
    pub reconcile_errors_total: IntCounterVec,
    /// `bloodraven_probe_duration_seconds{outcome}`: time one site probe took.
    pub probe_duration_seconds: HistogramVec,
    /// `bloodraven_probe_to_status_seconds`: from the start of a group's
    /// probes to the status write that reports them, or to the check that
    /// the stored status already reports them (no write needed).
    pub probe_to_status_seconds: HistogramVec,
    /// `bloodraven_leader`: 1 while this process is the leader.
    pub leader: IntGauge,
    /// `bloodraven_deploy_leases_active{group,kind}`: 1 while a deploy lease is live.
    pub deploy_leases_active: IntGaugeVec,
    /// `bloodraven_deploy_requests_total{handler,status}`.
    pub deploy_requests_total: IntCounterVec,
    /// `bloodraven_deploy_watches_open`: watches (push revocation) waiting now.
    pub deploy_watches_open: IntGauge,
    /// `bloodraven_deploy_request_duration_seconds{handler,status}`.
    pub deploy_request_duration_seconds: HistogramVec,
    /// `bloodraven_deploy_leases_revoked_total{reason}`.
    pub deploy_leases_revoked_total: IntCounterVec,
    /// `bloodraven_planned_failovers_deferred_total{group}`: times a planned
    /// failover entered `Deferred` behind a failover-hold.
    pub planned_failovers_deferred_total: IntCounterVec,
    /// `bloodraven_failovers_total{group,kind,outcome}`: failovers by kind
    /// (`planned`, `emergency`) and outcome (`completed`, `failed`).
    pub failovers_total: IntCounterVec,
    /// `bloodraven_operation_phase_transitions_total{group,operation,phase}`:
    /// phases entered by the requests of `operation` (`planned-failover`,
    /// `ordered-update`, `restore-in-place`).
    pub operation_phase_transitions_total: IntCounterVec,
    /// `bloodraven_primary_service_writes_total{kind,action}`: writes of
    /// `<mysqldatabase>-primary` objects (`kind` Service, EndpointSlice or
    /// Endpoints, `action` apply, delete or remove-routing); flat at steady
    /// state.
    pub primary_service_writes_total: IntCounterVec,
    /// `bloodraven_status_writes_total{outcome}`: observations of a group's
    /// probes, `written` (status applied: something in it changed) or `unchanged` (the status already said so; no
    /// API request). Mostly `unchanged` at steady state.
    pub status_writes_total: IntCounterVec,
    /// `bloodraven_decision_record_reads_total{source}`: reads of a group's
    /// decision record, `cache` (the watch cache: the group was settled) or
    /// `api` (a GET). One per round, `cache` at steady state; a second
    /// (`api`) only when an engine acts on a cached copy.
    pub decision_record_reads_total: IntCounterVec,
    /// `bloodraven_database_group_reads_total{source}`: how the database
    /// reconciler found a MysqlDatabase's group, `api` (a GET) or `skipped`
    /// (the metadata caches show it is another shard's group: no read).
    /// Databases of other shards' groups only ever count `skipped`.
    pub database_group_reads_total: IntCounterVec,
}

/// Failed to register a metric (a programming error: duplicate name).
#[derive(Debug, thiserror::Error)]
#[error("failed to register metrics: {0}")]
pub struct MetricsError(#[from] prometheus::Error);

impl Metrics {
    /// Creates and registers every metric.
    #[allow(clippy::too_many_lines)] // one declaration and one registration per metric
    pub(crate) fn new() -> Result<Self, MetricsError> {
        let registry = Registry::new();
        let descs = Arc::new(Mutex::new(Vec::new()));
        let register = |collector: Box<dyn Collector>| record(&registry, &descs, collector);
        let topology_generation = IntGaugeVec::new(
            Opts::new("bloodraven_topology_generation", "Decided topology generation of the group"),
            &["group"],
        )?;
        let site_up = IntGaugeVec::new(
            Opts::new("bloodraven_site_up", "1 when the last probe reached the site"),
            &["group", "site"],
        )?;
        let site_writable = IntGaugeVec::new(
            Opts::new("bloodraven_site_writable", "1 when the site accepts writes (read_only=0)"),
            &["group", "site"],
        )?;
        let replication_lag_seconds = GaugeVec::new(
            Opts::new("bloodraven_replication_lag_seconds", "Replication lag of the site in seconds"),
            &["group", "site"],
        )?;
        let site_last_probe_timestamp_seconds = GaugeVec::new(
            Opts::new(
                "bloodraven_site_last_probe_timestamp_seconds",
                "When the leader last probed the site (answered or not), in seconds since the epoch",
            ),
            &["group", "site"],
        )?;
        let group_stable =
            IntGaugeVec::new(Opts::new("bloodraven_group_stable", "1 when the group is stable"), &["group"])?;
        let reconcile_total =
            IntCounterVec::new(Opts::new("bloodraven_reconcile_total", "Reconciles started"), &["controller"])?;
        let reconcile_errors_total = IntCounterVec::new(
            Opts::new("bloodraven_reconcile_errors_total", "Reconciles that failed"),
            &["controller", "reason"],
        )?;
        let probe_duration_seconds = HistogramVec::new(
            HistogramOpts::new("bloodraven_probe_duration_seconds", "Time one site probe took")
                .buckets(vec![0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0]),
            &["outcome"],
        )?;
        let probe_to_status_seconds = HistogramVec::new(
            HistogramOpts::new(
                "bloodraven_probe_to_status_seconds",
                "From the start of a group's probes to the status that reports them (written, or found already current)",
            )
            .buckets(vec![0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0]),
            &["controller"],
        )?;
        let leader = IntGauge::new("bloodraven_leader", "1 while this process is the leader")?;
        let deploy_leases_active = IntGaugeVec::new(
            Opts::new("bloodraven_deploy_leases_active", "1 while a deploy lease of the group and kind is live"),
            &["group", "kind"],
        )?;
        let deploy_requests_total = IntCounterVec::new(
            Opts::new("bloodraven_deploy_requests_total", "Deploy API requests by handler and status"),
            &["handler", "status"],
        )?;
        let deploy_watches_open =
            IntGauge::new("bloodraven_deploy_watches_open", "Deploy-lease watches (push revocation) waiting now")?;
        let deploy_request_duration_seconds = HistogramVec::new(
            HistogramOpts::new("bloodraven_deploy_request_duration_seconds", "Deploy API request latency")
                .buckets(vec![0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5]),
            &["handler", "status"],
        )?;
        let deploy_leases_revoked_total = IntCounterVec::new(
            Opts::new("bloodraven_deploy_leases_revoked_total", "Deploy operations revoked, by reason"),
            &["reason"],
        )?;
        let planned_failovers_deferred_total = IntCounterVec::new(
            Opts::new(
                "bloodraven_planned_failovers_deferred_total",
                "Times a planned failover entered Deferred behind a failover-hold",
            ),
            &["group"],
        )?;
        let failovers_total = IntCounterVec::new(
            Opts::new("bloodraven_failovers_total", "Failovers by kind (planned, emergency) and outcome"),
            &["group", "kind", "outcome"],
        )?;
        register(Box::new(planned_failovers_deferred_total.clone()))?;
        register(Box::new(failovers_total.clone()))?;
        let operation_phase_transitions_total = IntCounterVec::new(
            Opts::new(
                "bloodraven_operation_phase_transitions_total",
                "Phases entered by requests, by operation (planned-failover, ordered-update, restore-in-place) and phase",
            ),
            &["group", "operation", "phase"],
        )?;
        register(Box::new(operation_phase_transitions_total.clone()))?;
        let primary_service_writes_total = IntCounterVec::new(
            Opts::new(
                "bloodraven_primary_service_writes_total",
                "Writes of <mysqldatabase>-primary Services, EndpointSlices and Endpoints objects, by kind and action",
            ),
            &["kind", "action"],
        )?;
        register(Box::new(primary_service_writes_total.clone()))?;
        let status_writes_total = IntCounterVec::new(
            Opts::new(
                "bloodraven_status_writes_total",
                "Observations of a group's probes, by outcome: written (status applied) or unchanged (no write needed)",
            ),
            &["outcome"],
        )?;
        register(Box::new(status_writes_total.clone()))?;
        let decision_record_reads_total = IntCounterVec::new(
            Opts::new(
                "bloodraven_decision_record_reads_total",
                "Reads of decision records, by source: cache (watch cache) or api (GET); one per round at steady state",
            ),
            &["source"],
        )?;
        register(Box::new(decision_record_reads_total.clone()))?;
        let database_group_reads_total = IntCounterVec::new(
            Opts::new(
                "bloodraven_database_group_reads_total",
                "Lookups of a MysqlDatabase's group by the database reconciler, by source: api (GET) or skipped (another shard's group, known from the caches)",
            ),
            &["source"],
        )?;
        register(Box::new(database_group_reads_total.clone()))?;
        register(Box::new(topology_generation.clone()))?;
        register(Box::new(site_up.clone()))?;
        register(Box::new(site_writable.clone()))?;
        register(Box::new(replication_lag_seconds.clone()))?;
        register(Box::new(site_last_probe_timestamp_seconds.clone()))?;
        register(Box::new(group_stable.clone()))?;
        register(Box::new(reconcile_total.clone()))?;
        register(Box::new(reconcile_errors_total.clone()))?;
        register(Box::new(probe_duration_seconds.clone()))?;
        register(Box::new(probe_to_status_seconds.clone()))?;
        register(Box::new(leader.clone()))?;
        register(Box::new(deploy_leases_active.clone()))?;
        register(Box::new(deploy_requests_total.clone()))?;
        register(Box::new(deploy_watches_open.clone()))?;
        register(Box::new(deploy_request_duration_seconds.clone()))?;
        register(Box::new(deploy_leases_revoked_total.clone()))?;
        Ok(Metrics {
            registry,
            descs,
            topology_generation,
            site_up,
            site_writable,
            replication_lag_seconds,
            site_last_probe_timestamp_seconds,
            group_stable,
            reconcile_total,
            reconcile_errors_total,
            probe_duration_seconds,
            probe_to_status_seconds,
            leader,
            deploy_leases_active,
            deploy_requests_total,
            deploy_watches_open,
            deploy_request_duration_seconds,
            deploy_leases_revoked_total,
            planned_failovers_deferred_total,
            failovers_total,
            operation_phase_transitions_total,
            primary_service_writes_total,
            status_writes_total,
            decision_record_reads_total,
            database_group_reads_total,
        })
    }

    /// Registers a collector owned by another module (metrics are registered
    /// by the module that owns them, in this one registry).
    pub(crate) fn register(&self, collector: Box<dyn Collector>) -> Result<(), MetricsError> {
        record(&self.registry, &self.descs, collector)
    }

    /// The description (name, help, label names) of every metric family
    /// registered so far, with or without series: what `/metrics` can show.
    /// The monitoring check (`xtask/tests/monitoring.rs`) compares the
    /// alert and dashboard queries with these.
    pub(crate) fn families(&self) -> Vec<Desc> {
        self.descs.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// The registry in Prometheus text format.
    #[cfg(test)]
    fn render(&self) -> String {
        bloodraven_serving::admin::render(&self.registry)
    }

    /// The registry every metric here is registered in (served on `/metrics`).
    pub(crate) fn registry(&self) -> &Registry {
        &self.registry
    }

    /// Drops every per-group series (the state gauges and the live deploy
    /// leases): called when this replica stops being the leader, which
    /// stops updating them, so a follower never reports a group state that
    /// only the leader knows (a dashboard would otherwise see two replicas
    /// disagree, one of them frozen at the moment it lost the lease).
    /// Counters and histograms stay: they count what this replica did.
    pub(crate) fn forget_groups(&self) {
        self.topology_generation.reset();
        self.group_stable.reset();
        self.site_up.reset();
        self.site_writable.reset();
        self.replication_lag_seconds.reset();
        self.site_last_probe_timestamp_seconds.reset();
        self.deploy_leases_active.reset();
    }

    /// Drops every series of a deleted group, so dashboards do not show a
    /// group that no longer exists.
    pub(crate) fn forget_group(&self, group: &str, sites: &[&str]) {
        let _ = self.topology_generation.remove_label_values(&[group]);
        let _ = self.group_stable.remove_label_values(&[group]);
        for site in sites {
            let labels = [group, site];
            let _ = self.site_up.remove_label_values(&labels);
            let _ = self.site_writable.remove_label_values(&labels);
            let _ = self.replication_lag_seconds.remove_label_values(&labels);
            let _ = self.site_last_probe_timestamp_seconds.remove_label_values(&labels);
        }
    }
}

/// Registers `collector` in `registry` and keeps its descriptions in `descs`.
fn record(registry: &Registry, descs: &Mutex<Vec<Desc>>, collector: Box<dyn Collector>) -> Result<(), MetricsError> {
    let these: Vec<Desc> = collector.desc().into_iter().cloned().collect();
    registry.register(collector)?;
    descs.lock().unwrap_or_else(PoisonError::into_inner).extend(these);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metrics_are_prometheus_text_and_a_deleted_group_leaves_no_series() {
        let m = Metrics::new().unwrap();
        m.topology_generation.with_label_values(&["g"]).set(3);
        let body = m.render();
        assert!(body.contains("bloodraven_topology_generation{group=\"g\"} 3"), "{body}");
        m.site_up.with_label_values(&["g", "iad"]).set(1);
        m.site_up.with_label_values(&["h", "iad"]).set(1);
        m.site_last_probe_timestamp_seconds.with_label_values(&["g", "pdx"]).set(1.7e9);
        m.forget_group("g", &["iad", "pdx"]);
        let body = m.render();
        assert!(!body.contains("group=\"g\""), "a deleted group leaves no series: {body}");
        assert!(body.contains("bloodraven_site_up{group=\"h\",site=\"iad\"} 1"), "other groups stay: {body}");
    }

    #[test]
    fn a_replica_that_stops_leading_drops_every_group_gauge_and_keeps_its_counters() {
        let m = Metrics::new().unwrap();
        m.topology_generation.with_label_values(&["g"]).set(3);
        m.group_stable.with_label_values(&["g"]).set(1);
        m.site_up.with_label_values(&["g", "iad"]).set(1);
        m.site_writable.with_label_values(&["g", "iad"]).set(1);
        m.replication_lag_seconds.with_label_values(&["g", "pdx"]).set(0.5);
        m.site_last_probe_timestamp_seconds.with_label_values(&["g", "pdx"]).set(1.7e9);
        m.deploy_leases_active.with_label_values(&["g", "migration"]).set(1);
        m.leader.set(1);
        m.forget_groups();
        let body = m.render();
        assert!(!body.contains("group=\"g\""), "no group gauge stays: {body}");
        assert!(body.contains("bloodraven_leader 1"), "{body}");
    }

    #[test]
    fn families_list_labelled_metrics_before_their_first_series() {
        let m = Metrics::new().unwrap();
        let body = m.render();
        assert!(!body.contains("bloodraven_site_up"), "no series yet: {body}");
        let families = m.families();
        let site_up = families.iter().find(|d| d.fq_name == "bloodraven_site_up").unwrap();
        assert_eq!(site_up.variable_labels, ["group", "site"]);
        assert!(families.iter().any(|d| d.fq_name == "bloodraven_leader"));
        let extra = IntGauge::new("bloodraven_test_extra", "registered by another module").unwrap();
        m.register(Box::new(extra)).unwrap();
        assert!(m.families().iter().any(|d| d.fq_name == "bloodraven_test_extra"));
        assert!(m.register(Box::new(IntGauge::new("bloodraven_leader", "twice").unwrap())).is_err());
        assert_eq!(m.families().iter().filter(|d| d.fq_name == "bloodraven_leader").count(), 1);
    }
}
