//! A local run never drops what it sends (behaviour §11, issue 34): without
//! `--until-idle` every function's children are delivered and its own continuation
//! is handed on; an SMTP outage heals within the run (real back-off) or ends in a
//! dead-letter file with keys and reasons that `hk replay file` delivers; a wrong
//! `GITLAB_DB_KEY_BASE` does the same to web hooks; an interrupted run writes what it
//! had not delivered. The SMTP server is the project's aiosmtpd sink.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use integration_tests::sinks::certs::TestCa;
use integration_tests::sinks::http::HttpReceiver;
use integration_tests::sinks::smtp::{SinkTls, SmtpSink};
use integration_tests::state::{canonical, demo_without_ghost, first_difference, Baseline};
use integration_tests::{t, TestDb};
use serde_json::Value;
use shared::notify::Instance;

mod common;
use common::text;

const NOW: &str = "2026-03-01T00:10:00Z";

/// Each cron function and the child function it sends work to.
const BATCHES: [(&str, &str); 5] = [
    ("remove-expired-members", "delete-user"),
    ("schedule-prune-deletions", "prune-deletions"),
    ("adjourned-group-deletion", "group-destroy"),
    ("placeholder-user-cleanup", "delete-placeholder-user"),
    ("pat-expiring", "deliver-notification"),
];

