//! The container registry client of `storage-cleanup` (docs/storage-cleanup.md): removes
//! one project's container repository through the registry's HTTP API (Docker
//! Registry HTTP API V2), the way GitLab does for a registry without its metadata
//! database: list the tags, resolve each to its manifest digest, delete each distinct
//! manifest once; and, beyond GitLab, unlink the blobs those manifests reference from
//! the repository.
//!
//! Owns: [`RegistryConfig`], [`Registry`] (the HTTP/1.1 client: rustls with ring over
//! the system roots plus an optional CA bundle, or plain http for a local registry; one
//! timeout per request) and [`RepositoryRemoval`]. Every request carries a token GitLab's
//! way ([`token`]: a JWT signed with GitLab's registry key, scoped to the one
//! repository, issued at the injected `now`). Errors are `Error::Storage` of kind
//! `registry`, naming the repository, method, status and the registry's error code,
//! never the token.
//!
//! What deletion leaves behind (Distribution 2.8, Debian's `docker-registry`): the
//! manifests, tags and blob links are gone at once, the blob data stays until the
//! registry's own garbage collector runs, and the catalogue (`GET /v2/_catalog`) keeps
//! listing the repository: it lists every repository directory holding a `_layers`
//! directory, which neither the API nor the garbage collector (`garbage-collect
//! --delete-untagged`) removes (docs/storage-cleanup.md).

mod api;
pub mod token;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use chrono::{DateTime, Utc};
use http_body_util::{BodyExt, Full};
use hyper::header::{HeaderValue, ACCEPT, AUTHORIZATION, LINK};
use hyper::{Method, Request, StatusCode};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use tokio::sync::OnceCell;

use self::api::{next_link, next_target, same_origin, References};
use self::token::{Access, SigningKey};
use super::Removal;
use crate::error::{Error, Result};

/// The manifest media types a manifest request accepts, so the registry answers with the digest
/// of the stored manifest instead of converting it: Docker schema 2, Docker manifest
/// list, OCI manifest, OCI index.
pub const MANIFEST_ACCEPT: &str = "application/vnd.docker.distribution.manifest.v2+json, \
application/vnd.docker.distribution.manifest.list.v2+json, \
application/vnd.oci.image.manifest.v1+json, \
application/vnd.oci.image.index.v1+json";

/// The actions of a deletion token: GitLab's `full_access_token` grants `*`, which
/// Distribution's token access controller matches for every action (`pull` for the
/// tag list and manifest reads, `delete` for `DELETE`).
const FULL_ACCESS: &[&str] = &["*"];
/// The actions of a read-only token (GitLab's `pull_access_token`).
const PULL: &[&str] = &["pull"];

/// How many times a repository's tags are listed and deleted before tags still
/// appearing (pushes racing the deletion) are an error.
pub const DELETE_ROUNDS: usize = 3;

/// Where the registry is and how to sign for it.
#[derive(Clone)]
pub struct RegistryConfig {
    /// The registry's API base URL, e.g. `https://registry.example.com` or
    /// `http://127.0.0.1:5000` (GitLab's `registry.api_url`).
    pub api_url: String,
    /// The token issuer (GitLab's `registry.issuer`, default `gitlab-issuer`).
    pub issuer: String,
    /// The token audience, the registry's `auth.token.service` (default
    /// `container_registry`).
    pub service: String,
    /// GitLab's registry signing key (`registry.key`): PKCS#1 `BEGIN RSA PRIVATE KEY`
    /// or PKCS#8 PEM.
    pub key_pem: String,
    /// Extra trusted CA certificates (PEM), besides the system roots.
    pub ca_bundle: Option<std::path::PathBuf>,
    /// The timeout of each request.
    pub timeout: Duration,
}

impl std::fmt::Debug for RegistryConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RegistryConfig")
            .field("api_url", &self.api_url)
            .field("issuer", &self.issuer)
            .field("service", &self.service)
            .field("key_pem", &"<redacted>")
            .field("ca_bundle", &self.ca_bundle)
            .field("timeout", &self.timeout)
            .finish()
    }
}

/// What removing one repository found and did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RepositoryRemoval {
    /// `Removed` when it had tags, `AlreadyGone` when it was unknown or had none.
    pub removal: Removal,
    /// Distinct manifests deleted (a manifest already gone is not counted).
    pub manifests_deleted: u64,
    /// Tags the repository had.
    pub tags: u64,
    /// Blobs (configs, layers) unlinked from the repository (already unlinked: not
    /// counted). Their data stays until the registry's garbage collector runs.
    pub blobs_unlinked: u64,
}

type HttpClient = Client<HttpsConnector<HttpConnector>, Full<Bytes>>;

