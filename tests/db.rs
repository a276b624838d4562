//! One fresh database per test, cloned from a migrated template database, dropped
//! when the test passes and kept, with its name printed, when it fails.

use engine::local::Runner;
use shared::config::Settings;
use shared::db::Connector;
use tokio_postgres::Client;

use crate::wait::{self, HARNESS_SESSION_TIMEOUT};

/// The GitLab release whose model the tests run on: `HK_TEST_GITLAB` (`18.2`, `18.8`,
/// `18.11` or `19.5`), default the newest.
pub fn gitlab_version() -> engine::migrate::GitlabVersion {
    match std::env::var("HK_TEST_GITLAB") {
        Ok(v) if !v.trim().is_empty() => {
            v.parse().unwrap_or_else(|e| panic!("HK_TEST_GITLAB: {e}"))
        }
        _ => engine::migrate::GitlabVersion::default(),
    }
}

/// The template's name: the selected release and a fingerprint of the embedded
/// migrations up to it, so a template built from another model or release (or by an
/// older harness) is never reused.
fn template_name() -> String {
    let v = gitlab_version();
    format!(
        "hk_template_{}_{}",
        v.as_str().replace('.', "_"),
        engine::migrate::fingerprint(v)
    )
}

/// A connector for the harness's own sessions: administration (create, clone, rename
/// databases; the template locks), template builds, fixtures and assertions. Their
/// lock and statement timeouts are [`HARNESS_SESSION_TIMEOUT`], not the product's,
/// which the handlers under test keep ([`TestDb::connector`]).
fn harness_connector(url: &str) -> Connector {
    let ms = u64::try_from(HARNESS_SESSION_TIMEOUT.as_millis()).expect("fits");
    Connector::from_url(url)
        .expect("a valid database URL")
        .with_lock_timeout_ms(ms)
        .with_statement_timeout_ms(ms)
}

/// A harness session to `url`.
async fn harness_session(url: &str) -> Client {
    harness_connector(url)
        .connect("tests")
        .await
        .unwrap_or_else(|e| panic!("cannot connect to the test cluster: {e}"))
}

/// The maintenance URL from the environment.
pub fn base_url() -> String {
    std::env::var("DATABASE_URL").unwrap_or_else(|_| {
        panic!("DATABASE_URL is not set: run the tests through scripts/test.sh, which starts a throwaway PostgreSQL")
    })
}

fn with_db(url: &str, db: &str) -> String {
    let (head, _) = url
        .rsplit_once('/')
        .expect("DATABASE_URL has a database part");
    format!("{head}/{db}")
}

/// A database of its own for one test. Dropping it drops the database (`t_<uuid>`),
/// unless the thread is panicking: a failed test keeps its database for inspection
/// and prints its name. Without this, every run against a `DATABASE_URL` of one's own
/// (not the throwaway cluster of `scripts/test.sh`) left some 400 databases behind.
pub struct TestDb {
    /// Its URL.
    pub url: String,
    /// Its name.
    pub name: String,
    /// A client for fixtures and assertions.
    pub client: Client,
    /// The maintenance URL a test database is dropped from when this is dropped;
    /// `None` for a template's build database, which is renamed into the template.
    admin_url: Option<String>,
}

impl Drop for TestDb {
    fn drop(&mut self) {
        let Some(admin_url) = self.admin_url.take() else {
            return;
        };
        if std::thread::panicking() {
            eprintln!(
                "test database {} kept for inspection (the test failed): {}",
                self.name, self.url
            );
            return;
        }
        if let Err(e) = drop_database_blocking(&admin_url, &self.name) {
            eprintln!("test database {} not dropped: {e}", self.name);
        }
    }
}

/// `DROP DATABASE IF EXISTS name WITH (FORCE)` through a harness session to
/// `admin_url`, blocking until done, for `Drop` implementations: `Drop` may run inside
/// a test's runtime, which cannot be blocked on, so the statement runs on a thread and
/// runtime of its own. `WITH (FORCE)` ends the sessions a test left open on it.
pub fn drop_database_blocking(admin_url: &str, name: &str) -> Result<(), String> {
    let (admin_url, name) = (admin_url.to_string(), name.to_string());
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| e.to_string())?;
        rt.block_on(async {
            let admin = harness_connector(&admin_url)
                .connect("tests")
                .await
                .map_err(|e| e.to_string())?;
            admin
                .batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
                .await
                .map_err(|e| e.to_string())
        })
    })
    .join()
    .unwrap_or_else(|_| Err("the drop panicked".to_string()))
}

