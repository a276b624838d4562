//! Paging by symptom (issue 35): an alarm pages (`PageTopicArn`) only for what needs a
//! person now: a cron that did not run or did not finish, a dead letter, a function
//! whose every record or item failed, a schema the functions refuse, EventBridge
//! Scheduler losing a tick; every other alarm makes a ticket (`TicketTopicArn`). OK is
//! notified only where the cause can end by itself. docs/runbook.md lists every alarm
//! that pages, with its count.

use super::on_call::{page_action_value, pages, ticket_action_value};
use super::*;
use shared::metrics::{
    Emitters, ITEM_FAILURE_EMITTERS, RECORDS, RECORDS_FAILED, SCHEMA_INCOMPATIBLE,
};

/// Alarms whose OK notification helps: their cause can end without anyone acting.
fn notifies_ok(alarm: &str) -> bool {
    alarm.ends_with("HeartbeatAlarm") || schema_alarms().iter().any(|a| a == alarm)
}

/// The schema pages: the functions' `schema_incompatible` ten to an alarm (CloudWatch's
/// hard limit on the metrics of one alarm): `SchemaRefusedAlarm`, then
/// `SchemaRefused2Alarm`, ….
fn schema_alarms() -> Vec<String> {
    (0..Function::ALL.len().div_ceil(10))
        .map(|i| match i {
            0 => "SchemaRefusedAlarm".to_string(),
            i => format!("SchemaRefused{}Alarm", i + 1),
        })
        .collect()
}

/// The alarms that must page, from the function catalogue.
fn expected_pages() -> BTreeSet<String> {
    let mut want = BTreeSet::new();
    for f in Function::ALL.iter().copied() {
        let c = camel(f.name());
        want.insert(format!("{c}DLQAlarm"));
        if f.cron().is_some() {
            want.insert(format!("{c}HeartbeatAlarm"));
        } else {
            want.insert(format!("{c}AllRecordsFailedAlarm"));
        }
        if shared::metrics::FAILED.emitted_by(f) {
            want.insert(format!("{c}AllItemsFailedAlarm"));
        }
    }
    for stack_wide in ["SchedulerTargetErrorsAlarm", "SchedulerDroppedAlarm"] {
        want.insert(stack_wide.to_string());
    }
    want.extend(schema_alarms());
    want
}

fn template_pages(t: &Value) -> BTreeSet<String> {
    alarms(t)
        .into_iter()
        .filter(|(_, p)| pages(p))
        .map(|(n, _)| n)
        .collect()
}

#[test]
fn every_alarm_pages_or_makes_a_ticket_and_notifies_only_that_topic() {
    let t = template();
    let all = alarms(&t);
    assert!(all.len() >= 80, "{} alarms", all.len());
    for (name, p) in &all {
        let d = p["AlarmDescription"].as_str().unwrap_or_default();
        assert!(
            d.starts_with("Page: ") || d.starts_with("Ticket: "),
            "{name}: the description must start with Page: or Ticket: ({d:?})"
        );
        let want = if pages(p) {
            page_action_value()
        } else {
            ticket_action_value()
        };
        assert_eq!(p["AlarmActions"], want, "{name} AlarmActions");
        if notifies_ok(name) {
            assert_eq!(p["OKActions"], want, "{name} OKActions");
        } else {
            assert!(p["OKActions"].is_null(), "{name}: no OK notification");
        }
        assert!(p["InsufficientDataActions"].is_null(), "{name}");
        assert!(
            p["ActionsEnabled"].is_null(),
            "{name}: actions are never switched off by a parameter"
        );
    }
    for (name, expr) in [
        ("HasPageTopic", "!Not [!Equals [!Ref PageTopicArn, \"\"]]"),
        (
            "HasTicketTopic",
            "!Not [!Equals [!Ref TicketTopicArn, \"\"]]",
        ),
    ] {
        assert_eq!(
            t["Conditions"][name],
            serde_yaml::from_str::<Value>(expr).unwrap()
        );
    }
    assert!(t["Parameters"]["AlarmTopicArn"].is_null());
}

