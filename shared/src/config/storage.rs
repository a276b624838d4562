//! Configuration of storage removal (issue 37, docs/storage-cleanup.md): per storage
//! kind whether `group-destroy` removes it (`STORAGE_GITALY`, `STORAGE_REGISTRY`,
//! `STORAGE_OBJECTS`), and where `storage-cleanup`'s clients reach Gitaly, the registry
//! and the buckets. Pure parsing; secrets behind ARNs are read at cold start by
//! [`crate::storage::Storage::build`]. A bad variable is refused by name. Owns also the
//! names configuration, messages and metrics give the storage kinds ([`StorageKind`])
//! and GitLab's buckets ([`Bucket`]).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::Serialize;

use crate::error::{Error, Result};

/// What `group-destroy` does with one kind of storage.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mode {
    /// `on`: recorded in the manifest and removed by `storage-cleanup` before (registry)
    /// or after (Gitaly, objects) the project's rows.
    On,
    /// `off` (the default): a group holding this kind of storage is blocked and stays
    /// whole, with nothing deleted, and the error line names what is there.
    #[default]
    Off,
    /// `leave`: the rows are deleted and the storage stays where it is, every path
    /// logged (the behaviour before issue 37). Not for the registry: its rows cannot
    /// be deleted while the images exist.
    Leave,
}

impl Mode {
    /// `on`, `off` or `leave`.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::On => "on",
            Mode::Off => "off",
            Mode::Leave => "leave",
        }
    }
}

/// The mode of each storage kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StorageModes {
    /// `STORAGE_GITALY`.
    pub gitaly: Mode,
    /// `STORAGE_REGISTRY` (`on` or `off`).
    pub registry: Mode,
    /// `STORAGE_OBJECTS`.
    pub objects: Mode,
}

impl StorageModes {
    /// Every kind `on` (tests, the demo with its stand-ins).
    pub const ALL_ON: StorageModes = StorageModes {
        gitaly: Mode::On,
        registry: Mode::On,
        objects: Mode::On,
    };

    /// The mode of `kind`.
    pub fn of(&self, kind: StorageKind) -> Mode {
        match kind {
            StorageKind::Gitaly => self.gitaly,
            StorageKind::Registry => self.registry,
            StorageKind::Objects => self.objects,
        }
    }

    /// The variable that sets `kind`'s mode.
    pub fn variable(kind: StorageKind) -> &'static str {
        match kind {
            StorageKind::Gitaly => "STORAGE_GITALY",
            StorageKind::Registry => "STORAGE_REGISTRY",
            StorageKind::Objects => "STORAGE_OBJECTS",
        }
    }

    pub(crate) fn from_lookup(get: &impl Fn(&str) -> Option<String>) -> Result<StorageModes> {
        let mode = |kind: StorageKind| -> Result<Mode> {
            let var = Self::variable(kind);
            match get(var).map(|v| v.trim().to_ascii_lowercase()).as_deref() {
                None | Some("off") => Ok(Mode::Off),
                Some("on") => Ok(Mode::On),
                Some("leave") if kind != StorageKind::Registry => Ok(Mode::Leave),
                Some(other) => Err(Error::Config(format!(
                    "{var} must be {}, not `{other}`",
                    if kind == StorageKind::Registry {
                        "`on` or `off` (a container repository's row cannot be deleted while its images exist)"
                    } else {
                        "`on`, `off` or `leave`"
                    }
                ))),
            }
        };
        Ok(StorageModes {
            gitaly: mode(StorageKind::Gitaly)?,
            registry: mode(StorageKind::Registry)?,
            objects: mode(StorageKind::Objects)?,
        })
    }
}

/// A secret given by value (local runs) or by Secrets Manager ARN (Lambda).
#[derive(Clone, PartialEq, Eq)]
pub enum SecretRef {
    /// The value itself (`…` variables; `hk` and tests).
    Value(String),
    /// A Secrets Manager ARN and the variable that named it.
    Arn {
        /// The variable (`…_SECRET_ARN`).
        var: &'static str,
        /// The ARN.
        arn: String,
    },
}

impl std::fmt::Debug for SecretRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SecretRef::Value(_) => f.write_str("Value(<redacted>)"),
            SecretRef::Arn { var, arn } => write!(f, "Arn({var}={arn})"),
        }
    }
}

