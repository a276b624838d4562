//! Queue-triggered child workers: one module per worker.
//!
//! Owns: each worker's re-verification and effects. Every worker re-checks the
//! database before any destructive step, so duplicates, replays and stale messages
//! are harmless (behaviour §9.9). Each module is declared by its row of the function
//! table, and its `//!` header is its entry in the code map.

use crate::function::modules;

// A module per row of the function table whose job is `workers::<module>::…`.
crate::function::with_functions!(modules workers);