#[test]
fn the_alarms_that_page_are_exactly_the_symptoms_that_need_a_person() {
    let t = template();
    let got = template_pages(&t);
    let want = expected_pages();
    assert_eq!(
        got,
        want,
        "paging alarms: unexpected {:?}, missing {:?}",
        got.difference(&want).collect::<Vec<_>>(),
        want.difference(&got).collect::<Vec<_>>()
    );
    // What used to page and must not: retried failures, throttles, durations, queue age.
    for f in Function::ALL.iter().copied() {
        let c = camel(f.name());
        for kind in [
            "FailedRecords",
            "ItemFailures",
            "Throttles",
            "Duration",
            "QueueAge",
            "Errors",
        ] {
            let name = format!("{c}{kind}Alarm");
            if let Some(r) = t["Resources"].get(name.as_str()) {
                assert!(!pages(&r["Properties"]), "{name} must make a ticket");
            }
        }
    }
}

/// The alarms the runbook's "Alarms that page" section lists, its rows by kind expanded
/// with the functions of the code: `<Cron>` every cron function, `<Function>` every
/// function, `<Counting>` every function whose runs count failed items, `<Worker>`
/// every child function; the function's name in CamelCase.
fn runbook_page_list() -> Vec<String> {
    let text = std::fs::read_to_string(root().join("docs/runbook.md")).unwrap();
    let start = text
        .find("<a id=\"alarms-that-page\"></a>")
        .expect("docs/runbook.md has an \"Alarms that page\" section");
    let section = &text[start..];
    let section = &section[..section[3..].find("\n## ").map_or(section.len(), |e| e + 3)];
    let counting = |f: &Function| match ITEM_FAILURE_EMITTERS {
        Emitters::Only(fs) => fs.contains(f),
        _ => panic!("ITEM_FAILURE_EMITTERS names its functions"),
    };
    let mut listed = Vec::new();
    for row in section.lines().filter_map(|l| l.strip_prefix("| `")) {
        let name = row.split('`').next().unwrap();
        let kind: Option<fn(&Function) -> bool> = match name.split('>').next() {
            Some("<Cron") => Some(|f| f.cron().is_some()),
            Some("<Function") => Some(|_| true),
            Some("<Worker") => Some(|f| f.cron().is_none()),
            _ => None,
        };
        match (name.strip_prefix("<Counting>"), kind) {
            (Some(rest), _) => listed.extend(
                Function::ALL
                    .iter()
                    .filter(|f| counting(f))
                    .map(|f| format!("{}{rest}", camel(f.name()))),
            ),
            (None, Some(kind)) => {
                let rest = &name[name.find('>').unwrap() + 1..];
                listed.extend(
                    Function::ALL
                        .iter()
                        .filter(|f| kind(f))
                        .map(|f| format!("{}{rest}", camel(f.name()))),
                );
            }
            (None, None) => listed.push(name.to_string()),
        }
    }
    listed
}

#[test]
fn the_runbook_lists_every_alarm_that_pages() {
    let t = template();
    let pages = template_pages(&t);
    let listed = runbook_page_list();
    let unique: BTreeSet<String> = listed.iter().cloned().collect();
    assert_eq!(unique.len(), listed.len(), "an alarm is listed twice");
    assert_eq!(
        unique, pages,
        "docs/runbook.md's list and the template differ"
    );
    // Every kind of page is there: today 5 heartbeats, 10 dead-letter queues, 5 + 5
    // failure alarms and 3 for the schema and the scheduler.
    assert!(pages.len() >= 28, "{pages:?}");
}

