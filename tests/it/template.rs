//! `infra/template.yaml` against the code: every function crate is in the template and
//! vice versa, and the values cfn-lint cannot check inside `AWS::Serverless::Function`
//! match the function catalogue and behaviour §9.7/§9.12; every alarm and dashboard
//! metric of ours is one the code emits (`shared::metrics::CATALOGUE`), on the `Service`
//! and `function` dimensions; every alarm notifies on ALARM and OK and names a runbook
//! section that exists; cron heartbeats, pausable event-source mappings and log groups.

use std::collections::{BTreeMap, BTreeSet};

use serde_yaml::Value;
use shared::messages::Envelope;
use shared::metrics::{FUNCTION_DIMENSION, NAMESPACE, SERVICE_DIMENSION, SERVICE_ENV};
use shared::Function;

fn root() -> std::path::PathBuf {
    std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

pub(crate) fn template() -> Value {
    let text = std::fs::read_to_string(root().join("infra/template.yaml")).unwrap();
    serde_yaml::from_str(&text).unwrap()
}

/// A value with any CloudFormation tag (`!Ref`, `!GetAtt`, …) removed.
fn plain(v: &Value) -> &Value {
    match v {
        Value::Tagged(t) => plain(&t.value),
        other => other,
    }
}

/// `(tag, value)` of a tagged value, e.g. `("!GetAtt", "XQueue.Arn")`.
fn tagged(v: &Value) -> (String, String) {
    match v {
        Value::Tagged(t) => (
            t.tag.to_string(),
            plain(&t.value).as_str().unwrap_or_default().to_string(),
        ),
        other => (
            String::new(),
            other.as_str().unwrap_or_default().to_string(),
        ),
    }
}

pub(crate) fn camel(name: &str) -> String {
    name.split('-')
        .map(|w| w[..1].to_uppercase() + &w[1..])
        .collect()
}

pub(crate) fn resource<'a>(t: &'a Value, logical: &str) -> &'a Value {
    let r = &t["Resources"][logical];
    assert!(
        !r.is_null(),
        "resource {logical} is missing from the template"
    );
    r
}

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
            uri.trim_start_matches("../target/lambda/")
                .trim_end_matches('/')
                .to_string()
        })
        .collect();
    let catalogue: BTreeSet<String> = Function::ALL.iter().map(|f| f.name().to_string()).collect();
    assert_eq!(
        crates, in_template,
        "functions/ and infra/template.yaml disagree"
    );
    assert_eq!(
        crates, catalogue,
        "functions/ and shared::Function::ALL disagree"
    );
    assert_eq!(crates.len(), 10);
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

#[test]
fn the_b43_alarms_read_metrics_the_code_emits() {
    let t = template();
    let sources = [
        include_str!("../../shared/src/batches/schedule_prune_deletions.rs"),
        include_str!("../../shared/src/workers/prune_deletions.rs"),
    ]
    .join("\n");
    for (alarm, metric, function, threshold) in [
        (
            "PruneBacklogAgeAlarm",
            "oldest_schedule_age_s",
            "schedule-prune-deletions",
            300,
        ),
        ("PruneErrorsAlarm", "failed_schedules", "prune-deletions", 3),
        (
            "PruneRemainingSchedulesAlarm",
            "remaining_schedules",
            "schedule-prune-deletions",
            100,
        ),
    ] {
        let p = &resource(&t, alarm)["Properties"];
        assert_eq!(p["Namespace"], shared::metrics::NAMESPACE);
        assert_eq!(p["MetricName"].as_str(), Some(metric));
        let dims = dimensions(&p["Dimensions"]);
        assert_eq!(dims[FUNCTION_DIMENSION].as_str(), Some(function));
        assert_eq!(dims[SERVICE_DIMENSION], service_value(&t));
        assert_eq!(p["Threshold"].as_u64(), Some(threshold));
        assert!(
            // Declared with the report type: `("name", value)` in its `metrics()`.
            sources.contains(&format!("(\"{metric}\", ")),
            "{metric} is not emitted"
        );
    }
}

// ------------------------------------------------------------------ metrics, alarms, on call

