//! `hk tick` against moto: the cron message of a stack's schedule (its target input as
//! infra/template.yaml writes it) sent to the function's queue as Scheduler sends it,
//! and `--region`/`--profile` reaching the SDK (moto keeps each region's queues apart).
//! Needs `MOTO_ENDPOINT`.

use std::path::PathBuf;
use std::process::{Command, Output};

use aws_config::{BehaviorVersion, Region};
use aws_sdk_scheduler::types::{FlexibleTimeWindow, FlexibleTimeWindowMode, ScheduleState, Target};
use integration_tests::aws::moto_endpoint;
use serde_json::Value;
use shared::messages::Envelope;
use shared::Function;

mod common;
use common::{queue_arn, schedule_group, text};

/// `hk` with the test's AWS environment only: no inherited credentials, profile or
/// region.
fn hk(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_hk"));
    c.args(args)
        .env("RUST_LOG", "warn")
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .env_remove("HK_STACK");
    for k in [
        "AWS_PROFILE",
        "AWS_REGION",
        "AWS_DEFAULT_REGION",
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "AWS_CONFIG_FILE",
        "AWS_SHARED_CREDENTIALS_FILE",
    ] {
        c.env_remove(k);
    }
    for (k, v) in env {
        c.env(k, v);
    }
    let o = c.output().expect("hk runs");
    eprintln!("hk {args:?}:\n{}", text(&o));
    o
}

async fn clients(region: &str) -> (aws_sdk_sqs::Client, aws_sdk_scheduler::Client) {
    let cfg = aws_config::defaults(BehaviorVersion::latest())
        .http_client(shared::aws::https_client(true))
        .endpoint_url(moto_endpoint())
        .region(Region::new(region.to_string()))
        .credentials_provider(aws_sdk_sqs::config::Credentials::new(
            "testing", "testing", None, None, "moto",
        ))
        .load()
        .await;
    (
        aws_sdk_sqs::Client::new(&cfg),
        aws_sdk_scheduler::Client::new(&cfg),
    )
}

/// The `Input` of `function`'s schedule in infra/template.yaml.
fn template_input(function: Function) -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../infra/template.yaml");
    let text = std::fs::read_to_string(path).unwrap();
    let needle = format!("\"type\":\"{}\"", function.run_type());
    let line = text
        .lines()
        .map(str::trim)
        .find(|l| l.starts_with("Input:") && l.contains(&needle))
        .unwrap_or_else(|| panic!("no schedule Input for {function} in the template"));
    line.trim_start_matches("Input:")
        .trim()
        .trim_matches('\'')
        .to_string()
}

/// Set up `<stack>-<function>` queues in `region` (`hk local setup`, the template's
/// names) and return the URL of `function`'s queue.
async fn queues(stack: &str, region: &str, function: Function) -> String {
    let env_file = std::env::temp_dir().join(format!("{stack}.env"));
    let o = hk(
        &[
            "local",
            "setup",
            "--endpoint",
            &moto_endpoint(),
            "--prefix",
            stack,
            "--region",
            region,
            "--env-file",
            env_file.to_str().unwrap(),
        ],
        &[],
    );
    assert!(o.status.success());
    let _ = std::fs::remove_file(&env_file);
    let (sqs, _) = clients(region).await;
    sqs.get_queue_url()
        .queue_name(format!("{stack}-{}", function.name()))
        .send()
        .await
        .unwrap()
        .queue_url
        .unwrap()
}

async fn receive(sqs: &aws_sdk_sqs::Client, url: &str) -> Vec<aws_sdk_sqs::types::Message> {
    sqs.receive_message()
        .queue_url(url)
        .max_number_of_messages(10)
        .message_attribute_names("All")
        .send()
        .await
        .unwrap()
        .messages
        .unwrap_or_default()
}

fn stack_name() -> String {
    format!("tk{}", &uuid::Uuid::new_v4().simple().to_string()[..10])
}

