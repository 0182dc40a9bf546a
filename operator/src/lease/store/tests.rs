use bloodraven_api::deploy::DdlState;
use bloodraven_core::lease::machine::Grant;
use k8s_openapi::jiff::Timestamp;

use super::*;

#[test]
fn a_grant_round_trips_through_a_lease_and_the_token_is_never_stored() {
    let g = Grant {
        operation_id: "op-1".into(),
        instance: "counter-app".into(),
        token_sha256: token_sha256("secret-token"),
        generation: 17,
        renewed_at: Timestamp::from_second(1_700_000_000).unwrap(),
        ttl_seconds: 30,
        ddl_state: Some(DdlState::Started),
        revision: Some("7".into()),
        client: Some("ci/deployer".into()),
        revoked: None,
    };
    let key = GroupKey { name: "playground".into(), uid: "u1".into(), created: None };
    let lease = encode_slot(&key, LeaseKind::Migration, None, Some(&g));
    assert_eq!(decode_grant(&lease), Some(g.clone()));
    // A revoked grant keeps its slot, and says so; re-encoded unrevoked, it no longer does.
    let revoked = Grant { revoked: Some(bloodraven_core::lease::machine::RevokeReason::OperatorRevoked), ..g.clone() };
    let kept = encode_slot(&key, LeaseKind::Migration, Some(&lease), Some(&revoked));
    assert_eq!(decode_grant(&kept), Some(revoked));
    assert_eq!(decode_grant(&encode_slot(&key, LeaseKind::Migration, Some(&kept), Some(&g))), Some(g.clone()));
    let text = serde_json::to_string(&lease).unwrap();
    assert!(!text.contains("secret-token"), "{text}");
    assert!(key.owns(&lease));
    let other = GroupKey { uid: "u2".into(), ..key.clone() };
    assert!(!other.owns(&lease), "a slot of another group of the same name is not this group's");
    assert_eq!(decode_owned(&other, Some(&lease)), None);
    let freed = encode_slot(&key, LeaseKind::Migration, Some(&lease), None);
    assert_eq!(decode_grant(&freed), None);
    assert!(!serde_json::to_string(&freed).unwrap().contains(&g.token_sha256), "a free slot keeps no token hash");
}