#[test]
fn every_worker_pages_when_every_record_failed_for_three_periods() {
    let t = template();
    let service = service_value(&t);
    for f in Function::ALL.iter().copied().filter(|f| f.cron().is_none()) {
        let name = format!("{}AllRecordsFailedAlarm", camel(f.name()));
        let p = &resource(&t, &name)["Properties"];
        let queries = p["Metrics"].as_sequence().unwrap();
        for (id, m) in [("failed", RECORDS_FAILED), ("records", RECORDS)] {
            let q = queries.iter().find(|q| q["Id"] == id).unwrap();
            let metric = &q["MetricStat"]["Metric"];
            assert_eq!(metric["Namespace"], NAMESPACE, "{name}");
            assert_eq!(metric["MetricName"].as_str(), Some(m.name), "{name}");
            let dims = dimensions(&metric["Dimensions"]);
            assert_eq!(dims[FUNCTION_DIMENSION].as_str(), Some(f.name()), "{name}");
            assert_eq!(dims[SERVICE_DIMENSION], service, "{name}");
            assert_eq!(q["MetricStat"]["Stat"], "Sum", "{name}");
            assert_eq!(q["MetricStat"]["Period"].as_u64(), Some(300), "{name}");
        }
        let out: Vec<&Value> = queries.iter().filter(|q| q["ReturnData"] == true).collect();
        assert_eq!(
            out[0]["Expression"].as_str(),
            Some("IF(FILL(records, 0) > 0, FILL(failed, 0) / FILL(records, 0), 0)"),
            "{name}"
        );
        // Three periods in a row: one failed record waits out an hour-long visibility
        // timeout before its next try, so a single retried failure never pages.
        assert_eq!(p["EvaluationPeriods"].as_u64(), Some(3), "{name}");
        assert_eq!(p["DatapointsToAlarm"].as_u64(), Some(3), "{name}");
        assert_eq!(p["Threshold"].as_u64(), Some(1), "{name}");
        assert_eq!(p["ComparisonOperator"], "GreaterThanOrEqualToThreshold");
        assert_eq!(p["TreatMissingData"], "notBreaching", "{name}");
    }
}

#[test]
fn the_schema_pages_read_every_functions_schema_incompatible() {
    let t = template();
    let service = service_value(&t);
    let mut read = Vec::new();
    let names = schema_alarms();
    for name in &names {
        let p = &resource(&t, name)["Properties"];
        let queries = p["Metrics"].as_sequence().unwrap();
        let mut ids = Vec::new();
        for q in queries.iter().filter(|q| !q["MetricStat"].is_null()) {
            let m = &q["MetricStat"]["Metric"];
            assert_eq!(m["MetricName"].as_str(), Some(SCHEMA_INCOMPATIBLE.name));
            let dims = dimensions(&m["Dimensions"]);
            assert_eq!(dims[SERVICE_DIMENSION], service);
            read.push(dims[FUNCTION_DIMENSION].as_str().unwrap().to_string());
            ids.push(q["Id"].as_str().unwrap().to_string());
        }
        // CloudWatch refuses an alarm reading more than ten metrics.
        assert!(ids.len() <= 10, "{name} reads {} metrics", ids.len());
        let expr = queries.iter().find(|q| q["ReturnData"] == true).unwrap()["Expression"]
            .as_str()
            .unwrap();
        for id in &ids {
            assert!(
                expr.contains(&format!("FILL({id}, 0)")),
                "{name}: {expr} omits {id}"
            );
        }
        assert_eq!(p["Threshold"].as_u64(), Some(0));
        assert_eq!(p["ComparisonOperator"], "GreaterThanThreshold");
        assert!(
            p["AlarmDescription"]
                .as_str()
                .unwrap()
                .contains("Runbook: docs/runbook.md#schema-refused"),
            "{name}"
        );
    }
    let once: BTreeSet<String> = read.iter().cloned().collect();
    assert_eq!(once.len(), read.len(), "a function is read twice: {read:?}");
    let all: BTreeSet<String> = Function::ALL.iter().map(|f| f.name().to_string()).collect();
    assert_eq!(once, all, "every function's cold-start refusal");
    // No other schema alarm.
    let others: Vec<String> = alarms(&t)
        .into_iter()
        .map(|(n, _)| n)
        .filter(|n| n.starts_with("SchemaRefused") && !names.contains(n))
        .collect();
    assert!(others.is_empty(), "{others:?}");
}
