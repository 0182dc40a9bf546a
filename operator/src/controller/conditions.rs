//! Building `metav1.Condition`s the Kubernetes way: `lastTransitionTime`
//! moves only when `status` changes; `observedGeneration` is the spec
//! generation the condition was computed from (API conventions,
//! "Typical status properties").

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;

pub(crate) use bloodraven_core::conditions::Computed;

/// Full conditions for `computed`, keeping each previous
/// `lastTransitionTime` whose status did not change.
pub(crate) fn materialize(
    previous: &[Condition],
    computed: &[Computed],
    generation: Option<i64>,
    now: Timestamp,
) -> Vec<Condition> {
    computed
        .iter()
        .map(|c| {
            let since = previous
                .iter()
                .find(|p| p.type_ == c.type_ && p.status == c.status)
                .map_or(Time(now), |p| p.last_transition_time.clone());
            Condition {
                type_: c.type_.to_owned(),
                status: c.status.to_owned(),
                reason: c.reason.to_owned(),
                message: c.message.clone(),
                observed_generation: generation,
                last_transition_time: since,
            }
        })
        .collect()
}

/// The computed conditions whose status differs from `previous` (absent counts as changed).
pub(crate) fn transitions<'a>(previous: &[Condition], computed: &'a [Computed]) -> Vec<&'a Computed> {
    computed.iter().filter(|c| !previous.iter().any(|p| p.type_ == c.type_ && p.status == c.status)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transition_time_moves_only_with_status() {
        let t0 = Timestamp::from_second(1_000).unwrap();
        let t1 = Timestamp::from_second(2_000).unwrap();
        let first = materialize(&[], &[Computed::flag("Ready", true, "AsExpected", "ok")], Some(1), t0);
        let same = materialize(&first, &[Computed::flag("Ready", true, "AsExpected", "still ok")], Some(2), t1);
        assert_eq!(same[0].last_transition_time, Time(t0));
        assert_eq!(same[0].observed_generation, Some(2));
        assert_eq!(same[0].message, "still ok");
        let flipped = materialize(&same, &[Computed::flag("Ready", false, "SiteUnreachable", "x")], Some(2), t1);
        assert_eq!(flipped[0].last_transition_time, Time(t1));
    }

    #[test]
    fn transitions_lists_changed_and_new_conditions() {
        let t0 = Timestamp::from_second(1_000).unwrap();
        let prev = materialize(&[], &[Computed::flag("Ready", true, "AsExpected", "")], None, t0);
        let next =
            [Computed::flag("Ready", true, "AsExpected", ""), Computed::flag("SplitBrain", false, "AsExpected", "")];
        let changed: Vec<_> = transitions(&prev, &next).into_iter().map(|c| c.type_).collect();
        assert_eq!(changed, vec!["SplitBrain"]);
    }
}
