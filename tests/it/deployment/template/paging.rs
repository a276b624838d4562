//! Paging by symptom (issues 35, 51, 48): at most one page per function and two for the
//! stack (ten today) (`PageTopicArn`), each a
//! composite alarm: per cron a run that did not happen or finish, the schema or release
//! refused, each destructive worker (group-destroy, delete-user, storage-cleanup)
//! blocked or failing on the same item again, and the stack stalled (two crons failing
//! at once: a database or network outage). The missed-run and stuck-worker pages are
//! suppressed while the stalled or schema page fires (`ActionsSuppressor`), so an
//! outage is one page (`tests/it/deployment/paging_moto.rs` counts it in moto). Every
//! paging alarm also sends OK. Every other alarm makes a ticket (`TicketTopicArn`) or,
//! as a child of a paging composite, notifies nobody itself (`Feeds <composite>: …`).
//! Every alarm is named `<stack>-<logical id>` and links its runbook section from
//! `RunbookBaseUrl`. docs/runbook.md lists every alarm that pages.

use super::on_call::{page_action_value, pages, ticket_action_value};
use super::*;
use shared::metrics::{RECORDS, RECORDS_FAILED, SCHEMA_INCOMPATIBLE};

/// The schema alarms: the functions' `schema_incompatible` ten to an alarm (CloudWatch's
/// hard limit on the metrics of one alarm): `SchemaRefusedAlarm`, then
/// `SchemaRefused2Alarm`, …; they feed `SchemaOrReleaseRefusedAlarm`.
fn schema_alarms() -> Vec<String> {
    (0..Function::ALL.len().div_ceil(10))
        .map(|i| match i {
            0 => "SchemaRefusedAlarm".to_string(),
            i => format!("SchemaRefused{}Alarm", i + 1),
        })
        .collect()
}

/// The destructive workers that page when stuck.
const DESTRUCTIVE: [&str; 3] = ["group-destroy", "delete-user", "storage-cleanup"];

/// The alarms that must page, from the function catalogue.
fn expected_pages() -> BTreeSet<String> {
    let mut want = BTreeSet::new();
    for f in Function::ALL.iter().copied().filter(|f| f.cron().is_some()) {
        want.insert(format!("{}MissedRunAlarm", camel(f.name())));
    }
    for w in DESTRUCTIVE {
        want.insert(format!("{}StuckAlarm", camel(w)));
    }
    want.insert("HousekeepingStalledAlarm".to_string());
    want.insert("SchemaOrReleaseRefusedAlarm".to_string());
    want
}

fn template_pages(t: &Value) -> BTreeSet<String> {
    alarms(t)
        .into_iter()
        .chain(composites(t))
        .filter(|(_, p)| pages(p))
        .map(|(n, _)| n)
        .collect()
}

/// The alarms a composite's rule refers to (`ALARM("${X.Arn}")`).
fn rule_children(p: &Value) -> Vec<String> {
    let rule = tagged(&p["AlarmRule"]).1;
    rule.split("ALARM(\"${")
        .skip(1)
        .map(|s| s.split(".Arn}").next().unwrap().to_string())
        .collect()
}