fn secret(
    get: &impl Fn(&str) -> Option<String>,
    value: &str,
    arn: &'static str,
) -> Option<SecretRef> {
    match (get(arn), get(value)) {
        (Some(a), _) => Some(SecretRef::Arn { var: arn, arn: a }),
        (None, Some(v)) => Some(SecretRef::Value(v)),
        (None, None) => None,
    }
}

/// Where Gitaly is (`GITALY_ADDRESSES`, `GITALY_TOKEN[_SECRET_ARN]`, `GITALY_TIMEOUT_S`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GitalySource {
    /// `GITALY_ADDRESSES` as given (parsed by the client).
    pub addresses: String,
    /// The token.
    pub token: Option<SecretRef>,
    /// Per call.
    pub timeout: Duration,
}

/// Where the registry is (`REGISTRY_API_URL`, `REGISTRY_KEY[_SECRET_ARN]`, …).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegistrySource {
    /// `REGISTRY_API_URL`.
    pub api_url: String,
    /// `REGISTRY_ISSUER` (default `gitlab-issuer`).
    pub issuer: String,
    /// `REGISTRY_SERVICE` (default `container_registry`).
    pub service: String,
    /// GitLab's registry signing key (PEM).
    pub key: SecretRef,
    /// `REGISTRY_CA_BUNDLE`.
    pub ca_bundle: Option<PathBuf>,
    /// Per request.
    pub timeout: Duration,
}

/// What `storage-cleanup` needs to reach each kind; `None` where not configured.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct StorageConfig {
    /// Gitaly.
    pub gitaly: Option<GitalySource>,
    /// The registry.
    pub registry: Option<RegistrySource>,
    /// The bucket of each kind of file (`OBJECT_STORAGE_BUCKET_*`), as GitLab's
    /// `object_store` bucket: `name` or `name/prefix` (its `bucket_prefix`).
    pub buckets: BTreeMap<Bucket, String>,
    /// `GITLAB_INSTANCE_UUID`: the GitLab instance this stack serves
    /// (`application_settings.uuid`); storage removal refuses another's database.
    pub instance_uuid: Option<String>,
}

/// The variable naming the GitLab instance storage removal serves.
pub const INSTANCE_UUID_VAR: &str = "GITLAB_INSTANCE_UUID";

/// Split a bucket setting into the bucket and its prefix, as GitLab's
/// `ObjectStoreSettings.split_bucket_prefix` does, refusing (by `var`) the combinations
/// of `/` and `.` it refuses.
pub fn split_bucket(var: &str, value: &str) -> Result<(String, Option<String>)> {
    let bad = || {
        Error::Config(format!(
            "{var}: a bucket name, or name/prefix without empty, '.' or '..' segments"
        ))
    };
    let (name, prefix) = match value.split_once('/') {
        None => (value, None),
        Some((n, p)) => (n, Some(p)),
    };
    if name.is_empty() || name.chars().all(|c| c == '.') {
        return Err(bad());
    }
    if let Some(p) = prefix {
        if p.split('/').any(|seg| seg.chars().all(|c| c == '.')) {
            return Err(bad());
        }
    }
    Ok((name.to_string(), prefix.map(str::to_string)))
}

/// The variable naming `b`'s bucket.
pub fn bucket_variable(b: Bucket) -> &'static str {
    match b {
        Bucket::Uploads => "OBJECT_STORAGE_BUCKET_UPLOADS",
        Bucket::Lfs => "OBJECT_STORAGE_BUCKET_LFS",
        Bucket::Packages => "OBJECT_STORAGE_BUCKET_PACKAGES",
    }
}

fn secs(get: &impl Fn(&str) -> Option<String>, var: &str, default: u64) -> Result<Duration> {
    match get(var) {
        None => Ok(Duration::from_secs(default)),
        Some(v) => v
            .trim()
            .parse::<u64>()
            .ok()
            .filter(|n| (1..=600).contains(n))
            .map(Duration::from_secs)
            .ok_or_else(|| Error::Config(format!("{var} must be a number of seconds in 1..=600"))),
    }
}

