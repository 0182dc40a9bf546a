//! The three planned operations a group runs one at a time — a switchover
//! (planned failover), an ordered update, a restore-in-place — which share
//! their request's shape: a `requestId` in spec, and in status a `phase`,
//! its `history`, an `admission` and a `message`, or an `ignored…` status
//! for a request not taken up.

use bloodraven_api::v1alpha1::{
    IgnoredRequest, MysqlFailoverGroup, OrderedUpdatePhase, PhaseTransition, PlannedFailoverAdmission,
    PlannedFailoverPhase, RestorePhase,
};

/// The three planned operations, which share their request's shape
/// (`requestId`, `phase`, `history`, `admission`, `message`, and an
/// `ignored…` status for a request not taken up).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Switchover,
    OrderedUpdate,
    RestoreInPlace,
}

impl Kind {
    pub(crate) const ALL: [Kind; 3] = [Kind::Switchover, Kind::OrderedUpdate, Kind::RestoreInPlace];

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Kind::Switchover => "switchover",
            Kind::OrderedUpdate => "ordered-update",
            Kind::RestoreInPlace => "restore-in-place",
        }
    }

    /// Its request in spec: the request id.
    pub(crate) fn requested(self, g: &MysqlFailoverGroup) -> Option<&str> {
        match self {
            Kind::Switchover => g.spec.planned_failover.as_ref().map(|r| r.request_id.as_str()),
            Kind::OrderedUpdate => g.spec.ordered_update.as_ref().map(|r| r.request_id.as_str()),
            Kind::RestoreInPlace => g.spec.restore_in_place.as_ref().map(|r| r.request_id.as_str()),
        }
    }

    /// Its status: (request id, phase, history, admission, message).
    #[allow(clippy::type_complexity)]
    pub(crate) fn status(
        self,
        g: &MysqlFailoverGroup,
    ) -> Option<(&str, &str, &[PhaseTransition], Option<&PlannedFailoverAdmission>, Option<&str>)> {
        let s = g.status.as_ref()?;
        match self {
            Kind::Switchover => s.planned_failover.as_ref().map(|p| {
                (p.request_id.as_str(), p.phase.as_str(), &p.history[..], p.admission.as_ref(), p.message.as_deref())
            }),
            Kind::OrderedUpdate => s.ordered_update.as_ref().map(|p| {
                (p.request_id.as_str(), p.phase.as_str(), &p.history[..], p.admission.as_ref(), p.message.as_deref())
            }),
            Kind::RestoreInPlace => s.restore_in_place.as_ref().map(|p| {
                (p.request_id.as_str(), p.phase.as_str(), &p.history[..], p.admission.as_ref(), p.message.as_deref())
            }),
        }
    }

    pub(crate) fn ignored(self, g: &MysqlFailoverGroup) -> Option<&IgnoredRequest> {
        let s = g.status.as_ref()?;
        match self {
            Kind::Switchover => s.ignored_planned_failover.as_ref(),
            Kind::OrderedUpdate => s.ignored_ordered_update.as_ref(),
            Kind::RestoreInPlace => s.ignored_restore_in_place.as_ref(),
        }
    }

    /// Whether `phase` ends the request (Completed and Failed end all three).
    pub(crate) fn is_final(self, phase: &str) -> bool {
        match self {
            Kind::Switchover => PlannedFailoverPhase::parse(phase).is_some_and(PlannedFailoverPhase::is_final),
            Kind::OrderedUpdate => OrderedUpdatePhase::parse(phase).is_some_and(OrderedUpdatePhase::is_final),
            Kind::RestoreInPlace => RestorePhase::parse(phase).is_some_and(RestorePhase::is_final),
        }
    }

    /// Whether `phase` is one of the kind's phases and not a final one (a
    /// phase written by hand that no engine knows is not in flight).
    pub(crate) fn in_flight(self, phase: &str) -> bool {
        let known = match self {
            Kind::Switchover => PlannedFailoverPhase::parse(phase).is_some(),
            Kind::OrderedUpdate => OrderedUpdatePhase::parse(phase).is_some(),
            Kind::RestoreInPlace => RestorePhase::parse(phase).is_some(),
        };
        known && !self.is_final(phase)
    }

    /// The site its status says it moves to (a switchover's target, an
    /// ordered update's standby, the site a restore replaces).
    pub(crate) fn target(self, g: &MysqlFailoverGroup) -> Option<String> {
        let s = g.status.as_ref()?;
        match self {
            Kind::Switchover => s.planned_failover.as_ref().map(|p| p.target_site.clone()),
            Kind::OrderedUpdate => s.ordered_update.as_ref().and_then(|u| u.standby_site.clone()),
            Kind::RestoreInPlace => s.restore_in_place.as_ref().and_then(|r| r.site.clone()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn in_flight_is_a_known_phase_short_of_the_end() {
        for k in Kind::ALL {
            assert!(k.in_flight("Admitting") && k.in_flight("Deferred"), "{k:?}");
            assert!(!k.in_flight("Completed") && !k.in_flight("Failed"), "{k:?}");
            assert!(!k.in_flight("Written-By-Hand"), "{k:?}: a phase no engine knows is not run");
        }
        assert!(Kind::OrderedUpdate.in_flight("UpdatingStandby") && !Kind::Switchover.in_flight("UpdatingStandby"));
    }
}
