//! The functions in the template: every function crate is there and every template
//! function is a crate, each a row of the function table but the directly invoked
//! `hk-check` (secret read only, no event); they run on AL2023 with the architecture parameter; each has
//! its queue settings (batch size, concurrency, redrive, delays past 900 s through the
//! Scheduler) and least privilege; each cron has a schedule putting a valid cron
//! message on its queue.

use super::*;

fn single_flight(f: Function) -> bool {
    f.cron().is_some() || f == Function::PruneDeletions
}

fn batch_size(f: Function) -> u64 {
    if single_flight(f) || matches!(f, Function::GroupDestroy | Function::DeleteUser) {
        1
    } else {
        10
    }
}

/// Functions whose delays can exceed 900 s and so create one-time schedules.
fn schedules_long_delays(f: Function) -> bool {
    matches!(
        f,
        Function::AdjournedGroupDeletion | Function::PlaceholderUserCleanup
    )
}

#[test]
fn every_function_crate_is_in_the_template_and_every_template_function_is_a_crate() {
    let t = template();
    let crates: BTreeSet<String> = std::fs::read_dir(root().join("functions"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
        .collect();
    let in_template: BTreeSet<String> = t["Resources"]
        .as_mapping()
        .unwrap()
        .values()
        .filter(|r| r["Type"] == "AWS::Serverless::Function")
        .map(|r| {
            let uri = r["Properties"]["CodeUri"].as_str().unwrap();
            uri.trim_start_matches("../functions/")
                .trim_end_matches('/')
                .to_string()
        })
        .collect();
    let catalogue: BTreeSet<String> = Function::ALL.iter().map(|f| f.name().to_string()).collect();
    assert_eq!(
        crates, in_template,
        "functions/ and infra/template.yaml disagree"
    );
    let queue_fed: BTreeSet<String> = crates
        .iter()
        .filter(|c| !DIRECTLY_INVOKED.contains(&c.as_str()))
        .cloned()
        .collect();
    assert_eq!(
        queue_fed, catalogue,
        "functions/ (but the directly invoked {DIRECTLY_INVOKED:?}) and shared::Function::ALL disagree"
    );
    assert!(crates.len() >= 10, "{} function crates read", crates.len());
}

/// The function crates outside the function table: invoked directly by an operator,
/// with no queue, schedule or alarm (docs/cutover.md).
const DIRECTLY_INVOKED: &[&str] = &["hk-check"];

#[test]
fn hk_check_is_invoked_directly_and_may_read_the_database_secret_only() {
    let t = template();
    let f = resource(&t, "HkCheckFunction");
    assert_eq!(f["Type"], "AWS::Serverless::Function");
    let p = &f["Properties"];
    assert_eq!(p["CodeUri"], "../functions/hk-check/");
    assert_eq!(f["Metadata"]["BuildMethod"], "makefile");
    assert!(
        p["Events"].is_null(),
        "no queue, no schedule: {:?}",
        p["Events"]
    );
    // The database secret, and kms:Decrypt on its key when one is given: nothing else.
    let policies = p["Policies"].as_sequence().unwrap();
    assert_eq!(policies.len(), 2, "{policies:?}");
    let kms = serde_yaml::to_string(&policies[0]).unwrap();
    assert!(
        kms.contains("HasSecretsKmsKey") && kms.contains("kms:Decrypt"),
        "{kms}"
    );
    assert_eq!(
        tagged(&policies[1]["AWSSecretsManagerGetSecretValuePolicy"]["SecretArn"]),
        ("!Ref".into(), "DatabaseSecretArn".into())
    );
    let env = &p["Environment"]["Variables"];
    assert!(
        env.as_mapping().is_none_or(|m| !m
            .keys()
            .any(|k| k.as_str().is_some_and(|k| k.starts_with("QUEUE_URL_")))),
        "hk-check sends nothing: {env:?}"
    );
    // Nothing else names it: no alarm, schedule or mapping.
    let others = t["Resources"]
        .as_mapping()
        .unwrap()
        .iter()
        .filter(|(k, _)| k.as_str() != Some("HkCheckFunction"))
        .filter(|(_, r)| {
            serde_yaml::to_string(r)
                .unwrap()
                .contains("HkCheckFunction")
        })
        .count();
    assert_eq!(others, 0);
}

#[test]
fn functions_run_on_al2023_with_the_architecture_parameter() {
    let t = template();
    let g = &t["Globals"]["Function"];
    assert_eq!(g["Runtime"], "provided.al2023");
    assert_eq!(g["Handler"], "bootstrap");
    assert_eq!(
        tagged(&g["Architectures"][0]),
        ("!Ref".into(), "Architecture".into())
    );
    assert_eq!(t["Parameters"]["Architecture"]["Default"], "arm64");
    assert_eq!(
        t["Parameters"]["Architecture"]["AllowedValues"],
        serde_yaml::to_value(["arm64", "x86_64"]).unwrap()
    );
    assert_eq!(g["LoggingConfig"]["LogFormat"], "JSON");
}

#[test]
fn each_function_has_its_queue_settings_and_least_privilege() {
    let t = template();
    for f in Function::ALL.iter().copied() {
        let c = camel(f.name());
        let p = &resource(&t, &format!("{c}Function"))["Properties"];
        let name = f.name();
        assert_eq!(
            p["Timeout"].as_u64(),
            Some(f.timeout().as_secs()),
            "{name} timeout"
        );
        let self_sending = f.sends_to().contains(&f);
        assert_eq!(
            p["RecursiveLoop"].as_str() == Some("Allow"),
            self_sending,
            "{name} RecursiveLoop"
        );
        // The event source mapping.
        let ev = &p["Events"]["Queue"];
        assert_eq!(ev["Type"], "SQS", "{name}");
        let ep = &ev["Properties"];
        assert_eq!(
            tagged(&ep["Queue"]),
            ("!GetAtt".into(), format!("{c}Queue.Arn")),
            "{name}"
        );
        assert_eq!(
            ep["FunctionResponseTypes"],
            serde_yaml::to_value(["ReportBatchItemFailures"]).unwrap(),
            "{name}"
        );
        assert_eq!(
            ep["BatchSize"].as_u64(),
            Some(batch_size(f)),
            "{name} BatchSize"
        );
        let max_conc = ep["ScalingConfig"]["MaximumConcurrency"].as_u64();
        assert_eq!(
            max_conc,
            single_flight(f).then_some(2),
            "{name} MaximumConcurrency"
        );
        // Only the queues it sends to, in its environment and its policies.
        let env = p["Environment"]["Variables"]
            .as_mapping()
            .cloned()
            .unwrap_or_default();
        let urls: BTreeSet<String> = env
            .keys()
            .filter_map(|k| k.as_str())
            .filter(|k| k.starts_with("QUEUE_URL_"))
            .map(str::to_string)
            .collect();
        let want: BTreeSet<String> = f
            .sends_to()
            .iter()
            .map(|t| format!("QUEUE_URL_{}", t.env_suffix()))
            .collect();
        assert_eq!(urls, want, "{name} queue URLs");
        let policies = p["Policies"].as_sequence().unwrap();
        let sqs: BTreeSet<String> = policies
            .iter()
            .filter_map(|pol| pol.get("SQSSendMessagePolicy"))
            .map(|q| tagged(&q["QueueName"]).1)
            .collect();
        let want: BTreeSet<String> = f
            .sends_to()
            .iter()
            .map(|t| format!("{}Queue.QueueName", camel(t.name())))
            .collect();
        assert_eq!(sqs, want, "{name} SQS policies");
        let text = serde_yaml::to_string(p).unwrap();
        assert_eq!(
            text.contains("scheduler:CreateSchedule"),
            schedules_long_delays(f),
            "{name} scheduler permission"
        );
        assert_eq!(
            env.contains_key("SCHEDULER_GROUP_NAME"),
            schedules_long_delays(f),
            "{name} scheduler env"
        );
        // Queue and DLQ.
        let q = &resource(&t, &format!("{c}Queue"))["Properties"];
        let vis = q["VisibilityTimeout"].as_u64().unwrap();
        assert!(
            vis >= 6 * f.timeout().as_secs(),
            "{name}: visibility {vis} < 6 × timeout"
        );
        assert_eq!(
            q["RedrivePolicy"]["maxReceiveCount"].as_u64(),
            Some(5),
            "{name}"
        );
        assert_eq!(
            tagged(&q["RedrivePolicy"]["deadLetterTargetArn"]).1,
            format!("{c}DLQ.Arn")
        );
        let dlq = &resource(&t, &format!("{c}DLQ"))["Properties"];
        assert!(
            dlq["MessageRetentionPeriod"].as_u64().unwrap()
                > q["MessageRetentionPeriod"].as_u64().unwrap()
        );
        // Alarms.
        resource(&t, &format!("{c}ErrorsAlarm"));
        let dlq_alarm = &resource(&t, &format!("{c}DLQAlarm"))["Properties"];
        assert_eq!(
            dlq_alarm["MetricName"],
            "ApproximateNumberOfMessagesVisible"
        );
    }
}

#[test]
fn cron_functions_have_a_schedule_putting_a_valid_cron_message_on_their_queue() {
    let t = template();
    for f in Function::ALL.iter().copied() {
        let c = camel(f.name());
        let sched = &t["Resources"][format!("{c}Schedule").as_str()];
        let Some(cron) = f.cron() else {
            assert!(
                sched.is_null(),
                "{f} is not a cron function but has a schedule"
            );
            continue;
        };
        let p = &sched["Properties"];
        assert_eq!(sched["Type"], "AWS::Scheduler::Schedule");
        assert_eq!(p["ScheduleExpression"].as_str(), Some(cron), "{f}");
        assert_eq!(p["ScheduleExpressionTimezone"], "UTC");
        assert_eq!(p["FlexibleTimeWindow"]["Mode"], "OFF");
        assert_eq!(tagged(&p["Target"]["Arn"]).1, format!("{c}Queue.Arn"));
        assert!(
            !plain(&p["State"]).is_null(),
            "{f}: a parameter can disable the schedule"
        );
        assert!(!t["Parameters"][format!("{c}ScheduleEnabled").as_str()].is_null());
        // Scheduler substitutes its context attributes; the result must parse as the
        // function's own cron message (behaviour §9.7).
        let input = p["Target"]["Input"].as_str().unwrap();
        let body = input
            .replace("<aws.scheduler.scheduled-time>", "2026-03-01T00:10:00Z")
            .replace(
                "<aws.scheduler.execution-id>",
                "4bd6e4c8-0d3a-4f26-9a70-1e8b1c8c2c11",
            );
        let env = Envelope::parse(&body, f).unwrap_or_else(|e| panic!("{f}: {}", e.error));
        assert_eq!(
            env.message_key,
            format!("{}:cron:2026-03-01T00:10:00Z", f.name())
        );
        assert_eq!(env.hop, 0);
        assert_eq!(env.kind, f.run_type());
    }
}

/// `events/<function>.json`, the sample events for `sam local invoke -e`: each names a
/// function of the table, and every record's body is a message that function accepts,
/// payload included.
#[test]
fn every_sample_event_is_a_valid_message_of_its_function() {
    let mut seen = BTreeSet::new();
    for e in std::fs::read_dir(root().join("events")).unwrap() {
        let path = e.unwrap().path();
        let stem = path.file_stem().unwrap().to_string_lossy().to_string();
        let f = Function::from_name(&stem)
            .unwrap_or_else(|| panic!("events/{stem}.json: not a function's name"));
        let ev: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        let records = ev["Records"].as_array().unwrap();
        assert!(!records.is_empty(), "{stem}");
        for r in records {
            assert_eq!(r["eventSource"], "aws:sqs", "{stem}");
            let body = r["body"].as_str().unwrap();
            let env = Envelope::parse(body, f).unwrap_or_else(|m| panic!("{stem}: {}", m.error));
            assert!(f.accepts().contains(&env.kind.as_str()), "{stem}");
        }
        seen.insert(f);
    }
    // A worker's sample too: storage-cleanup's item.
    assert!(seen.contains(&Function::StorageCleanup), "{seen:?}");
    assert!(seen.len() >= 10, "{seen:?}");
}
