//! Items failing inside a run are watched (issue 34): every function whose runs count
//! failed items (a per-item failure counter on its `done` line or a `failed_*`
//! metric) emits the catalogue's `failed` and `items`, and the template has, for each
//! of them and for no other function, a ticket when any item failed and another when
//! every item of a period failed (`failed` = `items`; pages are composites: `paging`).

use std::collections::BTreeSet;

use serde_yaml::Value;
use shared::metrics::{FAILED, FUNCTION_DIMENSION, ITEMS, NAMESPACE, SERVICE_DIMENSION};
use shared::Function;

use super::on_call::{pages, ticket_action_value};
use super::{alarms, camel, dimensions, resource, service_value, template};
use crate::emitted::emitted_metrics;

/// The page's expression: the share of the attempted items that failed.
const SHARE: &str = "IF(FILL(items, 0) > 0, FILL(failed, 0) / FILL(items, 0), 0)";

/// A field of a `done` line that counts failed items (`failed_rows`,
/// `total_user_failures`, …; GitLab's `extra.…` copies included).
fn is_failure_counter(key: &str, v: &serde_json::Value) -> bool {
    key.contains("fail") && v.is_u64()
}

#[tokio::test]
async fn every_function_with_a_failure_counter_emits_failed_and_items() {
    let e = emitted_metrics().await;
    let mut counting = BTreeSet::new();
    for l in e.lines.iter().filter(|l| l["message"] == "done") {
        let f = l["function"].as_str().unwrap_or_default();
        if l.as_object()
            .is_some_and(|m| m.iter().any(|(k, v)| is_failure_counter(k, v)))
        {
            counting.insert(f.to_string());
        }
    }
    for m in e.metrics.iter().filter(|m| m.name.starts_with("failed_")) {
        counting.insert(m.function.clone());
    }
    let want: BTreeSet<String> = [
        "remove-expired-members",
        "prune-deletions",
        "adjourned-group-deletion",
        "placeholder-user-cleanup",
        "pat-expiring",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    assert_eq!(counting, want, "the functions that count failed items");
    for f in &counting {
        for m in [FAILED, ITEMS] {
            assert!(
                e.has(f, m.name),
                "{f} counts failed items but emits no {}",
                m.name
            );
            let function = Function::from_name(f).unwrap();
            assert!(
                m.emitted_by(function),
                "{} is not catalogued for {f}",
                m.name
            );
        }
    }
}

#[test]
fn every_function_counting_failed_items_has_a_ticket_for_any_and_for_all_failed() {
    let t = template();
    let service = service_value(&t);
    let yaml = |s: &str| serde_yaml::from_str::<Value>(s).unwrap();
    assert_eq!(t["Parameters"]["TicketTopicArn"]["Default"], "");
    assert_eq!(
        t["Conditions"]["HasTicketTopic"],
        yaml("!Not [!Equals [!Ref TicketTopicArn, \"\"]]")
    );
    let ours = |m: &Value, metric: &str, f: Function| {
        assert_eq!(m["Namespace"], NAMESPACE, "{f} {metric}");
        assert_eq!(m["MetricName"].as_str(), Some(metric), "{f}");
        let dims = dimensions(&m["Dimensions"]);
        assert_eq!(
            dims[FUNCTION_DIMENSION].as_str(),
            Some(f.name()),
            "{metric}"
        );
        assert_eq!(dims[SERVICE_DIMENSION], service, "{f} {metric}");
    };
    let mut watched = BTreeSet::new();
    for f in Function::ALL.iter().copied() {
        let c = camel(f.name());
        let (ticket, page) = (
            format!("{c}ItemFailuresAlarm"),
            format!("{c}AllItemsFailedAlarm"),
        );
        assert_eq!(FAILED.emitted_by(f), ITEMS.emitted_by(f), "{f}");
        if !FAILED.emitted_by(f) {
            assert!(
                t["Resources"][ticket.as_str()].is_null(),
                "{f} counts no items"
            );
            assert!(
                t["Resources"][page.as_str()].is_null(),
                "{f} counts no items"
            );
            continue;
        }
        watched.insert(f);
        // The ticket: any failed item in an hour, to the ticket topic.
        let p = &resource(&t, &ticket)["Properties"];
        assert!(!pages(p), "{ticket} makes a ticket");
        ours(p, FAILED.name, f);
        assert_eq!(p["Statistic"], "Sum", "{ticket}");
        assert_eq!(p["Threshold"].as_u64(), Some(0), "{ticket}");
        assert_eq!(p["ComparisonOperator"], "GreaterThanThreshold", "{ticket}");
        assert_eq!(p["TreatMissingData"], "notBreaching", "{ticket}");
        assert_eq!(p["AlarmActions"], ticket_action_value(), "{ticket}");
        // Every item of 5 minutes failed: a ticket too (issue 51: a stuck destructive
        // worker or a stalled stack pages, through their composites).
        let p = &resource(&t, &page)["Properties"];
        assert!(!pages(p), "{page} makes a ticket");
        let queries = p["Metrics"].as_sequence().unwrap();
        for (id, m) in [("failed", FAILED), ("items", ITEMS)] {
            let q = queries
                .iter()
                .find(|q| q["Id"] == id)
                .unwrap_or_else(|| panic!("{page}: no query {id}"));
            assert_eq!(q["ReturnData"], false, "{page} {id}");
            ours(&q["MetricStat"]["Metric"], m.name, f);
            assert_eq!(q["MetricStat"]["Stat"], "Sum", "{page} {id}");
            assert_eq!(q["MetricStat"]["Period"].as_u64(), Some(300), "{page} {id}");
        }
        let out: Vec<&Value> = queries.iter().filter(|q| q["ReturnData"] == true).collect();
        assert_eq!(out.len(), 1, "{page}");
        assert_eq!(out[0]["Expression"].as_str(), Some(SHARE), "{page}");
        assert_eq!(p["Threshold"].as_u64(), Some(1), "{page}");
        assert_eq!(
            p["ComparisonOperator"], "GreaterThanOrEqualToThreshold",
            "{page}"
        );
        assert_eq!(p["TreatMissingData"], "notBreaching", "{page}");
        assert_eq!(p["AlarmActions"], ticket_action_value(), "{page}");
    }
    assert_eq!(watched.len(), 5, "{watched:?}");
    // No other alarm reads `failed` or `items`.
    for (name, p) in alarms(&t) {
        let mut read = vec![p["MetricName"].clone()];
        for q in p["Metrics"].as_sequence().into_iter().flatten() {
            read.push(q["MetricStat"]["Metric"]["MetricName"].clone());
        }
        if read.iter().any(|m| m == FAILED.name || m == ITEMS.name) {
            assert!(
                name.ends_with("ItemFailuresAlarm") || name.ends_with("AllItemsFailedAlarm"),
                "{name} reads failed items"
            );
        }
    }
}
