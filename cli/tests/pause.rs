//! `hk pause` / `hk resume` / `hk status` against moto (issue 51): a cron function's
//! schedule (with every field the template gives it), its queue's and a worker's
//! Lambda event-source mappings, and its missed-run page, named as
//! infra/template.yaml names them. Pausing disables the schedule (every other field
//! kept), the mappings and the page's actions, and `hk status` shows it paused; resuming
//! undoes all three; `all` pauses every function that has something to pause.
//!
//! moto 5.2.5 has no PutCompositeAlarm, so the missed-run page here is a metric alarm
//! of the template's name (`hk pause` switches the actions of the alarm of that name,
//! metric or composite). The Lambda functions behind the mappings are created with
//! boto3 (`HK_TEST_PYTHON`, else the checkout's `.venv`): the workspace has no IAM
//! client, and moto refuses a function whose role does not exist. No message is sent:
//! moto would invoke the function of an enabled mapping. Needs `MOTO_ENDPOINT`.

use std::path::PathBuf;
use std::process::{Command, Output};

use aws_sdk_scheduler::types::{
    FlexibleTimeWindow, FlexibleTimeWindowMode, RetryPolicy, ScheduleState, Target,
};
use integration_tests::aws::{moto_config, moto_endpoint};
use serde_json::Value;

mod common;
use common::{queue_arn, schedule_group, text};

fn hk(args: &[&str]) -> Output {
    let o = Command::new(env!("CARGO_BIN_EXE_hk"))
        .args(args)
        .env("RUST_LOG", "warn")
        .env_remove("HK_STACK")
        .output()
        .expect("hk runs");
    eprintln!("hk {args:?}:\n{}", text(&o));
    o
}

fn json_lines(o: &Output) -> Vec<Value> {
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l}: {e}")))
        .collect()
}

/// A Lambda function and its event-source mapping on `queue_arn`, in moto, with boto3.
fn mapping(endpoint: &str, name: &str, queue_arn: &str) {
    let python = std::env::var_os("HK_TEST_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../.venv/bin/python"));
    let script = r##"
import io, json, sys, zipfile
import boto3
endpoint, name, queue_arn = sys.argv[1:4]
kw = dict(endpoint_url=endpoint, region_name="us-east-1",
          aws_access_key_id="testing", aws_secret_access_key="testing")
iam, lam = boto3.client("iam", **kw), boto3.client("lambda", **kw)
role = iam.create_role(RoleName=name, AssumeRolePolicyDocument=json.dumps({
    "Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "sts:AssumeRole",
    "Principal": {"Service": "lambda.amazonaws.com"}}]}))["Role"]["Arn"]
buf = io.BytesIO()
with zipfile.ZipFile(buf, "w") as z:
    z.writestr("bootstrap", "#!/bin/sh\n")
lam.create_function(FunctionName=name, Runtime="provided.al2023", Role=role,
                    Handler="bootstrap", Code={"ZipFile": buf.getvalue()})
lam.create_event_source_mapping(EventSourceArn=queue_arn, FunctionName=name,
                                BatchSize=1, Enabled=True)
"##;
    let o = Command::new(&python)
        .arg("-c")
        .arg(script)
        .args([endpoint, name, queue_arn])
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", python.display()));
    assert!(o.status.success(), "boto3 setup: {}", text(&o));
}

async fn mapping_states(lambda: &aws_sdk_lambda::Client, arn: &str) -> Vec<String> {
    lambda
        .list_event_source_mappings()
        .event_source_arn(arn)
        .send()
        .await
        .unwrap()
        .event_source_mappings()
        .iter()
        .map(|m| m.state().unwrap_or_default().to_string())
        .collect()
}

async fn actions_enabled(cw: &aws_sdk_cloudwatch::Client, name: &str) -> bool {
    let out = cw.describe_alarms().alarm_names(name).send().await.unwrap();
    out.metric_alarms()[0].actions_enabled().unwrap()
}

