//! Recovery commands against moto queues and schedules named as infra/template.yaml
//! names them (`<stack>-<function>`, `<stack>-<function>-dlq`, schedules in
//! `<stack>-hk`): `hk replay dlq` reaches the messages behind those it leaves in
//! place (`--type`, `--dry-run`), `hk replay file --queue` sends each outbox record
//! to the receiver it names and takes the stack from `--stack`/`HK_STACK`, and
//! `hk status` shows every schedule that targets a function's queue. Needs
//! `MOTO_ENDPOINT`.

use std::process::{Command, Output};

use aws_sdk_scheduler::types::{FlexibleTimeWindow, FlexibleTimeWindowMode, ScheduleState, Target};
use aws_sdk_sqs::types::QueueAttributeName;
use integration_tests::aws::{moto_config, moto_endpoint};
use serde_json::Value;

mod common;
use common::{depth, queue_arn, schedule_group, text};

fn hk(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_hk"));
    c.args(args).env("RUST_LOG", "warn").env_remove("HK_STACK");
    for (k, v) in env {
        c.env(k, v);
    }
    let o = c.output().expect("hk runs");
    eprintln!("hk {args:?} -> {:?}:\n{}", o.status.code(), text(&o));
    o
}

fn json(o: &Output) -> Value {
    assert!(o.status.success(), "{o:?}");
    serde_json::from_str(String::from_utf8_lossy(&o.stdout).trim()).unwrap()
}

/// A stack's queues and DLQs (`hk local setup --prefix <stack>` makes them with the
/// template's names), and an SQS client.
async fn stack() -> (String, aws_sdk_sqs::Client) {
    let stack = format!("rc{}", &uuid::Uuid::new_v4().simple().to_string()[..10]);
    let env_file = std::env::temp_dir().join(format!("{stack}.env"));
    let o = hk(
        &[
            "local",
            "setup",
            "--endpoint",
            &moto_endpoint(),
            "--prefix",
            &stack,
            "--env-file",
            env_file.to_str().unwrap(),
        ],
        &[],
    );
    assert!(o.status.success());
    let _ = std::fs::remove_file(&env_file);
    (stack, aws_sdk_sqs::Client::new(&moto_config().await))
}

async fn url(sqs: &aws_sdk_sqs::Client, name: &str) -> String {
    sqs.get_queue_url()
        .queue_name(name)
        .send()
        .await
        .unwrap()
        .queue_url
        .unwrap()
}

/// The message types on a queue (received, then made visible again).
async fn types_on(sqs: &aws_sdk_sqs::Client, url: &str) -> Vec<String> {
    let msgs = sqs
        .receive_message()
        .queue_url(url)
        .max_number_of_messages(10)
        .visibility_timeout(0)
        .send()
        .await
        .unwrap()
        .messages
        .unwrap_or_default();
    let mut out: Vec<String> = msgs
        .iter()
        .map(|m| {
            let v: Value = serde_json::from_str(m.body().unwrap()).unwrap();
            v["type"].as_str().unwrap().to_string()
        })
        .collect();
    out.sort();
    out
}

fn body(kind: &str, key: &str) -> String {
    format!(
        r#"{{"version":1,"type":"{kind}","message_key":"{key}","run_id":"r","hop":0,"issued_at":"2026-03-01T00:10:00Z","payload":{{}}}}"#
    )
}

