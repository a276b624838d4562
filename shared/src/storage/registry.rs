//! (Registry client: being built on its own branch; this interface holds its place.)

use std::time::Duration;

use super::Removal;
use crate::error::{Error, Result};

/// The registry's configuration.
#[derive(Debug, Clone)]
pub struct RegistryConfig {
    /// API URL.
    pub api_url: String,
    /// Issuer.
    pub issuer: String,
    /// Service.
    pub service: String,
    /// Key.
    pub key_pem: String,
    /// CA bundle.
    pub ca_bundle: Option<std::path::PathBuf>,
    /// Timeout.
    pub timeout: Duration,
}

/// What a delete found.
#[derive(Debug, Clone, Copy)]
pub struct RepositoryRemoval {
    /// Removal.
    pub removal: Removal,
    /// Manifests deleted.
    pub manifests_deleted: u64,
    /// Tags.
    pub tags: u64,
}

/// The client.
#[derive(Debug)]
pub struct Registry;

impl Registry {
    /// Build.
    pub fn new(_cfg: &RegistryConfig) -> Result<Registry> {
        Ok(Registry)
    }

    /// Delete.
    pub async fn delete_repository(
        &self,
        _path: &str,
        _now: chrono::DateTime<chrono::Utc>,
    ) -> Result<RepositoryRemoval> {
        Err(Error::Config("registry client not built".into()))
    }
}
