//! `hk` as operators expect a CLI to behave (issue 20): exit codes by error class
//! (and 3 when items failed inside a run that ended, issue 34), `--version` with the commit, function names in `--help`, shell completions, one
//! parsable `--json` object per command, and no progress or colour when the output
//! is not a terminal.

use std::process::{Command, Output};

use integration_tests::aws::moto_endpoint;
use integration_tests::fixtures::{M, U};
use integration_tests::{Fx, TestDb};
use serde_json::Value;

mod common;
use common::text;

fn hk_env<S: AsRef<std::ffi::OsStr> + std::fmt::Debug>(args: &[S], env: &[(&str, &str)]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_hk"));
    c.args(args).env("RUST_LOG", "warn");
    for (k, v) in env {
        c.env(k, v);
    }
    let o = c.output().expect("hk runs");
    eprintln!("hk {args:?} -> {:?}\n{}", o.status.code(), text(&o));
    o
}

fn out(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).to_string()
}

/// The single JSON object a `--json` command prints.
fn json(o: &Output) -> Value {
    assert!(o.status.success(), "{o:?}");
    let text = out(o);
    assert_eq!(text.trim().lines().count(), 1, "one object: {text}");
    serde_json::from_str(text.trim()).unwrap_or_else(|e| panic!("{e}: {text}"))
}

/// A port nothing listens on (bound, then released).
fn closed_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

const FUNCTIONS: [&str; 10] = [
    "remove-expired-members",
    "delete-user",
    "schedule-prune-deletions",
    "prune-deletions",
    "adjourned-group-deletion",
    "group-destroy",
    "placeholder-user-cleanup",
    "delete-placeholder-user",
    "pat-expiring",
    "deliver-notification",
];

#[test]
fn version_help_and_completions_are_discoverable() {
    let o = hk_env(&["--version"], &[]);
    assert!(o.status.success());
    let v = out(&o);
    assert!(v.starts_with("hk 0."), "{v}");
    let commit = v
        .split("(commit ")
        .nth(1)
        .and_then(|s| s.strip_suffix(")\n"))
        .unwrap_or_else(|| panic!("no commit in {v}"));
    assert!(
        commit == "unknown" || commit.chars().all(|c| c.is_ascii_hexdigit()),
        "{v}"
    );
    let help = out(&hk_env(&["run", "--help"], &[]));
    for f in FUNCTIONS {
        assert!(
            help.contains(f),
            "`hk run --help` does not list {f}:\n{help}"
        );
    }
    let o = hk_env(&["completions", "bash"], &[]);
    assert!(o.status.success());
    let script = out(&o);
    assert!(
        script.contains("_hk()") && script.contains("complete -F _hk"),
        "{script}"
    );
    assert!(script.contains("delete-user"), "function names complete");
    let o = hk_env(&["completions", "zsh"], &[]);
    assert!(out(&o).contains("#compdef hk"));
}

#[test]
fn a_usage_error_exits_2() {
    for args in [
        &["run"][..],
        &["run", "no-such-function"],
        &["no-such-command"],
        &["migrate", "--no-such-flag"],
        &["completions", "no-such-shell"],
    ] {
        assert_eq!(hk_env(args, &[]).status.code(), Some(2), "{args:?}");
    }
    // A permanent failure too: an unknown data set.
    let o = hk_env(
        &["seed", "nothing"],
        &[("DATABASE_URL", "postgres://x@127.0.0.1:1/x")],
    );
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("permanent"));
}

#[test]
fn an_unreachable_database_exits_1() {
    let url = format!("postgres://postgres@127.0.0.1:{}/postgres", closed_port());
    for args in [
        &["migrate"][..],
        &[
            "run",
            "remove-expired-members",
            "--now",
            "2026-03-01T00:00:00Z",
        ],
    ] {
        let o = hk_env(args, &[("DATABASE_URL", &url)]);
        assert_eq!(o.status.code(), Some(1), "{args:?} on a closed port");
        assert!(String::from_utf8_lossy(&o.stderr).contains("retryable: exit 1"));
    }
}

