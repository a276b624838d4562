//! `hk status` and `hk replay dlq` against moto queues and schedules named as
//! infra/template.yaml names them: `<stack>-<function>`, `<stack>-<function>-dlq`,
//! and cron schedules with CloudFormation-generated names in the group
//! `<stack>-hk`, and the queues' CloudWatch metric `ApproximateAgeOfOldestMessage`.
//! Needs `MOTO_ENDPOINT`.

use std::process::{Command, Output};

use aws_sdk_cloudwatch::primitives::DateTime;
use aws_sdk_cloudwatch::types::{Dimension, MetricDatum};
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
    eprintln!("hk {args:?}:\n{}", text(&o));
    o
}

fn body(i: u32) -> String {
    format!(
        r#"{{"version":1,"type":"remove-expired-members.run","message_key":"remove-expired-members:cron:{i}","run_id":"r{i}","hop":0,"issued_at":"2026-03-01T00:10:00Z","payload":{{}}}}"#
    )
}

#[tokio::test]
async fn status_and_replay_use_the_stack_names_of_the_template() {
    let endpoint = moto_endpoint();
    let stack = format!("st{}", &uuid::Uuid::new_v4().simple().to_string()[..10]);
    let cfg = moto_config().await;
    let sqs = aws_sdk_sqs::Client::new(&cfg);
    let scheduler = aws_sdk_scheduler::Client::new(&cfg);
    let cloudwatch = aws_sdk_cloudwatch::Client::new(&cfg);
    // The queues and DLQs (the same `<name>-<function>[-dlq]` shape as the template).
    let env_file = std::env::temp_dir().join(format!("{stack}.env"));
    let o = hk(
        &[
            "local",
            "setup",
            "--endpoint",
            &endpoint,
            "--prefix",
            &stack,
            "--env-file",
            env_file.to_str().unwrap(),
        ],
        &[],
    );
    assert!(o.status.success());
    let _ = std::fs::remove_file(&env_file);
    let url = |n: String| {
        let sqs = sqs.clone();
        async move {
            sqs.get_queue_url()
                .queue_name(n)
                .send()
                .await
                .unwrap()
                .queue_url
                .unwrap()
        }
    };
    let queue = url(format!("{stack}-remove-expired-members")).await;
    let dlq = url(format!("{stack}-remove-expired-members-dlq")).await;
    // A short visibility window, so replay's "empty for a full window" is quick.
    sqs.set_queue_attributes()
        .queue_url(&dlq)
        .attributes(QueueAttributeName::VisibilityTimeout, "2")
        .send()
        .await
        .unwrap();
    // The stack's schedule group and two cron schedules as CloudFormation names them.
    let group = schedule_group(&scheduler, &stack).await;
    for (logical, f, state) in [
        (
            "RemoveExpiredMembersSchedule",
            "remove-expired-members",
            ScheduleState::Disabled,
        ),
        (
            "PatExpiringSchedule",
            "pat-expiring",
            ScheduleState::Enabled,
        ),
    ] {
        let q = url(format!("{stack}-{f}")).await;
        let arn = queue_arn(&sqs, &q).await;
        scheduler
            .create_schedule()
            .name(format!("{stack}-{logical}-1AB2C3D4E5F6"))
            .group_name(&group)
            .schedule_expression("cron(10 0 * * ? *)")
            .state(state)
            .flexible_time_window(
                FlexibleTimeWindow::builder()
                    .mode(FlexibleTimeWindowMode::Off)
                    .build()
                    .unwrap(),
            )
            .target(
                Target::builder()
                    .arn(arn)
                    .role_arn("arn:aws:iam::123456789012:role/scheduler")
                    .input("{}")
                    .build()
                    .unwrap(),
            )
            .send()
            .await
            .unwrap();
    }
    for i in 0..3 {
        sqs.send_message()
            .queue_url(&dlq)
            .message_body(body(i))
            .send()
            .await
            .unwrap();
    }
    sqs.send_message()
        .queue_url(&queue)
        .message_body(body(9))
        .send()
        .await
        .unwrap();

    // SQS's age metric for one queue, a minute ago (inside hk status's 5-minute window);
    // every other queue has no datapoint.
    cloudwatch
        .put_metric_data()
        .namespace("AWS/SQS")
        .metric_data(
            MetricDatum::builder()
                .metric_name("ApproximateAgeOfOldestMessage")
                .dimensions(
                    Dimension::builder()
                        .name("QueueName")
                        .value(format!("{stack}-remove-expired-members"))
                        .build(),
                )
                .timestamp(DateTime::from(
                    std::time::SystemTime::now() - std::time::Duration::from_secs(60),
                ))
                .value(420.0)
                .build(),
        )
        .send()
        .await
        .expect("moto accepts a datapoint in the AWS/SQS namespace");

    // No stack: refused, naming how to give one.
    let o = hk(&["status", "--endpoint", &endpoint], &[]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--stack"));

    // Status, the stack from HK_STACK.
    let o = hk(
        &["status", "--endpoint", &endpoint, "--json"],
        &[("HK_STACK", &stack)],
    );
    // Three cron functions have no schedule in this stack: reported, exit 1.
    assert_eq!(o.status.code(), Some(1));
    let lines: Vec<Value> = String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let of = |f: &str| lines.iter().find(|l| l["function"] == f).unwrap().clone();
    let rem = of("remove-expired-members");
    assert_eq!(rem["queue"]["visible"], 1);
    assert_eq!(rem["dlq"]["visible"], 3);
    assert_eq!(rem["schedule"], "DISABLED");
    assert_eq!(rem["queue"]["oldest_age_s"], 420);
    // No datapoint: null, not 0 (the DLQ of the same function, and another queue).
    assert_eq!(rem["dlq"]["oldest_age_s"], Value::Null);
    assert_eq!(of("pat-expiring")["queue"]["oldest_age_s"], Value::Null);
    assert!(rem["queue"].get("oldest_age_error").is_none(), "{rem}");
    assert_eq!(of("pat-expiring")["schedule"], "ENABLED");
    assert_eq!(of("schedule-prune-deletions")["schedule"], "missing");
    assert_eq!(of("delete-user")["schedule"], Value::Null);
    assert_eq!(of("delete-user")["dlq"]["visible"], 0);
    let o = hk(&["status", "--endpoint", &endpoint, "--stack", &stack], &[]);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("DISABLED") && text.contains("ApproximateAgeOfOldestMessage"));
    let row = |f: &str| -> Vec<String> {
        text.lines()
            .find(|l| l.split_whitespace().next() == Some(f))
            .unwrap_or_else(|| panic!("no row for {f}: {text}"))
            .split_whitespace()
            .map(String::from)
            .collect()
    };
    // function queue in_flight delayed age_s dlq dlq_age_s schedule one-time
    assert_eq!(row("remove-expired-members")[4], "420", "{text}");
    assert_eq!(row("remove-expired-members")[6], "-", "{text}");
    assert_eq!(row("pat-expiring")[4], "-", "{text}");

    // Replay: everything moves, the keys are printed, the DLQ is empty.
    let o = hk(
        &[
            "replay",
            "dlq",
            "remove-expired-members",
            "--endpoint",
            &endpoint,
            "--stack",
            &stack,
            "--wait-s",
            "1",
        ],
        &[],
    );
    assert!(o.status.success());
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("moved 3 message(s)"), "{text}");
    for i in 0..3 {
        assert!(
            text.contains(&format!("key remove-expired-members:cron:{i}")),
            "{text}"
        );
    }
    assert_eq!(depth(&sqs, &dlq).await, (0, 0));
    assert_eq!(depth(&sqs, &queue).await, (4, 0));
}