#[tokio::test]
async fn tick_sends_the_schedules_own_message_to_the_stacks_queue() {
    let f = Function::RemoveExpiredMembers;
    let stack = stack_name();
    let region = "us-east-1";
    let queue = queues(&stack, region, f).await;
    let (sqs, scheduler) = clients(region).await;
    let arn = queue_arn(&sqs, &queue).await;
    // The stack's group and the schedule as CloudFormation creates it from the template.
    let group = schedule_group(&scheduler, &stack).await;
    let input = template_input(f);
    scheduler
        .create_schedule()
        .name(format!("{stack}-RemoveExpiredMembersSchedule-1AB2C3D4E5F6"))
        .group_name(&group)
        .schedule_expression(f.cron().unwrap())
        .state(ScheduleState::Disabled)
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
                .input(&input)
                .build()
                .unwrap(),
        )
        .send()
        .await
        .unwrap();

    let o = hk(
        &[
            "tick",
            f.name(),
            "--stack",
            &stack,
            "--endpoint",
            &moto_endpoint(),
            "--now",
            "2026-03-01T00:10:00Z",
            "--json",
        ],
        &[],
    );
    assert!(o.status.success());
    let out: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        out["schedule"],
        format!("{stack}-RemoveExpiredMembersSchedule-1AB2C3D4E5F6")
    );
    let run_id = out["run_id"].as_str().unwrap();
    let messages = receive(&sqs, &queue).await;
    assert_eq!(messages.len(), 1, "one message on the queue");
    let m = &messages[0];
    // Exactly the schedule's input with Scheduler's placeholders filled in, bare.
    let expected = input
        .replace("<aws.scheduler.scheduled-time>", "2026-03-01T00:10:00Z")
        .replace("<aws.scheduler.execution-id>", run_id);
    assert_eq!(m.body(), Some(expected.as_str()));
    assert!(m.message_attributes().is_none_or(|a| a.is_empty()));
    let env = Envelope::parse(m.body().unwrap(), f).expect("the function accepts it");
    assert_eq!(
        env.message_key,
        "remove-expired-members:cron:2026-03-01T00:10:00Z"
    );
    assert_eq!(env.issued_at, "2026-03-01T00:10:00Z");
    assert_eq!(env.hop, 0);
    assert_eq!(out["message_key"], env.message_key);

    // Without --now: the message carries the time of the tick.
    let before = chrono::Utc::now() - chrono::Duration::seconds(1);
    let o = hk(
        &[
            "tick",
            f.name(),
            "--stack",
            &stack,
            "--endpoint",
            &moto_endpoint(),
            "--dry-run",
            "--json",
        ],
        &[],
    );
    assert!(o.status.success());
    let out: Value = serde_json::from_slice(&o.stdout).unwrap();
    let at = chrono::DateTime::parse_from_rfc3339(out["issued_at"].as_str().unwrap()).unwrap();
    assert!(at >= before && at <= chrono::Utc::now(), "{at}");
    assert!(out["message_id"].is_null(), "a dry run sends nothing");

    // A cron function no schedule targets: behaviour §9.7's message.
    let pat = Function::PatExpiring;
    let o = hk(
        &[
            "tick",
            pat.name(),
            "--stack",
            &stack,
            "--endpoint",
            &moto_endpoint(),
            "--now",
            "2026-03-01T01:00:00Z",
            "--json",
        ],
        &[],
    );
    assert!(o.status.success());
    let out: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(out["schedule"].is_null());
    let pat_queue = out["queue_url"].as_str().unwrap().to_string();
    let messages = receive(&sqs, &pat_queue).await;
    assert_eq!(messages.len(), 1);
    let env = Envelope::parse(messages[0].body().unwrap(), pat).unwrap();
    assert_eq!(env.message_key, "pat-expiring:cron:2026-03-01T01:00:00Z");
    assert_eq!(
        template_input(pat)
            .replace("<aws.scheduler.scheduled-time>", "2026-03-01T01:00:00Z")
            .replace("<aws.scheduler.execution-id>", &env.run_id),
        messages[0].body().unwrap(),
        "the same message the template's schedule would send"
    );

    // A function without a schedule is refused, naming the cron functions.
    let o = hk(
        &[
            "tick",
            "delete-user",
            "--stack",
            &stack,
            "--endpoint",
            &moto_endpoint(),
        ],
        &[],
    );
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("has no schedule") && err.contains("pat-expiring"),
        "{err}"
    );
}

#[tokio::test]
async fn region_and_profile_are_passed_to_the_sdk() {
    let f = Function::AdjournedGroupDeletion;
    let stack = stack_name();
    // `--region`: the queues exist in eu-west-3 only.
    let queue = queues(&stack, "eu-west-3", f).await;
    let (us, _) = clients("us-east-1").await;
    assert!(
        us.get_queue_url()
            .queue_name(format!("{stack}-{}", f.name()))
            .send()
            .await
            .is_err(),
        "--region eu-west-3 created nothing in us-east-1"
    );
    let endpoint = moto_endpoint();
    let tick = |extra: &[&str], env: &[(&str, &str)]| {
        let mut args = vec![
            "tick",
            f.name(),
            "--stack",
            &stack,
            "--endpoint",
            &endpoint,
            "--now",
            "2026-03-01T02:00:00Z",
        ];
        args.extend_from_slice(extra);
        hk(&args, env)
    };
    // The default region (us-east-1 for an endpoint) has no such queue.
    let o = tick(&[], &[]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("does not exist"));
    // `--profile`: its region and credentials from the shared files.
    let dir = std::env::temp_dir().join(format!("hk-profile-{stack}"));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("config");
    let credentials = dir.join("credentials");
    std::fs::write(&config, "[profile night]\nregion = eu-west-3\n").unwrap();
    std::fs::write(
        &credentials,
        "[night]\naws_access_key_id = AKIDNIGHT\naws_secret_access_key = night\n",
    )
    .unwrap();
    let files = [
        ("AWS_CONFIG_FILE", config.to_str().unwrap()),
        ("AWS_SHARED_CREDENTIALS_FILE", credentials.to_str().unwrap()),
    ];
    let o = tick(&["--profile", "night"], &files);
    assert!(o.status.success(), "the profile's region finds the queue");
    // `--region` wins over the profile's.
    let o = tick(&["--profile", "night", "--region", "us-east-1"], &files);
    assert_eq!(o.status.code(), Some(2));
    // A profile the files do not define: one line naming it.
    let o = tick(&["--profile", "nobody"], &files);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("profile `nobody`"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    // `--region` alone.
    let o = tick(&["--region", "eu-west-3"], &[]);
    assert!(o.status.success());
    let (eu, _) = clients("eu-west-3").await;
    assert_eq!(receive(&eu, &queue).await.len(), 2, "both ticks arrived");
    std::fs::remove_dir_all(&dir).unwrap();
}
