//! `infra/template.yaml` against the code, by concern:
//!
//! * `functions`: every function crate is in the template and vice versa, and the
//!   values cfn-lint cannot check inside `AWS::Serverless::Function` match the function
//!   catalogue and behaviour §9.7/§9.12 (runtime, queues, least privilege, cron
//!   schedules).
//! * `metrics`: every alarm and dashboard metric of ours is one the code emits
//!   (`shared::metrics::CATALOGUE`), on the `Service` and `function` dimensions.
//! * `item_alarms`: the per-item failure metrics and their ticket and page alarms.
//! * `on_call`: cron heartbeats (armed through cutover), pausable event-source
//!   mappings and log groups; every alarm names a runbook section that exists.
//! * `paging`: which alarms page (ten composites at most) and which make a ticket,
//!   their topics, names, runbook links and suppression, and the runbook's list of
//!   the alarms that page.
//! * `variables`: every documented variable is a parameter passed to the functions
//!   that read it, or documented as not one.
//! * `deploy_path`: `sam build` runs infra/Makefile, which runs the package script;
//!   reserved concurrency and the secrets' KMS key.
//! * `first_deploy`: crons off, operator answers without defaults, placeholders and a
//!   missing VPC refused, samconfig's `prod` environment, the guided order.
//!
//! Here: the parsed template and the readers of its values, resources and alarms.

use std::collections::{BTreeMap, BTreeSet};

use serde_yaml::Value;
use shared::messages::Envelope;
use shared::metrics::{FUNCTION_DIMENSION, NAMESPACE, SERVICE_DIMENSION, SERVICE_ENV};
use shared::Function;

mod deploy_path;
mod first_deploy;
mod functions;
mod item_alarms;
mod metrics;
mod on_call;
mod paging;
mod variables;

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

/// An alarm's description text, plain or in `!Sub` (which fills in the runbook link).
pub(crate) fn description(p: &Value) -> String {
    plain(&p["AlarmDescription"])
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// Composite alarms by logical id.
pub(crate) fn composites(t: &Value) -> Vec<(String, &Value)> {
    t["Resources"]
        .as_mapping()
        .unwrap()
        .iter()
        .filter(|(_, r)| r["Type"] == "AWS::CloudWatch::CompositeAlarm")
        .map(|(k, r)| (k.as_str().unwrap().to_string(), &r["Properties"]))
        .collect()
}

/// Metric alarms by logical id.
pub(crate) fn alarms(t: &Value) -> Vec<(String, &Value)> {
    t["Resources"]
        .as_mapping()
        .unwrap()
        .iter()
        .filter(|(_, r)| r["Type"] == "AWS::CloudWatch::Alarm")
        .map(|(k, r)| (k.as_str().unwrap().to_string(), &r["Properties"]))
        .collect()
}
