//! The Gitaly client of `storage-cleanup`: removes a project's Git repositories (the
//! project's, its wiki's `.wiki.git` and its designs' `.design.git`) with Gitaly's
//! `RepositoryService.RemoveRepository` over gRPC.
//!
//! Owns: [`GitalyConfig`] and its `GITALY_ADDRESSES` syntax ([`parse_addresses`]), the
//! one lazy channel per storage, Gitaly's v2 token ([`v2_token`]) and the mapping of
//! Gitaly's answers to [`Removal`] or [`Error::Storage`] (kind `gitaly`). The client
//! is generated at build time from `shared/proto/gitaly/repository.proto` (build.rs).
//!
//! Gitaly's behaviour relied on (its `internal/gitaly/service/repository/remove.go`,
//! `internal/gitaly/repoutil/remove.go`, `internal/gitaly/config/locator.go`,
//! `internal/praefect/remove_repository.go` and `auth/token.go`): OK when the
//! repository was removed; `NotFound` "repository does not exist" (Gitaly and
//! Praefect alike; "… concurrently removed" in a race) when there was none, which is
//! [`Removal::AlreadyGone`]; `InvalidArgument` "storage name
//! not found" for a storage it does not serve; `Unauthenticated` without a token and
//! `PermissionDenied` for a wrong or stale one (tokens are valid ±30 s around the
//! server's clock).

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::{DateTime, Utc};
use sha2::{Digest, Sha256};
use tokio::sync::OnceCell;
use tonic::transport::{Channel, ClientTlsConfig, Endpoint};

use super::Removal;
use crate::error::{Error, Result};

/// The client generated from `shared/proto/gitaly/repository.proto`.
#[allow(missing_docs, clippy::all, clippy::pedantic)]
pub mod proto {
    tonic::include_proto!("gitaly");
}

/// The environment variable [`parse_addresses`] reads its text from.
pub const ADDRESSES_VAR: &str = "GITALY_ADDRESSES";

/// Where the Gitaly storages are and how to authenticate.
#[derive(Clone)]
pub struct GitalyConfig {
    /// Storage name (GitLab's `repository_storage`, e.g. `default`) → address
    /// `tcp://host:port` or `tls://host:port` (GitLab's `gitaly_address` forms).
    pub storages: BTreeMap<String, String>,
    /// Gitaly's shared secret (`gitaly['configuration'][:auth][:token]`); `None`: no
    /// `authorization` header.
    pub token: Option<String>,
    /// The limit of one call (connection included).
    pub timeout: Duration,
}

impl std::fmt::Debug for GitalyConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GitalyConfig")
            .field("storages", &self.storages)
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .field("timeout", &self.timeout)
            .finish()
    }
}

struct Storage {
    endpoint: Endpoint,
    channel: OnceCell<Channel>,
}

/// A client of the configured Gitaly storages: one lazily connected channel each.
pub struct Gitaly {
    storages: BTreeMap<String, Storage>,
    token: Option<String>,
    timeout: Duration,
}

impl std::fmt::Debug for Gitaly {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gitaly")
            .field("storages", &self.storages.keys().collect::<Vec<_>>())
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

/// `tcp://host:port` → `http://host:port`, `tls://host:port` → `https://host:port`;
/// `Err` says what is wrong (without the variable's name).
fn endpoint_uri(address: &str) -> std::result::Result<(String, bool), String> {
    let (rest, tls) = if let Some(rest) = address.strip_prefix("tcp://") {
        (rest, false)
    } else if let Some(rest) = address.strip_prefix("tls://") {
        (rest, true)
    } else if address.starts_with("unix:") {
        return Err(format!(
            "{address:?}: unix sockets are not reachable from Lambda; give the Gitaly \
             server's tcp://host:port or tls://host:port"
        ));
    } else {
        return Err(format!(
            "{address:?}: expected tcp://host:port or tls://host:port"
        ));
    };
    let port_ok = rest
        .rsplit_once(':')
        .is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok_and(|p| p > 0));
    if !port_ok || rest.contains('/') || rest.contains('@') {
        return Err(format!(
            "{address:?}: expected tcp://host:port or tls://host:port"
        ));
    }
    let scheme = if tls { "https" } else { "http" };
    Ok((format!("{scheme}://{rest}"), tls))
}