#[test]
fn every_alarm_pages_makes_a_ticket_or_feeds_a_composite_and_is_named_and_linked() {
    let t = template();
    let all: Vec<(String, &Value)> = alarms(&t).into_iter().chain(composites(&t)).collect();
    assert!(all.len() >= 90, "{} alarms", all.len());
    let composite: BTreeMap<String, &Value> = composites(&t).into_iter().collect();
    for (name, p) in &all {
        let d = description(p);
        assert_eq!(
            p["AlarmName"],
            serde_yaml::from_str::<Value>(&format!("!Sub \"${{AWS::StackName}}-{name}\"")).unwrap(),
            "{name}: named after the stack"
        );
        assert!(
            d.contains("Runbook: ${RunbookBaseUrl}#"),
            "{name}: the runbook link is built from RunbookBaseUrl ({d:?})"
        );
        assert!(p["InsufficientDataActions"].is_null(), "{name}");
        assert!(
            p["ActionsEnabled"].is_null(),
            "{name}: actions are never switched off by a parameter"
        );
        if pages(p) {
            assert!(
                composite.contains_key(name),
                "{name}: a page is a composite alarm"
            );
            assert_eq!(
                p["AlarmActions"],
                page_action_value(),
                "{name} AlarmActions"
            );
            assert_eq!(
                p["OKActions"],
                page_action_value(),
                "{name}: every page sends OK"
            );
        } else if d.starts_with("Ticket: ") {
            assert_eq!(
                p["AlarmActions"],
                ticket_action_value(),
                "{name} AlarmActions"
            );
            assert!(p["OKActions"].is_null(), "{name}: no OK notification");
        } else {
            // A child: a composite it names reads it, and it notifies nobody itself; or
            // the suppressor of the pages.
            if let Some(r) = d.strip_prefix("Feeds ") {
                let parent = r.split(':').next().unwrap();
                let parent_p = composite
                    .get(parent)
                    .unwrap_or_else(|| panic!("{name} feeds {parent}, which is no composite"));
                assert!(
                    rule_children(parent_p).contains(name),
                    "{name}: {parent}'s rule does not read it"
                );
            } else {
                assert!(
                    name == "PagesSuppressedAlarm" && d.starts_with("Suppresses "),
                    "{name}: Page:, Ticket: or Feeds <alarm>: ({d:?})"
                );
            }
            assert!(
                p["AlarmActions"].is_null() && p["OKActions"].is_null(),
                "{name}: a child notifies nobody itself"
            );
        }
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
    assert!(
        t["Parameters"]["RunbookBaseUrl"]["Default"].is_null(),
        "RunbookBaseUrl is the operator's own answer"
    );
}

#[test]
fn one_page_per_function_at_most_and_exactly_the_symptoms_that_need_a_person() {
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
    // The paging budget comes from the function table (issue 48): at most one page per
    // function (its missed run, or its stuck worker) and the two stack-wide pages (the
    // stack stalled, the schema or release refused): ten with today's table.
    for f in Function::ALL.iter().copied() {
        let c = camel(f.name());
        let own = got.iter().filter(|n| n.starts_with(&c)).count();
        assert!(own <= 1, "{} pages for {}: {got:?}", own, f.name());
    }
    let stack_wide = got
        .iter()
        .filter(|n| {
            !Function::ALL
                .iter()
                .any(|f| n.starts_with(&camel(f.name())))
        })
        .count();
    assert_eq!(stack_wide, 2, "{got:?}");
    // Retried failures, throttles, durations, queue age, dead letters of the other
    // workers, every-record and every-item failures: tickets.
    for f in Function::ALL.iter().copied() {
        let c = camel(f.name());
        for kind in [
            "FailedRecords",
            "ItemFailures",
            "Throttles",
            "Duration",
            "QueueAge",
            "Errors",
            "AllRecordsFailed",
            "AllItemsFailed",
            "DLQ",
        ] {
            let name = format!("{c}{kind}Alarm");
            if let Some(r) = t["Resources"].get(name.as_str()) {
                let p = &r["Properties"];
                assert!(!pages(p), "{name} must not page itself");
                let d = description(p);
                if kind == "DLQ" && DESTRUCTIVE.contains(&f.name()) {
                    assert!(
                        d.starts_with(&format!("Feeds {c}StuckAlarm: ")),
                        "{name}: {d}"
                    );
                } else {
                    assert!(d.starts_with("Ticket: "), "{name} makes a ticket: {d}");
                }
            }
        }
    }
}

#[test]
fn a_stalled_stack_or_a_refused_schema_suppresses_the_other_pages() {
    let t = template();
    let c: BTreeMap<String, &Value> = composites(&t).into_iter().collect();
    let crons: Vec<String> = Function::ALL
        .iter()
        .filter(|f| f.cron().is_some())
        .map(|f| camel(f.name()))
        .collect();
    // Stalled: any two crons failing (errors, failed records or a missed run), unless
    // the schema explains it.
    let stalled = c["HousekeepingStalledAlarm"];
    let read = rule_children(stalled);
    for (i, a) in crons.iter().enumerate() {
        let failing = c[&format!("{a}FailingAlarm")];
        assert_eq!(
            rule_children(failing),
            [
                format!("{a}ErrorsAlarm"),
                format!("{a}FailedRecordsAlarm"),
                format!("{a}HeartbeatAlarm")
            ],
            "{a}FailingAlarm"
        );
        for b in &crons[i + 1..] {
            let pair = format!(
                "(ALARM(\"${{{a}FailingAlarm.Arn}}\") AND ALARM(\"${{{b}FailingAlarm.Arn}}\"))"
            );
            assert!(tagged(&stalled["AlarmRule"]).1.contains(&pair), "{pair}");
        }
    }
    assert_eq!(read.last().unwrap(), "SchemaOrReleaseRefusedAlarm");
    assert!(tagged(&stalled["AlarmRule"])
        .1
        .ends_with(") AND NOT ALARM(\"${SchemaOrReleaseRefusedAlarm.Arn}\")"));
    assert_eq!(
        rule_children(c["PagesSuppressedAlarm"]),
        ["HousekeepingStalledAlarm", "SchemaOrReleaseRefusedAlarm"]
    );
    assert_eq!(
        rule_children(c["SchemaOrReleaseRefusedAlarm"]),
        schema_alarms()
    );
    for name in expected_pages() {
        let p = c[&name];
        let suppressed =
            !["HousekeepingStalledAlarm", "SchemaOrReleaseRefusedAlarm"].contains(&name.as_str());
        if suppressed {
            assert_eq!(
                tagged(&p["ActionsSuppressor"]),
                ("!GetAtt".into(), "PagesSuppressedAlarm.Arn".into()),
                "{name}"
            );
            // CloudWatch waits this long for the suppressor before acting, and keeps
            // suppressing this long after it recovered.
            assert_eq!(
                p["ActionsSuppressorWaitPeriod"].as_u64(),
                Some(600),
                "{name}"
            );
            assert_eq!(
                p["ActionsSuppressorExtensionPeriod"].as_u64(),
                Some(3600),
                "{name}"
            );
        } else {
            assert!(
                p["ActionsSuppressor"].is_null(),
                "{name} is never suppressed"
            );
        }
    }
    assert_eq!(
        rule_children(c["GroupDestroyStuckAlarm"]),
        ["GroupDestroyBlockedAlarm", "GroupDestroyDLQAlarm"]
    );
    assert_eq!(
        rule_children(c["DeleteUserStuckAlarm"]),
        ["DeleteUserDLQAlarm"]
    );
    assert_eq!(
        rule_children(c["StorageCleanupStuckAlarm"]),
        ["StorageCleanupDLQAlarm"]
    );
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
    let counting = |f: &Function| f.counts_item_failures();
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
    assert_eq!(pages.len(), expected_pages().len(), "{pages:?}");
}

#[test]
fn every_worker_makes_a_ticket_when_every_record_failed_for_three_periods() {
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
        // timeout before its next try, so a single retried failure never alarms.
        assert_eq!(p["EvaluationPeriods"].as_u64(), Some(3), "{name}");
        assert_eq!(p["DatapointsToAlarm"].as_u64(), Some(3), "{name}");
        assert_eq!(p["Threshold"].as_u64(), Some(1), "{name}");
        assert_eq!(p["ComparisonOperator"], "GreaterThanOrEqualToThreshold");
        assert_eq!(p["TreatMissingData"], "notBreaching", "{name}");
    }
}

#[test]
fn the_schema_page_reads_every_functions_schema_incompatible() {
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
            description(p).contains("Runbook: ${RunbookBaseUrl}#schema-refused"),
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