/// The value every custom metric's `Service` dimension must carry: the one the functions
/// get as `SERVICE_NAME` (so alarm and code always agree, whatever `ServiceName` is).
pub(crate) fn service_value(t: &Value) -> Value {
    let v = t["Globals"]["Function"]["Environment"]["Variables"][SERVICE_ENV].clone();
    assert!(!v.is_null(), "Globals set no {SERVICE_ENV}");
    v
}

/// `Dimensions: [{Name, Value}]` as a map.
pub(crate) fn dimensions(v: &Value) -> BTreeMap<String, Value> {
    v.as_sequence()
        .map(|s| {
            s.iter()
                .map(|d| (d["Name"].as_str().unwrap().to_string(), d["Value"].clone()))
                .collect()
        })
        .unwrap_or_default()
}

/// One metric the template reads: where, its namespace, name and dimensions.
#[derive(Debug, Clone)]
struct MetricRef {
    place: String,
    namespace: String,
    metric: String,
    dims: BTreeMap<String, Value>,
}

/// Alarms by logical id.
pub(crate) fn alarms(t: &Value) -> Vec<(String, &Value)> {
    t["Resources"]
        .as_mapping()
        .unwrap()
        .iter()
        .filter(|(_, r)| r["Type"] == "AWS::CloudWatch::Alarm")
        .map(|(k, r)| (k.as_str().unwrap().to_string(), &r["Properties"]))
        .collect()
}

/// Every metric read by an alarm (plain or in a metric-math `Metrics` list).
fn alarm_metrics(t: &Value) -> Vec<MetricRef> {
    let mut out = Vec::new();
    for (name, p) in alarms(t) {
        if !p["MetricName"].is_null() {
            out.push(MetricRef {
                place: name.clone(),
                namespace: p["Namespace"].as_str().unwrap_or_default().into(),
                metric: p["MetricName"].as_str().unwrap_or_default().into(),
                dims: dimensions(&p["Dimensions"]),
            });
        }
        for q in p["Metrics"].as_sequence().into_iter().flatten() {
            let m = &q["MetricStat"]["Metric"];
            if m.is_null() {
                continue;
            }
            out.push(MetricRef {
                place: format!("{name}.{}", q["Id"].as_str().unwrap_or_default()),
                namespace: m["Namespace"].as_str().unwrap_or_default().into(),
                metric: m["MetricName"].as_str().unwrap_or_default().into(),
                dims: dimensions(&m["Dimensions"]),
            });
        }
    }
    out
}

/// The dashboard's body (the `!Sub` text) and its variables.
fn dashboard(t: &Value) -> (String, BTreeMap<String, Value>) {
    let r = resource(t, "Dashboard");
    assert_eq!(r["Type"], "AWS::CloudWatch::Dashboard");
    let Value::Tagged(sub) = &r["Properties"]["DashboardBody"] else {
        panic!("DashboardBody is not a !Sub");
    };
    assert_eq!(sub.tag.to_string(), "!Sub");
    let body = sub.value[0].as_str().unwrap().to_string();
    let vars = sub.value[1]
        .as_mapping()
        .unwrap()
        .iter()
        .map(|(k, v)| (k.as_str().unwrap().to_string(), v.clone()))
        .collect();
    (body, vars)
}

/// Every metric of every dashboard widget; a `${Var}` dimension value is resolved
/// through the `!Sub` variables (`${Service}` → the `Service` expression).
fn dashboard_metrics(body: &str, vars: &BTreeMap<String, Value>) -> Vec<MetricRef> {
    let json: serde_json::Value =
        serde_json::from_str(body).unwrap_or_else(|e| panic!("dashboard body: {e}"));
    let mut out = Vec::new();
    for (i, w) in json["widgets"].as_array().unwrap().iter().enumerate() {
        for m in w["properties"]["metrics"].as_array().into_iter().flatten() {
            let parts: Vec<&serde_json::Value> = m
                .as_array()
                .unwrap()
                .iter()
                .filter(|x| x.is_string())
                .collect();
            let s = |x: &serde_json::Value| x.as_str().unwrap().to_string();
            let mut dims = BTreeMap::new();
            for kv in parts[2..].chunks(2) {
                let v = s(kv[1]);
                let v = match v.strip_prefix("${").and_then(|v| v.strip_suffix('}')) {
                    Some(var) if vars.contains_key(var) => vars[var].clone(),
                    _ => Value::String(v),
                };
                dims.insert(s(kv[0]), v);
            }
            out.push(MetricRef {
                place: format!("dashboard widget {i} ({})", w["properties"]["title"]),
                namespace: s(parts[0]),
                metric: s(parts[1]),
                dims,
            });
        }
    }
    out
}

