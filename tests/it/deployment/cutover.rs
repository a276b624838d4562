//! Heartbeats armed through cutover (issue 35): the stack is deployed into moto with
//! every schedule off, then updated to on (`tests/deploy/cutover_check.py`, which
//! evaluates each heartbeat as CloudWatch would from the alarm definitions the stack
//! produced, and the composite it pages through). The first missed run after cutover
//! must change the alarm's state and notify the page topic; while the schedules are off nothing pages. A copy with the
//! design the issue found (actions switched by the schedule parameter, missing data
//! always breaching) is deployed beside it and must be caught: it pages nobody.

use std::process::Command;

use serde_json::{json, Value};
use shared::Function;

use super::deploy::{python, root, run, Moto, CODE_BUCKET, CODE_KEY};

fn cutover_report() -> Value {
    let sam_py = python("HK_SAM_PYTHON", ".venv-sam", "the SAM CLI (samtranslator)");
    let moto_py = python("HK_TEST_PYTHON", ".venv", "moto 5.2.5 and boto3");
    let dir = std::env::temp_dir().join(format!("hk-cutover-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    let moto = Moto::start(&moto_py, &dir, "cutover");
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
        "stacks": [
            {"stack": "hk-cutover"},
            {"stack": "old-design", "mutation": "heartbeat_actions_follow_schedule"},
        ],
    });
    std::fs::write(dir.join("plan.json"), plan.to_string()).unwrap();
    run(
        Command::new(&moto_py)
            .arg(root().join("tests/deploy/cutover_check.py"))
            .arg(dir.join("plan.json"))
            .arg(dir.join("report.json")),
        &format!("cutover_check.py (moto log {})", moto.log.display()),
    );
    let report =
        serde_json::from_str(&std::fs::read_to_string(dir.join("report.json")).unwrap()).unwrap();
    drop(moto);
    let _ = std::fs::remove_dir_all(&dir);
    report
}

fn notified(step: &Value) -> Vec<String> {
    step["notified"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect()
}

#[test]
fn a_stack_deployed_with_schedules_off_then_on_pages_on_the_first_missed_run() {
    let report = cutover_report();
    let crons = Function::ALL.iter().filter(|f| f.cron().is_some()).count();

    let ours = &report["hk-cutover"];
    let page = ours["page_topic"].as_str().unwrap();
    let alarms = ours["alarms"].as_object().unwrap();
    assert_eq!(alarms.len(), crons, "one heartbeat per cron: {alarms:?}");
    for (name, a) in alarms {
        // Schedules off: nothing pages, the alarm waits in OK with its actions on.
        assert_eq!(a["off"]["state"], "OK", "{name} while off: {a}");
        assert_eq!(
            a["config_off"]["TreatMissingData"], "notBreaching",
            "{name}"
        );
        assert_eq!(a["config_off"]["ActionsEnabled"], true, "{name}");
        // The update switches missing data to breaching and keeps the state.
        assert_eq!(a["config_on"]["TreatMissingData"], "breaching", "{name}");
        assert_eq!(a["config_on"]["ActionsEnabled"], true, "{name}");
        // It pages through its composite `<Cron>MissedRunAlarm` (issue 51), not itself.
        assert_eq!(a["config_on"]["AlarmActions"], json!([]), "{name}");
        assert_eq!(a["state_kept_by_update"], true, "{name}");
        // No run after cutover: a state change that pages (within minutes).
        assert_eq!(a["no_run"]["state"], "ALARM", "{name}: {a}");
        assert_eq!(notified(&a["no_run"]), [page], "{name}: {a}");
        // Ticked before cutover: OK after the update, and the first missed run pages.
        assert_eq!(a["after_update"]["state"], "OK", "{name}: {a}");
        assert!(notified(&a["after_update"]).is_empty(), "{name}: {a}");
        assert_eq!(a["first_missed"]["state"], "ALARM", "{name}: {a}");
        assert_eq!(notified(&a["first_missed"]), [page], "{name}: {a}");
    }

    // The design issue 35 found: silent in ALARM while off, so after cutover a run that
    // never comes changes nothing and pages nobody. The check must catch it.
    let old = &report["old-design"];
    let alarms = old["alarms"].as_object().unwrap();
    assert_eq!(alarms.len(), crons);
    for (name, a) in alarms {
        assert_eq!(a["off"]["state"], "ALARM", "{name}: {a}");
        assert!(notified(&a["off"]).is_empty(), "{name}: actions were off");
        assert!(
            notified(&a["no_run"]).is_empty(),
            "{name}: the old design must page nobody here, or this test proves nothing: {a}"
        );
    }
}