#[tokio::test]
async fn pause_and_resume_switch_schedule_mapping_and_page_without_a_deploy() {
    let endpoint = moto_endpoint();
    let stack = format!("pz{}", &uuid::Uuid::new_v4().simple().to_string()[..10]);
    let cfg = moto_config().await;
    let sqs = aws_sdk_sqs::Client::new(&cfg);
    let scheduler = aws_sdk_scheduler::Client::new(&cfg);
    let lambda = aws_sdk_lambda::Client::new(&cfg);
    let cw = aws_sdk_cloudwatch::Client::new(&cfg);
    let env_file = std::env::temp_dir().join(format!("{stack}.env"));
    let setup = [
        "local",
        "setup",
        "--endpoint",
        &endpoint,
        "--prefix",
        &stack,
        "--env-file",
        env_file.to_str().unwrap(),
    ];
    assert!(hk(&setup).status.success());
    let _ = std::fs::remove_file(&env_file);
    let url = |f: &str| {
        let (sqs, name) = (sqs.clone(), format!("{stack}-{f}"));
        async move {
            sqs.get_queue_url()
                .queue_name(name)
                .send()
                .await
                .unwrap()
                .queue_url
                .unwrap()
        }
    };
    let cron_arn = queue_arn(&sqs, &url("remove-expired-members").await).await;
    let worker_arn = queue_arn(&sqs, &url("delete-user").await).await;

    // The cron's schedule as the template creates it (CloudFormation names it).
    let group = schedule_group(&scheduler, &stack).await;
    let schedule = format!("{stack}-RemoveExpiredMembersSchedule-1AB2C3D4E5F6");
    let input = r#"{"version":1,"type":"remove-expired-members.run","message_key":"remove-expired-members:cron:<aws.scheduler.scheduled-time>","run_id":"<aws.scheduler.execution-id>","hop":0,"issued_at":"<aws.scheduler.scheduled-time>","payload":{}}"#;
    scheduler
        .create_schedule()
        .name(&schedule)
        .group_name(&group)
        .description("remove-expired-members cron tick (behaviour §9.7)")
        .schedule_expression("cron(10 0 * * ? *)")
        .schedule_expression_timezone("UTC")
        .state(ScheduleState::Enabled)
        .flexible_time_window(
            FlexibleTimeWindow::builder()
                .mode(FlexibleTimeWindowMode::Off)
                .build()
                .unwrap(),
        )
        .target(
            Target::builder()
                .arn(&cron_arn)
                .role_arn("arn:aws:iam::123456789012:role/scheduler")
                .input(input)
                .retry_policy(
                    RetryPolicy::builder()
                        .maximum_retry_attempts(10)
                        .maximum_event_age_in_seconds(3600)
                        .build(),
                )
                .build()
                .unwrap(),
        )
        .send()
        .await
        .unwrap();
    let before = scheduler
        .get_schedule()
        .group_name(&group)
        .name(&schedule)
        .send()
        .await
        .unwrap();
    mapping(&endpoint, &format!("{stack}-rem"), &cron_arn);
    mapping(&endpoint, &format!("{stack}-del"), &worker_arn);
    let page = format!("{stack}-RemoveExpiredMembersMissedRunAlarm");
    cw.put_metric_alarm()
        .alarm_name(&page)
        .namespace("GitLabHousekeeping")
        .metric_name("outcome_done")
        .statistic(aws_sdk_cloudwatch::types::Statistic::Sum)
        .period(3600)
        .evaluation_periods(26)
        .threshold(1.0)
        .comparison_operator(aws_sdk_cloudwatch::types::ComparisonOperator::LessThanThreshold)
        .alarm_actions("arn:aws:sns:us-east-1:123456789012:pager")
        .send()
        .await
        .unwrap();
    let s = ["--stack", &stack, "--endpoint", &endpoint];

    // Running: status says so (exit 1: the other crons of this stand-in stack have no
    // schedule).
    let o = hk(&[&["status", "--json"][..], &s[..]].concat());
    let rem = json_lines(&o)
        .into_iter()
        .find(|l| l["function"] == "remove-expired-members")
        .unwrap();
    assert_eq!(rem["paused"], false, "{rem}");
    assert_eq!(rem["mappings"][0]["state"], "Enabled", "{rem}");
    assert!(
        rem["next_run"].as_str().unwrap().ends_with(":10:00Z"),
        "{rem}"
    );
    assert!(
        rem["alarms"]
            .as_array()
            .unwrap()
            .iter()
            .any(|a| a["name"] == "RemoveExpiredMembersMissedRunAlarm"),
        "{rem}"
    );

    // Pause one cron: schedule DISABLED with every other field kept, mapping disabled,
    // page silenced; the worker untouched.
    let o = hk(&[&["pause", "remove-expired-members", "--json"][..], &s[..]].concat());
    assert!(o.status.success(), "{}", text(&o));
    let change = &json_lines(&o)[0];
    assert_eq!(change["schedules"][0]["after"], "DISABLED", "{change}");
    assert_eq!(change["missed_run_alarm"], page.as_str(), "{change}");
    let after = scheduler
        .get_schedule()
        .group_name(&group)
        .name(&schedule)
        .send()
        .await
        .unwrap();
    assert_eq!(after.state(), Some(&ScheduleState::Disabled));
    assert_eq!(after.schedule_expression(), before.schedule_expression());
    assert_eq!(
        after.schedule_expression_timezone(),
        before.schedule_expression_timezone()
    );
    assert_eq!(after.description(), before.description());
    assert_eq!(after.flexible_time_window(), before.flexible_time_window());
    assert_eq!(
        after.target(),
        before.target(),
        "target, input and retry policy kept"
    );
    assert_eq!(mapping_states(&lambda, &cron_arn).await, ["Disabled"]);
    assert_eq!(mapping_states(&lambda, &worker_arn).await, ["Enabled"]);
    assert!(
        !actions_enabled(&cw, &page).await,
        "the missed-run page is silenced"
    );

    let o = hk(&[&["status", "--json"][..], &s[..]].concat());
    let lines = json_lines(&o);
    let rem = lines
        .iter()
        .find(|l| l["function"] == "remove-expired-members")
        .unwrap();
    assert_eq!(rem["paused"], true, "{rem}");
    assert_eq!(rem["schedule"], "DISABLED", "{rem}");
    assert_eq!(
        rem["next_run"],
        Value::Null,
        "a paused cron has no next run: {rem}"
    );
    let del = lines
        .iter()
        .find(|l| l["function"] == "delete-user")
        .unwrap();
    assert_eq!(del["paused"], false, "{del}");
    let o = hk(&[&["status"][..], &s[..]].concat());
    assert!(
        String::from_utf8_lossy(&o.stdout)
            .lines()
            .any(|l| l.starts_with("remove-expired-members") && l.contains("PAUSED")),
        "{}",
        text(&o)
    );

    // Resume: all three back.
    let o = hk(&[&["resume", "remove-expired-members"][..], &s[..]].concat());
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        text(&o).contains("hk tick"),
        "resume says to tick: {}",
        text(&o)
    );
    let state = |n: String| {
        let (sc, g) = (scheduler.clone(), group.clone());
        async move {
            sc.get_schedule()
                .group_name(g)
                .name(n)
                .send()
                .await
                .unwrap()
                .state()
                .cloned()
        }
    };
    assert_eq!(state(schedule.clone()).await, Some(ScheduleState::Enabled));
    assert_eq!(mapping_states(&lambda, &cron_arn).await, ["Enabled"]);
    assert!(actions_enabled(&cw, &page).await);

    // `all`: every function with a schedule or mapping; the others are said to have none.
    let o = hk(&[&["pause", "all", "--json"][..], &s[..]].concat());
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(json_lines(&o).len(), shared::Function::ALL.len());
    assert_eq!(state(schedule.clone()).await, Some(ScheduleState::Disabled));
    assert_eq!(mapping_states(&lambda, &worker_arn).await, ["Disabled"]);
    let o = hk(&[&["resume", "all"][..], &s[..]].concat());
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(mapping_states(&lambda, &worker_arn).await, ["Enabled"]);

    // One function with nothing to pause is an error naming it.
    let o = hk(&[&["pause", "prune-deletions"][..], &s[..]].concat());
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("prune-deletions"), "{}", text(&o));
}
