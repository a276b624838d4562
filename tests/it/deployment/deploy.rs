//! The stack deployed before a user does: `infra/template.yaml` translated offline by
//! SAM's own translator (`tests/deploy/translate.py`, the SAM CLI's Python) and created
//! in fresh moto servers (`tests/deploy/moto_launcher.py`, which adds the
//! CloudFormation models moto 5.2.5 lacks), then checked through the service APIs by
//! `tests/deploy/deploy_check.py` (see tests/deploy/README.md): redrive, visibility,
//! event-source mappings, queue URLs and send permissions, schedules, alarms and
//! dashboards, for two parameter sets. The cron messages the schedules carry are parsed
//! here with the functions' own envelope rules. One deliberately broken copy of the
//! template per check proves each check catches its fault, and only it.
//!
//! Needs the two Pythons: `HK_SAM_PYTHON` (else `.venv-sam/bin/python`,
//! requirements-sam.txt) and `HK_TEST_PYTHON` (else `.venv/bin/python`, moto,
//! requirements-dev.txt); a missing one fails the test naming the variable.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use integration_tests::wait;
use serde_json::{json, Value};
use shared::messages::Envelope;
use shared::Function;

/// The checks `deploy_check.py` makes, plus `schedule_message` (made here).
const CHECKS: &[&str] = &[
    "no_skipped_resource",
    "redrive",
    "visibility_timeout",
    "event_source_mapping",
    "event_source_enabled",
    "queue_urls",
    "send_permission",
    "bucket_permission",
    "schedule_target",
    "schedule_state",
    "schedule_message",
    "alarm_metric",
    "alarm_aws_dimension",
    "alarm_actions",
    "dashboard_metric",
];

/// The broken copies deployed beside each parameter set (one moto server per set; the
/// two servers run in parallel). Each mutation is named after the one check it breaks.
const ON_DEFAULTS: &[&str] = &[
    "no_skipped_resource",
    "redrive",
    "visibility_timeout",
    "event_source_mapping",
    "event_source_enabled",
    "queue_urls",
    "send_permission",
];
const ON_OPERATIONS: &[&str] = &[
    "bucket_permission",
    "schedule_target",
    "schedule_state",
    "schedule_message",
    "alarm_metric",
    "alarm_aws_dimension",
    "alarm_actions",
    "dashboard_metric",
];

pub(super) const CODE_BUCKET: &str = "hk-deploy-code";
pub(super) const CODE_KEY: &str = "code.zip";

pub(super) fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// A test tool's Python: `var`, else the repository's venv; missing is a failure.
pub(super) fn python(var: &str, venv: &str, what: &str) -> PathBuf {
    let p = match std::env::var_os(var) {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => root().join(venv).join("bin/python"),
    };
    assert!(
        p.exists(),
        "{} does not exist: set {var} to a Python with {what} (scripts/test.sh builds {venv})",
        p.display()
    );
    p
}

