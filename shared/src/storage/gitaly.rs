//! (Gitaly client: being built on its own branch; this interface holds its place.)

use std::collections::BTreeMap;
use std::time::Duration;

use super::Removal;
use crate::error::{Error, Result};

/// Gitaly's storages and token.
#[derive(Debug, Clone)]
pub struct GitalyConfig {
    /// Storage name → address.
    pub storages: BTreeMap<String, String>,
    /// The token.
    pub token: Option<String>,
    /// Per-call timeout.
    pub timeout: Duration,
}

/// The client.
#[derive(Debug)]
pub struct Gitaly;

impl Gitaly {
    /// Build.
    pub fn new(_cfg: &GitalyConfig) -> Result<Gitaly> {
        Ok(Gitaly)
    }

    /// Remove.
    pub async fn remove_repository(
        &self,
        _storage: &str,
        _relative_path: &str,
        _now: chrono::DateTime<chrono::Utc>,
    ) -> Result<Removal> {
        Err(Error::Config("gitaly client not built".into()))
    }
}

/// Parse `GITALY_ADDRESSES`.
pub fn parse_addresses(_s: &str) -> Result<BTreeMap<String, String>> {
    Err(Error::Config("GITALY_ADDRESSES: not built".into()))
}
