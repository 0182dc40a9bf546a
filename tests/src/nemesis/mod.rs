//! The nemesis suite's pieces (docs/nemesis.md): the seeded schedule of
//! faults, the network that lets a partition or a slow link be put between
//! any two parts of the stack, the history every recorder writes, and the
//! workload — writers through `<db>-primary`, deploy clients running
//! `bloodraven-sidecar run`, pollers, probers and watchers. The binary
//! `nemesis` (tests/src/bin/nemesis.rs) puts them together on the real
//! stack and hands the history to the checker (nemesis/checker).

pub mod history;
pub mod net;
pub mod schedule;
pub mod workload;
