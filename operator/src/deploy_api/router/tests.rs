use super::*;

#[test]
fn names() {
    assert!(valid_name("playground") && valid_name("counter-app") && valid_name("a.b"));
    for bad in ["", "-a", "a-", "UPPER", "a_b", &"a".repeat(254)] {
        assert!(!valid_name(bad), "{bad}");
    }
}

#[test]
fn access_log_values_are_validated_or_marked_invalid() {
    let raw = format!("\u{202e}{}", "x".repeat(60 * 1024));
    let done = Done::new("create_lease", Instant::now()).group("playground").instance("Bad Name").operation_id(&raw);
    assert_eq!(done.group, "playground");
    assert!(done.instance.starts_with("invalid(8 bytes):"), "{}", done.instance);
    let op = &done.operation_id;
    assert!(op.starts_with("invalid(61443 bytes):\"\\u{202e}xxx") && op.len() < 400, "{op}");
    assert!(!op.contains('\u{202e}'));
    let done = Done::new("renew_lease", Instant::now()).operation_id("op-1.2:3_4").instance("");
    assert_eq!((done.operation_id.as_ref(), done.instance.as_ref()), ("op-1.2:3_4", ""));
}
