//! The nemesis' schedule: which fault, when, for how long — drawn from one
//! seed by a portable generator (ChaCha8, the same on every machine and
//! version), so a run is printed and replayed from its seed alone.
//!
//! The draw keeps the faults ordinary rather than apocalyptic: at most two
//! at once, none of them twice at once, every one of them ended before the
//! schedule ends. What they are is [`Fault`]; what each one does to the
//! stack is the runner's (`nemesis::net` and the binary).

use std::fmt;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// One of the two sites.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Site {
    /// The site that starts as primary.
    Iad,
    /// The site that starts as standby.
    Pdx,
}

impl Site {
    /// Both, in order.
    pub const ALL: [Site; 2] = [Site::Iad, Site::Pdx];

    /// Its name in the group.
    pub fn name(self) -> &'static str {
        match self {
            Site::Iad => "iad",
            Site::Pdx => "pdx",
        }
    }
}

/// Something a partition can cut off from something else.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Endpoint {
    /// A site's server.
    Site(Site),
    /// Operator replica 1 or 2.
    Operator(u8),
    /// The clients: writers through `<db>-primary` and the deploy clients.
    Clients,
    /// The kube-apiserver.
    ApiServer,
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Endpoint::Site(s) => f.write_str(s.name()),
            Endpoint::Operator(n) => write!(f, "operator-{n}"),
            Endpoint::Clients => f.write_str("clients"),
            Endpoint::ApiServer => f.write_str("apiserver"),
        }
    }
}

/// A process the nemesis kills or pauses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Process {
    /// A site's mysqld.
    Server(Site),
    /// Operator replica 1 or 2.
    Operator(u8),
}

impl fmt::Display for Process {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Process::Server(s) => write!(f, "mysqld@{}", s.name()),
            Process::Operator(n) => write!(f, "operator-{n}"),
        }
    }
}

/// One fault.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// No packet passes between the two, either way.
    Partition(Endpoint, Endpoint),
    /// `kill -9`; started again when the fault ends (a host agent's restart).
    Kill(Process),
    /// SIGSTOP; SIGCONT when the fault ends.
    Pause(Process),
    /// The kube-apiserver stopped (SIGKILL) and started again when the fault ends.
    ApiServerDown,
    /// Every packet to and from a site delayed by `delay_ms` (± a quarter)
    /// and `loss_percent` of them dropped (`tc netem`).
    SlowLink {
        /// The site whose link is slow.
        site: Site,
        /// Delay, ms.
        delay_ms: u32,
        /// Loss, percent.
        loss_percent: u32,
    },
    /// A planned failover onto the site that is the standby at that moment
    /// (a request; it takes no time of its own).
    PlannedFailover,
    /// A person revokes the deploy leases (the group's revoke annotation).
    Revoke,
}

impl Fault {
    /// The kind's name, as the history and the report count faults.
    pub fn kind(&self) -> &'static str {
        match self {
            Fault::Partition(..) => "partition",
            Fault::Kill(_) => "kill",
            Fault::Pause(_) => "pause",
            Fault::ApiServerDown => "apiserver-down",
            Fault::SlowLink { .. } => "slow-link",
            Fault::PlannedFailover => "planned-failover",
            Fault::Revoke => "revoke",
        }
    }

    /// The names the fault touches (the history's `targets`).
    pub fn targets(&self) -> Vec<String> {
        match self {
            Fault::Partition(a, b) => vec![a.to_string(), b.to_string()],
            Fault::Kill(p) | Fault::Pause(p) => vec![p.to_string()],
            Fault::ApiServerDown => vec!["apiserver".into()],
            Fault::SlowLink { site, .. } => vec![site.name().into()],
            Fault::PlannedFailover | Fault::Revoke => vec![],
        }
    }

    /// Whether it is a request that takes no time (no `stop`).
    pub fn instant(&self) -> bool {
        matches!(self, Fault::PlannedFailover | Fault::Revoke)
    }

    /// Whether two faults may not run at once: the same process or link,
    /// or two that stop the same thing in two ways.
    fn clashes(&self, other: &Fault) -> bool {
        let touched = |f: &Fault| -> Vec<String> {
            match f {
                Fault::Kill(p) | Fault::Pause(p) => vec![p.to_string()],
                Fault::SlowLink { site, .. } => vec![format!("link@{}", site.name())],
                Fault::ApiServerDown => vec!["apiserver".into()],
                Fault::Partition(a, b) => vec![format!("cut {a}|{b}")],
                Fault::PlannedFailover | Fault::Revoke => vec![],
            }
        };
        let mine = touched(self);
        touched(other).iter().any(|t| mine.contains(t))
    }
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Fault::Partition(a, b) => write!(f, "partition {a} | {b}"),
            Fault::Kill(p) => write!(f, "kill -9 {p}"),
            Fault::Pause(p) => write!(f, "SIGSTOP {p}"),
            Fault::ApiServerDown => f.write_str("kube-apiserver down"),
            Fault::SlowLink { site, delay_ms, loss_percent } => {
                write!(f, "slow link {}: {delay_ms} ms, {loss_percent}% loss", site.name())
            }
            Fault::PlannedFailover => f.write_str("planned failover onto the standby"),
            Fault::Revoke => f.write_str("revoke the deploy leases"),
        }
    }
}

