//! The storage clients of `storage-cleanup` against real local servers: Gitaly's
//! RemoveRepository against the Gitaly stand-in (`gitaly.rs`), and the project's Gitaly
//! proto subset checked against Gitaly's published protos (`conformance.rs`).

mod conformance;
mod gitaly;
