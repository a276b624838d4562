//! The storage clients of `storage-cleanup` against real local servers: Gitaly's
//! RemoveRepository against the Gitaly stand-in (`gitaly.rs`), the project's Gitaly
//! proto subset checked against Gitaly's published protos (`conformance.rs`), and the
//! container registry (Debian's `docker-registry`, `registry.rs`; a scripted one for
//! the races and hostile answers a real registry does not produce on demand,
//! `registry_races.rs`).

mod conformance;
mod gitaly;
mod registry;
mod registry_races;
