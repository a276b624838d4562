//! What on call relies on in the template: every cron function has a heartbeat for a
//! run that did not happen or did not finish, armed through cutover; every event-source
//! mapping can be paused by its own parameter; every function logs to its own log group
//! kept for the retention parameter; every alarm links a runbook section that exists
//! (`${RunbookBaseUrl}#<section>`).
//! Which alarms page and which make a ticket: `paging`.

use super::*;
use shared::metrics::OUTCOME_DONE;

/// The actions of an alarm that pages: the page topic, when given.
pub(crate) fn page_action_value() -> Value {
    serde_yaml::from_str("!If [HasPageTopic, [!Ref PageTopicArn], !Ref AWS::NoValue]").unwrap()
}

/// The actions of a ticket-severity alarm: the ticket topic, when given.
pub(crate) fn ticket_action_value() -> Value {
    serde_yaml::from_str("!If [HasTicketTopic, [!Ref TicketTopicArn], !Ref AWS::NoValue]").unwrap()
}

/// Whether an alarm pages: its description says so (`Page: …`; the rest `Ticket: …`,
/// or `Feeds <composite>: …` for the children of a composite that pages).
pub(crate) fn pages(alarm: &Value) -> bool {
    description(alarm).starts_with("Page: ")
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

/// The minute of a daily cron expression (`cron(10 0 * * ? *)` → 10).
fn cron_minute(cron: &str) -> u64 {
    cron.trim_start_matches("cron(")
        .split(' ')
        .next()
        .and_then(|m| m.parse().ok())
        .unwrap_or_else(|| panic!("{cron}: a fixed minute"))
}

#[test]
fn every_cron_function_has_a_heartbeat_for_a_run_that_did_not_happen_or_finish() {
    let t = template();
    let service = service_value(&t);
    let heartbeats: BTreeMap<String, (String, &Value)> = alarms(&t)
        .into_iter()
        .filter(|(name, _)| name.ends_with("HeartbeatAlarm"))
        .map(|(name, p)| {
            let f = dimensions(&p["Dimensions"])[FUNCTION_DIMENSION].clone();
            (f.as_str().unwrap().to_string(), (name, p))
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
        let (alarm, p) = &heartbeats[f.name()];
        let name = f.name();
        let c = camel(name);
        assert_eq!(alarm, &format!("{c}HeartbeatAlarm"));
        assert_eq!(p["Namespace"], NAMESPACE, "{name}");
        // A record that ended with its work done: a run that started and failed on every
        // attempt counts none, so "did not finish" pages as "did not run" does.
        assert_eq!(p["MetricName"], OUTCOME_DONE.name, "{name}");
        assert_eq!(dimensions(&p["Dimensions"])[SERVICE_DIMENSION], service);
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
        if cron_s < 3600 {
            // For */5: room for one late tick and the open period.
            assert!(window >= 3 * cron_s, "{name}: one late tick must not page");
        } else {
            // The cron period plus the period still open: yesterday's tick is inside the
            // window until the end of the period that holds today's, so the heartbeat
            // never pages before the cron time, and a missed tick pages at the end of
            // that period, within the hour (issue 51).
            assert_eq!(
                window,
                cron_s + period,
                "{name}: the cron period plus the open period"
            );
            let minute = cron_minute(cron);
            let late = period - (minute * 60) % period;
            assert!(
                late <= 3600,
                "{name}: a missed tick pages {late} s after the cron time"
            );
        }
        // Armed through cutover: missing data breaches only while the schedule runs, and
        // the actions are never switched off (a disabled schedule leaves the alarm in OK,
        // so the first missed run after switching it on is a state change that pages;
        // tests/it/deployment/cutover.rs deploys it off, then on).
        assert_eq!(
            p["TreatMissingData"],
            serde_yaml::from_str::<Value>(&format!("!If [{c}ScheduleOn, breaching, notBreaching]"))
                .unwrap(),
            "{name}"
        );
        assert!(
            p["ActionsEnabled"].is_null(),
            "{name}: actions must stay on through cutover"
        );
        // It pages through its composite, which a stalled stack or a refused schema
        // suppresses (`paging`): no actions of its own.
        assert!(
            p["AlarmActions"].is_null() && p["OKActions"].is_null(),
            "{name}: pages through {c}MissedRunAlarm only"
        );
        let page = &resource(&t, &format!("{c}MissedRunAlarm"))["Properties"];
        assert!(pages(page), "{c}MissedRunAlarm: a missed run pages");
        assert_eq!(page["AlarmActions"], page_action_value(), "{name}");
        assert_eq!(page["OKActions"], page_action_value(), "{name}");
        assert_eq!(
            tagged(&page["AlarmRule"]).1,
            format!("ALARM(\"${{{c}HeartbeatAlarm.Arn}}\")"),
            "{c}MissedRunAlarm follows its heartbeat alone"
        );
        assert!(
            page["ActionsEnabled"].is_null(),
            "{name}: actions must stay on through cutover"
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
    for (name, p) in alarms(&t).into_iter().chain(composites(&t)) {
        let d = description(p);
        let anchor = d
            .split("Runbook: ${RunbookBaseUrl}#")
            .nth(1)
            .unwrap_or_else(|| panic!("{name}: no `Runbook: ${{RunbookBaseUrl}}#…` in {d:?}"));
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
