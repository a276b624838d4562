//! The template reads only what the code emits: every alarm and dashboard metric of our
//! namespace is in the metric catalogue and in the real EMF lines of a local run, for
//! the function in its dimension; a wrong metric name, function dimension or namespace
//! is caught; the B43 alarms read metrics the code emits.

use super::*;

#[test]
fn the_b43_alarms_read_metrics_the_code_emits() {
    let t = template();
    let sources = [
        include_str!("../../../../shared/src/batches/schedule_prune_deletions.rs"),
        include_str!("../../../../shared/src/workers/prune_deletions.rs"),
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

/// One metric the template reads: where, its namespace, name and dimensions.
#[derive(Debug, Clone)]
struct MetricRef {
    place: String,
    namespace: String,
    metric: String,
    dims: BTreeMap<String, Value>,
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
            "run_started of a worker",
            |t| {
                let p = &mut t["Resources"]["PatExpiringHeartbeatAlarm"]["Properties"];
                p["MetricName"] = "run_started".into();
                p["Dimensions"][1]["Value"] = "deliver-notification".into();
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