async fn ensure_template(admin: &Client, base: &str) -> String {
    let template = template_name();
    // Serialize template creation across the test processes that nextest runs.
    admin
        .execute("SELECT pg_advisory_lock(4242)", &[])
        .await
        .expect("lock");
    let exists = admin
        .query_opt("SELECT 1 FROM pg_database WHERE datname = $1", &[&template])
        .await
        .expect("query")
        .is_some();
    if !exists {
        admin
            .batch_execute(&format!("DROP DATABASE IF EXISTS {template}_build"))
            .await
            .expect("drop a stale template build");
        admin
            .batch_execute(&format!("CREATE DATABASE {template}_build"))
            .await
            .expect("create template");
        {
            let mut c = harness_session(&with_db(base, &format!("{template}_build"))).await;
            engine::migrate::run_for(&mut c, gitlab_version())
                .await
                .expect("migrate template");
            // Every test database is cloned from here: all of them are throwaway.
            engine::migrate::mark_throwaway(&c, "test harness")
                .await
                .expect("mark template");
        }
        admin
            .batch_execute(&format!(
                "ALTER DATABASE {template}_build RENAME TO {template}"
            ))
            .await
            .expect("rename template");
    }
    admin
        .execute("SELECT pg_advisory_unlock(4242)", &[])
        .await
        .expect("unlock");
    template
}

impl TestDb {
    /// Create `t_<uuid>` from a template database named after `template` that `init`
    /// fills once per cluster (starting from the migrated schema): for data sets that
    /// are slow to build. The name must change whenever what `init` does changes; the
    /// schema template's name is appended, so a change of the model or of
    /// `HK_TEST_GITLAB` builds it anew.
    pub async fn from_template<F, Fut>(template: &str, init: F) -> TestDb
    where
        F: FnOnce(TestDb) -> Fut,
        Fut: std::future::Future<Output = TestDb>,
    {
        let base = base_url();
        let admin = harness_session(&base).await;
        let schema = ensure_template(&admin, &base).await;
        let template = &format!("{template}_{}", schema.trim_start_matches("hk_template_"));
        admin
            .execute("SELECT pg_advisory_lock(4243)", &[])
            .await
            .expect("lock");
        let exists = admin
            .query_opt("SELECT 1 FROM pg_database WHERE datname = $1", &[&template])
            .await
            .expect("query")
            .is_some();
        if !exists {
            let build = format!("{template}_build");
            admin
                .batch_execute(&format!("DROP DATABASE IF EXISTS {build}"))
                .await
                .expect("drop stale build");
            admin
                .batch_execute(&format!("CREATE DATABASE {build} TEMPLATE {schema}"))
                .await
                .expect("create build database");
            let url = with_db(&base, &build);
            let client = harness_session(&url).await;
            let filled = init(TestDb {
                url,
                name: build.clone(),
                client,
                admin_url: None,
            })
            .await;
            drop(filled);
            // Let the build database's sessions end before it is renamed.
            wait::until(
                &format!("the sessions of {build} to end before its rename"),
                wait::SESSION_END,
                || async {
                    let n: i64 = admin
                        .query_one(
                            "SELECT count(*) FROM pg_stat_activity WHERE datname = $1",
                            &[&build],
                        )
                        .await
                        .expect("count sessions")
                        .get(0);
                    (n == 0).then_some(())
                },
            )
            .await;
            admin
                .batch_execute(&format!("ALTER DATABASE {build} RENAME TO {template}"))
                .await
                .expect("rename template");
        }
        admin
            .execute("SELECT pg_advisory_unlock(4243)", &[])
            .await
            .expect("unlock");
        Self::clone_of(&admin, base, template).await
    }

    /// Create `t_<uuid>` from the migrated template and connect to it.
    pub async fn new() -> TestDb {
        let base = base_url();
        let admin = harness_session(&base).await;
        let template = ensure_template(&admin, &base).await;
        Self::clone_of(&admin, base, &template).await
    }

    /// An empty `t_<uuid>` (no schema, no throwaway marker): for tests that build the
    /// model themselves (`engine::migrate::run_for` per GitLab release).
    pub async fn empty() -> TestDb {
        let base = base_url();
        let admin = harness_session(&base).await;
        Self::clone_of(&admin, base, "template0").await
    }

    /// Create `t_<uuid>` from `template` through `admin` (a session to `base`) and
    /// connect to it.
    async fn clone_of(admin: &Client, base: String, template: &str) -> TestDb {
        let name = format!("t_{}", uuid::Uuid::new_v4().simple());
        admin
            .batch_execute(&format!("CREATE DATABASE {name} TEMPLATE {template}"))
            .await
            .expect("create test database");
        let url = with_db(&base, &name);
        let client = harness_session(&url).await;
        TestDb {
            url,
            name,
            client,
            admin_url: Some(base),
        }
    }

