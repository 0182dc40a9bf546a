//! Leader election over the operator's own `coordination.k8s.io/v1` Lease
//! (`bloodraven-leader` in the operator's namespace), with client-go's
//! semantics and defaults: lease duration 15 s, renew deadline 10 s, retry
//! period 2 s.
//!
//! Model:
//! - Every write is a replace carrying the resourceVersion read just before,
//!   so two candidates can never both believe they took the Lease.
//! - A candidate judges expiry on its *own* monotonic clock: it notes when it
//!   last saw the record change (holder or renewTime) and takes over only
//!   after `leaseDurationSeconds` without a change. Clock skew between nodes
//!   therefore never shortens a lease.
//! - The leader is leader until `start of the last successful renewal +
//!   renew deadline`. Since the renew deadline is shorter than the lease
//!   duration, the old leader stops acting before anyone else may start.
//!   [`Leadership::is_leader`] reads that deadline, so a leader whose renewals
//!   hang loses leadership on time without any task having to notice.
//! - On shutdown the leader releases the Lease (empty holder) so a follower
//!   takes over at its next retry instead of after a full lease duration.
//!
//! Leader election is part of the fencing core, so it is written here rather
//! than taken from a crate: none of the Rust crates offers client-go's renew
//! deadline, which the status-write fence depends on.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, PostParams};
use tokio::sync::watch;
use tokio::time::Instant;

/// Leader-election timings (client-go's LeaseDuration, RenewDeadline, RetryPeriod).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timings {
    /// How long a follower waits after the last observed change of the record.
    pub lease_duration: Duration,
    /// How long the leader acts after the start of its last successful renewal.
    pub renew_deadline: Duration,
    /// Time between acquire/renew attempts.
    pub retry_period: Duration,
}

/// A cheap, cloneable view of whether this process is the leader now.
#[derive(Clone, Debug)]
pub(crate) struct Leadership {
    rx: watch::Receiver<Option<Instant>>,
}

impl Leadership {
    /// A view that says "leader" for an hour, for unit tests of the leader-only paths.
    #[cfg(test)]
    pub(crate) fn leading_for_tests() -> Self {
        let (tx, rx) = watch::channel(Some(Instant::now() + std::time::Duration::from_secs(3600)));
        std::mem::forget(tx);
        Leadership { rx }
    }

    /// True while this process holds the leader Lease and its last successful
    /// renewal started less than the renew deadline ago. Check it right before
    /// every side effect only the leader may perform.
    pub(crate) fn is_leader(&self) -> bool {
        matches!(*self.rx.borrow(), Some(until) if Instant::now() < until)
    }

    /// Resolves each time this process becomes leader (used to reconcile
    /// every object at once on takeover).
    pub(crate) fn acquisitions(&self) -> impl futures::Stream<Item = ()> + Send + 'static {
        let rx = self.rx.clone();
        futures::stream::unfold((rx, false), |(mut rx, mut was)| async move {
            loop {
                let now = matches!(*rx.borrow_and_update(), Some(until) if Instant::now() < until);
                if now && !was {
                    return Some(((), (rx, true)));
                }
                was = now;
                if rx.changed().await.is_err() {
                    return None;
                }
            }
        })
    }
}

/// What the follower last saw of the record, and when (monotonic).
#[derive(Debug)]
struct Observed {
    holder: Option<String>,
    renew_time: Option<Timestamp>,
    at: Instant,
}

/// Runs the election loop for one process.
#[derive(Debug)]
pub(crate) struct Elector {
    api: Api<Lease>,
    name: String,
    identity: String,
    timings: Timings,
    tx: watch::Sender<Option<Instant>>,
    observed: Option<Observed>,
    /// Leadership as last logged.
    announced: bool,
}

/// Errors of one acquire/renew attempt.
#[derive(Debug, thiserror::Error)]
pub(crate) enum LeaderError {
    /// The API server refused or failed the request.
    #[error("failed to read or write the leader Lease: {0}")]
    Kube(#[from] kube::Error),
    /// The attempt took longer than the retry period.
    #[error("leader Lease request timed out")]
    Timeout,
}

impl Elector {
    /// A new elector for Lease `name` in `api`'s namespace, and the view of its state.
    pub(crate) fn new(api: Api<Lease>, name: &str, identity: &str, timings: Timings) -> (Self, Leadership) {
        let (tx, rx) = watch::channel(None);
        let elector = Elector {
            api,
            name: name.to_owned(),
            identity: identity.to_owned(),
            timings,
            tx,
            observed: None,
            announced: false,
        };
        (elector, Leadership { rx })
    }

