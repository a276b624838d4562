//! Real local servers for B28's delivery tests, all on 127.0.0.1: an SMTP sink with
//! STARTTLS or implicit TLS (aiosmtpd, a child process), an HTTP(S) receiver, and the throwaway certificates they
//! serve. A test network maps public names and addresses to the local receiver, so
//! the target check sees a public address while nothing leaves the machine. Also the
//! Gitaly stand-in of the storage tests (grpcio, a child process) and a container
//! registry (Debian's `docker-registry`) for the storage-cleanup tests.

pub mod certs;
pub mod gitaly;
pub mod http;
pub mod net;
pub mod registry;
pub mod smtp;

use std::path::{Path, PathBuf};

/// The Python that runs a sink's child (the SMTP sink, the Gitaly stand-in):
/// `HK_TEST_PYTHON`, else the repository's `.venv`.
fn python() -> PathBuf {
    match std::env::var_os("HK_TEST_PYTHON") {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => Path::new(env!("CARGO_MANIFEST_DIR")).join("../.venv/bin/python"),
    }
}