impl StorageConfig {
    pub(crate) fn from_lookup(get: &impl Fn(&str) -> Option<String>) -> Result<StorageConfig> {
        let gitaly = match get("GITALY_ADDRESSES") {
            None => None,
            Some(addresses) => Some(GitalySource {
                addresses,
                token: secret(get, "GITALY_TOKEN", "GITALY_TOKEN_SECRET_ARN"),
                timeout: secs(get, "GITALY_TIMEOUT_S", 30)?,
            }),
        };
        let registry = match get("REGISTRY_API_URL") {
            None => None,
            Some(api_url) => Some(RegistrySource {
                api_url,
                issuer: get("REGISTRY_ISSUER").unwrap_or_else(|| "gitlab-issuer".into()),
                service: get("REGISTRY_SERVICE").unwrap_or_else(|| "container_registry".into()),
                key: secret(get, "REGISTRY_KEY", "REGISTRY_KEY_SECRET_ARN").ok_or_else(|| {
                    Error::Config(
                        "REGISTRY_API_URL is set: set REGISTRY_KEY_SECRET_ARN (GitLab's registry signing key)"
                            .into(),
                    )
                })?,
                ca_bundle: get("REGISTRY_CA_BUNDLE").map(PathBuf::from),
                timeout: secs(get, "REGISTRY_TIMEOUT_S", 30)?,
            }),
        };
        let mut buckets = BTreeMap::new();
        for b in Bucket::ALL {
            if let Some(name) = get(bucket_variable(b)) {
                split_bucket(bucket_variable(b), name.trim())?;
                buckets.insert(b, name.trim().to_string());
            }
        }
        let instance_uuid = get(INSTANCE_UUID_VAR)
            .map(|v| v.trim().to_string())
            .filter(|v| !v.is_empty());
        Ok(StorageConfig {
            gitaly,
            registry,
            buckets,
            instance_uuid,
        })
    }

    /// Refuse, by variable name, a kind switched `on` that `storage-cleanup` cannot reach.
    pub fn require(&self, modes: &StorageModes) -> Result<()> {
        let any_on = [modes.gitaly, modes.registry, modes.objects].contains(&Mode::On);
        if any_on && self.instance_uuid.is_none() {
            return Err(Error::Config(format!(
                "storage removal is on (STORAGE_*=on): set {INSTANCE_UUID_VAR} to the GitLab instance's application_settings.uuid, so that a copy of another instance's database never removes that instance's storage"
            )));
        }
        if modes.gitaly == Mode::On && self.gitaly.is_none() {
            return Err(Error::Config(
                "STORAGE_GITALY=on needs GITALY_ADDRESSES (storage=address, comma separated)"
                    .into(),
            ));
        }
        if modes.registry == Mode::On && self.registry.is_none() {
            return Err(Error::Config(
                "STORAGE_REGISTRY=on needs REGISTRY_API_URL and REGISTRY_KEY_SECRET_ARN".into(),
            ));
        }
        if modes.objects == Mode::On {
            if let Some(b) = Bucket::ALL
                .into_iter()
                .find(|b| !self.buckets.contains_key(b))
            {
                return Err(Error::Config(format!(
                    "STORAGE_OBJECTS=on needs {} (and the other OBJECT_STORAGE_BUCKET_* variables)",
                    bucket_variable(b)
                )));
            }
        }
        Ok(())
    }
}

/// One of GitLab's object-storage buckets (`object_store` of GitLab's configuration).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Bucket {
    /// `uploads`: project attachments and avatars.
    Uploads,
    /// `lfs`: Git LFS objects, by object id.
    Lfs,
    /// `packages`: package registry files.
    Packages,
}

impl Bucket {
    /// Every bucket.
    pub const ALL: [Bucket; 3] = [Bucket::Uploads, Bucket::Lfs, Bucket::Packages];

    /// `uploads`, `lfs` or `packages`.
    pub fn as_str(self) -> &'static str {
        match self {
            Bucket::Uploads => "uploads",
            Bucket::Lfs => "lfs",
            Bucket::Packages => "packages",
        }
    }

    /// The bucket named `s` (`uploads`, `lfs` or `packages`).
    pub fn parse(s: &str) -> Option<Bucket> {
        Bucket::ALL.into_iter().find(|b| b.as_str() == s)
    }
}

