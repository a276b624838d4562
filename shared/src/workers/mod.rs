//! Queue-triggered child workers: one module per worker.
//!
//! Owns: each worker's re-verification and effects. Every worker re-checks the
//! database before any destructive step, so duplicates, replays and stale messages
//! are harmless (behaviour §9.9).

pub mod delete_placeholder_user;
pub mod delete_user;
pub mod deliver_notification;
pub mod group_destroy;
pub mod prune_deletions;
