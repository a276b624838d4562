//! Who is paged, in moto (issue 51): the stack deployed with a page and a ticket topic,
//! its alarms put into ALARM the way an incident would (`tests/deploy/paging_check.py`),
//! and the notifications counted on each topic. moto 5.2.5 publishes no SNS
//! notification on an alarm's state change and evaluates no composite alarm, so the
//! script computes who is notified from the alarms' states, rules, actions and
//! `ActionsSuppressor` as read back from moto (the states it computes are stored in
//! moto and read back), as `cutover_check.py` follows the heartbeats.
//!
//! An outage of the database for every function is one page; each missed cron is one
//! page; a refused schema is one page; every other alarm alone is a ticket or (a child
//! of a page) nothing; every page sends OK when it clears.

use std::collections::BTreeSet;
use std::process::Command;

use serde_json::{json, Value};
use shared::Function;

use super::deploy::{python, root, run, Moto, CODE_BUCKET, CODE_KEY};

const STACK: &str = "hk-paging";

fn paging_report() -> Value {
    let sam_py = python("HK_SAM_PYTHON", ".venv-sam", "the SAM CLI (samtranslator)");
    let moto_py = python("HK_TEST_PYTHON", ".venv", "moto 5.2.5 and boto3");
    let dir = std::env::temp_dir().join(format!("hk-paging-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    let moto = Moto::start(&moto_py, &dir, "paging");
    run(
        Command::new(&sam_py)
            .arg(root().join("tests/deploy/translate.py"))
            .arg(root().join("infra/template.yaml"))
            .arg(dir.join("translated.json"))
            .arg(CODE_BUCKET)
            .arg(CODE_KEY),
        "translate.py (samtranslator)",
    );
    let plan = json!({
        "endpoint": moto.endpoint,
        "template": dir.join("translated.json"),
        "code_bucket": CODE_BUCKET,
        "code_key": CODE_KEY,
        "stack": STACK,
    });
    std::fs::write(dir.join("plan.json"), plan.to_string()).unwrap();
    run(
        Command::new(&moto_py)
            .arg(root().join("tests/deploy/paging_check.py"))
            .arg(dir.join("plan.json"))
            .arg(dir.join("report.json")),
        &format!("paging_check.py (moto log {})", moto.log.display()),
    );
    let report =
        serde_json::from_str(&std::fs::read_to_string(dir.join("report.json")).unwrap()).unwrap();
    drop(moto);
    let _ = std::fs::remove_dir_all(&dir);
    report
}

/// The alarms that notified `topic` in a scenario's step (`notified` or `recovery`).
fn on(step: &Value, topic: &Value) -> BTreeSet<String> {
    step.as_array()
        .unwrap()
        .iter()
        .filter(|n| n["topics"].as_array().unwrap().contains(topic))
        .map(|n| n["alarm"].as_str().unwrap().to_string())
        .collect()
}

fn named(logical: &str) -> String {
    format!("{STACK}-{logical}")
}

fn camel(name: &str) -> String {
    name.split('-')
        .map(|w| w[..1].to_uppercase() + &w[1..])
        .collect()
}

#[test]
fn an_outage_is_one_page_a_missed_cron_one_page_and_everything_else_a_ticket() {
    let r = paging_report();
    let (page, ticket) = (&r["page_topic"], &r["ticket_topic"]);
    let s = &r["scenarios"];

    // Deployed as the template says: at most one page per function and two for the
    // stack (ten with today's table), each named after the
    // stack, each sending OK, each linking the runbook from RunbookBaseUrl.
    let alarms = r["alarms"].as_object().unwrap();
    let paging: Vec<&String> = alarms
        .iter()
        .filter(|(_, a)| a["actions"].as_array().unwrap().contains(page))
        .map(|(n, _)| n)
        .collect();
    // The budget from the function table (issue 48): at most one page per function
    // (its missed run or its stuck worker) plus the two stack-wide pages: ten today.
    assert!(!paging.is_empty(), "{paging:?}");
    let function_of = |n: &str| {
        Function::ALL
            .iter()
            .find(|f| n.starts_with(&named(&camel(f.name()))))
            .copied()
    };
    for f in Function::ALL.iter().copied() {
        let own = paging.iter().filter(|n| function_of(n) == Some(f)).count();
        assert!(own <= 1, "{own} pages for {}: {paging:?}", f.name());
    }
    let stack_wide = paging.iter().filter(|n| function_of(n).is_none()).count();
    assert_eq!(stack_wide, 2, "{paging:?}");
    for (n, a) in alarms {
        assert!(
            n.starts_with(&format!("{STACK}-")),
            "{n}: named after the stack"
        );
        let d = a["description"].as_str().unwrap();
        assert!(
            d.contains("Runbook: https://gitlab.acme-corp.internal/platform/housekeeping/-/blob/main/docs/runbook.md#"),
            "{n}: {d}"
        );
        if a["actions"].as_array().unwrap().contains(page) {
            assert_eq!(a["ok_actions"], a["actions"], "{n}: a page sends OK");
        }
    }

    // The database unreachable for every function: one page, the stalled stack.
    let outage = &s["outage"];
    assert!(
        outage["tripped"].as_array().unwrap().len() >= 40,
        "{outage}"
    );
    assert_eq!(
        on(&outage["notified"], page),
        BTreeSet::from([named("HousekeepingStalledAlarm")]),
        "an outage of every function pages once"
    );
    assert!(
        on(&outage["notified"], ticket).len() >= 20,
        "the rest are tickets"
    );
    assert_eq!(
        on(&outage["recovery"], page),
        BTreeSet::from([named("HousekeepingStalledAlarm")]),
        "and sends OK once"
    );

    // A refused schema fails every function too: one page, the schema's.
    assert_eq!(
        on(&s["schema"]["notified"], page),
        BTreeSet::from([named("SchemaOrReleaseRefusedAlarm")])
    );

    // Each missed cron alone: one page, its own, and OK when it ran.
    for f in Function::ALL.iter().filter(|f| f.cron().is_some()) {
        let c = camel(f.name());
        let step = &s[format!("alone:{c}HeartbeatAlarm").as_str()];
        let want = BTreeSet::from([named(&format!("{c}MissedRunAlarm"))]);
        assert_eq!(on(&step["notified"], page), want, "{f}");
        assert_eq!(on(&step["recovery"], page), want, "{f}: OK");
    }

    // Every other alarm alone: at most one page (a destructive worker stuck, the
    // schema), else a ticket or nothing; never two notifications.
    let mut tickets = 0;
    for (name, step) in s.as_object().unwrap() {
        let Some(logical) = name.strip_prefix("alone:") else {
            continue;
        };
        let pages = on(&step["notified"], page);
        let t = on(&step["notified"], ticket);
        assert!(pages.len() + t.len() <= 1, "{logical}: {step}");
        let pages_expected = logical.ends_with("HeartbeatAlarm")
            || logical.starts_with("SchemaRefused")
            || [
                "GroupDestroyBlockedAlarm",
                "GroupDestroyDLQAlarm",
                "DeleteUserDLQAlarm",
                "StorageCleanupDLQAlarm",
            ]
            .contains(&logical);
        assert_eq!(pages.len() == 1, pages_expected, "{logical}: {step}");
        if !pages_expected {
            assert_eq!(
                t,
                BTreeSet::from([named(logical)]),
                "{logical} makes a ticket"
            );
            tickets += 1;
        }
    }
    assert!(tickets >= 80, "{tickets} ticket alarms");
}
