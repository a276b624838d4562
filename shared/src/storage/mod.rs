//! Storage outside the database that `storage-cleanup` removes when `group-destroy`
//! deletes a project (docs/storage-cleanup.md): Git repositories through Gitaly
//! ([`gitaly`]), container images through the registry API ([`registry`]) and files in
//! object storage ([`objects`]).
//!
//! Owns: [`Removal`], what one idempotent removal found, and the clients, each built
//! once at cold start from its configuration. Never touches the database.

pub mod gitaly;
pub mod objects;
pub mod registry;

/// What removing one item found: it was there and is now gone, or it was already gone
/// (a replay, or never created). Both mean done.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Removal {
    /// The item existed and was removed.
    Removed,
    /// The item did not exist.
    AlreadyGone,
}

impl Removal {
    /// `removed` or `already_gone`, as logs and metrics name it.
    pub fn as_str(self) -> &'static str {
        match self {
            Removal::Removed => "removed",
            Removal::AlreadyGone => "already_gone",
        }
    }
}

use crate::config::storage::{SecretRef, StorageConfig, StorageModes};
use crate::error::Result;

/// The clients of the kinds switched `on`, built once at cold start of
/// `storage-cleanup` (its [`crate::job::Job::Deps`]); a kind not `on` has none.
pub struct Storage {
    /// Gitaly, when `STORAGE_GITALY=on`.
    pub gitaly: Option<gitaly::Gitaly>,
    /// The registry, when `STORAGE_REGISTRY=on`.
    pub registry: Option<registry::Registry>,
    /// Object storage, when `STORAGE_OBJECTS=on`.
    pub objects: Option<objects::Objects>,
    /// A dry run (`hk run --dry-run`, the plan): every re-check runs, no service is
    /// called and nothing is deleted.
    pub dry_run: bool,
    /// The GitLab instance the services belong to (`GITLAB_INSTANCE_UUID`): every
    /// removal first requires the database's `application_settings.uuid` to be it.
    pub instance_uuid: Option<String>,
    /// The clock that dates the services' tokens (Gitaly's v2 token, the registry's
    /// JWT): the wall clock, because each service checks them against its own clock.
    /// The database decisions use the invocation's injected `now`; under Lambda both
    /// are the system clock, while `hk`'s virtual time may run ahead of the wall.
    pub token_clock: std::sync::Arc<dyn crate::clock::Clock>,
}

impl Default for Storage {
    fn default() -> Storage {
        Storage {
            gitaly: None,
            registry: None,
            objects: None,
            dry_run: false,
            instance_uuid: None,
            token_clock: std::sync::Arc::new(crate::clock::SystemClock),
        }
    }
}

impl std::fmt::Debug for Storage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Storage")
            .field("gitaly", &self.gitaly.is_some())
            .field("registry", &self.registry.is_some())
            .field("objects", &self.objects.is_some())
            .field("dry_run", &self.dry_run)
            .field("instance_uuid", &self.instance_uuid)
            .finish()
    }
}

/// A secret's value: given, or read from Secrets Manager.
async fn resolve(s: &SecretRef, aws: &aws_config::SdkConfig) -> Result<String> {
    match s {
        SecretRef::Value(v) => Ok(v.clone()),
        SecretRef::Arn { var, arn } => crate::aws::read_secret(Some(aws), var, arn).await,
    }
}

impl Storage {
    /// The storage of a dry run: no client, nothing removed.
    pub fn dry_run() -> Storage {
        Storage {
            dry_run: true,
            ..Storage::default()
        }
    }

    /// The clients of the kinds `modes` switches on, from `cfg` (secrets read through
    /// `aws`). A kind on without its configuration is refused by variable name.
    pub async fn build(
        modes: &StorageModes,
        cfg: &StorageConfig,
        aws: &aws_config::SdkConfig,
    ) -> Result<Storage> {
        use crate::config::storage::Mode;
        cfg.require(modes)?;
        let mut s = Storage {
            instance_uuid: cfg.instance_uuid.clone(),
            ..Storage::default()
        };
        if let (Mode::On, Some(g)) = (modes.gitaly, &cfg.gitaly) {
            let token = match &g.token {
                Some(t) => Some(resolve(t, aws).await?),
                None => None,
            };
            s.gitaly = Some(gitaly::Gitaly::new(&gitaly::GitalyConfig {
                storages: gitaly::parse_addresses(&g.addresses)?,
                token,
                timeout: g.timeout,
            })?);
        }
        if let (Mode::On, Some(r)) = (modes.registry, &cfg.registry) {
            s.registry = Some(registry::Registry::new(&registry::RegistryConfig {
                api_url: r.api_url.clone(),
                issuer: r.issuer.clone(),
                service: r.service.clone(),
                key_pem: resolve(&r.key, aws).await?,
                ca_bundle: r.ca_bundle.clone(),
                timeout: r.timeout,
            })?);
        }
        if modes.objects == Mode::On {
            let endpoint = crate::aws::service_endpoint(|k| std::env::var(k).ok(), "S3");
            s.objects = Some(objects::Objects::new(aws, endpoint, &cfg.buckets));
        }
        Ok(s)
    }
}