#[tokio::test]
async fn replay_dlq_reaches_the_messages_behind_those_it_leaves_in_place() {
    let (stack, sqs) = stack().await;
    let endpoint = moto_endpoint();
    let dlq = url(&sqs, &format!("{stack}-deliver-notification-dlq")).await;
    let queue = url(&sqs, &format!("{stack}-deliver-notification")).await;
    // A short visibility window, so the real replay's "empty for a full window" is quick.
    sqs.set_queue_attributes()
        .queue_url(&dlq)
        .attributes(QueueAttributeName::VisibilityTimeout, "2")
        .send()
        .await
        .unwrap();
    // 25 web hooks first, then the 5 emails the operator wants back.
    for i in 0..25 {
        let b = body("deliver-notification.webhook", &format!("hook:{i}"));
        sqs.send_message()
            .queue_url(&dlq)
            .message_body(b)
            .send()
            .await
            .unwrap();
    }
    for i in 0..5 {
        let b = body("deliver-notification.email", &format!("mail:{i}"));
        sqs.send_message()
            .queue_url(&dlq)
            .message_body(b)
            .send()
            .await
            .unwrap();
    }
    let replay = |extra: &[&str]| {
        let mut args = vec![
            "replay",
            "dlq",
            "deliver-notification",
            "--endpoint",
            &endpoint,
            "--stack",
            &stack,
            "--wait-s",
            "1",
            "--json",
        ];
        args.extend_from_slice(extra);
        json(&hk(&args, &[]))
    };
    // A dry run counts all 30, not the first receive's 10 seen twice.
    let v = replay(&["--dry-run"]);
    assert_eq!(v["total"], 30, "{v}");
    assert_eq!(v["by_type"]["deliver-notification.webhook"], 25, "{v}");
    assert_eq!(v["by_type"]["deliver-notification.email"], 5, "{v}");
    assert_eq!(
        depth(&sqs, &dlq).await,
        (30, 0),
        "a dry run leaves all visible"
    );
    let v = replay(&["--dry-run", "--type", "deliver-notification.email"]);
    assert_eq!(
        (v["total"].as_u64(), v["skipped"].as_u64()),
        (Some(5), Some(25))
    );
    assert_eq!(depth(&sqs, &dlq).await, (30, 0));
    // The real replay moves the 5 emails behind the 25 web hooks.
    let v = replay(&["--type", "deliver-notification.email"]);
    assert_eq!(v["action"], "moved");
    assert_eq!(
        (v["total"].as_u64(), v["skipped"].as_u64()),
        (Some(5), Some(25))
    );
    let mut keys: Vec<String> = v["keys"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k.as_str().unwrap().to_string())
        .collect();
    keys.sort();
    assert_eq!(keys, ["mail:0", "mail:1", "mail:2", "mail:3", "mail:4"]);
    assert_eq!(
        depth(&sqs, &dlq).await,
        (25, 0),
        "the web hooks stay, visible"
    );
    assert_eq!(depth(&sqs, &queue).await, (5, 0));
    assert_eq!(
        types_on(&sqs, &queue).await,
        vec!["deliver-notification.email"; 5]
    );
}