/// The registry client, built once at cold start.
pub struct Registry {
    base: url::Url,
    issuer: String,
    service: String,
    key: SigningKey,
    ca_bundle: Option<std::path::PathBuf>,
    timeout: Duration,
    /// Built on the first request (loading the system roots is file I/O).
    client: OnceCell<HttpClient>,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry")
            .field("base", &self.base.as_str())
            .field("issuer", &self.issuer)
            .field("service", &self.service)
            .field("kid", &self.key.kid())
            .finish_non_exhaustive()
    }
}

/// A response: status, headers we read, body (small: error documents and tag lists).
struct Reply {
    status: StatusCode,
    digest: Option<String>,
    next: Option<String>,
    body: Bytes,
}

impl Reply {
    /// The first error code of a registry error document (`{"errors":[{"code":…}]}`).
    fn error_code(&self) -> String {
        serde_json::from_slice::<serde_json::Value>(&self.body)
            .ok()
            .and_then(|v| v["errors"][0]["code"].as_str().map(str::to_string))
            .unwrap_or_else(|| "-".into())
    }
}

fn storage(message: String) -> Error {
    Error::Storage {
        kind: "registry",
        message,
    }
}

impl Registry {
    /// Parse the configuration and the key; no I/O. A bad key is `Error::Config`
    /// naming `REGISTRY_KEY`, never its text.
    pub fn new(cfg: &RegistryConfig) -> Result<Registry> {
        let key = SigningKey::from_pem(&cfg.key_pem)?;
        let mut base = url::Url::parse(cfg.api_url.trim())
            .map_err(|e| Error::Config(format!("REGISTRY_API_URL: {e}")))?;
        if !matches!(base.scheme(), "http" | "https") || base.host_str().is_none() {
            return Err(Error::Config(
                "REGISTRY_API_URL: an http or https URL with a host".into(),
            ));
        }
        if !base.path().ends_with('/') {
            let p = format!("{}/", base.path());
            base.set_path(&p);
        }
        Ok(Registry {
            base,
            issuer: cfg.issuer.clone(),
            service: cfg.service.clone(),
            key,
            ca_bundle: cfg.ca_bundle.clone(),
            timeout: cfg.timeout,
            client: OnceCell::new(),
        })
    }

    /// The libtrust key id the tokens carry (`kid`).
    pub fn key_id(&self) -> &str {
        self.key.kid()
    }

    fn build_client(&self) -> Result<HttpClient> {
        let mut roots = rustls::RootCertStore::empty();
        if self.base.scheme() == "https" {
            let native = rustls_native_certs::load_native_certs();
            roots.add_parsable_certificates(native.certs);
            if let Some(path) = &self.ca_bundle {
                use rustls::pki_types::pem::PemObject;
                let certs: Vec<_> = rustls::pki_types::CertificateDer::pem_file_iter(path)
                    .and_then(|it| it.collect::<std::result::Result<Vec<_>, _>>())
                    .map_err(|e| {
                        Error::Config(format!("REGISTRY_CA_BUNDLE {}: {e}", path.display()))
                    })?;
                if certs.is_empty() {
                    return Err(Error::Config(format!(
                        "REGISTRY_CA_BUNDLE {}: no certificate",
                        path.display()
                    )));
                }
                roots.add_parsable_certificates(certs);
            }
        }
        let tls = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .map_err(|e| Error::Config(format!("registry TLS: {e}")))?
        .with_root_certificates(roots)
        .with_no_client_auth();
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_http1()
            .build();
        Ok(Client::builder(TokioExecutor::new()).build(connector))
    }

    fn url(&self, target: &str) -> Result<url::Url> {
        if let Ok(abs) = url::Url::parse(target) {
            return same_origin(&self.base, abs);
        }
        self.base
            .join(target.trim_start_matches('/'))
            .map_err(|e| Error::Invariant(format!("registry URL {target}: {e}")))
    }