/// A fault, when it starts and how long it lasts (ms from the schedule's start).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Step {
    /// Start, ms after the workload began.
    pub at_ms: u64,
    /// Duration, ms (0 for a request).
    pub for_ms: u64,
    /// What.
    pub fault: Fault,
}

impl Step {
    /// When it ends.
    pub fn end_ms(&self) -> u64 {
        self.at_ms + self.for_ms
    }
}

/// A whole run's plan.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Schedule {
    /// The seed it was drawn from.
    pub seed: u64,
    /// How long the faults run, ms (the workload runs a while longer: the
    /// group settles before the final read).
    pub length_ms: u64,
    /// Whether semi-synchronous replication is on in this run.
    pub semi_sync: bool,
    /// The steps, by start.
    pub steps: Vec<Step>,
}

/// Time without faults at the start (the workload warms up; the leases are
/// taken) and at the end (the last fault ends before the schedule does).
const QUIET_MS: u64 = 5_000;

impl Schedule {
    /// Draws the schedule of `seed` for `length_ms` of faults.
    pub fn draw(seed: u64, length_ms: u64) -> Schedule {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let semi_sync = rng.random_bool(0.5);
        let mut steps: Vec<Step> = Vec::new();
        let mut at = QUIET_MS;
        let last = length_ms.saturating_sub(QUIET_MS);
        while at < last {
            let fault = draw_fault(&mut rng);
            let for_ms = if fault.instant() { 0 } else { rng.random_range(2_000..=20_000).min(last - at) };
            let step = Step { at_ms: at, for_ms, fault };
            let running: Vec<&Step> = steps.iter().filter(|s| s.end_ms() > at && !s.fault.instant()).collect();
            if fault.instant() || (running.len() < 2 && !running.iter().any(|s| s.fault.clashes(&fault))) {
                steps.push(step);
            }
            at += rng.random_range(1_500..=8_000);
        }
        Schedule { seed, length_ms, semi_sync, steps }
    }

    /// The count of each kind of fault, by kind.
    pub fn counts(&self) -> std::collections::BTreeMap<&'static str, usize> {
        let mut out = std::collections::BTreeMap::new();
        for s in &self.steps {
            *out.entry(s.fault.kind()).or_insert(0) += 1;
        }
        out
    }
}

fn draw_site(rng: &mut ChaCha8Rng) -> Site {
    if rng.random_bool(0.5) { Site::Iad } else { Site::Pdx }
}

fn draw_operator(rng: &mut ChaCha8Rng) -> u8 {
    rng.random_range(1..=2)
}