    /// Tries to acquire or renew every retry period until `shutdown` resolves,
    /// then releases the Lease if held.
    pub(crate) async fn run(mut self, shutdown: impl std::future::Future<Output = ()>) {
        tokio::pin!(shutdown);
        loop {
            let started = Instant::now();
            let attempt = tokio::time::timeout(self.timings.retry_period, self.try_acquire_or_renew()).await;
            let result = attempt.unwrap_or(Err(LeaderError::Timeout));
            match &result {
                Ok(true) => {
                    self.tx.send_replace(Some(started + self.timings.renew_deadline));
                }
                Ok(false) => {
                    self.tx.send_replace(None);
                }
                Err(err) => {
                    tracing::warn!(identity = %self.identity, lease = %self.name, error = %err, "leader lease attempt failed");
                }
            }
            self.log_transition(matches!(result, Ok(false)));
            tokio::select! {
                () = &mut shutdown => break,
                () = tokio::time::sleep(self.timings.retry_period) => {}
            }
        }
        self.release().await;
    }

    /// Logs a change of leadership since the last call.
    fn log_transition(&mut self, taken_by_other: bool) {
        let now = self.is_leader_now();
        if now == self.announced {
            return;
        }
        self.announced = now;
        if now {
            tracing::info!(identity = %self.identity, lease = %self.name, "acquired leadership");
        } else if taken_by_other {
            tracing::warn!(identity = %self.identity, lease = %self.name, "lost leadership: another holder has the lease");
        } else {
            tracing::warn!(identity = %self.identity, lease = %self.name, "lost leadership: renew deadline passed");
        }
    }

    fn is_leader_now(&self) -> bool {
        matches!(*self.tx.borrow(), Some(until) if Instant::now() < until)
    }

    fn lease_spec(&self, now: Timestamp, transitions: i32, acquire: Option<MicroTime>) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some(self.identity.clone()),
            lease_duration_seconds: Some(i32::try_from(self.timings.lease_duration.as_secs()).unwrap_or(i32::MAX)),
            acquire_time: acquire.or(Some(MicroTime(now))),
            renew_time: Some(MicroTime(now)),
            lease_transitions: Some(transitions),
            ..LeaseSpec::default()
        }
    }

    /// One attempt. `Ok(true)`: this process holds the Lease now.
    async fn try_acquire_or_renew(&mut self) -> Result<bool, LeaderError> {
        let now = Timestamp::now();
        let Some(mut lease) = self.api.get_opt(&self.name).await? else {
            let lease = Lease {
                metadata: ObjectMeta { name: Some(self.name.clone()), ..ObjectMeta::default() },
                spec: Some(self.lease_spec(now, 0, None)),
            };
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(_) => Ok(true),
                Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
                Err(e) => Err(e.into()),
            };
        };
        let spec = lease.spec.clone().unwrap_or_default();
        let holder = spec.holder_identity.clone().filter(|h| !h.is_empty());
        let renew_time = spec.renew_time.as_ref().map(|t| t.0);
        let changed = self.observed.as_ref().is_none_or(|o| o.holder != holder || o.renew_time != renew_time);
        if changed {
            self.observed = Some(Observed { holder: holder.clone(), renew_time, at: Instant::now() });
        }
        let transitions = spec.lease_transitions.unwrap_or(0);
        let new_spec = if holder.as_deref() == Some(self.identity.as_str()) {
            self.lease_spec(now, transitions, spec.acquire_time.clone())
        } else {
            let duration = spec
                .lease_duration_seconds
                .and_then(|s| u64::try_from(s).ok())
                .map_or(self.timings.lease_duration, Duration::from_secs);
            let expired = self.observed.as_ref().is_some_and(|o| o.at + duration <= Instant::now());
            if holder.is_some() && !expired {
                return Ok(false);
            }
            self.lease_spec(now, transitions.saturating_add(1), None)
        };
        // resourceVersion stays as read: the replace is a compare-and-swap.
        lease.spec = Some(new_spec);
        match self.api.replace(&self.name, &PostParams::default(), &lease).await {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    /// Gives the Lease up (empty holder) if this process holds it.
    async fn release(&mut self) {
        let held = self.is_leader_now();
        self.tx.send_replace(None);
        if !held {
            return;
        }
        let result = async {
            let Some(mut lease) = self.api.get_opt(&self.name).await? else { return Ok(()) };
            let mut spec = lease.spec.clone().unwrap_or_default();
            if spec.holder_identity.as_deref() != Some(self.identity.as_str()) {
                return Ok(());
            }
            spec.holder_identity = None;
            spec.lease_duration_seconds = Some(1);
            spec.renew_time = Some(MicroTime(Timestamp::now()));
            lease.spec = Some(spec);
            self.api.replace(&self.name, &PostParams::default(), &lease).await.map(|_| ())
        };
        match tokio::time::timeout(self.timings.retry_period, result).await {
            Ok(Ok(())) => tracing::info!(identity = %self.identity, "released leadership"),
            Ok(Err(err)) => {
                tracing::warn!(identity = %self.identity, error = %err, "failed to release the leader lease");
            }
            Err(_) => tracing::warn!(identity = %self.identity, "timed out releasing the leader lease"),
        }
    }
}
