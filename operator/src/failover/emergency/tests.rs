use bloodraven_api::v1alpha1::{
    FailoverPolicy, MysqlFailoverGroupSpec, MysqlFailoverGroupStatus, SecretRef, Site, SiteHealth,
};

use super::*;
use crate::controller::failover_group::assess::ProbeFailure;

fn failed(reason: &'static str) -> SiteProbe {
    SiteProbe { site: "iad".into(), outcome: Err(ProbeFailure { reason, message: "m".into(), answered_as: None }) }
}

fn group(port: u16, answered: Option<&str>) -> MysqlFailoverGroup {
    let site = |name: &str, port| Site {
        name: name.into(),
        host: "10.0.0.1".into(),
        port,
        credentials_secret_ref: SecretRef { namespace: "ns".into(), name: "c".into() },
    };
    let spec = MysqlFailoverGroupSpec {
        sites: vec![site("iad", port), site("pdx", 3307)],
        initial_active_site: "iad".into(),
        failover: FailoverPolicy::default(),
        planned_failover: None,
        ordered_update: None,
        restore_in_place: None,
        allowed_databases: bloodraven_api::v1alpha1::AllowedDatabases::default(),
    };
    let mut g = MysqlFailoverGroup::new("g", spec);
    g.status = Some(MysqlFailoverGroupStatus {
        health: vec![SiteHealth {
            site: "iad".into(),
            answered_endpoint: answered.map(str::to_owned),
            ..SiteHealth::default()
        }],
        ..MysqlFailoverGroupStatus::default()
    });
    g
}

#[test]
fn a_changed_endpoint_waits_until_it_answers() {
    let down = failed(reason::SITE_UNREACHABLE);
    let blocked = endpoint_unconfirmed(&group(3316, Some("10.0.0.1:3306")), "iad", Some(&down)).unwrap();
    assert_eq!(blocked.0, reason::ACTIVE_SITE_ENDPOINT_CHANGED);
    assert!(blocked.1.contains("10.0.0.1:3306") && blocked.1.contains("10.0.0.1:3316"), "{}", blocked.1);
    // Same endpoint, or nothing recorded (a status from before): misses count.
    assert!(endpoint_unconfirmed(&group(3306, Some("10.0.0.1:3306")), "iad", Some(&down)).is_none());
    assert!(endpoint_unconfirmed(&group(3316, None), "iad", Some(&down)).is_none());
}

fn standby(host: &str, source_server_id: Option<u32>, io_running: bool, heartbeats: u64) -> SiteProbe {
    let replication = crate::mysql::ReplicationObservation {
        io_running,
        io_state: if io_running { "Yes".into() } else { "Connecting".into() },
        sql_running: true,
        source_host: host.into(),
        source_port: 3306,
        source_server_id,
        received_position: Some("0-1-5".into()),
        heartbeats: Some(heartbeats),
        heartbeat_period_ms: Some(1000),
        ..crate::mysql::ReplicationObservation::default()
    };
    let obs = crate::mysql::SiteObservation {
        flavor: crate::mysql::Flavor::MariaDb,
        version: "10.11".into(),
        server_id: 2,
        server_uuid: String::new(),
        writable: false,
        gtid_position: "0-1-5".into(),
        gtid_binlog_state: "0-1-5".into(),
        gtid_slave_pos: "0-1-5".into(),
        replication: Some(replication),
        semi_sync: None,
    };
    SiteProbe { site: "pdx".into(), outcome: Ok(obs) }
}

/// Only a receiver connected to the active site speaks for it: by its
/// endpoint in spec, or by the server_id it is known by (another name for
/// the same server). A relay, or a receiver retrying, hears nothing of it.
#[test]
fn only_a_receiver_connected_to_the_active_site_hears_it() {
    let active = ActiveSource { host: "10.0.0.1".into(), port: 3306, server_id: Some(1) };
    let interval = Duration::from_secs(1);
    let heard = |probe: &SiteProbe| Missed::default().hear("u", Some(probe), &active, interval).is_some();
    assert!(heard(&standby("10.0.0.1", None, true, 7)), "by its endpoint");
    assert!(heard(&standby("primary.db.internal", Some(1), true, 7)), "by its server_id");
    assert!(!heard(&standby("10.0.0.9", Some(9), true, 7)), "a relay speaks for itself");
    assert!(!heard(&standby("10.0.0.1", Some(1), false, 7)), "a receiver retrying hears nothing");
    // A standby that cannot be probed for a round keeps what was heard:
    // its next reading with the same counts is no news (a heartbeat period
    // of 1 ms: silent after 2 ms).
    let quick = |beats| {
        let mut p = standby("10.0.0.1", Some(1), true, beats);
        if let Ok(o) = &mut p.outcome {
            o.replication.as_mut().unwrap().heartbeat_period_ms = Some(1);
        }
        p
    };
    let missed = Missed::default();
    assert!(missed.hear("u", Some(&quick(7)), &active, interval).is_some(), "a first reading is heard now");
    let unreachable = SiteProbe { site: "pdx".into(), ..failed("SiteUnreachable") };
    assert!(missed.hear("u", Some(&unreachable), &active, interval).is_none());
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(missed.hear("u", Some(&quick(7)), &active, interval), None, "the same counts after the gap: silent");
    assert!(missed.hear("u", Some(&quick(8)), &active, interval).is_some(), "a heartbeat: heard");
}