/// Parse `GITALY_ADDRESSES`: `name=address` entries separated by commas, e.g.
/// `default=tcp://gitaly-1:8075,archive=tls://gitaly-2:9999`. Errors name the
/// variable and the bad entry.
pub fn parse_addresses(s: &str) -> Result<BTreeMap<String, String>> {
    let mut out = BTreeMap::new();
    for entry in s.split(',').map(str::trim) {
        if entry.is_empty() {
            continue;
        }
        let Some((name, address)) = entry.split_once('=') else {
            return Err(Error::Config(format!(
                "{ADDRESSES_VAR}: entry {entry:?} is not storage=address"
            )));
        };
        let (name, address) = (name.trim(), address.trim());
        if name.is_empty() || address.is_empty() {
            return Err(Error::Config(format!(
                "{ADDRESSES_VAR}: entry {entry:?} is not storage=address"
            )));
        }
        if let Err(why) = endpoint_uri(address) {
            return Err(Error::Config(format!(
                "{ADDRESSES_VAR}: storage {name:?}: {why}"
            )));
        }
        if out.insert(name.to_string(), address.to_string()).is_some() {
            return Err(Error::Config(format!(
                "{ADDRESSES_VAR}: storage {name:?} is given twice"
            )));
        }
    }
    if out.is_empty() {
        return Err(Error::Config(format!(
            "{ADDRESSES_VAR}: no storage given (expected name=tcp://host:port,…)"
        )));
    }
    Ok(out)
}

/// HMAC-SHA-256 (RFC 2104) of `message` under `key`.
fn hmac_sha256(key: &[u8], message: &[u8]) -> [u8; 32] {
    const BLOCK: usize = 64;
    let mut k = [0u8; BLOCK];
    if key.len() > BLOCK {
        k[..32].copy_from_slice(&Sha256::digest(key));
    } else {
        k[..key.len()].copy_from_slice(key);
    }
    let mut inner = Sha256::new();
    inner.update(k.map(|b| b ^ 0x36));
    inner.update(message);
    let mut outer = Sha256::new();
    outer.update(k.map(|b| b ^ 0x5c));
    outer.update(inner.finalize());
    outer.finalize().into()
}

/// Gitaly's v2 token for `now`: `v2.<hex HMAC-SHA-256(secret, timestamp)>.<timestamp>`,
/// the timestamp in Unix seconds (Gitaly's `auth/rpccredentials.go`). Sent as
/// `authorization: Bearer <token>`.
pub fn v2_token(secret: &str, now: DateTime<Utc>) -> String {
    let message = now.timestamp().to_string();
    let signature = hmac_sha256(secret.as_bytes(), message.as_bytes());
    format!("v2.{}.{message}", hex::encode(signature))
}

/// Whether a `NotFound` answer means the repository is missing (not the storage's
/// directory: "storage does not exist" is a server fault).
fn repository_missing(status: &tonic::Status) -> bool {
    status.code() == tonic::Code::NotFound && status.message().contains("repository")
}