/// Every metric the template reads, alarms and dashboard.
fn template_metrics(t: &Value) -> Vec<MetricRef> {
    let (body, vars) = dashboard(t);
    let mut all = alarm_metrics(t);
    all.extend(dashboard_metrics(&body, &vars));
    all
}

/// `(function, metric)` for every metric the catalogue says each function emits.
fn catalogue_pairs() -> BTreeSet<(String, String)> {
    let mut out = BTreeSet::new();
    for m in shared::metrics::CATALOGUE {
        for f in Function::ALL.iter().copied().filter(|f| m.emitted_by(*f)) {
            out.insert((f.name().to_string(), m.name.to_string()));
        }
    }
    out
}

/// What is wrong with the template's metrics, given the `(function, metric)` pairs the
/// code emits (from the catalogue here; the same check takes the pairs collected from
/// the functions' real EMF lines). Our namespace: exactly the dimensions `Service`
/// (= the functions' `SERVICE_NAME`) and `function`, and a pair the function emits.
/// Other namespaces: only the AWS services the stack uses.
fn metric_problems(
    refs: &[MetricRef],
    emitted: &BTreeSet<(String, String)>,
    service: &Value,
) -> Vec<String> {
    let mut problems = Vec::new();
    for r in refs {
        let at = &r.place;
        if r.namespace != NAMESPACE {
            if !["AWS/Lambda", "AWS/SQS", "AWS/Scheduler"].contains(&r.namespace.as_str()) {
                problems.push(format!("{at}: unknown namespace {:?}", r.namespace));
            }
            continue;
        }
        let keys: BTreeSet<&str> = r.dims.keys().map(String::as_str).collect();
        if keys != BTreeSet::from([SERVICE_DIMENSION, FUNCTION_DIMENSION]) {
            problems.push(format!("{at}: {} dimensions are {keys:?}", r.metric));
            continue;
        }
        if &r.dims[SERVICE_DIMENSION] != service {
            problems.push(format!(
                "{at}: Service dimension {:?} is not the functions' {SERVICE_ENV}",
                r.dims[SERVICE_DIMENSION]
            ));
        }
        let Some(function) = r.dims[FUNCTION_DIMENSION].as_str() else {
            problems.push(format!("{at}: the function dimension is not a literal"));
            continue;
        };
        if !emitted.contains(&(function.to_string(), r.metric.clone())) {
            problems.push(format!("{at}: {function} does not emit {}", r.metric));
        }
    }
    problems
}

#[test]
fn every_alarm_and_dashboard_metric_of_ours_is_emitted_by_the_function_in_its_dimension() {
    let t = template();
    let refs = template_metrics(&t);
    let ours = |rs: &[MetricRef], p: &str| {
        rs.iter()
            .filter(|r| r.namespace == NAMESPACE && r.place.starts_with(p))
            .count()
    };
    assert!(
        ours(&refs, "dashboard") >= 40,
        "the dashboard reads our metrics"
    );
    assert!(
        alarm_metrics(&t)
            .iter()
            .filter(|r| r.namespace == NAMESPACE)
            .count()
            >= 20,
        "the alarms read our metrics"
    );
    let problems = metric_problems(&refs, &catalogue_pairs(), &service_value(&t));
    assert!(problems.is_empty(), "{problems:#?}");
}