#[test]
fn unreachable_aws_exits_1() {
    let endpoint = format!("http://127.0.0.1:{}", closed_port());
    let o = hk_env(
        &[
            "replay",
            "dlq",
            "delete-user",
            "--endpoint",
            &endpoint,
            "--prefix",
            "hk",
        ],
        &[],
    );
    assert_eq!(o.status.code(), Some(1));
}

#[tokio::test]
async fn migrate_seed_and_demo_print_one_json_object_and_succeed() {
    let db = TestDb::new().await;
    let env = [("DATABASE_URL", db.url.as_str())];
    let v = json(&hk_env(&["migrate", "--json"], &env));
    assert_eq!(v, serde_json::json!({"applied": []}), "already migrated");
    db.exec("TRUNCATE users CASCADE").await;
    let v = json(&hk_env(
        &["seed", "demo", "--now", "2026-03-01T00:10:00Z", "--json"],
        &env,
    ));
    assert_eq!(v["set"], "demo");
    assert_eq!(v["relative_to"], "2026-03-01");
    let db = TestDb::new().await;
    let mail = std::env::temp_dir().join(format!("hk-op-mail-{}", db.name));
    let o = hk_env(
        &["demo", "--now", "2026-03-01T00:10:00Z", "--json"],
        &[
            ("DATABASE_URL", db.url.as_str()),
            ("EMAIL_FILE_DIR", mail.to_str().unwrap()),
        ],
    );
    assert_eq!(o.status.code(), Some(0));
    let v = json(&o);
    assert!(v["now"]
        .as_str()
        .unwrap()
        .starts_with("2026-03-01T00:10:00"));
    assert_eq!(v["exit_code"], 0);
    for f in FUNCTIONS {
        assert!(v["functions"][f]["runs"].as_u64().unwrap() > 0, "{f}: {v}");
    }
    let tables = v["tables"].as_array().unwrap();
    let ns = tables.iter().find(|t| t["table"] == "namespaces").unwrap();
    assert!(ns["after"].as_i64() < ns["before"].as_i64(), "{ns}");
    assert!(v["emails"].is_string());
    let _ = std::fs::remove_dir_all(mail);
}

/// `--gitlab` picks the release whose model is built: 18.2 stops after V1, 18.8 applies
/// V2 on top, 18.11 V3, 19.5 (the default) V4; another release is a usage error.
#[tokio::test]
async fn migrate_builds_the_model_of_the_gitlab_release_asked_for() {
    let db = TestDb::empty().await;
    let env = [("DATABASE_URL", db.url.as_str())];
    let v = json(&hk_env(&["migrate", "--gitlab", "18.2", "--json"], &env));
    assert_eq!(v, serde_json::json!({"applied": [1]}));
    let newest: String = db
        .scalar("SELECT max(version) FROM schema_migrations")
        .await;
    assert_eq!(newest, "20250709143510", "18.2's newest marker");
    let v = json(&hk_env(&["migrate", "--gitlab", "18.8", "--json"], &env));
    assert_eq!(v, serde_json::json!({"applied": [2]}));
    let newest: String = db
        .scalar("SELECT max(version) FROM schema_migrations")
        .await;
    assert_eq!(newest, "20251231013427", "18.8's newest marker");
    let v = json(&hk_env(&["migrate", "--gitlab", "18.11", "--json"], &env));
    assert_eq!(v, serde_json::json!({"applied": [3]}));
    assert!(
        db.exists("information_schema.columns WHERE table_name = 'namespace_details' AND column_name = 'deletion_scheduled_at'")
            .await
    );
    let v = json(&hk_env(&["migrate", "--json"], &env));
    assert_eq!(v, serde_json::json!({"applied": [4]}), "the default: 19.5");
    let newest: String = db
        .scalar("SELECT max(version) FROM schema_migrations")
        .await;
    assert_eq!(newest, "20260916223000", "19.5's newest marker");
    assert!(
        db.exists("information_schema.columns WHERE table_name = 'ghost_user_migrations' AND column_name = 'user_type'")
            .await
    );
    let o = hk_env(&["migrate", "--gitlab", "17.11"], &env);
    assert_eq!(o.status.code(), Some(2), "{}", out(&o));
}

