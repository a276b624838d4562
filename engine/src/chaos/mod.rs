//! Chaos and fault injection for local runs (`hk run … --until-idle --chaos …`, tests).
//!
//! Owns: the chaos specification ([`ChaosSpec`]: seed, duplicate rate, reordering,
//! crash rate), the seeded random source that decides every perturbation
//! ([`Chaos`], ChaCha8, so a seed replays the same run), the named crash points
//! ([`CrashPoint`]), the per-delivery [`CrashGate`] that fires at one of them, the
//! wire tap ([`TappedStream`]) that sees the PostgreSQL frontend protocol of a
//! handler's session and fires the gate before a transaction starts, before a COMMIT
//! is sent, after a COMMIT completed or at a statement, and the gated transport
//! ([`GatedQueue`]) that fires it after an enqueue and duplicates sent messages.
//!
//! A crash is real: once the gate fires, the tap refuses every further byte (the
//! socket closes, so PostgreSQL rolls back the open transaction and releases the
//! session's advisory locks, as when a Lambda environment dies), the gated queue
//! never returns, and the local runner drops the handler future at once and does not
//! acknowledge the message, which comes back after the visibility timeout.
//!
//! Nothing here is used unless a chaos specification or a fault plan is armed on a
//! [`crate::local::Runner`]: Lambda mode and plain `hk run` never name this module's
//! types, and handlers contain no fault hooks of their own.
//!
//! The parts: `spec` ([`ChaosSpec`]), `source` ([`Chaos`] and [`ChaosStats`]),
//! `gate` ([`CrashPoint`], [`CrashGate`], [`PlannedCrash`]), `tap`
//! ([`TappedStream`]) and `transport` ([`GatedQueue`]).

mod gate;
mod source;
mod spec;
mod tap;
mod transport;

pub use gate::{CrashGate, CrashPoint, PlannedCrash};
pub use source::{Chaos, ChaosStats};
pub use spec::{ChaosSpec, DEFAULT_REORDER_WINDOW_S};
pub use tap::TappedStream;
pub use transport::GatedQueue;
