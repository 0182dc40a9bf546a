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