pub(super) fn run(cmd: &mut Command, what: &str) {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {what}: {e}"));
    assert!(
        out.status.success(),
        "{what} failed ({}):\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A moto server of its own (`moto_launcher.py`), killed on drop.
pub(super) struct Moto {
    child: Child,
    pub(super) endpoint: String,
    pub(super) log: PathBuf,
}

impl Moto {
    pub(super) fn start(py: &Path, dir: &Path, name: &str) -> Moto {
        let port_file = dir.join(format!("{name}.port"));
        let log = dir.join(format!("{name}.log"));
        let out = std::fs::File::create(&log).unwrap();
        let child = Command::new(py)
            .arg(root().join("tests/deploy/moto_launcher.py"))
            .arg(&port_file)
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start moto with {}: {e}", py.display()));
        Moto {
            child,
            endpoint: String::new(),
            log,
        }
        .listening(&port_file, name)
    }

    fn listening(mut self, port_file: &Path, name: &str) -> Moto {
        let log = self.log.clone();
        let child = &mut self.child;
        let port = wait::until_blocking(
            &format!("moto ({name}) to listen on 127.0.0.1"),
            wait::SERVER_LISTEN,
            || {
                if let Ok(Some(status)) = child.try_wait() {
                    panic!(
                        "moto_launcher.py exited ({status}):\n{}",
                        std::fs::read_to_string(&log).unwrap_or_default()
                    );
                }
                std::fs::read_to_string(port_file).ok()
            },
        );
        self.endpoint = format!("http://127.0.0.1:{}", port.trim());
        self
    }
}

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What the code emits, from its real EMF lines: every function run locally on the demo
/// data (`crate::emitted::emitted_metrics`), one entry per (metric, function, dimension
/// set). The input format of `deploy_check.py`.
fn emitted_metrics() -> Value {
    let e = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(crate::emitted::emitted_metrics());
    let out: Vec<Value> = e
        .metrics
        .iter()
        .map(|m| {
            json!({
                "namespace": m.namespace,
                "metric": m.name,
                "dimensions": m.dimensions,
                "function": m.function,
            })
        })
        .collect();
    assert!(
        out.len() > 100,
        "the local run emitted only {} metrics",
        out.len()
    );
    Value::Array(out)
}

/// `deploy_check.py`'s report for one server.
fn deploy(py: &Path, moto: &Moto, dir: &Path, name: &str, deployments: Value) -> Value {
    let plan = json!({
        "endpoint": moto.endpoint,
        "template": dir.join("translated.json"),
        "emitted": dir.join("emitted.json"),
        "code_bucket": CODE_BUCKET,
        "code_key": CODE_KEY,
        "deployments": deployments,
    });
    let plan_path = dir.join(format!("{name}.plan.json"));
    std::fs::write(&plan_path, plan.to_string()).unwrap();
    let report = dir.join(format!("{name}.report.json"));
    run(
        Command::new(py)
            .arg(root().join("tests/deploy/deploy_check.py"))
            .arg(&plan_path)
            .arg(&report),
        &format!("deploy_check.py ({name}; moto log {})", moto.log.display()),
    );
    serde_json::from_str(&std::fs::read_to_string(report).unwrap()).unwrap()
}

fn deployments(set: &str, mutations: &[&str]) -> Value {
    let mut d = vec![json!({"stack": format!("hk-{set}"), "parameters": set})];
    for m in mutations {
        d.push(json!({
            "stack": format!("broken-{}", m.replace('_', "-")),
            "parameters": set,
            "mutation": m,
        }));
    }
    Value::Array(d)
}

/// Failures of one stack: the report's, plus each schedule's cron message parsed as
/// its function's own cron message (behaviour §9.7) and its expression checked.
fn failures(entry: &Value) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = entry["failures"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["check"].as_str().unwrap().to_string(),
                f["detail"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let mut fail = |d: String| out.push(("schedule_message".into(), d));
    let schedules = entry["schedules"].as_array().unwrap();
    for f in Function::ALL.iter().copied() {
        let n = schedules
            .iter()
            .filter(|s| s["function"] == f.name())
            .count();
        let want = usize::from(f.cron().is_some());
        if n != want {
            fail(format!("{f}: {n} schedules, expected {want}"));
        }
    }
    for s in schedules {
        let name = s["function"].as_str().unwrap();
        let Some(f) = Function::from_name(name) else {
            fail(format!("{}: no function {name}", s["schedule"]));
            continue;
        };
        if s["expression"].as_str() != f.cron() {
            fail(format!(
                "{f}: expression {}, expected {:?}",
                s["expression"],
                f.cron()
            ));
        }
        let time = "2026-03-01T00:10:00Z";
        let body = s["input"]
            .as_str()
            .unwrap()
            .replace("<aws.scheduler.scheduled-time>", time)
            .replace(
                "<aws.scheduler.execution-id>",
                "4bd6e4c8-0d3a-4f26-9a70-1e8b1c8c2c11",
            );
        match Envelope::parse(&body, f) {
            Err(e) => fail(format!("{f}: the cron message is malformed: {}", e.error)),
            Ok(env) => {
                if env.message_key != format!("{}:cron:{time}", f.name())
                    || env.hop != 0
                    || env.kind != f.run_type()
                {
                    fail(format!(
                        "{f}: cron message key {} hop {} type {}",
                        env.message_key, env.hop, env.kind
                    ));
                }
            }
        }
    }
    out
}

#[test]
fn the_translated_template_deploys_into_moto_wired_and_every_broken_copy_is_caught() {
    let sam_py = python("HK_SAM_PYTHON", ".venv-sam", "the SAM CLI (samtranslator)");
    let moto_py = python("HK_TEST_PYTHON", ".venv", "moto 5.2.5 and boto3");
    let dir = std::env::temp_dir().join(format!("hk-deploy-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).unwrap();

    // Both servers import moto while the template is translated.
    let defaults_moto = Moto::start(&moto_py, &dir, "defaults");
    let operations_moto = Moto::start(&moto_py, &dir, "operations");
    run(
        Command::new(&sam_py)
            .arg(root().join("tests/deploy/translate.py"))
            .arg(root().join("infra/template.yaml"))
            .arg(dir.join("translated.json"))
            .arg(CODE_BUCKET)
            .arg(CODE_KEY),
        "translate.py (samtranslator)",
    );
    std::fs::write(dir.join("emitted.json"), emitted_metrics().to_string()).unwrap();
    let translated: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("translated.json")).unwrap())
            .unwrap();

    let reports = std::thread::scope(|s| {
        let a = s.spawn(|| {
            deploy(
                &moto_py,
                &defaults_moto,
                &dir,
                "defaults",
                deployments("defaults", ON_DEFAULTS),
            )
        });
        let b = s.spawn(|| {
            deploy(
                &moto_py,
                &operations_moto,
                &dir,
                "operations",
                deployments("operations", ON_OPERATIONS),
            )
        });
        [a.join().unwrap(), b.join().unwrap()]
    });
    drop(defaults_moto);
    drop(operations_moto);

    // The two parameter sets: nothing fails.
    for (report, set) in reports.iter().zip(["defaults", "operations"]) {
        let entry = &report[format!("hk-{set}").as_str()];
        let f = failures(entry);
        assert!(
            f.is_empty(),
            "the stack with the {set} parameters is miswired:\n{}",
            f.iter()
                .map(|(c, d)| format!("  {c}: {d}"))
                .collect::<Vec<_>>()
                .join("\n")
        );
    }

    // Each broken copy fails exactly its check. A mutation may find nothing to break
    // only where the template has nothing of that kind yet.
    let resources = translated["Resources"].as_object().unwrap();
    let has = |pred: &dyn Fn(&Value) -> bool| resources.values().any(pred);
    let optional: BTreeMap<&str, bool> = [
        (
            "event_source_enabled",
            has(&|r| {
                r["Type"] == "AWS::Lambda::EventSourceMapping"
                    && !r["Properties"]["Enabled"].is_null()
            }),
        ),
        (
            "dashboard_metric",
            has(&|r| r["Type"] == "AWS::CloudWatch::Dashboard"),
        ),
    ]
    .into_iter()
    .collect();
    let mut caught = BTreeSet::new();
    for report in &reports {
        for (stack, entry) in report.as_object().unwrap() {
            let Some(mutation) = entry["mutation"].as_str() else {
                continue;
            };
            assert!(
                CHECKS.contains(&mutation),
                "{stack}: unknown check {mutation}"
            );
            if entry["applicable"] == false {
                assert_eq!(
                    optional.get(mutation),
                    Some(&false),
                    "{stack}: the {mutation} mutation found nothing to break: {}",
                    entry["why"]
                );
                eprintln!(
                    "not applicable to this template: {mutation} ({})",
                    entry["why"]
                );
                continue;
            }
            let f = failures(entry);
            let checks: BTreeSet<&str> = f.iter().map(|(c, _)| c.as_str()).collect();
            assert_eq!(
                checks,
                BTreeSet::from([mutation]),
                "{stack}: the copy broken for {mutation} must fail that check and only it; \
                 failures:\n{f:#?}"
            );
            caught.insert(mutation);
        }
    }
    let required: BTreeSet<&str> = CHECKS
        .iter()
        .copied()
        .filter(|c| optional.get(c).copied().unwrap_or(true))
        .collect();
    assert_eq!(caught, required, "every check is shown to catch its fault");
    let _ = std::fs::remove_dir_all(&dir);
}