#[tokio::test]
async fn tables_and_progress_stay_out_of_piped_output() {
    let db = TestDb::new().await;
    db.exec("TRUNCATE users CASCADE").await;
    let env = [("DATABASE_URL", db.url.as_str())];
    assert!(
        hk_env(&["seed", "demo", "--now", "2026-03-01T00:10:00Z"], &env)
            .status
            .success()
    );
    let o = hk_env(
        &[
            "run",
            "remove-expired-members",
            "--now",
            "2026-03-01T00:10:00Z",
            "--until-idle",
        ],
        &env,
    );
    assert!(o.status.success());
    let text = out(&o);
    let err = String::from_utf8_lossy(&o.stderr);
    // Piped: no spinner (indicatif redraws with \r and cursor moves) and no colour.
    assert!(!err.contains('\r') && !err.contains('\u{1b}'), "{err:?}");
    assert!(!text.contains('\u{1b}'), "{text:?}");
    // The summary table: function first, then runs right-aligned under its header.
    let summary = text
        .split_once("\nSummary\n")
        .unwrap_or_else(|| panic!("no summary:\n{text}"))
        .1;
    let header = summary
        .lines()
        .find(|l| l.starts_with("function"))
        .unwrap_or_else(|| panic!("no summary header:\n{text}"));
    assert_eq!(header, header.trim_end(), "no trailing blanks");
    let row = summary
        .lines()
        .find(|l| l.starts_with("remove-expired-members "))
        .unwrap_or_else(|| panic!("no summary row:\n{text}"));
    let runs_end = header.find("runs").unwrap() + "runs".len();
    assert!(
        row[..runs_end].ends_with(|c: char| c.is_ascii_digit()),
        "runs right-aligned:\n{header}\n{row}"
    );
}

#[test]
fn db_up_prints_json_and_the_cluster_stops() {
    let base = std::env::temp_dir().join(format!("hk-op-pg-{}", std::process::id()));
    let port = closed_port().to_string();
    let env = [
        ("HK_PG_BASE", base.to_str().unwrap()),
        ("HK_PG_PORT", port.as_str()),
    ];
    let v = json(&hk_env(&["db", "up", "--json"], &env));
    let down = hk_env(&["db", "down"], &env);
    let _ = std::fs::remove_dir_all(&base);
    assert!(down.status.success());
    assert_eq!(v["port"].as_u64(), Some(port.parse().unwrap()));
    assert_eq!(v["base"], base.to_str().unwrap());
    assert!(
        v["database_url"]
            .as_str()
            .unwrap()
            .contains(&format!(":{port}/")),
        "{v}"
    );
}

