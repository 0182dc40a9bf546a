use kube::runtime::events::EventType;

use super::*;

#[test]
fn a_promotion_moment_is_a_normal_event_and_a_conflict_a_warning() {
    let condition = primary::desired::CONDITION;
    let moment = Computed::flag(condition, false, reason::ACTIVE_SITE_NOT_WRITABLE, "m");
    assert_eq!(event_for(&[], &moment, false).map(|e| e.type_), Some(EventType::Normal));
    let conflict = Computed::flag(condition, false, reason::PRIMARY_SERVICE_CONFLICT, "m");
    assert_eq!(event_for(&[], &conflict, false).map(|e| e.type_), Some(EventType::Warning));
    let none = Computed::flag(condition, false, reason::NO_ACTIVE_SITE, "m");
    assert!(event_for(&[], &none, false).is_none());
}
