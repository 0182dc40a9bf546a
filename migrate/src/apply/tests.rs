use super::checks::oversized;
use super::*;

fn f(cause: Cause, dirty: bool) -> Failure {
    Failure { cause, message: String::new(), dirty, statement: None }
}

impl Failure {
    /// The exit code of a run that ends with this failure.
    fn code_of(&self, exhausted: bool) -> i32 {
        RunnerError::Revision { version: 1, failure: self.clone(), exhausted }.exit_code()
    }
}

#[test]
fn only_clean_lock_contention_is_retried_and_exit_codes_say_why() {
    let lock = Cause::Db(Class::LockContention, Some(1205));
    assert!(f(lock.clone(), false).retried());
    assert!(!f(lock.clone(), true).retried(), "never past a statement that took effect");
    assert!(f(Cause::Blocked { retried: true }, false).retried(), "--on-blocker wait ran out");
    assert!(!f(Cause::Blocked { retried: false }, false).retried(), "--on-blocker fail fails the run at once");
    assert_eq!(f(Cause::Blocked { retried: false }, false).code_of(false), exit::CONTENTION);
    for c in [Class::StatementTimeout, Class::Killed, Class::ReadOnly, Class::ConnectionLost, Class::Other] {
        assert!(!f(Cause::Db(c, None), false).retried(), "{c:?}");
    }
    assert_eq!(f(lock.clone(), false).code_of(true), exit::CONTENTION);
    assert_eq!(f(lock, true).code_of(false), exit::DIRTY);
    assert_eq!(f(Cause::Db(Class::ReadOnly, Some(1290)), false).code_of(false), exit::FENCED);
    assert_eq!(f(Cause::Db(Class::ConnectionLost, None), false).code_of(false), exit::CONNECTION_LOST);
    assert_eq!(f(Cause::Db(Class::StatementTimeout, Some(1969)), false).code_of(false), exit::FAILED);
    assert_eq!(f(Cause::Sidecar, false).code_of(false), exit::FENCED);
}

#[test]
fn attack_a_statement_too_large_for_the_server_is_found_before_the_run() {
    let small = crate::revision::parse_revision("V1__a.sql", 1, "a".into(), b"UPDATE t SET a = 1;").unwrap();
    let text = format!("UPDATE t SET a = 1;\nINSERT INTO t VALUES ('{}');", "x".repeat(4096));
    let big = crate::revision::parse_revision("V2__b.sql", 2, "b".into(), text.as_bytes()).unwrap();
    assert_eq!(oversized(&[&small, &big], 1 << 20), None);
    let (r, i, len) = oversized(&[&small, &big], 4096).unwrap();
    assert_eq!((r.version, i), (2, 2));
    assert!(len > 4096);
}

#[test]
fn the_idle_bound_covers_the_longest_gap() {
    let t = Tuning {
        lock_timeout: Duration::from_secs(5),
        max_attempts: 20,
        retry_min: Duration::from_secs(3),
        retry_max: Duration::from_secs(15),
    };
    assert_eq!(idle_bound(&t), Duration::from_secs(600));
    let slow = Tuning { retry_max: Duration::from_secs(900), ..t };
    assert_eq!(idle_bound(&slow), Duration::from_secs(3600));
}
