//! What on call relies on in the template: every alarm notifies the topic on ALARM and
//! on OK and names a runbook section that exists; every cron function has a missed-run
//! heartbeat; every event-source mapping can be paused by its own parameter; every
//! function logs to its own log group kept for the retention parameter.

use super::*;

/// The actions of an alarm that pages: the alarm topic, when given.
pub(crate) fn alarm_action_value() -> Value {
    serde_yaml::from_str("!If [HasAlarmTopic, [!Ref AlarmTopicArn], !Ref AWS::NoValue]").unwrap()
}

/// The actions of a ticket-severity alarm: the ticket topic, else the alarm topic.
pub(crate) fn ticket_action_value() -> Value {
    serde_yaml::from_str(
        "!If [HasTicketTopic, [!Ref TicketTopicArn], !If [HasAlarmTopic, [!Ref AlarmTopicArn], !Ref AWS::NoValue]]",
    )
    .unwrap()
}

/// Ticket-severity alarms: a few items failed inside a run that went on.
pub(crate) fn is_ticket(alarm: &str) -> bool {
    alarm.ends_with("ItemFailuresAlarm")
}

#[test]
fn every_alarm_notifies_the_topic_on_alarm_and_on_ok() {
    let t = template();
    let all = alarms(&t);
    assert!(all.len() >= 60, "{} alarms", all.len());
    for (name, p) in all {
        let want = if is_ticket(&name) {
            ticket_action_value()
        } else {
            alarm_action_value()
        };
        assert_eq!(p["AlarmActions"], want, "{name} AlarmActions");
        assert_eq!(p["OKActions"], want, "{name} OKActions");
    }
}

/// The cron period in seconds: `*/5` (B43) or daily.
fn cron_period_s(cron: &str) -> u64 {
    if cron.starts_with("cron(0/5 ") {
        300
    } else {
        assert!(
            cron.split(' ').nth(2) == Some("*"),
            "{cron}: only daily and */5 crons are known"
        );
        86_400
    }
}

#[test]
fn every_cron_function_has_a_missed_run_heartbeat_that_treats_missing_data_as_breaching() {
    let t = template();
    let service = service_value(&t);
    let heartbeats: BTreeMap<String, &Value> = alarms(&t)
        .into_iter()
        .filter(|(_, p)| p["MetricName"] == "run_started")
        .map(|(_, p)| {
            let f = dimensions(&p["Dimensions"])[FUNCTION_DIMENSION].clone();
            (f.as_str().unwrap().to_string(), p)
        })
        .collect();
    let crons: BTreeSet<String> = Function::ALL
        .iter()
        .filter(|f| f.cron().is_some())
        .map(|f| f.name().to_string())
        .collect();
    assert_eq!(
        heartbeats.keys().cloned().collect::<BTreeSet<_>>(),
        crons,
        "one heartbeat per cron function"
    );
    for f in Function::ALL.iter().copied() {
        let Some(cron) = f.cron() else { continue };
        let p = heartbeats[f.name()];
        let name = f.name();
        assert_eq!(p["Namespace"], NAMESPACE, "{name}");
        assert_eq!(dimensions(&p["Dimensions"])[SERVICE_DIMENSION], service);
        assert_eq!(p["TreatMissingData"], "breaching", "{name}");
        assert_eq!(p["Statistic"], "Sum", "{name}");
        assert_eq!(p["ComparisonOperator"], "LessThanThreshold", "{name}");
        assert_eq!(p["Threshold"].as_u64(), Some(1), "{name}");
        let period = p["Period"].as_u64().unwrap();
        let n = p["EvaluationPeriods"].as_u64().unwrap();
        assert_eq!(
            p["DatapointsToAlarm"].as_u64(),
            Some(n),
            "{name}: all must breach"
        );
        let window = period * n;
        // CloudWatch: one day for periods under an hour, seven days from an hour up.
        let limit = if period < 3600 { 86_400 } else { 604_800 };
        assert!(window <= limit, "{name}: CloudWatch allows {limit} s");
        let cron_s = cron_period_s(cron);
        // More than the cron period plus one period: yesterday's run is still inside the
        // window while today's open period is empty, so the heartbeat never pages before
        // the cron time; for */5, room for one late tick and the open period.
        assert!(
            window >= cron_s + 2 * period,
            "{name}: {window} s < cron period {cron_s} s + two periods"
        );
        if cron_s < 3600 {
            assert!(window >= 3 * cron_s, "{name}: one late tick must not page");
        }
        // A deliberately paused schedule does not page.
        let c = camel(name);
        assert_eq!(
            p["ActionsEnabled"],
            serde_yaml::from_str::<Value>(&format!("!If [{c}ScheduleOn, true, false]")).unwrap(),
            "{name}"
        );
    }
}

