//! Cron batches: one module per batch (behaviour §B38, §B43, §B51, §B70, §B28).
//!
//! Owns: each batch's selection, per-item processing and `done` outcome (the overlap
//! lock and continuations are `job::drive`'s). Each module is declared by its row of
//! the function table, and its `//!` header is its entry in the code map.

use crate::function::modules;

// A module per row of the function table whose job is `batches::<module>::…`.
crate::function::with_functions!(modules batches);
