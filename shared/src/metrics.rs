//! CloudWatch embedded-metric-format (EMF) lines (behaviour §8).
//!
//! Owns: the one EMF line each invocation prints (namespace `GitLabHousekeeping`,
//! dimension `function`), with `duration_s` and the metrics the handler's `Report`
//! names. The line goes through the log pipeline, so it lands on stdout in Lambda and
//! is visible to `telemetry::capture` in tests. Alarms in the SAM template read it.

use serde_json::{json, Map, Value};

use crate::function::Function;

/// The CloudWatch namespace of every metric.
pub const NAMESPACE: &str = "GitLabHousekeeping";

/// Print one EMF line for `function` with the given `(name, value)` metrics.
pub fn emit(function: Function, metrics: &[(&str, f64)]) {
    let ts = chrono::Utc::now().timestamp_millis();
    let defs: Vec<Value> = metrics
        .iter()
        .map(|(name, _)| {
            let unit = if name.ends_with("_s") {
                "Seconds"
            } else {
                "Count"
            };
            json!({ "Name": name, "Unit": unit })
        })
        .collect();
    let mut line = Map::new();
    line.insert(
        "_aws".into(),
        json!({
            "Timestamp": ts,
            "CloudWatchMetrics": [{
                "Namespace": NAMESPACE,
                "Dimensions": [["function"]],
                "Metrics": defs,
            }]
        }),
    );
    line.insert("function".into(), Value::from(function.name()));
    for (name, v) in metrics {
        line.insert((*name).to_string(), json!(v));
    }
    let line = Value::Object(line);
    tracing::info!(_flatten = %line, "metrics");
}
