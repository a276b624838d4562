//! `hk`'s library: everything that runs on an operator's or developer's machine and
//! never in Lambda.
//!
//! Owns: the local runner ([`local`]) and its in-process queue with virtual time
//! ([`local_queue`]), fault injection ([`chaos`]), the demo data ([`demo`]), the schema
//! subset migrations for local and test databases ([`migrate`]), the benchmarks
//! ([`mod@bench`]), `hk check`'s preflight ([`check`]), the throwaway PostgreSQL cluster
//! ([`pg`]), the read-only copy a `--read-only` plan runs on ([`shadow`]), the local AWS stand-ins around `cargo lambda watch` ([`aws_local`]); the
//! binary's `cmd` module has one module per command.
//! The Lambda functions never link this crate (an architecture test checks it); the
//! integration tests use it for the runner, chaos and the migrations.
#![warn(missing_docs)]

pub mod aws_local;
pub mod bench;
pub mod chaos;
/// `hk check`'s preflight and `hk grants`: the `housekeeping-checks` crate, which the
/// `hk-check` Lambda function links too.
pub mod check {
    pub use checks::*;
}
pub mod demo;
pub mod local;
pub mod local_queue;
pub mod migrate;
pub mod parity;
pub mod pg;
pub mod shadow;
