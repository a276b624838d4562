//! The local engine: the functions run on this machine, and the local databases they
//! run on. Never linked by a Lambda function (an architecture test checks it).
//!
//! Owns: the local runner ([`local`]) and its in-process queue with virtual time
//! ([`local_queue`]), fault injection ([`chaos`]), the read-only copy a `--read-only`
//! plan runs on ([`shadow`]), the throwaway PostgreSQL cluster ([`pg`]) and the model
//! of GitLab's tables for local and test databases ([`migrate`]).
//! Used by the lab (`housekeeping-lab`), by `hk`'s commands and by the integration
//! tests; it uses neither of the first two (the compiler keeps that: neither is a
//! dependency of this crate).
#![warn(missing_docs)]

pub mod chaos;
pub mod local;
pub mod local_queue;
pub mod migrate;
pub mod pg;
pub mod shadow;
