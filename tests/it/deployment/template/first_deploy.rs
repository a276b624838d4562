//! A first deploy that cannot harm (issue 45): every cron starts off; the parameters
//! that must be the operator's own have no default and refuse placeholders; the VPC
//! is required unless waived explicitly; db_key_base is required only with the
//! notices on; samconfig.toml's `prod` environment answers every required parameter;
//! the guided deploy asks in the order of the template's parameter groups; the
//! GitLab version parameter defaults to a tested release. CloudFormation's own
//! validation (patterns, rules) is evaluated offline by `tests/deploy/parameters_check.py`
//! (moto checks neither).

use std::process::Command;

use super::*;
use crate::deployment::deploy::{python, root as repo_root, run};
use shared::gitlab::release;

fn report() -> serde_json::Value {
    let py = python(
        "HK_SAM_PYTHON",
        ".venv-sam",
        "aws-sam-cli (requirements-sam.txt)",
    );
    let dir = std::env::temp_dir().join(format!("hk-params-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join("report.json");
    run(
        Command::new(py)
            .arg(repo_root().join("tests/deploy/parameters_check.py"))
            .arg(&out),
        "parameters_check.py",
    );
    let r = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    r
}

fn why(r: &serde_json::Value, case: &str) -> Vec<String> {
    r[case]["why"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w.as_str().unwrap().to_string())
        .collect()
}

#[test]
fn a_default_deploy_refuses_missing_and_placeholder_answers_and_asks_for_a_vpc() {
    let r = report();
    let required: Vec<&str> = r["required"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert_eq!(
        required,
        [
            "DatabaseSecretArn",
            "GitlabBaseUrl",
            "MailFrom",
            "RunbookBaseUrl",
            "SmtpHost"
        ],
        "the operator's own answers have no default"
    );
    assert_eq!(r["no_answers"]["refused"], true);
    let placeholders = why(&r, "placeholders");
    assert_eq!(placeholders.len(), 4, "{placeholders:?}");
    for (w, name) in
        placeholders
            .iter()
            .zip(["GitlabBaseUrl", "MailFrom", "SmtpHost", "RunbookBaseUrl"])
    {
        assert!(
            w.starts_with(&format!("{name}: ")) && w.contains("example.com"),
            "{w}"
        );
    }
    assert_eq!(
        r["prod_untouched"]["refused"], true,
        "samconfig's placeholders are refused"
    );
    assert_eq!(
        r["prod_answered"]["refused"],
        false,
        "{:?}",
        why(&r, "prod_answered")
    );
    for name in &required {
        assert!(
            r["prod_keys"].as_array().unwrap().iter().any(|k| k == name),
            "samconfig.toml's prod environment does not answer {name}"
        );
    }
    let vpc = why(&r, "no_vpc");
    assert!(
        !vpc.is_empty() && vpc.iter().all(|w| w.starts_with("rule VpcRequired:")),
        "{vpc:?}"
    );
    assert_eq!(
        r["no_vpc_said"]["refused"],
        false,
        "{:?}",
        why(&r, "no_vpc_said")
    );
    let notices = why(&r, "notices_without_key_base");
    assert!(
        notices.len() == 1 && notices[0].starts_with("rule DbKeyBaseForNotices:"),
        "{notices:?}"
    );
    let storage = why(&r, "storage_without_instance");
    assert!(
        storage.len() == 1 && storage[0].starts_with("rule InstanceForStorage:"),
        "{storage:?}"
    );
    assert_eq!(
        r["storage_with_instance"]["refused"],
        false,
        "{:?}",
        why(&r, "storage_with_instance")
    );
}

#[test]
fn every_cron_starts_off_and_the_version_default_is_tested() {
    let t = template();
    let params = t["Parameters"].as_mapping().unwrap();
    let mut crons = 0;
    for f in Function::ALL.iter().filter(|f| f.cron().is_some()) {
        let name = format!("{}ScheduleEnabled", camel(f.name()));
        assert_eq!(t["Parameters"][name.as_str()]["Default"], "false", "{name}");
        crons += 1;
    }
    assert!(crons >= 5);
    let v = t["Parameters"]["GitlabVersion"]["Default"]
        .as_str()
        .unwrap();
    let num = |r: &str| -> (u32, u32) {
        let mut it = r.split('.').map(|x| x.parse::<u32>().unwrap());
        (it.next().unwrap(), it.next().unwrap())
    };
    assert!(
        num(release::OLDEST) <= num(v) && num(v) <= num(release::NEWEST),
        "GitlabVersion defaults to {v}, outside {}",
        release::range()
    );
    let accepted = &t["Globals"]["Function"]["Environment"]["Variables"]["GITLAB_SCHEMA_ACCEPTED"];
    assert_eq!(
        tagged(accepted),
        ("!Ref".into(), "GitlabSchemaAccepted".into())
    );
    // The guided deploy asks in the groups' order: every parameter in exactly one
    // group, and the Parameters section in that order.
    let groups = t["Metadata"]["AWS::CloudFormation::Interface"]["ParameterGroups"]
        .as_sequence()
        .expect("ParameterGroups");
    let grouped: Vec<&str> = groups
        .iter()
        .flat_map(|g| g["Parameters"].as_sequence().unwrap())
        .map(|p| p.as_str().unwrap())
        .collect();
    let declared: Vec<&str> = params.keys().map(|k| k.as_str().unwrap()).collect();
    assert_eq!(
        grouped, declared,
        "ParameterGroups and the Parameters section disagree"
    );
}
