//! The lab: what measures the functions and what feeds them data, on this machine.
//! Never linked by a Lambda function (an architecture test checks it).
//!
//! Owns: the benchmarks and their data generators ([`mod@bench`], `hk bench`) and the
//! demo data set ([`demo`], `hk seed demo` and `hk demo`). Built on the local engine
//! (`housekeeping-engine`); used by `hk`'s commands and by the integration tests,
//! never by the engine.
#![warn(missing_docs)]

pub mod bench;
pub mod demo;