impl Gitaly {
    /// A client for `cfg`'s storages. No I/O: each storage connects on first use.
    pub fn new(cfg: &GitalyConfig) -> Result<Gitaly> {
        let mut storages = BTreeMap::new();
        for (name, address) in &cfg.storages {
            let (uri, tls) = endpoint_uri(address).map_err(|why| {
                Error::Config(format!("{ADDRESSES_VAR}: storage {name:?}: {why}"))
            })?;
            let mut endpoint = Endpoint::from_shared(uri)
                .map_err(|e| {
                    Error::Config(format!(
                        "{ADDRESSES_VAR}: storage {name:?}: {address:?}: {e}"
                    ))
                })?
                .connect_timeout(cfg.timeout)
                .timeout(cfg.timeout);
            if tls {
                endpoint = endpoint
                    .tls_config(ClientTlsConfig::new().with_native_roots())
                    .map_err(|e| {
                        Error::Config(format!(
                            "{ADDRESSES_VAR}: storage {name:?}: TLS for {address:?}: {e}"
                        ))
                    })?;
            }
            storages.insert(
                name.clone(),
                Storage {
                    endpoint,
                    channel: OnceCell::new(),
                },
            );
        }
        Ok(Gitaly {
            storages,
            token: cfg.token.clone().filter(|t| !t.is_empty()),
            timeout: cfg.timeout,
        })
    }

    /// The configured storage names, sorted.
    pub fn storage_names(&self) -> impl Iterator<Item = &str> {
        self.storages.keys().map(String::as_str)
    }

