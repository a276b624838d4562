//! A real container registry for the registry client's tests: Debian's
//! `docker-registry` (Distribution 2.8, package `docker-registry`, installed by
//! scripts/system-packages.sh) run as a child process on 127.0.0.1, with filesystem
//! storage in a directory of its own, deletes enabled, and token authentication the way
//! a GitLab installation configures it (`auth.token` with issuer `gitlab-issuer`,
//! service `container_registry`, and a root certificate bundle holding the certificate
//! of the signing key). The key and its self-signed certificate are generated per
//! registry; [`TestRegistry::key_pem`] is GitLab's `registry.key` for the client.
//!
//! Helpers push an image through the HTTP API (config and layer blobs, a schema 2
//! manifest, tags), read the catalogue, tags and manifests, and run the registry's
//! garbage collector as an operator would (`docker-registry garbage-collect`).
//! Dropping the registry kills the child and removes its directory.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use openssl::asn1::Asn1Time;
use openssl::bn::{BigNum, MsbOption};
use openssl::hash::MessageDigest;
use openssl::pkey::PKey;
use openssl::rsa::Rsa;
use openssl::x509::{X509Builder, X509NameBuilder};
use serde_json::{json, Value};
use shared::storage::registry::token::{Access, SigningKey};
use shared::storage::registry::{RegistryConfig, MANIFEST_ACCEPT};

use super::certs::Leaf;
use crate::wait;

/// The registry binary of the Debian package.
const BINARY: &str = "/usr/bin/docker-registry";
/// GitLab's default `registry.issuer`.
pub const ISSUER: &str = "gitlab-issuer";
/// GitLab's token audience (`auth.token.service`).
pub const SERVICE: &str = "container_registry";
/// A schema 2 manifest's media type.
const SCHEMA2: &str = "application/vnd.docker.distribution.manifest.v2+json";

/// The running registry.
pub struct TestRegistry {
    /// Its port on 127.0.0.1.
    pub port: u16,
    /// `http`, or `https` for a registry started with [`TestRegistry::start_tls`].
    scheme: &'static str,
    dir: PathBuf,
    child: Child,
    key: SigningKey,
    key_pem: String,
    http: reqwest::Client,
}

impl Drop for TestRegistry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A pushed image: its manifest digest.
#[derive(Debug, Clone)]
pub struct Pushed {
    /// `sha256:…` of the manifest.
    pub digest: String,
    /// `sha256:…` of the config blob and the layer blob.
    pub blobs: [String; 2],
    /// The manifest's size in bytes.
    pub size: usize,
}

