//! A condition as the rules compute it: type, status, reason and message.
//! The operator turns it into a `metav1.Condition`, attaching the transition
//! time and the spec generation it was computed from.

/// A condition as computed, before times and generations are attached.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Computed {
    /// Condition type, e.g. `Ready`.
    pub type_: &'static str,
    /// `True`, `False` or `Unknown`.
    pub status: &'static str,
    /// Stable CamelCase reason.
    pub reason: &'static str,
    /// What the user should know or do.
    pub message: String,
}

impl Computed {
    /// A condition with status `True` when `on`, else `False`.
    pub fn flag(type_: &'static str, on: bool, reason: &'static str, message: impl Into<String>) -> Self {
        Computed { type_, status: if on { "True" } else { "False" }, reason, message: message.into() }
    }

    /// A condition with status `Unknown`.
    pub fn unknown(type_: &'static str, reason: &'static str, message: impl Into<String>) -> Self {
        Computed { type_, status: "Unknown", reason, message: message.into() }
    }

    /// Whether the status is `True`.
    pub fn is_true(&self) -> bool {
        self.status == "True"
    }
}