/// One fault, by weights that favour what the failover engine must judge
/// (partitions, kills and pauses of a server) over what only delays it.
fn draw_fault(rng: &mut ChaCha8Rng) -> Fault {
    match rng.random_range(0..100) {
        0..=11 => Fault::Partition(Endpoint::Site(Site::Iad), Endpoint::Site(Site::Pdx)),
        12..=23 => Fault::Partition(Endpoint::Operator(draw_operator(rng)), Endpoint::Site(draw_site(rng))),
        24..=31 => Fault::Partition(Endpoint::Clients, Endpoint::Site(draw_site(rng))),
        32..=37 => Fault::Partition(Endpoint::Operator(draw_operator(rng)), Endpoint::ApiServer),
        38..=49 => Fault::Kill(Process::Server(draw_site(rng))),
        50..=55 => Fault::Kill(Process::Operator(draw_operator(rng))),
        56..=63 => Fault::Pause(Process::Server(draw_site(rng))),
        64..=68 => Fault::Pause(Process::Operator(draw_operator(rng))),
        69..=72 => Fault::ApiServerDown,
        73..=82 => Fault::SlowLink {
            site: draw_site(rng),
            delay_ms: [20, 100, 400, 1_500][rng.random_range(0..4)],
            loss_percent: [0, 0, 5, 30][rng.random_range(0..4)],
        },
        83..=93 => Fault::PlannedFailover,
        _ => Fault::Revoke,
    }
}

impl fmt::Display for Schedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "schedule of seed {} ({} s of faults, semi-sync {}):",
            self.seed,
            self.length_ms / 1000,
            if self.semi_sync { "on" } else { "off" }
        )?;
        for s in &self.steps {
            if s.fault.instant() {
                writeln!(f, "  t+{:>6.1}s            {}", s.at_ms as f64 / 1000.0, s.fault)?;
            } else {
                writeln!(
                    f,
                    "  t+{:>6.1}s for {:>5.1}s  {}",
                    s.at_ms as f64 / 1000.0,
                    s.for_ms as f64 / 1000.0,
                    s.fault
                )?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_draws_the_same_schedule_every_time() {
        let a = Schedule::draw(42, 600_000);
        let b = Schedule::draw(42, 600_000);
        assert_eq!(a, b);
        assert_eq!(a.to_string(), b.to_string());
        assert_ne!(a.steps, Schedule::draw(43, 600_000).steps, "two seeds, one schedule");
    }

    /// The first draws of seed 1, as printed: a change of the generator or
    /// of the weights changes every recorded seed's schedule, and must be
    /// seen (the regression seeds in docs/nemesis.md replay nothing then).
    #[test]
    fn the_generator_is_stable_across_builds() {
        let s = Schedule::draw(1, 60_000);
        let first: Vec<String> =
            s.steps.iter().take(3).map(|s| format!("{}@{}+{}", s.fault, s.at_ms, s.for_ms)).collect();
        assert_eq!(first, STABLE_SEED_1, "seed 1 now draws {first:?}");
    }

    const STABLE_SEED_1: [&str; 3] =
        ["revoke the deploy leases@5000+0", "SIGSTOP mysqld@iad@7872+7106", "kill -9 mysqld@pdx@13991+2751"];

    #[test]
    fn faults_stay_ordinary_and_end_inside_the_schedule() {
        for seed in 0..200 {
            let s = Schedule::draw(seed, 120_000);
            for (i, step) in s.steps.iter().enumerate() {
                assert!(step.at_ms >= QUIET_MS, "seed {seed}: {step:?} starts in the quiet start");
                assert!(step.end_ms() <= s.length_ms - QUIET_MS, "seed {seed}: {step:?} outlasts the schedule");
                let at_once: Vec<&Step> = s.steps[..i]
                    .iter()
                    .filter(|o| !o.fault.instant() && o.end_ms() > step.at_ms && !step.fault.instant())
                    .collect();
                assert!(at_once.len() < 2, "seed {seed}: three faults at once at {}", step.at_ms);
                assert!(!at_once.iter().any(|o| o.fault.clashes(&step.fault)), "seed {seed}: {step:?} clashes");
            }
        }
    }

    #[test]
    fn a_long_schedule_draws_every_kind_and_both_semi_sync_modes_occur() {
        let s = Schedule::draw(7, 1_800_000);
        let kinds = s.counts();
        for kind in ["partition", "kill", "pause", "apiserver-down", "slow-link", "planned-failover", "revoke"] {
            assert!(kinds.contains_key(kind), "no {kind} in {kinds:?}");
        }
        let on = (0..40).filter(|&seed| Schedule::draw(seed, 60_000).semi_sync).count();
        assert!((5..=35).contains(&on), "semi-sync on in {on} of 40 seeds");
    }
}