    /// Remove the repository `relative_path` of `storage`. `now` dates the token.
    /// A missing repository is [`Removal::AlreadyGone`]; any other failure, and a
    /// storage missing from the configuration, is a retryable [`Error::Storage`].
    pub async fn remove_repository(
        &self,
        storage: &str,
        relative_path: &str,
        now: DateTime<Utc>,
    ) -> Result<Removal> {
        let fail = |message: String| Error::Storage {
            kind: "gitaly",
            message,
        };
        let Some(target) = self.storages.get(storage) else {
            let known: Vec<&str> = self.storage_names().collect();
            return Err(fail(format!(
                "storage {storage:?} of repository {relative_path:?} is not in \
                 {ADDRESSES_VAR} (configured: {})",
                known.join(", ")
            )));
        };
        let channel = target
            .channel
            .get_or_init(|| async { target.endpoint.connect_lazy() })
            .await
            .clone();
        let mut request = tonic::Request::new(proto::RemoveRepositoryRequest {
            repository: Some(proto::Repository {
                storage_name: storage.to_string(),
                relative_path: relative_path.to_string(),
                ..Default::default()
            }),
        });
        request.set_timeout(self.timeout);
        if let Some(secret) = &self.token {
            let value = format!("Bearer {}", v2_token(secret, now));
            let value = value
                .parse()
                .map_err(|_| fail("the Gitaly token cannot be sent as a header".into()))?;
            request.metadata_mut().insert("authorization", value);
        }
        let mut client = proto::repository_service_client::RepositoryServiceClient::new(channel);
        match client.remove_repository(request).await {
            Ok(_) => Ok(Removal::Removed),
            Err(status) if repository_missing(&status) => Ok(Removal::AlreadyGone),
            Err(status) => Err(fail(format!(
                "RemoveRepository {storage}:{relative_path}: {:?}: {}",
                status.code(),
                status.message()
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    #[test]
    fn hmac_matches_rfc_4231_case_2() {
        let mac = hmac_sha256(b"Jefe", b"what do ya want for nothing?");
        assert_eq!(
            hex::encode(mac),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }

    #[test]
    fn hmac_hashes_long_keys_first() {
        // RFC 4231 case 6: a 131-byte key.
        let mac = hmac_sha256(
            &[0xaa; 131],
            b"Test Using Larger Than Block-Size Key - Hash Key First",
        );
        assert_eq!(
            hex::encode(mac),
            "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"
        );
    }

    #[test]
    fn v2_token_signs_the_injected_timestamp() {
        let now = Utc.with_ymd_and_hms(2026, 11, 26, 12, 0, 0).unwrap();
        let token = v2_token("secret", now);
        let ts = now.timestamp().to_string();
        let parts: Vec<&str> = token.split('.').collect();
        assert_eq!(parts.len(), 3, "{token}");
        assert_eq!(parts[0], "v2");
        assert_eq!(parts[2], ts);
        assert_eq!(parts[1], hex::encode(hmac_sha256(b"secret", ts.as_bytes())));
        assert_eq!(parts[1].len(), 64);
        assert!(!token.contains("secret"));
        let later = v2_token("secret", now + chrono::Duration::seconds(1));
        assert_ne!(token, later);
        assert_ne!(token, v2_token("other", now));
    }

    #[test]
    fn parse_addresses_reads_storage_address_pairs() {
        let map = parse_addresses(" default=tcp://gitaly-1:8075 , archive=tls://g2.example:9999,")
            .unwrap();
        assert_eq!(map.len(), 2);
        assert_eq!(map["default"], "tcp://gitaly-1:8075");
        assert_eq!(map["archive"], "tls://g2.example:9999");
    }

    #[test]
    fn parse_addresses_names_the_variable_and_the_bad_entry() {
        for (text, needle) in [
            ("default", "\"default\""),
            ("=tcp://h:1", "\"=tcp://h:1\""),
            (
                "default=unix:/var/opt/gitlab/gitaly/gitaly.socket",
                "unix sockets",
            ),
            ("default=http://h:8075", "\"http://h:8075\""),
            ("default=tcp://h", "\"tcp://h\""),
            ("default=tcp://h:port", "\"tcp://h:port\""),
            ("a=tcp://h:1,a=tcp://h:2", "\"a\" is given twice"),
            ("", "no storage"),
        ] {
            let err = parse_addresses(text).unwrap_err();
            assert_eq!(err.class(), "config", "{text}");
            let msg = err.to_string();
            assert!(msg.contains(ADDRESSES_VAR), "{text}: {msg}");
            assert!(msg.contains(needle), "{text}: {msg}");
        }
    }

    #[test]
    fn new_refuses_unix_sockets_and_hides_the_token() {
        let cfg = GitalyConfig {
            storages: [("default".to_string(), "unix:/tmp/gitaly.socket".to_string())].into(),
            token: Some("s3cret".into()),
            timeout: Duration::from_secs(1),
        };
        let err = Gitaly::new(&cfg).unwrap_err();
        assert_eq!(err.class(), "config");
        assert!(err.to_string().contains("unix sockets"), "{err}");
        assert!(!format!("{cfg:?}").contains("s3cret"));
    }

    #[test]
    fn new_does_no_io_and_lists_storages() {
        let cfg = GitalyConfig {
            storages: [
                ("default".to_string(), "tcp://127.0.0.1:1".to_string()),
                ("b".to_string(), "tls://gitaly.example:9999".to_string()),
            ]
            .into(),
            token: None,
            timeout: Duration::from_secs(1),
        };
        let g = Gitaly::new(&cfg).unwrap();
        assert_eq!(g.storage_names().collect::<Vec<_>>(), ["b", "default"]);
    }

    #[test]
    fn the_request_encodes_as_gitalys_wire_format() {
        use prost::Message;
        let request = proto::RemoveRepositoryRequest {
            repository: Some(proto::Repository {
                storage_name: "default".into(),
                relative_path: "a.git".into(),
                ..Default::default()
            }),
        };
        // Field 1 (repository, length-delimited) holding field 2 (storage_name) and
        // field 3 (relative_path).
        let mut expected = vec![0x0a, 16, 0x12, 7];
        expected.extend_from_slice(b"default");
        expected.extend_from_slice(&[0x1a, 5]);
        expected.extend_from_slice(b"a.git");
        assert_eq!(request.encode_to_vec(), expected);
    }

    #[test]
    fn only_a_missing_repository_is_already_gone() {
        use tonic::{Code, Status};
        assert!(repository_missing(&Status::new(
            Code::NotFound,
            "repository does not exist"
        )));
        assert!(repository_missing(&Status::new(
            Code::NotFound,
            "repository was concurrently removed"
        )));
        assert!(!repository_missing(&Status::new(
            Code::NotFound,
            "storage does not exist"
        )));
        assert!(!repository_missing(&Status::new(
            Code::InvalidArgument,
            "repository not set"
        )));
    }
}
