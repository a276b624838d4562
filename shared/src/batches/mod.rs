//! Cron batches: one module per batch (behaviour §B38, §B43, §B51, §B70, §B28).
//!
//! Owns: each batch's selection, per-item processing, continuation and `done` report.
//! Batches take the overlap lock first and release it before any continuation.

pub mod adjourned_group_deletion;
pub mod pat_expiring;
pub mod placeholder_user_cleanup;
pub mod remove_expired_members;
pub mod schedule_prune_deletions;
