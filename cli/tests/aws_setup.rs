//! Every `hk` command that calls AWS, without credentials or without a region: one
//! line saying what to set, exit 2, none of the AWS SDK's JSON log lines; and a
//! request that never reaches AWS (an endpoint nobody listens on): one line, exit 1.
//! The credentials provider chain runs for real (environment, shared files under an
//! empty home, no instance metadata). An IAM Identity Center (SSO) profile is loaded
//! (aws-config's `sso` feature): without a session it names `aws sso login`.

use std::process::{Command, Output};

mod common;
use common::text;

/// `hk` in an environment with no AWS configuration at all, plus `env`.
fn hk(args: &[&str], env: &[(&str, &str)]) -> Output {
    let home = std::env::temp_dir().join(format!("hk-empty-home-{}", std::process::id()));
    std::fs::create_dir_all(&home).unwrap();
    let mut c = Command::new(env!("CARGO_BIN_EXE_hk"));
    c.args(args)
        .env_remove("RUST_LOG")
        .env_remove("HK_STACK")
        .env("HOME", &home)
        // Instance metadata would answer on an EC2 machine with a role: not this test.
        .env("AWS_EC2_METADATA_DISABLED", "true");
    for (k, _) in std::env::vars() {
        if k.starts_with("AWS_") && k != "AWS_CA_BUNDLE" {
            c.env_remove(&k);
        }
    }
    for (k, v) in env {
        c.env(k, v);
    }
    let o = c.output().expect("hk runs");
    eprintln!("hk {args:?}:\n{}", text(&o));
    o
}

/// Every command that builds AWS clients, on a stack (or prefix) of no importance.
fn aws_commands(file: &str) -> Vec<Vec<String>> {
    [
        vec!["status", "--stack", "s"],
        vec!["tick", "remove-expired-members", "--stack", "s"],
        vec!["replay", "dlq", "delete-user", "--stack", "s"],
        vec!["replay", "file", file, "--queue", "--stack", "s"],
        vec!["local", "setup", "--prefix", "s", "--env-file", "/dev/null"],
        vec!["local", "pump", "--prefix", "s", "--max-seconds", "1"],
        vec!["pause", "remove-expired-members", "--stack", "s"],
        vec!["resume", "all", "--stack", "s"],
    ]
    .into_iter()
    .map(|a| a.into_iter().map(String::from).collect())
    .collect()
}

/// One line on stderr naming `want`, no JSON log line, exit `code`.
fn assert_one_line(o: &Output, code: i32, want: &str) {
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(code), "{err}");
    assert_eq!(err.lines().count(), 1, "one line, no SDK log lines:\n{err}");
    assert!(!err.contains('{'), "no JSON on the terminal:\n{err}");
    assert!(err.contains(want), "{want:?} in:\n{err}");
}

#[test]
fn without_credentials_or_region_every_aws_command_says_what_to_set() {
    let file = std::env::temp_dir().join(format!("hk-aws-setup-{}.jsonl", std::process::id()));
    std::fs::write(&file, "{}\n").unwrap();
    let file = file.to_str().unwrap();
    let keys = [
        ("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE"),
        ("AWS_SECRET_ACCESS_KEY", "secret"),
    ];
    for args in aws_commands(file) {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        // No credentials (a region given): what to set for them.
        let o = hk(&[args.as_slice(), &["--region", "eu-west-1"]].concat(), &[]);
        assert_one_line(
            &o,
            2,
            "no AWS credentials: set AWS_PROFILE or pass --profile, or set AWS_ACCESS_KEY_ID",
        );
        // Credentials, no region.
        let o = hk(&args, &keys);
        assert_one_line(&o, 2, "no AWS region: pass --region or set AWS_REGION");
        // Neither: both in one line.
        let o = hk(&args, &[]);
        assert_one_line(&o, 2, "no AWS credentials");
        assert!(String::from_utf8_lossy(&o.stderr).contains("--region"));
    }
    std::fs::remove_file(file).unwrap();
}

#[test]
fn an_aws_that_cannot_be_reached_is_one_retryable_line() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let endpoint = format!("http://127.0.0.1:{port}");
    for args in [
        vec!["status", "--stack", "s"],
        vec!["tick", "pat-expiring", "--stack", "s"],
    ] {
        let args = [
            args.as_slice(),
            &["--endpoint", &endpoint, "--region", "eu-west-1"],
        ]
        .concat();
        let o = hk(
            &args,
            &[
                ("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE"),
                ("AWS_SECRET_ACCESS_KEY", "secret"),
            ],
        );
        assert_one_line(&o, 1, "dispatch failure");
        assert!(String::from_utf8_lossy(&o.stderr).contains("looking up queue s-"));
    }
}

#[test]
fn an_sso_profile_is_loaded_and_without_a_session_names_aws_sso_login() {
    let dir = std::env::temp_dir().join(format!("hk-sso-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("config");
    std::fs::write(
        &config,
        "[profile oncall]\nsso_session = corp\nsso_account_id = 123456789012\n\
         sso_role_name = Housekeeping\nregion = eu-west-1\n\n\
         [sso-session corp]\nsso_start_url = https://corp.awsapps.com/start\n\
         sso_region = eu-west-1\nsso_registration_scopes = sso:account:access\n",
    )
    .unwrap();
    let files = [("AWS_CONFIG_FILE", config.to_str().unwrap())];
    for (args, env) in [
        (
            vec!["status", "--stack", "s", "--profile", "oncall"],
            vec![],
        ),
        (
            vec!["pause", "all", "--stack", "s"],
            vec![("AWS_PROFILE", "oncall")],
        ),
    ] {
        let env: Vec<(&str, &str)> = files.iter().copied().chain(env).collect();
        let o = hk(&args, &env);
        assert_one_line(&o, 2, "run `aws sso login --profile oncall`");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
