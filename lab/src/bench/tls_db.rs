//! TLS on the footprint bench's own throwaway cluster, for its cold start with the
//! database: a throwaway CA and a server certificate for `127.0.0.1` made by the
//! `openssl` command (as `cli/tests/tls.rs` does), written into the server's data
//! directory through `COPY … TO` (so the files belong to the server's user; the key is
//! then made 0600, as PostgreSQL requires, which needs the data directory on this
//! machine: a cluster `engine::pg` started for this and nothing else), `ssl = on` by
//! `ALTER SYSTEM` and a reload, and everything reset by [`TlsOn::off`].
//!
//! Owns: the certificate files of the client side (a temporary directory holding the
//! CA bundle handed to the functions as `DATABASE_CA_BUNDLE`) and the server settings
//! it changed.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use tokio_postgres::Client;

use shared::error::{Error, Result};

/// The server files, in the data directory.
const CERT_FILE: &str = "hk-bench-server.crt";
const KEY_FILE: &str = "hk-bench-server.key";

/// How long the server may take to apply `ssl = on` after the reload.
const READY_LIMIT: Duration = Duration::from_secs(10);
/// Between two connection attempts while waiting for it.
const READY_POLL: Duration = Duration::from_millis(50);

/// TLS switched on; [`TlsOn::off`] switches it off again.
pub struct TlsOn {
    dir: PathBuf,
}

fn openssl(dir: &Path, args: &[&str]) -> Result<()> {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .map_err(|e| Error::Invariant(format!("footprint: cannot run openssl: {e}")))?;
    if !out.status.success() {
        return Err(Error::Invariant(format!(
            "footprint: openssl {} failed: {}",
            args.first().copied().unwrap_or_default(),
            String::from_utf8_lossy(&out.stderr)
        )));
    }
    Ok(())
}

/// A CA and a server certificate for `IP:127.0.0.1` and `DNS:localhost` in `dir`.
fn make_certs(dir: &Path) -> Result<()> {
    openssl(
        dir,
        &[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "2",
            "-keyout",
            "ca.key",
            "-out",
            "ca.crt",
            "-subj",
            "/CN=hk-bench-ca",
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=critical,keyCertSign,cRLSign",
        ],
    )?;
    openssl(dir, &["genrsa", "-out", "server.key", "2048"])?;
    std::fs::write(
        dir.join("server.ext"),
        "subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\n\
         keyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n",
    )
    .map_err(|e| Error::Invariant(format!("footprint: {e}")))?;
    openssl(
        dir,
        &[
            "req",
            "-new",
            "-key",
            "server.key",
            "-out",
            "server.csr",
            "-subj",
            "/CN=127.0.0.1",
        ],
    )?;
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "2",
            "-out",
            "server.crt",
            "-extfile",
            "server.ext",
        ],
    )
}

/// Write `pem` to `file` in the server's data directory, one line per row (PEM lines
/// hold no character `COPY`'s text format escapes).
async fn copy_to_server(admin: &Client, pem: &str, file: &str) -> Result<()> {
    admin
        .batch_execute(&format!(
            "COPY (SELECT unnest(string_to_array(rtrim('{}', E'\\n'), E'\\n'))) TO '{}'",
            pem.replace('\'', "''"),
            file.replace('\'', "''")
        ))
        .await?;
    Ok(())
}

impl TlsOn {
    /// Switch TLS on (the admin session must be a superuser's on a server the bench
    /// may reconfigure: the throwaway cluster of `hk db up`).
    pub async fn on(admin: &Client) -> Result<TlsOn> {
        let dir = std::env::temp_dir().join(format!("hk-bench-tls-{}", std::process::id()));
        std::fs::create_dir_all(&dir).map_err(|e| Error::Invariant(format!("footprint: {e}")))?;
        let on = TlsOn { dir };
        make_certs(&on.dir)?;
        let read = |f: &str| {
            std::fs::read_to_string(on.dir.join(f))
                .map_err(|e| Error::Invariant(format!("footprint: {f}: {e}")))
        };
        // COPY writes absolute paths only.
        let data: String = admin
            .query_one("SELECT current_setting('data_directory')", &[])
            .await?
            .get(0);
        let (cert, key) = (format!("{data}/{CERT_FILE}"), format!("{data}/{KEY_FILE}"));
        copy_to_server(admin, &read("server.crt")?, &cert).await?;
        copy_to_server(admin, &read("server.key")?, &key).await?;
        // COPY creates files readable by all; PostgreSQL refuses such a key. The
        // throwaway cluster's data directory is on this machine.
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).map_err(
                |e| {
                    Error::Invariant(format!(
                        "footprint: the TLS cold start needs the server's data directory on this \
                     machine (chmod 600 {key}: {e})"
                    ))
                },
            )?;
        }
        // One statement per call: ALTER SYSTEM refuses a transaction block, which a
        // multi-statement simple query is.
        for sql in [
            format!(
                "ALTER SYSTEM SET ssl_cert_file = '{}'",
                cert.replace('\'', "''")
            ),
            format!(
                "ALTER SYSTEM SET ssl_key_file = '{}'",
                key.replace('\'', "''")
            ),
            "ALTER SYSTEM SET ssl = on".to_string(),
            "SELECT pg_reload_conf()".to_string(),
        ] {
            admin.batch_execute(&sql).await?;
        }
        Ok(on)
    }

    /// The CA bundle that verifies the server (`DATABASE_CA_BUNDLE`).
    pub fn ca_bundle(&self) -> PathBuf {
        self.dir.join("ca.crt")
    }

    /// Wait until the reloaded server accepts a verified TLS session on `url` (the
    /// reload is asynchronous), at most [`READY_LIMIT`].
    pub async fn wait_ready(&self, url: &str) -> Result<()> {
        let pg: tokio_postgres::Config = url
            .parse()
            .map_err(|e| Error::Config(format!("invalid bench URL: {e}")))?;
        let pem = std::fs::read(self.ca_bundle())
            .map_err(|e| Error::Invariant(format!("footprint: CA bundle: {e}")))?;
        let tls = shared::db::tls_connector(Some(&pem))?;
        let until = Instant::now() + READY_LIMIT;
        loop {
            match pg.connect(tls.clone()).await {
                Ok((client, conn)) => {
                    let task = tokio::spawn(conn);
                    let ssl: bool = client
                        .query_one(
                            "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
                            &[],
                        )
                        .await?
                        .get(0);
                    drop(client);
                    let _ = task.await;
                    return if ssl {
                        Ok(())
                    } else {
                        Err(Error::Invariant(
                            "footprint: the session is not encrypted".into(),
                        ))
                    };
                }
                Err(e) if Instant::now() >= until => {
                    return Err(Error::Invariant(format!(
                        "footprint: PostgreSQL did not accept TLS within {READY_LIMIT:?} \
                         (ssl = on by ALTER SYSTEM and a reload): {e}"
                    )))
                }
                Err(_) => tokio::time::sleep(READY_POLL).await,
            }
        }
    }

    /// Reset the server's TLS settings and remove the client-side files.
    pub async fn off(self, admin: &Client) -> Result<()> {
        let _ = std::fs::remove_dir_all(&self.dir);
        for sql in [
            "ALTER SYSTEM RESET ssl",
            "ALTER SYSTEM RESET ssl_cert_file",
            "ALTER SYSTEM RESET ssl_key_file",
            "SELECT pg_reload_conf()",
        ] {
            admin.batch_execute(sql).await?;
        }
        Ok(())
    }
}