#[test]
fn local_setup_pump_and_replay_print_one_json_object() {
    let endpoint = moto_endpoint();
    let prefix = format!("op{}", std::process::id());
    let dir = std::env::temp_dir().join(format!("hk-op-{prefix}"));
    let env_file = dir.join("lambda.env");
    let aws = ["--endpoint", endpoint.as_str(), "--prefix", prefix.as_str()];
    let with = |head: &[&str]| -> Vec<String> {
        head.iter()
            .chain(aws.iter())
            .map(|s| s.to_string())
            .collect()
    };
    let v = json(&hk_env(
        &with(&[
            "local",
            "setup",
            "--json",
            "--env-file",
            env_file.to_str().unwrap(),
        ]),
        &[],
    ));
    assert_eq!(v["queues"], shared::Function::ALL.len());
    assert_eq!(v["schedule_group"], prefix.as_str());
    assert_eq!(v["env_file"], env_file.to_str().unwrap());
    // Nothing queued: the pump ends at once, having delivered nothing.
    let v = json(&hk_env(
        &with(&[
            "local",
            "pump",
            "--until-idle",
            "--json",
            "--max-seconds",
            "60",
        ]),
        &[],
    ));
    assert_eq!(v["delivered"], serde_json::json!({}));
    assert_eq!(v["failed"], serde_json::json!({}));
    assert_eq!(v["schedules_fired"], 0);
    assert_eq!(v["work_left"], false);
    let lines = dir.join("replay.jsonl");
    let body = r#"{"version":1,"type":"delete-user.run","message_key":"delete-user:20","run_id":"r","hop":0,"issued_at":"2026-03-01T00:00:00Z","payload":{"user_id":20,"initiator_user_id":null,"reason":null}}"#;
    std::fs::write(&lines, format!("{body}\n")).unwrap();
    let v = json(&hk_env(
        &with(&[
            "replay",
            "file",
            lines.to_str().unwrap(),
            "--queue",
            "--to",
            "delete-user",
            "--json",
        ]),
        &[],
    ));
    assert_eq!(v["action"], "sent");
    assert_eq!(v["total"], 1);
    assert_eq!(v["by_type"]["delete-user.run"], 1);
    assert_eq!(v["keys"], serde_json::json!(["delete-user:20"]));
    assert_eq!(v["skipped"], 0);
    let v = json(&hk_env(
        &with(&["replay", "dlq", "delete-user", "--dry-run", "--json"]),
        &[],
    ));
    assert_eq!(v["action"], "would move");
    assert_eq!(v["total"], 0);
    assert_eq!(v["by_type"], serde_json::json!({}));
    let _ = std::fs::remove_dir_all(dir);
}

/// Two expired memberships whose removal a trigger makes fail (`ids`).
async fn failing_members(ids: &str) -> TestDb {
    let db = TestDb::new().await;
    let fx = Fx(&db);
    fx.group(100, "acme", None).await;
    fx.project(200, 100).await;
    fx.users(&[U::human(10), U::human(11), U::human(12)]).await;
    fx.members(&[
        M::gm(1, 100, 11, 50),
        M::pm(20, 200, 10, 30).expires("2026-02-27"),
        M::pm(21, 200, 12, 30).expires("2026-02-27"),
    ])
    .await;
    db.exec(&format!(
        "CREATE FUNCTION boom() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'boom'; END $$;
         CREATE TRIGGER boom BEFORE DELETE ON members FOR EACH ROW WHEN (OLD.id IN ({ids})) EXECUTE FUNCTION boom();"
    ))
    .await;
    db
}

#[tokio::test]
async fn a_run_with_failed_items_exits_3_and_names_them() {
    for (ids, failed) in [("20", 1), ("20, 21", 2)] {
        let db = failing_members(ids).await;
        let env = [("DATABASE_URL", db.url.as_str())];
        for extra in [&[][..], &["--until-idle"], &["--dry-run"], &["--json"]] {
            let mut args = vec![
                "run",
                "remove-expired-members",
                "--now",
                "2026-03-01T00:10:00Z",
            ];
            args.extend_from_slice(extra);
            let o = hk_env(&args, &env);
            assert_eq!(o.status.code(), Some(3), "{ids} {extra:?}");
            let err = String::from_utf8_lossy(&o.stderr);
            assert!(
                err.contains(&format!(
                    "{failed} item(s) failed inside runs that ended (remove-expired-members: {failed})"
                )),
                "{err}"
            );
        }
        // The run itself succeeded, and says so in its report.
        let o = hk_env(
            &[
                "run",
                "remove-expired-members",
                "--now",
                "2026-03-01T00:10:00Z",
                "--json",
            ],
            &env,
        );
        let run: Value = serde_json::from_str(out(&o).trim()).unwrap();
        assert_eq!(run["outcome"], "success");
        assert_eq!(run["report"]["failed_rows"], failed);
    }
    let help = out(&hk_env(&["run", "--help"], &[]));
    assert!(
        help.contains("3 the run ended but items failed inside it"),
        "{help}"
    );
}
