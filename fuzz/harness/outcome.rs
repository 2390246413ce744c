//! What one input of a target did: the type every target body returns and the runner counts.
//! A leaf of its own, so that a user of the runner that needs none of the program targets
//! (the StableHLO reader's stable fuzz test) includes it without `targets.rs`.

/// What an input did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Loaded (and for `host`, executed: `ran` says whether execution succeeded).
    Accepted { ran: bool },
    /// Refused with an error; `class` groups errors for corpus feedback.
    Rejected { class: String },
    /// Outside the host target's bounds (not run).
    Skipped,
}
