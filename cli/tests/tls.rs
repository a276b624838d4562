//! TLS to the database, verified (behaviour §10 `DATABASE_CA_BUNDLE`): a throwaway
//! PostgreSQL (`hk db up`) switched to `ssl=on` with certificates made here by
//! `openssl`, reached through the production configuration path (`Config` in SQS
//! mode, which requires TLS for a non-loopback host, then `Connector`). The right CA
//! bundle connects and the session is encrypted; a wrong bundle, the system roots,
//! a host name the certificate does not name, and a certificate issued for another
//! host name all fail to connect.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use integration_tests::wait;
use shared::config::Config;
use shared::db::Connector;

fn run(cmd: &mut Command) -> String {
    let out = cmd.output().expect("command runs");
    assert!(
        out.status.success(),
        "{cmd:?} failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).to_string()
}

fn openssl(dir: &Path, args: &[&str]) {
    run(Command::new("openssl").args(args).current_dir(dir));
}

/// A CA, a wrong CA, and two server certificates signed by the CA with one key: for
/// `db.test.example` and for `db.other.example`.
fn make_certs(dir: &Path) {
    for (name, cn) in [("ca", "hk-test-ca"), ("wrong-ca", "hk-wrong-ca")] {
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
                &format!("{name}.key"),
                "-out",
                &format!("{name}.crt"),
                "-subj",
                &format!("/CN={cn}"),
                "-addext",
                "basicConstraints=critical,CA:TRUE",
                "-addext",
                "keyUsage=critical,keyCertSign,cRLSign",
            ],
        );
    }
    openssl(dir, &["genrsa", "-out", "server.key", "2048"]);
    for (name, host) in [("server", "db.test.example"), ("other", "db.other.example")] {
        std::fs::write(
            dir.join(format!("{name}.ext")),
            format!(
                "subjectAltName=DNS:{host}\nbasicConstraints=CA:FALSE\n\
                 keyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n"
            ),
        )
        .unwrap();
        openssl(
            dir,
            &[
                "req",
                "-new",
                "-key",
                "server.key",
                "-out",
                &format!("{name}.csr"),
                "-subj",
                &format!("/CN={host}"),
            ],
        );
        openssl(
            dir,
            &[
                "x509",
                "-req",
                "-in",
                &format!("{name}.csr"),
                "-CA",
                "ca.crt",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-days",
                "2",
                "-out",
                &format!("{name}.crt"),
                "-extfile",
                &format!("{name}.ext"),
            ],
        );
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The throwaway cluster; stopped and removed when dropped.
struct Cluster {
    base: PathBuf,
    port: u16,
}

impl Cluster {
    fn hk(&self, action: &str) -> String {
        run(Command::new(env!("CARGO_BIN_EXE_hk"))
            .args(["db", action])
            .env("HK_PG_BASE", &self.base)
            .env("HK_PG_PORT", self.port.to_string()))
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = Command::new(env!("CARGO_BIN_EXE_hk"))
            .args(["db", "down"])
            .env("HK_PG_BASE", &self.base)
            .env("HK_PG_PORT", self.port.to_string())
            .output();
        let _ = std::fs::remove_dir_all(&self.base);
    }
}

fn is_root() -> bool {
    std::fs::metadata("/proc/self")
        .map(|m| std::os::unix::fs::MetadataExt::uid(&m) == 0)
        .unwrap_or(false)
}

/// Connect as a Lambda function would: `Config` (SQS mode) then `Connector`.
async fn connect(conninfo: &str, ca: Option<&Path>) -> Result<tokio_postgres::Client, String> {
    let mut env: HashMap<&str, String> = HashMap::from([
        ("DATABASE_URL", conninfo.to_string()),
        ("SERVICE_NAME", "tls-test".to_string()),
    ]);
    if let Some(ca) = ca {
        env.insert("DATABASE_CA_BUNDLE", ca.display().to_string());
    }
    let config = Config::from_lookup(|k| env.get(k).cloned()).map_err(|e| e.to_string())?;
    assert!(config.database.require_tls);
    let pg = shared::aws::database_config(&config.database.source, None)
        .await
        .map_err(|e| e.to_string())?;
    let connector = Connector::new(pg, &config.database).map_err(|e| e.to_string())?;
    connector
        .connect("tls-test")
        .await
        .map_err(|e| e.to_string())
}

#[tokio::test]
async fn tls_to_the_database_verifies_the_certificate_chain_and_the_host_name() {
    let base = std::env::temp_dir().join(format!("hk-tls-{}", uuid::Uuid::new_v4().simple()));
    let cluster = Cluster {
        base: base.clone(),
        port: free_port(),
    };
    cluster.hk("up");
    let certs = base.join("certs");
    std::fs::create_dir_all(&certs).unwrap();
    make_certs(&certs);
    // The server's files live in its data directory, owned by the server's user.
    let data = base.join("data");
    for f in ["server.crt", "server.key", "other.crt"] {
        std::fs::copy(certs.join(f), data.join(f)).unwrap();
    }
    if is_root() {
        run(Command::new("chown")
            .arg("postgres")
            .args(["server.crt", "server.key", "other.crt"].map(|f| data.join(f))));
    }
    run(Command::new("chmod")
        .arg("600")
        .arg(data.join("server.key")));
    // Switch TLS on (a reload is enough since PostgreSQL 10).
    let plain = format!("postgres://postgres@127.0.0.1:{}/postgres", cluster.port);
    let admin = Connector::from_url(&plain)
        .unwrap()
        .connect("tls-setup")
        .await
        .unwrap();
    // One statement per call: ALTER SYSTEM refuses a multi-statement (implicit
    // transaction) query.
    for stmt in [
        "ALTER SYSTEM SET ssl_cert_file = 'server.crt'",
        "ALTER SYSTEM SET ssl_key_file = 'server.key'",
        "ALTER SYSTEM SET ssl = on",
    ] {
        admin.batch_execute(stmt).await.unwrap();
    }
    admin
        .batch_execute("SELECT pg_reload_conf()")
        .await
        .unwrap();
    // A host name the process cannot resolve, reached at 127.0.0.1 through hostaddr:
    // not loopback by name, so TLS is required and verified against that name.
    let info = |host: &str| {
        format!(
            "host={host} hostaddr=127.0.0.1 port={} user=postgres dbname=postgres",
            cluster.port
        )
    };
    let ca = certs.join("ca.crt");
    // The reload is asynchronous.
    let client = wait::until(
        "the server to accept TLS with the right CA bundle after ssl = on",
        wait::SERVER_RELOAD,
        || async { connect(&info("db.test.example"), Some(&ca)).await.ok() },
    )
    .await;
    let encrypted: bool = client
        .query_one(
            "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert!(encrypted, "the session is encrypted");

    let wrong = connect(&info("db.test.example"), Some(&certs.join("wrong-ca.crt")))
        .await
        .expect_err("a wrong CA bundle must not connect");
    assert!(
        wrong.contains("certificate") || wrong.contains("TLS"),
        "{wrong}"
    );
    let system = connect(&info("db.test.example"), None)
        .await
        .expect_err("the system roots do not trust a private CA");
    assert!(
        system.contains("certificate") || system.contains("TLS"),
        "{system}"
    );
    let other_name = connect(&info("db.wrong.example"), Some(&ca))
        .await
        .expect_err("a certificate that does not name the host must not connect");
    assert!(
        other_name.contains("certificate") || other_name.contains("TLS"),
        "{other_name}"
    );
    // sslmode=disable towards a non-local host is refused before any connection.
    let disabled = connect(
        &format!("{} sslmode=disable", info("db.test.example")),
        Some(&ca),
    )
    .await
    .expect_err("TLS cannot be switched off");
    assert!(disabled.contains("TLS is required"), "{disabled}");

    // The server now presents a certificate issued for another host name.
    admin
        .batch_execute("ALTER SYSTEM SET ssl_cert_file = 'other.crt'")
        .await
        .unwrap();
    admin
        .batch_execute("SELECT pg_reload_conf()")
        .await
        .unwrap();
    wait::until(
        "the server to present the certificate for db.other.example after the reload",
        wait::SERVER_RELOAD,
        || async {
            connect(&info("db.other.example"), Some(&ca))
                .await
                .ok()
                .map(drop)
        },
    )
    .await;
    let err = connect(&info("db.test.example"), Some(&ca))
        .await
        .expect_err("a certificate for another host name must not connect");
    assert!(err.contains("certificate") || err.contains("TLS"), "{err}");
    drop(cluster);
}