fn outbox_record(receiver: &str, body: &str) -> String {
    format!(r#"{{"receiver":"{receiver}","delay_seconds":0,"body":{body}}}"#)
}

#[tokio::test]
async fn replay_file_sends_an_outbox_record_to_its_receiver_whatever_to_says() {
    let (stack, sqs) = stack().await;
    let endpoint = moto_endpoint();
    // A run's child (an outbox record for delete-user) and a bare cron body.
    let file = std::env::temp_dir().join(format!("{stack}.jsonl"));
    let child = outbox_record("delete-user", &body("delete-user.run", "delete-user:20"));
    let cron = body(
        "remove-expired-members.run",
        "remove-expired-members:cron:2026-03-01T00:10:00Z",
    );
    std::fs::write(&file, format!("{child}\n{cron}\n")).unwrap();
    let v = json(&hk(
        &[
            "replay",
            "file",
            file.to_str().unwrap(),
            "--queue",
            "--to",
            "remove-expired-members",
            "--endpoint",
            &endpoint,
            "--prefix",
            &stack,
            "--json",
        ],
        &[],
    ));
    assert_eq!(v["total"], 2);
    let rem = url(&sqs, &format!("{stack}-remove-expired-members")).await;
    let du = url(&sqs, &format!("{stack}-delete-user")).await;
    assert_eq!(types_on(&sqs, &du).await, vec!["delete-user.run"]);
    assert_eq!(
        types_on(&sqs, &rem).await,
        vec!["remove-expired-members.run"]
    );
    let _ = std::fs::remove_file(file);
}

#[tokio::test]
async fn replay_file_to_the_queues_takes_the_stack_from_the_flag_or_hk_stack() {
    let (stack, sqs) = stack().await;
    let endpoint = moto_endpoint();
    let file = std::env::temp_dir().join(format!("{stack}-tick.jsonl"));
    let tick = body(
        "remove-expired-members.run",
        "remove-expired-members:cron:2026-03-01T00:10:00Z",
    );
    std::fs::write(&file, format!("{tick}\n")).unwrap();
    let args = |extra: &[&'static str]| -> Vec<String> {
        let mut a: Vec<String> = [
            "replay",
            "file",
            file.to_str().unwrap(),
            "--queue",
            "--to",
            "remove-expired-members",
            "--endpoint",
            &endpoint,
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        a.extend(extra.iter().map(|s| s.to_string()));
        a
    };
    let run = |a: Vec<String>, env: &[(&str, &str)]| {
        let a: Vec<&str> = a.iter().map(String::as_str).collect();
        hk(&a, env)
    };
    // No stack: refused, naming how to give one (never a default `hk-<function>`).
    let o = run(args(&[]), &[]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--stack"));
    let mut a = args(&["--stack"]);
    a.push(stack.clone());
    assert!(run(a, &[]).status.success());
    assert!(run(args(&[]), &[("HK_STACK", &stack)]).status.success());
    let rem = url(&sqs, &format!("{stack}-remove-expired-members")).await;
    assert_eq!(
        depth(&sqs, &rem).await,
        (2, 0),
        "both ticks on the stack's queue"
    );
    let _ = std::fs::remove_file(file);
}

#[tokio::test]
async fn status_shows_every_schedule_that_targets_a_functions_queue() {
    let (stack, sqs) = stack().await;
    let endpoint = moto_endpoint();
    let scheduler = aws_sdk_scheduler::Client::new(&moto_config().await);
    let group = schedule_group(&scheduler, &stack).await;
    let q = url(&sqs, &format!("{stack}-remove-expired-members")).await;
    let arn = queue_arn(&sqs, &q).await;
    // The template's cron, enabled, and a paused one made by hand on the same queue
    // (listed after it).
    let cron = format!("{stack}-RemoveExpiredMembersSchedule-1AB2C3D4E5F6");
    let manual = format!("{stack}-remove-expired-members-manual");
    for (name, expr, state) in [
        (&cron, "cron(10 0 * * ? *)", ScheduleState::Enabled),
        (&manual, "rate(1 day)", ScheduleState::Disabled),
    ] {
        scheduler
            .create_schedule()
            .name(name)
            .group_name(&group)
            .schedule_expression(expr)
            .state(state)
            .flexible_time_window(
                FlexibleTimeWindow::builder()
                    .mode(FlexibleTimeWindowMode::Off)
                    .build()
                    .unwrap(),
            )
            .target(
                Target::builder()
                    .arn(&arn)
                    .role_arn("arn:aws:iam::123456789012:role/scheduler")
                    .input("{}")
                    .build()
                    .unwrap(),
            )
            .send()
            .await
            .unwrap();
    }
    let o = hk(
        &[
            "status",
            "--endpoint",
            &endpoint,
            "--stack",
            &stack,
            "--json",
        ],
        &[],
    );
    let lines: Vec<Value> = String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let rem = lines
        .iter()
        .find(|l| l["function"] == "remove-expired-members")
        .unwrap();
    assert_eq!(rem["schedule"], "MIXED", "{rem}");
    assert_eq!(
        rem["schedules"],
        serde_json::json!([
            {"name": cron, "state": "ENABLED", "expression": "cron(10 0 * * ? *)"},
            {"name": manual, "state": "DISABLED", "expression": "rate(1 day)"},
        ])
    );
    let pat = lines
        .iter()
        .find(|l| l["function"] == "pat-expiring")
        .unwrap();
    assert_eq!(pat["schedule"], "missing");
    assert_eq!(pat["schedules"], serde_json::json!([]));
    // The table: the summary with the count, then one line per schedule.
    let o = hk(&["status", "--endpoint", &endpoint, "--stack", &stack], &[]);
    let text = String::from_utf8_lossy(&o.stdout);
    let row = text
        .lines()
        .find(|l| l.starts_with("remove-expired-members "))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(row.contains("MIXED(2)"), "{text}");
    let listed = |name: &str, state: &str| {
        text.lines().any(|l| {
            l.trim_start().starts_with("remove-expired-members")
                && l.contains(state)
                && l.ends_with(name)
        })
    };
    assert!(listed(&cron, "ENABLED"), "{text}");
    assert!(listed(&manual, "DISABLED"), "{text}");
}