/// An RSA key (PKCS#1 PEM, as GitLab's `registry.key`) and its self-signed certificate.
pub fn key_and_certificate() -> (String, Vec<u8>) {
    let rsa = Rsa::generate(2048).unwrap();
    let key_pem = String::from_utf8(rsa.private_key_to_pem().unwrap()).unwrap();
    let key = PKey::from_rsa(rsa).unwrap();
    let mut name = X509NameBuilder::new().unwrap();
    name.append_entry_by_text("CN", "gitlab-registry-test")
        .unwrap();
    let name = name.build();
    let mut b = X509Builder::new().unwrap();
    b.set_version(2).unwrap();
    let mut serial = BigNum::new().unwrap();
    serial.rand(64, MsbOption::MAYBE_ZERO, false).unwrap();
    b.set_serial_number(&serial.to_asn1_integer().unwrap())
        .unwrap();
    b.set_subject_name(&name).unwrap();
    b.set_issuer_name(&name).unwrap();
    b.set_pubkey(&key).unwrap();
    b.set_not_before(&Asn1Time::days_from_now(0).unwrap())
        .unwrap();
    b.set_not_after(&Asn1Time::days_from_now(1).unwrap())
        .unwrap();
    b.sign(&key, MessageDigest::sha256()).unwrap();
    (key_pem, b.build().to_pem().unwrap())
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn sha256(data: &[u8]) -> String {
    format!(
        "sha256:{}",
        openssl::sha::sha256(data)
            .map(|b| format!("{b:02x}"))
            .concat()
    )
}

impl TestRegistry {
    /// Start a registry on a free port; waits, bounded, until `GET /v2/` answers.
    pub async fn start() -> TestRegistry {
        Self::start_with(None).await
    }

    /// Start a registry serving HTTPS with `leaf` (a certificate of the test CA for
    /// 127.0.0.1); waits, bounded, until it accepts connections. The helpers speak
    /// plain HTTP only: tests of this registry use the client alone.
    pub async fn start_tls(leaf: &Leaf) -> TestRegistry {
        Self::start_with(Some(leaf)).await
    }

    async fn start_with(tls: Option<&Leaf>) -> TestRegistry {
        assert!(
            Path::new(BINARY).exists(),
            "{BINARY} missing: install the docker-registry package (scripts/system-packages.sh)"
        );
        let dir =
            std::env::temp_dir().join(format!("hk-registry-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(dir.join("data")).unwrap();
        let (key_pem, cert_pem) = key_and_certificate();
        std::fs::write(dir.join("root.crt"), cert_pem).unwrap();
        let port = free_port();
        let mut yml = config(&dir, port);
        if let Some(leaf) = tls {
            std::fs::write(dir.join("tls.crt"), &leaf.cert_pem).unwrap();
            std::fs::write(dir.join("tls.key"), &leaf.key_pem).unwrap();
            yml = yml.replace(
                "http:\n",
                &format!(
                    "http:\n  tls:\n    certificate: {}\n    key: {}\n",
                    dir.join("tls.crt").display(),
                    dir.join("tls.key").display()
                ),
            );
        }
        std::fs::write(dir.join("config.yml"), yml).unwrap();
        let log = std::fs::File::create(dir.join("registry.log")).unwrap();
        let child = Command::new(BINARY)
            .arg("serve")
            .arg(dir.join("config.yml"))
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("start docker-registry");
        let reg = TestRegistry {
            port,
            scheme: if tls.is_some() { "https" } else { "http" },
            dir,
            child,
            key: SigningKey::from_pem(&key_pem).unwrap(),
            key_pem,
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(10))
                .build()
                .unwrap(),
        };
        if tls.is_some() {
            wait::until(
                "docker-registry to listen",
                Duration::from_secs(20),
                || async move {
                    tokio::net::TcpStream::connect(("127.0.0.1", port))
                        .await
                        .ok()
                        .map(drop)
                },
            )
            .await;
            return reg;
        }
        let url = reg.url("/v2/");
        let http = reg.http.clone();
        wait::until("docker-registry to answer", Duration::from_secs(20), || {
            let (url, http) = (url.clone(), http.clone());
            async move {
                // 401: token auth on, no token: it is up.
                let r = http.get(&url).send().await.ok()?;
                (r.status() == 401).then_some(())
            }
        })
        .await;
        reg
    }

    /// `http://127.0.0.1:<port><path>` (`https` for a TLS registry).
    pub fn url(&self, path: &str) -> String {
        format!("{}://127.0.0.1:{}{path}", self.scheme, self.port)
    }

    /// The signing key's PEM (PKCS#1), GitLab's `registry.key`.
    pub fn key_pem(&self) -> &str {
        &self.key_pem
    }

    /// The client configuration for this registry.
    pub fn client_config(&self) -> RegistryConfig {
        RegistryConfig {
            api_url: self.url(""),
            issuer: ISSUER.into(),
            service: SERVICE.into(),
            key_pem: self.key_pem.clone(),
            ca_bundle: None,
            timeout: Duration::from_secs(10),
        }
    }

    /// The registry's log so far (for failure messages).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("registry.log")).unwrap_or_default()
    }

    fn bearer(&self, kind: &str, name: &str, actions: &[&str]) -> String {
        let t = self
            .key
            .token(
                ISSUER,
                SERVICE,
                &[Access {
                    kind,
                    name,
                    actions,
                }],
                chrono::Utc::now(),
            )
            .unwrap();
        format!("Bearer {t}")
    }

    async fn push_blob(&self, path: &str, auth: &str, data: &[u8]) -> String {
        let digest = sha256(data);
        let r = self
            .http
            .post(self.url(&format!("/v2/{path}/blobs/uploads/")))
            .header("Authorization", auth)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 202, "start upload: {}", r.text().await.unwrap());
        let location = r.headers()["location"].to_str().unwrap().to_string();
        let mut put = url::Url::parse(&location)
            .or_else(|_| url::Url::parse(&self.url(&location)))
            .unwrap();
        put.query_pairs_mut().append_pair("digest", &digest);
        let r = self
            .http
            .put(put.as_str())
            .header("Authorization", auth)
            .header("Content-Type", "application/octet-stream")
            .body(data.to_vec())
            .send()
            .await
            .unwrap();
        assert_eq!(
            r.status(),
            201,
            "finish upload: {}",
            r.text().await.unwrap()
        );
        digest
    }

    /// Push a one-layer image (`layer` is its content, so two different layers make
    /// two different manifests) as `path:tag` (`tag` empty: by digest, untagged), with
    /// a push token signed by the key.
    pub async fn push_image(&self, path: &str, tag: &str, layer: &str) -> Pushed {
        let auth = self.bearer("repository", path, &["pull", "push"]);
        let config = json!({"architecture": "amd64", "os": "linux",
            "rootfs": {"type": "layers", "diff_ids": []}, "config": {}})
        .to_string();
        let config_digest = self.push_blob(path, &auth, config.as_bytes()).await;
        let layer_digest = self.push_blob(path, &auth, layer.as_bytes()).await;
        let manifest = json!({
            "schemaVersion": 2,
            "mediaType": SCHEMA2,
            "config": {"mediaType": "application/vnd.docker.container.image.v1+json",
                "size": config.len(), "digest": config_digest},
            "layers": [{"mediaType": "application/vnd.docker.image.rootfs.diff.tar.gzip",
                "size": layer.len(), "digest": layer_digest}],
        })
        .to_string();
        let reference = if tag.is_empty() {
            sha256(manifest.as_bytes())
        } else {
            tag.to_string()
        };
        let r = self
            .http
            .put(self.url(&format!("/v2/{path}/manifests/{reference}")))
            .header("Authorization", &auth)
            .header("Content-Type", SCHEMA2)
            .body(manifest.clone())
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 201, "put manifest: {}", r.text().await.unwrap());
        let digest = r.headers()["docker-content-digest"]
            .to_str()
            .unwrap()
            .to_string();
        assert_eq!(digest, sha256(manifest.as_bytes()));
        Pushed {
            digest,
            blobs: [config_digest, layer_digest],
            size: manifest.len(),
        }
    }

    /// Push an OCI image index over `children` (already pushed to `path`) as
    /// `path:tag`; returns its digest.
    pub async fn push_index(&self, path: &str, tag: &str, children: &[&Pushed]) -> String {
        const INDEX: &str = "application/vnd.oci.image.index.v1+json";
        let manifests: Vec<Value> = children
            .iter()
            .map(|c| {
                json!({"mediaType": SCHEMA2, "digest": c.digest, "size": c.size,
                "platform": {"architecture": "amd64", "os": "linux"}})
            })
            .collect();
        let index =
            json!({"schemaVersion": 2, "mediaType": INDEX, "manifests": manifests}).to_string();
        let r = self
            .http
            .put(self.url(&format!("/v2/{path}/manifests/{tag}")))
            .header(
                "Authorization",
                self.bearer("repository", path, &["pull", "push"]),
            )
            .header("Content-Type", INDEX)
            .body(index.clone())
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 201, "put index: {}", r.text().await.unwrap());
        sha256(index.as_bytes())
    }

    /// The catalogue (`GET /v2/_catalog`), with a `registry:catalog:*` token.
    pub async fn catalogue(&self) -> Vec<String> {
        let r = self
            .http
            .get(self.url("/v2/_catalog?n=1000"))
            .header("Authorization", self.bearer("registry", "catalog", &["*"]))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        let v: Value = r.json().await.unwrap();
        v["repositories"]
            .as_array()
            .map(|a| a.iter().map(|s| s.as_str().unwrap().to_string()).collect())
            .unwrap_or_default()
    }

    /// `(status, body)` of `GET /v2/<path>/tags/list`, with a pull token.
    pub async fn tags(&self, path: &str) -> (u16, Value) {
        let r = self
            .http
            .get(self.url(&format!("/v2/{path}/tags/list")))
            .header("Authorization", self.bearer("repository", path, &["pull"]))
            .send()
            .await
            .unwrap();
        let status = r.status().as_u16();
        (status, r.json().await.unwrap_or(Value::Null))
    }

    /// Whether `HEAD /v2/<path>/manifests/<reference>` finds it (200) or not (404).
    pub async fn manifest_exists(&self, path: &str, reference: &str) -> bool {
        let r = self
            .http
            .head(self.url(&format!("/v2/{path}/manifests/{reference}")))
            .header("Authorization", self.bearer("repository", path, &["pull"]))
            .header("Accept", MANIFEST_ACCEPT)
            .send()
            .await
            .unwrap();
        match r.status().as_u16() {
            200 => true,
            404 => false,
            s => panic!("HEAD manifest {path}@{reference}: {s}"),
        }
    }

    /// Whether the registry still stores blob `digest` for `path` (`HEAD` 200).
    pub async fn blob_exists(&self, path: &str, digest: &str) -> bool {
        let r = self
            .http
            .head(self.url(&format!("/v2/{path}/blobs/{digest}")))
            .header("Authorization", self.bearer("repository", path, &["pull"]))
            .send()
            .await
            .unwrap();
        r.status() == 200
    }

    /// `DELETE /v2/<path>/blobs/<digest>` (the repository's link to a blob); the status.
    pub async fn delete_blob(&self, path: &str, digest: &str) -> u16 {
        let r = self
            .http
            .delete(self.url(&format!("/v2/{path}/blobs/{digest}")))
            .header("Authorization", self.bearer("repository", path, &["*"]))
            .send()
            .await
            .unwrap();
        r.status().as_u16()
    }

    /// Run the registry's garbage collector on its storage as an operator's scheduled
    /// job does (`docker-registry garbage-collect --delete-untagged <config>`); returns
    /// its output. The registry is idle meanwhile (no push runs during it).
    pub fn garbage_collect(&self) -> String {
        let out = Command::new(BINARY)
            .arg("garbage-collect")
            .arg("--delete-untagged")
            .arg(self.dir.join("config.yml"))
            .output()
            .expect("run docker-registry garbage-collect");
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(out.status.success(), "garbage-collect failed:\n{text}");
        text
    }

    /// Whether the registry's storage still holds a blob's data (the garbage
    /// collector removes it; the API only unlinks it from a repository).
    pub fn blob_data_exists(&self, digest: &str) -> bool {
        let hex = digest.trim_start_matches("sha256:");
        self.dir
            .join("data/docker/registry/v2/blobs/sha256")
            .join(&hex[..2])
            .join(hex)
            .join("data")
            .exists()
    }

    /// Whether the repository's `_layers` directory exists in the registry's storage:
    /// the catalogue lists every repository that has one.
    pub fn layers_dir_exists(&self, path: &str) -> bool {
        self.dir
            .join("data/docker/registry/v2/repositories")
            .join(path)
            .join("_layers")
            .is_dir()
    }
}

/// The registry's configuration: filesystem storage, deletes on, token auth.
fn config(dir: &Path, port: u16) -> String {
    format!(
        "version: 0.1
log:
  level: info
  accesslog:
    disabled: true
storage:
  filesystem:
    rootdirectory: {data}
  delete:
    enabled: true
  maintenance:
    uploadpurging:
      enabled: false
http:
  addr: 127.0.0.1:{port}
auth:
  token:
    realm: http://127.0.0.1:{port}/jwt/auth
    service: {SERVICE}
    issuer: {ISSUER}
    rootcertbundle: {root}
",
        data = dir.join("data").display(),
        root = dir.join("root.crt").display(),
    )
}
