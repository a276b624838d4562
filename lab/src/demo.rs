//! The demo data set of `hk seed demo` and `hk demo`.
//!
//! Owns: `demo/demo.sql` (fixed ids, dates relative to the run's `today`) and the
//! derived `project_authorizations`, computed with the same `refresh` the batches use
//! so the seed starts consistent. Local databases only.

use chrono::NaiveDate;

use shared::error::{Error, Result};
use shared::gitlab::authz;

/// The demo SQL files, applied in order; each batch adds its own file (fixed id
/// ranges per file, see the file headers). Public so tests can tell when a cached
/// copy of the seeded data is stale.
pub const DEMO_SQL: &[&str] = &[
    include_str!("../demo/demo.sql"),
    include_str!("../demo/b43.sql"),
    include_str!("../demo/b51.sql"),
    include_str!("../demo/b70.sql"),
    include_str!("../demo/b28.sql"),
];

/// The `db_key_base` that encrypted the demo web hooks of `demo/b28.sql`; `hk` uses it
/// when `GITLAB_DB_KEY_BASE` is not set. Demo data only, never a real secret.
pub const DEMO_DB_KEY_BASE: &str = "293f479f10e22dace33abef477105078343622853c3f22fe9a0b3f81bf494521c3042e7172950a3ef946e5dddd856591d6dbdfe71f0cf431f318361d7edffd07";

/// Seed the demo data into an empty, migrated database.
pub async fn seed(client: &mut tokio_postgres::Client, today: NaiveDate) -> Result<()> {
    let users: i64 = client
        .query_one("SELECT count(*) FROM users", &[])
        .await?
        .get(0);
    if users > 0 {
        return Err(Error::Config(
            "the demo data needs an empty database (users is not empty)".into(),
        ));
    }
    let tx = client.transaction().await?;
    for sql in DEMO_SQL {
        tx.batch_execute(&sql.replace(":today", &today.to_string()))
            .await?;
    }
    let projects: Vec<i64> = tx
        .query("SELECT id::bigint FROM projects", &[])
        .await?
        .iter()
        .map(|r| r.get(0))
        .collect();
    let users: Vec<i64> = tx
        .query(
            "SELECT DISTINCT user_id::bigint FROM members WHERE user_id IS NOT NULL",
            &[],
        )
        .await?
        .iter()
        .map(|r| r.get(0))
        .collect();
    for u in users {
        authz::refresh(&tx, u, &projects).await?;
    }
    tx.commit().await?;
    Ok(())
}

/// Row counts of the tables the batches change, in a fixed order (demo summary).
pub async fn table_counts(client: &tokio_postgres::Client) -> Result<Vec<(String, i64)>> {
    const TABLES: [&str; 17] = [
        "users",
        "members",
        "project_authorizations",
        "notification_settings",
        "personal_access_tokens",
        "ghost_user_migrations",
        "members_deletion_schedules",
        "group_deletion_schedules",
        "namespaces",
        "projects",
        "routes",
        "web_hooks",
        "import_placeholder_user_details",
        "import_source_users",
        "issues",
        "merge_requests",
        "notes",
    ];
    let mut out = Vec::new();
    for t in TABLES {
        let n: i64 = client
            .query_one(&format!("SELECT count(*) FROM {t}"), &[])
            .await?
            .get(0);
        out.push((t.to_string(), n));
    }
    Ok(out)
}

/// The embedded defaults of `hk` (local mode) for variables that are not set: the
/// `file` email transport under the system temp directory, a placeholder instance, and
/// the demo `db_key_base` that encrypted the demo hooks. Lambda never uses these.
pub fn hk_default(key: &str) -> Option<String> {
    match key {
        "GITLAB_BASE_URL" => Some("https://gitlab.example.com".into()),
        "EMAIL_TRANSPORT" => Some("file".into()),
        "EMAIL_FILE_DIR" => Some(
            std::env::temp_dir()
                .join("hk-mail")
                .to_string_lossy()
                .into_owned(),
        ),
        "MAIL_FROM" => Some("GitLab <gitlab@gitlab.example.com>".into()),
        "GITLAB_DB_KEY_BASE" => Some(DEMO_DB_KEY_BASE.into()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use shared::notify::crypto::{encrypt_with_iv, KeyRing};

    /// The demo hooks were encrypted with Python's `cryptography` AESGCM (an
    /// independent implementation); this module's decryption must open them, and its
    /// encryption must produce the same stored strings.
    #[test]
    fn the_demo_hook_secrets_decrypt_with_the_demo_key() {
        let ring = KeyRing::from_list(DEMO_DB_KEY_BASE);
        let sql = include_str!("../demo/b28.sql");
        let cases = [
            ("http://127.0.0.1:9/hooks/site", [1u8; 12]),
            ("demo-hook-token", [2; 12]),
            ("http://10.0.0.5/hooks/acme", [3; 12]),
            ("http://127.0.0.1:9/hooks/unsubscribed", [4; 12]),
        ];
        for (plain, iv) in cases {
            let (v, ivb) = encrypt_with_iv(plain, DEMO_DB_KEY_BASE, iv);
            let escaped = |s: &str| s.replace('\n', "\\n");
            assert!(sql.contains(&escaped(&v)), "{plain}: {v:?} not in b28.sql");
            assert!(
                sql.contains(&escaped(&ivb)),
                "{plain}: {ivb:?} not in b28.sql"
            );
            assert_eq!(ring.decrypt(&v, &ivb).unwrap(), plain);
        }
    }

    #[tokio::test]
    async fn hk_defaults_build_a_file_mailer_and_the_demo_keys() {
        let cfg = shared::notify::NotifyConfig::from_lookup(&hk_default).unwrap();
        let n = shared::notify::Notifier::full(&cfg, None).await.unwrap();
        let d = &n.delivery;
        assert!(matches!(d.mailer, shared::notify::mail::Mailer::File(_)));
        assert!(!d.dry_run && n.dry_run().delivery.dry_run);
        let instance = shared::notify::Instance::from_config(&cfg).unwrap();
        assert_eq!(instance, n.instance);
    }
}