    /// One request with a fresh token for `path`, under the per-request timeout.
    async fn request(
        &self,
        method: Method,
        path: &str,
        target: &str,
        actions: &[&str],
        now: DateTime<Utc>,
    ) -> Result<Reply> {
        let client = self
            .client
            .get_or_try_init(|| async { self.build_client() })
            .await?;
        let url = self.url(target)?;
        let token = self.key.token(
            &self.issuer,
            &self.service,
            &[Access {
                kind: "repository",
                name: path,
                actions,
            }],
            now,
        )?;
        let mut auth = HeaderValue::from_str(&format!("Bearer {token}"))
            .map_err(|_| Error::Invariant("registry token: not a header value".into()))?;
        auth.set_sensitive(true);
        let req = Request::builder()
            .method(method.clone())
            .uri(url.as_str())
            .header(AUTHORIZATION, auth)
            .header(ACCEPT, MANIFEST_ACCEPT)
            .body(Full::new(Bytes::new()))
            .map_err(|e| Error::Invariant(format!("registry request: {e}")))?;
        let what = format!("{method} {path} ({})", url.path());
        let exchange = async {
            let resp = client
                .request(req)
                .await
                .map_err(|e| storage(format!("{what}: no response: {}", error_chain(&e))))?;
            let status = resp.status();
            let header = |name| {
                resp.headers()
                    .get(name)
                    .and_then(|v: &HeaderValue| v.to_str().ok())
                    .map(str::to_string)
            };
            let digest = header("docker-content-digest");
            let next = header(LINK.as_str()).as_deref().and_then(next_link);
            let body = resp
                .into_body()
                .collect()
                .await
                .map_err(|e| storage(format!("{what}: reading the response: {e}")))?
                .to_bytes();
            Ok::<_, Error>(Reply {
                status,
                digest,
                next,
                body,
            })
        };
        tokio::time::timeout(self.timeout, exchange)
            .await
            .map_err(|_| storage(format!("{what}: no response within {:?}", self.timeout)))?
    }

    fn failure(what: &str, path: &str, r: &Reply) -> Error {
        storage(format!(
            "{what} {path}: HTTP {} {}",
            r.status.as_u16(),
            r.error_code()
        ))
    }

    /// The repository's tags, every page (`Link` pagination, which Distribution 3 and
    /// GitLab's registry use; Distribution 2.8 answers with one page), or `None` when the
    /// registry does not know the repository (`404 NAME_UNKNOWN`). Read-only, with a
    /// `pull` token.
    pub async fn tags(&self, path: &str, now: DateTime<Utc>) -> Result<Option<Vec<String>>> {
        self.list_tags(path, PULL, now).await
    }

    async fn list_tags(
        &self,
        path: &str,
        actions: &[&str],
        now: DateTime<Utc>,
    ) -> Result<Option<Vec<String>>> {
        let mut tags = Vec::new();
        let mut target = format!("v2/{path}/tags/list");
        loop {
            let r = self
                .request(Method::GET, path, &target, actions, now)
                .await?;
            if r.status == StatusCode::NOT_FOUND && r.error_code() == "NAME_UNKNOWN" {
                return Ok(None);
            }
            if r.status != StatusCode::OK {
                return Err(Self::failure("GET tags/list", path, &r));
            }
            let page: serde_json::Value = serde_json::from_slice(&r.body)
                .map_err(|e| storage(format!("GET tags/list {path}: not a tag list: {e}")))?;
            if let Some(list) = page["tags"].as_array() {
                tags.extend(list.iter().filter_map(|t| t.as_str().map(str::to_string)));
            }
            match r.next {
                Some(next) => {
                    let next = next_target(&self.base, &next)?;
                    // A registry repeating the same page would loop forever.
                    if self.url(&next)? == self.url(&target)? {
                        return Err(storage(format!(
                            "GET tags/list {path}: the next page is the same page"
                        )));
                    }
                    target = next;
                }
                None => break,
            }
        }
        Ok(Some(tags))
    }

    /// A manifest by tag or digest (`GET`, all four media types accepted): its digest
    /// and the digests it references, or `None` when it is gone (404).
    async fn manifest(
        &self,
        path: &str,
        reference: &str,
        now: DateTime<Utc>,
    ) -> Result<Option<(String, References)>> {
        let r = self
            .request(
                Method::GET,
                path,
                &format!("v2/{path}/manifests/{reference}"),
                FULL_ACCESS,
                now,
            )
            .await?;
        match r.status {
            StatusCode::NOT_FOUND => return Ok(None),
            StatusCode::OK => {}
            _ => return Err(Self::failure("GET manifests", path, &r)),
        }
        let digest = r.digest.clone().ok_or_else(|| {
            storage(format!(
                "GET manifests {path}:{reference}: no Docker-Content-Digest"
            ))
        })?;
        Ok(Some((digest, References::of(&r.body))))
    }

    /// `DELETE` one manifest or blob link: `true` when deleted, `false` when already
    /// gone (404).
    async fn delete(
        &self,
        path: &str,
        what: &str,
        digest: &str,
        now: DateTime<Utc>,
    ) -> Result<bool> {
        let r = self
            .request(
                Method::DELETE,
                path,
                &format!("v2/{path}/{what}/{digest}"),
                FULL_ACCESS,
                now,
            )
            .await?;
        match r.status {
            StatusCode::ACCEPTED | StatusCode::OK | StatusCode::NO_CONTENT => Ok(true),
            StatusCode::NOT_FOUND => Ok(false),
            _ => Err(Self::failure(&format!("DELETE {what}"), path, &r)),
        }
    }