/// The same check against what the functions really print: every function run locally
/// on the demo data, its EMF lines collected (`crate::emitted`). Every metric of the
/// alarms and the dashboard was emitted by the function in its dimension, in our
/// namespace and with exactly the dimension set the template uses.
#[tokio::test]
async fn every_alarm_and_dashboard_metric_is_in_the_functions_real_emf_lines() {
    let t = template();
    let e = crate::emitted::emitted_metrics().await;
    let pairs: BTreeSet<(String, String)> = e
        .metrics
        .iter()
        .map(|m| (m.function.clone(), m.name.clone()))
        .collect();
    for m in &e.metrics {
        assert_eq!(m.namespace, NAMESPACE, "{m:?}");
        assert_eq!(
            m.dimensions,
            [SERVICE_DIMENSION, FUNCTION_DIMENSION],
            "the alarms read these dimensions: {m:?}"
        );
    }
    // The local run's Service value is `local`; the template's is the stack's: compare
    // names and functions here, the Service wiring in the catalogue test above.
    let problems = metric_problems(&template_metrics(&t), &pairs, &service_value(&t));
    assert!(problems.is_empty(), "{problems:#?}");
    let missing = metric_problems(&template_metrics(&t), &BTreeSet::new(), &service_value(&t));
    assert!(
        !missing.is_empty(),
        "an empty emitted set must fail every reference"
    );
}

/// Each broken copy of the template must produce a problem naming what was broken.
#[test]
fn a_wrong_metric_name_function_dimension_or_namespace_is_caught() {
    let t = template();
    let service = service_value(&t);
    let check = |t: &Value| metric_problems(&template_metrics(t), &catalogue_pairs(), &service);
    assert!(check(&t).is_empty());
    type Break = fn(&mut Value);
    let breaks: [(&str, Break, &str); 7] = [
        (
            "misspelt metric",
            |t| {
                t["Resources"]["RemoveExpiredMembersFailedRecordsAlarm"]["Properties"]
                    ["MetricName"] = "records_faild".into()
            },
            "remove-expired-members does not emit records_faild",
        ),
        (
            "metric of another function",
            |t| {
                t["Resources"]["PlaceholderMaxAttemptsAlarm"]["Properties"]["Dimensions"][1]
                    ["Value"] = "pat-expiring".into()
            },
            "pat-expiring does not emit max_attempts_reached",
        ),
        (
            "heartbeat on a worker",
            |t| {
                t["Resources"]["PatExpiringHeartbeatAlarm"]["Properties"]["Dimensions"][1]
                    ["Value"] = "deliver-notification".into()
            },
            "deliver-notification does not emit run_started",
        ),
        (
            "only the function dimension",
            |t| {
                let d = t["Resources"]["PruneErrorsAlarm"]["Properties"]["Dimensions"]
                    .as_sequence_mut()
                    .unwrap();
                d.remove(0);
            },
            "failed_schedules dimensions are {\"function\"}",
        ),
        (
            "items of a function that counts none",
            |t| {
                t["Resources"]["RemoveExpiredMembersAllItemsFailedAlarm"]["Properties"]["Metrics"]
                    [2]["MetricStat"]["Metric"]["Dimensions"][1]["Value"] = "delete-user".into()
            },
            "delete-user does not emit items",
        ),
        (
            "namespace typo",
            |t| {
                t["Resources"]["MailFailureRateAlarm"]["Properties"]["Metrics"][1]["MetricStat"]
                    ["Metric"]["Namespace"] = "GitlabHousekeeping".into()
            },
            "unknown namespace \"GitlabHousekeeping\"",
        ),
        (
            "dashboard metric misspelt",
            |t| {
                let Value::Tagged(sub) =
                    &mut t["Resources"]["Dashboard"]["Properties"]["DashboardBody"]
                else {
                    unreachable!()
                };
                let body = sub.value[0]
                    .as_str()
                    .unwrap()
                    .replace("\"mails_sent\"", "\"mail_sent\"");
                sub.value[0] = body.into();
            },
            "deliver-notification does not emit mail_sent",
        ),
    ];
    for (what, broken, expect) in breaks {
        let mut copy = t.clone();
        broken(&mut copy);
        let problems = check(&copy);
        assert!(
            problems.iter().any(|p| p.contains(expect)),
            "{what}: not caught; problems: {problems:#?}"
        );
    }
    // A Service dimension that is not the functions' SERVICE_NAME.
    let mut copy = t.clone();
    copy["Resources"]["PruneBacklogAgeAlarm"]["Properties"]["Dimensions"][0]["Value"] =
        "production".into();
    assert!(check(&copy)
        .iter()
        .any(|p| p.contains("PruneBacklogAgeAlarm: Service dimension")));
}

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
    assert_eq!(mappings, 10);
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
    assert!(include_str!("../../shared/src/telemetry.rs").contains("\"AWS_LAMBDA_LOG_LEVEL\""));
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