    /// A connector to this database.
    pub fn connector(&self) -> Connector {
        Connector::from_url(&self.url).unwrap()
    }

    /// A second session (another actor in the scenario).
    pub async fn session(&self) -> Client {
        self.connector().connect("other-session").await.unwrap()
    }

    /// Wait until a session of `application_name` on this database waits for a lock
    /// (one another session of the test holds), and return its backend pid. Sessions
    /// of other tests' databases, which run in parallel with the same application
    /// names, are not counted.
    pub async fn blocked_on_lock(&self, application_name: &str) -> i32 {
        self.session_waiting(application_name, "Lock").await
    }

    /// Wait until a session of `application_name` on this database waits on an event
    /// of `wait_event_type` (`Lock`; `Timeout` for `pg_sleep` in a fixture's
    /// trigger), and return its backend pid.
    pub async fn session_waiting(&self, application_name: &str, wait_event_type: &str) -> i32 {
        wait::until(
            &format!(
                "a session of {application_name} on {} to wait on a {wait_event_type} event",
                self.name
            ),
            wait::LOCK_WAIT,
            || async {
                self.client
                    .query_opt(
                        "SELECT pid FROM pg_stat_activity
                         WHERE datname = current_database() AND application_name = $1
                           AND wait_event_type = $2
                         LIMIT 1",
                        &[&application_name, &wait_event_type],
                    )
                    .await
                    .expect("read pg_stat_activity")
                    .map(|r| r.get::<_, i32>(0))
            },
        )
        .await
    }

    /// A local runner whose clock starts at `now`.
    pub fn runner(&self, now: chrono::DateTime<chrono::Utc>) -> Runner {
        self.runner_with(now, Settings::default())
    }

    /// A local runner with explicit settings (budgets, margins).
    pub fn runner_with(&self, now: chrono::DateTime<chrono::Utc>, settings: Settings) -> Runner {
        Runner::new(self.connector(), settings, now)
    }

    /// Execute SQL statements (fixtures).
    pub async fn exec(&self, sql: &str) {
        self.client.batch_execute(sql).await.unwrap_or_else(|e| {
            let why = e
                .as_db_error()
                .map_or_else(|| e.to_string(), |d| d.message().to_string());
            panic!("fixture SQL failed: {why}\n{sql}")
        });
    }

    /// One scalar.
    pub async fn scalar<T>(&self, sql: &str) -> T
    where
        T: for<'a> tokio_postgres::types::FromSql<'a>,
    {
        self.client
            .query_one(sql, &[])
            .await
            .unwrap_or_else(|e| panic!("query failed: {e}\n{sql}"))
            .get(0)
    }

    /// `SELECT count(*) FROM <from_where>`.
    pub async fn count(&self, from_where: &str) -> i64 {
        self.scalar(&format!("SELECT count(*) FROM {from_where}"))
            .await
    }

    /// Whether a row matches.
    pub async fn exists(&self, from_where: &str) -> bool {
        self.count(from_where).await > 0
    }

    /// Sorted ids (`SELECT id::bigint FROM <from_where> ORDER BY 1`).
    pub async fn ids(&self, from_where: &str) -> Vec<i64> {
        self.client
            .query(
                &format!("SELECT id::bigint FROM {from_where} ORDER BY 1"),
                &[],
            )
            .await
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect()
    }

    /// Every row of every table in `public`, as canonical JSON text per table: two
    /// snapshots are equal exactly when the data is.
    pub async fn snapshot(&self) -> std::collections::BTreeMap<String, String> {
        let tables: Vec<String> = self
            .client
            .query(
                "SELECT table_name::text FROM information_schema.tables WHERE table_schema = 'public' ORDER BY 1",
                &[],
            )
            .await
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect();
        let mut out = std::collections::BTreeMap::new();
        for t in tables {
            let text: String = self
                .scalar(&format!(
                    "SELECT coalesce(json_agg(x ORDER BY x::text), '[]')::text FROM {t} x"
                ))
                .await;
            out.insert(t, text);
        }
        out
    }

    /// All `(user_id, project_id, access_level)` rows of project_authorizations.
    pub async fn pas(&self) -> Vec<(i64, i64, i32)> {
        self.client
            .query(
                "SELECT user_id::bigint, project_id::bigint, access_level FROM project_authorizations ORDER BY 1, 2, 3",
                &[],
            )
            .await
            .unwrap()
            .iter()
            .map(|r| (r.get(0), r.get(1), r.get(2)))
            .collect()
    }
}
