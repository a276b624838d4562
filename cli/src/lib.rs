//! `hk`'s library: the operator commands' own code, on an operator's or developer's
//! machine and never in Lambda.
//!
//! Owns: `hk check`'s preflight ([`check`], the `housekeeping-checks` crate),
//! `hk parity` ([`parity`]) and the local AWS stand-ins around `cargo lambda watch`
//! and the operator's AWS commands ([`aws_local`]); the binary's `cmd` module has one
//! module per command. The local engine (runner, queue, chaos, the read-only copy,
//! the throwaway PostgreSQL and the model's migrations) is the `housekeeping-engine`
//! crate (`engine`), the benchmarks and the demo data the `housekeeping-lab` crate
//! (`lab`): the commands use both, neither uses `hk`.
//! The Lambda functions never link this crate (an architecture test checks it).
#![warn(missing_docs)]

pub mod aws_local;
/// `hk check`'s preflight and `hk grants`: the `housekeeping-checks` crate, which the
/// `hk-check` Lambda function links too.
pub mod check {
    pub use checks::*;
}
pub mod parity;