/// A fresh directory under the system temp dir.
fn temp(what: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("hk-{what}-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// `hk` against `db`, its hand-on directory under `state`, its mail files in `mail`.
fn hk_cmd(db: &TestDb, state: &Path, args: &[&str], env: &[(&str, &str)]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_hk"));
    c.args(args)
        .env("DATABASE_URL", &db.url)
        .env("RUST_LOG", "warn")
        .env("HK_STATE_DIR", state)
        .env("EMAIL_FILE_DIR", state.join("mail"));
    for (k, v) in env {
        c.env(k, v);
    }
    c
}

fn hk(db: &TestDb, state: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    let o = hk_cmd(db, state, args, env).output().expect("hk runs");
    eprintln!("hk {args:?} -> {:?}\n{}", o.status.code(), text(&o));
    o
}

/// The JSON objects of a `--json` run, one a line.
fn objects(o: &Output) -> Vec<Value> {
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

/// The `{"handed_on": …}` object of a `--json` run.
fn handed_on(objects: &[Value]) -> Option<&Value> {
    objects.iter().find_map(|o| o.get("handed_on"))
}

/// The keys of the messages of `type` the runs sent.
fn sent_keys(objects: &[Value], kind: &str) -> Vec<String> {
    objects
        .iter()
        .filter_map(|o| o["sent"].as_array())
        .flatten()
        .filter(|s| s["body"]["type"] == kind)
        .map(|s| s["body"]["message_key"].as_str().unwrap().to_string())
        .collect()
}

/// The `message_key` of every line of a hand-on file.
fn file_keys(path: &str) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["message_key"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect()
}

/// A port nothing listens on (bound, then released).
fn closed_port() -> u16 {
    engine::pg::free_port().unwrap()
}

/// What `hk` needs to send mail to the sink on `port` (STARTTLS, the test CA).
fn smtp_env(port: &str, bundle: &str) -> Vec<(&'static str, String)> {
    vec![
        ("EMAIL_TRANSPORT", "smtp".into()),
        ("SMTP_HOST", "127.0.0.1".into()),
        ("SMTP_PORT", port.into()),
        ("SMTP_TLS", "starttls".into()),
        ("SMTP_CA_BUNDLE", bundle.into()),
    ]
}

fn pairs<'a>(v: &'a [(&'static str, String)]) -> Vec<(&'static str, &'a str)> {
    v.iter().map(|(k, v)| (*k, v.as_str())).collect()
}

/// The `Message-ID` of the notice with `key` (the demo instance).
fn message_id(key: &str) -> String {
    let instance = Instance::new("https://gitlab.example.com", None, "18.0.0").unwrap();
    format!("<{}>", shared::notify::mail::message_id(key, &instance))
}

/// Claimed tokens: any notification timestamp set.
async fn claimed(db: &TestDb) -> i64 {
    db.count(
        "personal_access_tokens WHERE seven_days_notification_sent_at IS NOT NULL \
         OR thirty_days_notification_sent_at IS NOT NULL OR sixty_days_notification_sent_at IS NOT NULL",
    )
    .await
}

#[tokio::test]
async fn a_run_without_until_idle_delivers_every_functions_children() {
    // Two copies of the demo data: one run with --until-idle, one without; after
    // each batch (and the replay of what the single run handed on) they must agree.
    let single = demo_without_ghost(t(NOW)).await;
    let idle = demo_without_ghost(t(NOW)).await;
    let base = Baseline::capture(&single).await;
    let (s_state, i_state) = (temp("state"), temp("state"));
    for (f, child) in BATCHES {
        let o = hk(
            &idle,
            &i_state,
            &["run", f, "--now", NOW, "--until-idle"],
            &[],
        );
        assert!(o.status.success(), "{f} --until-idle");
        let o = hk(&single, &s_state, &["run", f, "--now", NOW, "--json"], &[]);
        assert!(o.status.success(), "{f}");
        let objs = objects(&o);
        assert_eq!(objs[0]["function"], f);
        let children: Vec<&Value> = objs.iter().filter(|r| r["function"] == child).collect();
        assert!(!children.is_empty(), "{f}: no {child} run");
        assert!(
            children.iter().all(|r| r["outcome"] == "success"),
            "{f}: a {child} run failed"
        );
        // Only the function's own continuation is left, written where it says.
        if let Some(h) = handed_on(&objs) {
            assert_eq!(h["dead_letters"]["messages"], serde_json::json!([]));
            let undelivered = h["undelivered"]["messages"].as_array().unwrap();
            assert!(undelivered.iter().all(|m| m["receiver"] == f), "{h}");
            let file = h["undelivered"]["file"].as_str().unwrap();
            let keys: Vec<&str> = undelivered
                .iter()
                .map(|m| m["message_key"].as_str().unwrap())
                .collect();
            assert_eq!(file_keys(file), keys);
            let o = hk(
                &single,
                &s_state,
                &["replay", "file", file, "--now", NOW, "--until-idle"],
                &[],
            );
            assert!(o.status.success(), "{f}: replay of {file}");
        }
        let (a, b) = (
            canonical(&idle, &base).await,
            canonical(&single, &base).await,
        );
        if let Some(d) = first_difference(&a, &b) {
            panic!("after {f}: {d}");
        }
    }
    // What the operator saw lost: the bot, the final placeholder attempt, the notices.
    assert!(
        !single.exists("users WHERE id = 10").await,
        "B38's bot deleted"
    );
    assert!(
        !single.exists("users WHERE id = 5003").await,
        "B70's final attempt ran"
    );
    let mails = |d: &Path| {
        std::fs::read_dir(d.join("mail"))
            .map(|r| r.count())
            .unwrap_or(0)
    };
    assert!(mails(&s_state) > 0);
    assert_eq!(mails(&s_state), mails(&i_state));
    for d in [s_state, i_state] {
        std::fs::remove_dir_all(d).unwrap();
    }
}

/// Read `hk`'s stderr until `n` `record failed` lines of `error_class` at receive
/// `receive` have appeared; the receive count and (real) time of every such line of
/// `error_class` read.
fn until_failures(
    stderr: &mut impl BufRead,
    error_class: &str,
    receive: u64,
    n: usize,
) -> Vec<(u64, chrono::DateTime<chrono::Utc>)> {
    let (mut line, mut seen) = (String::new(), Vec::new());
    while seen.iter().filter(|(r, _)| *r == receive).count() < n {
        line.clear();
        assert!(
            stderr.read_line(&mut line).unwrap() > 0,
            "hk ended before {n} deliveries failed at receive {receive}"
        );
        if let Ok(v) = serde_json::from_str::<Value>(&line) {
            if v["message"] == "record failed" && v["error_class"] == error_class {
                let at = v["timestamp"].as_str().unwrap().parse().unwrap();
                seen.push((v["receive_count"].as_u64().unwrap(), at));
            }
        }
    }
    seen
}

#[tokio::test]
async fn a_short_smtp_outage_heals_within_the_run() {
    let db = demo_without_ghost(t(NOW)).await;
    let state = temp("state");
    // The emails the run will send, as a dry run shows them.
    let dry = hk(
        &db,
        &state,
        &["run", "pat-expiring", "--now", NOW, "--dry-run", "--json"],
        &[],
    );
    let emails = sent_keys(&objects(&dry), "deliver-notification.email").len();
    assert!(emails >= 5);
    let port = closed_port();
    let mut sink = SmtpSink::closed_on(SinkTls::StartTls, port);
    let bundle = TestCa::get().write_bundle().to_string_lossy().into_owned();
    let env = smtp_env(&port.to_string(), &bundle);
    let mut child = hk_cmd(
        &db,
        &state,
        &[
            "run",
            "pat-expiring",
            "--now",
            NOW,
            "--until-idle",
            "--json",
        ],
        &pairs(&env),
    )
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    // The outage outlasts four receives of every email (1 + 2 + 4 s of real time)
    // and ends while hk waits 8 s before their fifth and last.
    let failed = until_failures(&mut stderr, "smtp", 4, emails);
    std::thread::spawn(move || stderr.lines().for_each(drop));
    sink.open().await;
    // Retried in real time, not virtual: at least 1 + 2 + 4 s from the first
    // receive's failure to the fourth's.
    let first = |n: u64| {
        failed
            .iter()
            .filter(|(r, _)| *r == n)
            .map(|(_, t)| *t)
            .min()
            .unwrap()
    };
    let waited = first(4) - first(1);
    assert!(
        waited >= chrono::Duration::seconds(7),
        "retried after {waited}"
    );
    let o = child.wait_with_output().unwrap();
    let objs = objects(&o);
    assert_eq!(o.status.code(), Some(0), "{objs:?}");
    assert!(
        handed_on(&objs).is_none(),
        "nothing dead-lettered: {objs:?}"
    );
    let keys = sent_keys(&objs, "deliver-notification.email");
    assert!(keys.len() >= 5, "{keys:?}");
    let got: Vec<String> = sink
        .received()
        .iter()
        .filter_map(|m| m.header("Message-ID"))
        .collect();
    for k in &keys {
        assert!(got.contains(&message_id(k)), "{k} not delivered: {got:?}");
    }
    std::fs::remove_dir_all(state).unwrap();
}

#[tokio::test]
async fn a_long_smtp_outage_is_dead_lettered_to_a_file_and_replayed_once_it_ends() {
    let db = demo_without_ghost(t(NOW)).await;
    let state = temp("state");
    let port = closed_port();
    let bundle = TestCa::get().write_bundle().to_string_lossy().into_owned();
    let mut env = smtp_env(&port.to_string(), &bundle);
    env.push(("HK_RETRY_FIRST_MS", "10".into()));
    let o = hk(
        &db,
        &state,
        &[
            "run",
            "pat-expiring",
            "--now",
            NOW,
            "--until-idle",
            "--json",
        ],
        &pairs(&env),
    );
    assert_eq!(o.status.code(), Some(1), "a retryable failure is left");
    let objs = objects(&o);
    let keys = sent_keys(&objs, "deliver-notification.email");
    let h = handed_on(&objs).expect("the dead letters are reported");
    let dead = h["dead_letters"]["messages"].as_array().unwrap();
    let dead_keys: Vec<&str> = dead
        .iter()
        .map(|d| d["message_key"].as_str().unwrap())
        .collect();
    assert_eq!(
        dead_keys,
        keys.iter().map(String::as_str).collect::<Vec<_>>()
    );
    assert!(
        dead.iter()
            .all(|d| d["error_class"] == "smtp" && d["receives"] == 5),
        "{h}"
    );
    assert!(
        dead.iter()
            .all(|d| !d["reason"].as_str().unwrap().is_empty()),
        "{h}"
    );
    let file = h["dead_letters"]["file"].as_str().unwrap().to_string();
    assert_eq!(file_keys(&file), keys);
    let before = claimed(&db).await;
    assert!(
        before > 0,
        "the tokens stay claimed, their notices in the file"
    );
    // The human form names the file, the keys and the reason.
    let o = hk(
        &db,
        &state,
        &["replay", "file", &file, "--now", NOW, "--until-idle"],
        &pairs(&env),
    );
    assert_eq!(o.status.code(), Some(1), "still down: dead-lettered again");
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("dead letters: ") && out.contains(&keys[0]),
        "{out}"
    );
    assert!(
        out.contains("reason=SMTP") && out.contains("hk replay file"),
        "{out}"
    );
    // The server is back: the file delivers every notice, under its key.
    let sink = SmtpSink::start_on(SinkTls::StartTls, port).await;
    let o = hk(
        &db,
        &state,
        &["replay", "file", &file, "--now", NOW, "--until-idle"],
        &pairs(&env),
    );
    assert!(o.status.success());
    let got: Vec<String> = sink
        .received()
        .iter()
        .filter_map(|m| m.header("Message-ID"))
        .collect();
    assert_eq!(got.len(), keys.len(), "{got:?}");
    for k in &keys {
        assert!(got.contains(&message_id(k)), "{k} not delivered: {got:?}");
    }
    assert_eq!(claimed(&db).await, before);
    std::fs::remove_dir_all(state).unwrap();
}

// Multi-threaded: the receiver answers on the runtime while `hk` runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_key_base_dead_letters_web_hooks_and_the_right_one_delivers_them() {
    let db = demo_without_ghost(t(NOW)).await;
    let receiver = HttpReceiver::start().await;
    for id in [6001i64, 6002, 6003] {
        let url = receiver.url(&format!("/hooks/{id}"));
        let (v, iv) = shared::notify::crypto::encrypt_with_iv(
            &url,
            lab::demo::DEMO_DB_KEY_BASE,
            [id as u8; 12],
        );
        db.client
            .execute(
                "UPDATE web_hooks SET encrypted_url = $1, encrypted_url_iv = $2 WHERE id = $3",
                &[&v, &iv, &id],
            )
            .await
            .unwrap();
    }
    // The receiver is on 127.0.0.1: GitLab's own setting lets hooks reach it.
    integration_tests::Fx(&db).local_web_hooks(true).await;
    let state = temp("state");
    let wrong = [
        ("GITLAB_DB_KEY_BASE", "0f".repeat(64)),
        ("HK_RETRY_FIRST_MS", "10".to_string()),
    ];
    let o = hk(
        &db,
        &state,
        &[
            "run",
            "pat-expiring",
            "--now",
            NOW,
            "--until-idle",
            "--json",
        ],
        &pairs(&wrong),
    );
    assert_eq!(o.status.code(), Some(1));
    let objs = objects(&o);
    let keys = sent_keys(&objs, "deliver-notification.webhook");
    assert!(!keys.is_empty());
    let h = handed_on(&objs).expect("dead letters");
    let dead = h["dead_letters"]["messages"].as_array().unwrap();
    assert_eq!(dead.len(), keys.len(), "{h}");
    assert!(dead.iter().all(|d| d["error_class"] == "decrypt"), "{h}");
    assert!(receiver.requests().is_empty());
    let file = h["dead_letters"]["file"].as_str().unwrap();
    assert_eq!(file_keys(file), keys);
    // The right key (the demo's) delivers them, with their keys.
    let o = hk(
        &db,
        &state,
        &["replay", "file", file, "--now", NOW, "--until-idle"],
        &[],
    );
    assert!(o.status.success());
    let got: Vec<String> = receiver
        .requests()
        .iter()
        .filter_map(|r| r.header("idempotency-key").map(str::to_string))
        .collect();
    assert_eq!(got, keys);
    std::fs::remove_dir_all(state).unwrap();
}

#[tokio::test]
async fn an_interrupted_run_writes_what_it_had_not_delivered() {
    let db = demo_without_ghost(t(NOW)).await;
    let state = temp("state");
    let dry = hk(
        &db,
        &state,
        &["run", "pat-expiring", "--now", NOW, "--dry-run", "--json"],
        &[],
    );
    let emails = sent_keys(&objects(&dry), "deliver-notification.email").len();
    let port = closed_port();
    let mut sink = SmtpSink::closed_on(SinkTls::StartTls, port);
    let bundle = TestCa::get().write_bundle().to_string_lossy().into_owned();
    let mut env = smtp_env(&port.to_string(), &bundle);
    // Long enough that the run is still waiting to retry when it is interrupted.
    env.push(("HK_RETRY_FIRST_MS", "60000".into()));
    let mut child = hk_cmd(
        &db,
        &state,
        &[
            "run",
            "pat-expiring",
            "--now",
            NOW,
            "--until-idle",
            "--json",
        ],
        &pairs(&env),
    )
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    // Every email failed once: hk now waits 60 s before the first one's second receive.
    until_failures(&mut stderr, "smtp", 1, emails);
    std::thread::spawn(move || stderr.lines().for_each(drop));
    let kill = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    let o = child.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(1), "interrupted: run it again later");
    let objs = objects(&o);
    let keys = sent_keys(&objs, "deliver-notification.email");
    let h = handed_on(&objs).expect("what was left is reported");
    let file = h["undelivered"]["file"].as_str().unwrap().to_string();
    let left = file_keys(&file);
    assert_eq!(keys.len(), emails);
    for k in &keys {
        assert!(
            left.contains(k),
            "{k} was neither delivered nor written: {left:?}"
        );
    }
    sink.open().await;
    let o = hk(
        &db,
        &state,
        &["replay", "file", &file, "--now", NOW, "--until-idle"],
        &pairs(&env),
    );
    assert!(o.status.success());
    let got: Vec<String> = sink
        .received()
        .iter()
        .filter_map(|m| m.header("Message-ID"))
        .collect();
    for k in &keys {
        assert!(got.contains(&message_id(k)), "{k} not delivered: {got:?}");
    }
    std::fs::remove_dir_all(state).unwrap();
}

#[tokio::test]
async fn a_run_that_could_not_hand_on_its_messages_claims_nothing() {
    let db = demo_without_ghost(t(NOW)).await;
    let dir = temp("state");
    let not_a_dir = dir.join("file");
    std::fs::write(&not_a_dir, b"").unwrap();
    let o = hk(&db, &not_a_dir, &["run", "pat-expiring", "--now", NOW], &[]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("HK_STATE_DIR"));
    assert_eq!(claimed(&db).await, 0, "nothing was claimed");
    std::fs::remove_dir_all(dir).unwrap();
}