/// The three storage kinds, as configuration and metrics name them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StorageKind {
    /// Git repositories through Gitaly.
    Gitaly,
    /// Container images through the registry API.
    Registry,
    /// Files in object storage (S3).
    Objects,
}

impl StorageKind {
    /// Every kind, in the order a project's storage is removed (registry first: its
    /// rows hold the project back).
    pub const ALL: [StorageKind; 3] = [
        StorageKind::Registry,
        StorageKind::Gitaly,
        StorageKind::Objects,
    ];

    /// `gitaly`, `registry` or `objects`.
    pub fn as_str(self) -> &'static str {
        match self {
            StorageKind::Gitaly => "gitaly",
            StorageKind::Registry => "registry",
            StorageKind::Objects => "objects",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lookup<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |k| {
            pairs
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn modes_default_off_and_bad_values_name_the_variable() {
        assert_eq!(
            StorageModes::from_lookup(&lookup(&[])).unwrap(),
            StorageModes::default()
        );
        let m = StorageModes::from_lookup(&lookup(&[
            ("STORAGE_GITALY", "leave"),
            ("STORAGE_REGISTRY", "ON"),
        ]))
        .unwrap();
        assert_eq!(
            (m.gitaly, m.registry, m.objects),
            (Mode::Leave, Mode::On, Mode::Off)
        );
        let e = StorageModes::from_lookup(&lookup(&[("STORAGE_REGISTRY", "leave")])).unwrap_err();
        assert!(e.to_string().contains("STORAGE_REGISTRY"), "{e}");
        let e = StorageModes::from_lookup(&lookup(&[("STORAGE_OBJECTS", "yes")])).unwrap_err();
        assert!(e.to_string().contains("STORAGE_OBJECTS"), "{e}");
    }

    #[test]
    fn a_kind_on_without_its_service_is_refused_by_name() {
        let cfg =
            StorageConfig::from_lookup(&lookup(&[("OBJECT_STORAGE_BUCKET_UPLOADS", "u")])).unwrap();
        let e = cfg.require(&StorageModes::ALL_ON).unwrap_err().to_string();
        assert!(e.contains(INSTANCE_UUID_VAR), "{e}");
        let cfg = StorageConfig::from_lookup(&lookup(&[
            ("OBJECT_STORAGE_BUCKET_UPLOADS", "u"),
            (INSTANCE_UUID_VAR, "abc"),
        ]))
        .unwrap();
        assert!(cfg.require(&StorageModes::default()).is_ok());
        let e = cfg.require(&StorageModes::ALL_ON).unwrap_err().to_string();
        assert!(e.contains("GITALY_ADDRESSES"), "{e}");
        let modes = StorageModes {
            objects: Mode::On,
            ..StorageModes::default()
        };
        let e = cfg.require(&modes).unwrap_err().to_string();
        assert!(e.contains("OBJECT_STORAGE_BUCKET_LFS"), "{e}");
        let e =
            StorageConfig::from_lookup(&lookup(&[("REGISTRY_API_URL", "http://r")])).unwrap_err();
        assert!(e.to_string().contains("REGISTRY_KEY_SECRET_ARN"), "{e}");
        let k = StorageConfig::from_lookup(&lookup(&[
            ("GITALY_ADDRESSES", "default=tcp://g:8075"),
            ("GITALY_TOKEN", "s3cr3t"),
        ]))
        .unwrap();
        assert!(!format!("{k:?}").contains("s3cr3t"));
    }

    #[test]
    fn bucket_prefixes_split_as_gitlab_splits_them() {
        assert_eq!(
            split_bucket("V", "gitlab").unwrap(),
            ("gitlab".to_string(), None)
        );
        assert_eq!(
            split_bucket("V", "shared/gitlab/packages").unwrap(),
            ("shared".to_string(), Some("gitlab/packages".to_string()))
        );
        for bad in ["", "/x", "b/", "b//p", "b/../p", "b/./p", ".."] {
            let e = split_bucket("OBJECT_STORAGE_BUCKET_LFS", bad).unwrap_err();
            assert!(e.to_string().contains("OBJECT_STORAGE_BUCKET_LFS"), "{bad}");
        }
    }
}