#[test]
fn every_event_source_mapping_can_be_paused_by_its_own_parameter() {
    let t = template();
    let mut mappings = 0;
    for f in Function::ALL.iter().copied() {
        let c = camel(f.name());
        let p = &resource(&t, &format!("{c}Function"))["Properties"];
        for (_, ev) in p["Events"].as_mapping().unwrap() {
            assert_eq!(ev["Type"], "SQS", "{f}: only SQS events are expected");
            mappings += 1;
            assert_eq!(
                ev["Properties"]["Enabled"],
                serde_yaml::from_str::<Value>(&format!("!If [{c}MappingOn, true, false]")).unwrap(),
                "{f}: Enabled follows {c}MappingEnabled"
            );
        }
        assert_eq!(
            t["Conditions"][format!("{c}MappingOn").as_str()],
            serde_yaml::from_str::<Value>(&format!("!Equals [!Ref {c}MappingEnabled, \"true\"]"))
                .unwrap()
        );
        let param = &t["Parameters"][format!("{c}MappingEnabled").as_str()];
        assert_eq!(param["Default"], "true", "{f}");
        assert_eq!(
            param["AllowedValues"],
            serde_yaml::to_value(["true", "false"]).unwrap()
        );
    }
    assert_eq!(mappings, Function::ALL.len());
}

#[test]
fn every_function_logs_to_its_own_log_group_kept_for_the_retention_parameter() {
    let t = template();
    let mut names = BTreeSet::new();
    for f in Function::ALL.iter().copied() {
        let c = camel(f.name());
        let p = &resource(&t, &format!("{c}Function"))["Properties"];
        assert_eq!(
            tagged(&p["LoggingConfig"]["LogGroup"]),
            ("!Ref".into(), format!("{c}LogGroup")),
            "{f}"
        );
        let lg = resource(&t, &format!("{c}LogGroup"));
        assert_eq!(lg["Type"], "AWS::Logs::LogGroup");
        assert_eq!(
            tagged(&lg["Properties"]["RetentionInDays"]),
            ("!Ref".into(), "LogRetentionDays".into()),
            "{f}"
        );
        assert!(names.insert(serde_yaml::to_string(&lg["Properties"]["LogGroupName"]).unwrap()));
    }
    assert_eq!(t["Parameters"]["LogRetentionDays"]["Type"], "Number");
    // The level Lambda passes as AWS_LAMBDA_LOG_LEVEL, which telemetry reads first.
    let g = &t["Globals"]["Function"];
    assert_eq!(g["LoggingConfig"]["LogFormat"], "JSON");
    assert_eq!(
        tagged(&g["LoggingConfig"]["ApplicationLogLevel"]),
        ("!Ref".into(), "ApplicationLogLevel".into())
    );
    assert!(
        include_str!("../../../../shared/src/telemetry.rs").contains("\"AWS_LAMBDA_LOG_LEVEL\"")
    );
    for level in t["Parameters"]["ApplicationLogLevel"]["AllowedValues"]
        .as_sequence()
        .unwrap()
    {
        let l = level.as_str().unwrap().to_ascii_lowercase();
        assert!(
            ["trace", "debug", "info", "warn", "error"].contains(&l.as_str()),
            "{l}: not a tracing level"
        );
    }
    // Tracing, tags (propagated to the generated roles and mappings).
    assert_eq!(tagged(&g["Tracing"]), ("!Ref".into(), "Tracing".into()));
    assert_eq!(
        t["Parameters"]["Tracing"]["AllowedValues"],
        serde_yaml::to_value(["PassThrough", "Active"]).unwrap()
    );
    assert_eq!(g["PropagateTags"], true);
    assert_eq!(g["Tags"]["Service"], service_value(&t));
}

/// The `<a id="…">` anchors of docs/runbook.md: `(all, alarm sections)`; an alarm
/// section is a level-3 heading (`### <a id="…"></a>`).
fn runbook_anchors() -> (BTreeSet<String>, BTreeSet<String>) {
    let text = std::fs::read_to_string(root().join("docs/runbook.md")).unwrap();
    let id = |s: &str| s.split('"').next().unwrap().to_string();
    let all = text.split("<a id=\"").skip(1).map(id).collect();
    let alarms = text
        .lines()
        .filter_map(|l| l.strip_prefix("### <a id=\""))
        .map(id)
        .collect();
    (all, alarms)
}

#[test]
fn every_alarm_description_names_a_runbook_section_that_exists() {
    let t = template();
    let (anchors, sections) = runbook_anchors();
    let mut used = BTreeSet::new();
    for (name, p) in alarms(&t) {
        let d = p["AlarmDescription"].as_str().unwrap_or_default();
        let anchor = d
            .split("Runbook: docs/runbook.md#")
            .nth(1)
            .unwrap_or_else(|| panic!("{name}: no `Runbook: docs/runbook.md#…` in {d:?}"));
        let anchor = anchor.split_whitespace().next().unwrap();
        assert!(
            anchors.contains(anchor),
            "{name}: #{anchor} is not in docs/runbook.md"
        );
        used.insert(anchor.to_string());
    }
    // Every alarm section of the runbook belongs to an alarm.
    let unused: Vec<_> = sections.difference(&used).collect();
    assert!(
        unused.is_empty(),
        "runbook sections no alarm names: {unused:?}"
    );
}
