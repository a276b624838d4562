//! Cron batches: one module per batch (spec files b38, b43, b51, b70, b28).
//!
//! Owns: each batch's selection, per-item processing, continuation and `done` report.
//! Batches take the overlap lock first and release it before any continuation.

pub mod pat_expiring;
pub mod remove_expired_members;