    /// Delete the repository's images, with a full-access token for `path` issued at
    /// `now`: resolve every tag to its manifest (and an index's or list's child
    /// manifests), unlink the blobs they reference from the repository
    /// (`DELETE /v2/<path>/blobs/<digest>`: the layers are no longer served under this
    /// path, even before the registry's garbage collector reclaims them), then delete
    /// each distinct manifest once, which removes its tags. Blobs go first so that a
    /// replay after a failure still finds every manifest through its tags. Then the tags
    /// are listed again: an image pushed meanwhile goes too (up to [`DELETE_ROUNDS`]
    /// rounds; tags still appearing after them are an error, so the caller keeps the
    /// row). Unknown repository, or no tag left: `AlreadyGone`. Anything already gone
    /// (404) is not an error.
    pub async fn delete_repository(
        &self,
        path: &str,
        now: DateTime<Utc>,
    ) -> Result<RepositoryRemoval> {
        let mut total = RepositoryRemoval {
            removal: Removal::AlreadyGone,
            manifests_deleted: 0,
            tags: 0,
            blobs_unlinked: 0,
        };
        for _ in 0..DELETE_ROUNDS {
            let Some(tags) = self.list_tags(path, FULL_ACCESS, now).await? else {
                return Ok(total);
            };
            if tags.is_empty() {
                return Ok(total);
            }
            let round = self.delete_tagged(path, tags, now).await?;
            if round.manifests_deleted == 0 && round.blobs_unlinked == 0 {
                // Tags whose manifests are already gone: nothing left to delete.
                return Ok(RepositoryRemoval {
                    removal: Removal::Removed,
                    ..total
                });
            }
            total = RepositoryRemoval {
                removal: Removal::Removed,
                manifests_deleted: total.manifests_deleted + round.manifests_deleted,
                tags: total.tags + round.tags,
                blobs_unlinked: total.blobs_unlinked + round.blobs_unlinked,
            };
        }
        Err(storage(format!(
            "DELETE {path}: tags were still being pushed after {DELETE_ROUNDS} rounds of deletion; the row is kept for a retry"
        )))
    }

    /// One round: `tags` resolved to their manifests, their blobs unlinked, then the
    /// manifests deleted.
    async fn delete_tagged(
        &self,
        path: &str,
        tags: Vec<String>,
        now: DateTime<Utc>,
    ) -> Result<RepositoryRemoval> {
        let mut manifests: Vec<String> = Vec::new();
        let mut blobs: Vec<String> = Vec::new();
        let mut pending: Vec<String> = tags.clone();
        while let Some(reference) = pending.pop() {
            // A tag deleted meanwhile (with another tag's manifest) is skipped.
            let Some((digest, refs)) = self.manifest(path, &reference, now).await? else {
                continue;
            };
            if manifests.contains(&digest) {
                continue;
            }
            manifests.push(digest);
            for b in refs.blobs {
                if !blobs.contains(&b) {
                    blobs.push(b);
                }
            }
            pending.extend(
                refs.manifests
                    .into_iter()
                    .filter(|m| !manifests.contains(m)),
            );
        }
        let mut unlinked = 0;
        for b in &blobs {
            unlinked += u64::from(self.delete(path, "blobs", b, now).await?);
        }
        let mut deleted = 0;
        for m in &manifests {
            deleted += u64::from(self.delete(path, "manifests", m, now).await?);
        }
        Ok(RepositoryRemoval {
            removal: Removal::Removed,
            manifests_deleted: deleted,
            tags: tags.len() as u64,
            blobs_unlinked: unlinked,
        })
    }
}

/// An error and its sources, `: `-joined (hyper's own message is terse).
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut cur = e.source();
    while let Some(s) = cur {
        out.push_str(": ");
        out.push_str(&s.to_string());
        cur = s.source();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_errors_name_the_setting_and_debug_hides_the_key() {
        let cfg = RegistryConfig {
            api_url: "ftp://x".into(),
            issuer: "gitlab-issuer".into(),
            service: "container_registry".into(),
            key_pem: include_str!("../../testdata/registry-test-key-pkcs1.pem").into(),
            ca_bundle: None,
            timeout: Duration::from_secs(5),
        };
        let e = Registry::new(&cfg).unwrap_err().to_string();
        assert!(e.contains("REGISTRY_API_URL"), "{e}");
        assert!(!format!("{cfg:?}").contains("PRIVATE"));
        let ok = RegistryConfig {
            api_url: "http://127.0.0.1:5000".into(),
            ..cfg
        };
        let r = Registry::new(&ok).unwrap();
        assert_eq!(
            r.url("v2/g/p/tags/list").unwrap().as_str(),
            "http://127.0.0.1:5000/v2/g/p/tags/list"
        );
        assert!(!format!("{r:?}").contains("PRIVATE"));
    }
}
