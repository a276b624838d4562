//! The deploy path (issue 35): `sam build` builds every function with the project's own
//! package script (infra/Makefile, `BuildMethod: makefile`), never a bare `cargo lambda
//! build` (no vendored OpenSSL, no CA bundle); reserved concurrency fits a new account;
//! the secrets may be under a customer-managed KMS key. The build itself runs in
//! scripts/test.sh (`tests/deploy/sam_build_check.py`, after the Lambda build).

use super::*;

#[test]
fn sam_build_runs_the_package_script_for_every_function() {
    let t = template();
    let makefile = std::fs::read_to_string(root().join("infra/Makefile")).unwrap();
    let description = t["Description"].as_str().unwrap();
    assert!(
        !description.contains("cargo lambda build"),
        "the template must not tell users to build without the package script"
    );
    assert!(description.contains("sam build && sam deploy --guided"));
    let mut n = 0;
    let names = Function::ALL.iter().map(|f| f.name()).chain(["hk-check"]);
    for name in names {
        let logical = format!("{}Function", camel(name));
        let r = resource(&t, &logical);
        assert_eq!(r["Metadata"]["BuildMethod"], "makefile", "{logical}");
        // ContextPath is relative to the template: infra/Makefile.
        assert_eq!(r["Metadata"]["ContextPath"], ".", "{logical}");
        assert_eq!(
            r["Properties"]["CodeUri"].as_str(),
            Some(format!("../functions/{name}/").as_str()),
            "{logical}"
        );
        // The target SAM runs, and what it runs (make's dry run prints the command).
        let out = std::process::Command::new("make")
            .current_dir(root())
            .args(["-n", "-f", "infra/Makefile", &format!("build-{logical}")])
            .args(["ARTIFACTS_DIR=/nonexistent/out", "HK_CA_BUNDLE=Cargo.toml"])
            .output()
            .expect("make runs");
        let printed = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "make build-{logical}: {out:?}");
        assert!(
            printed.contains(&format!("--function {name} --out \"/nonexistent/out\"")),
            "build-{logical} does not package {name}: {printed}"
        );
        n += 1;
    }
    assert_eq!(n, Function::ALL.len() + 1, "every function and hk-check");
    assert!(makefile.contains(
        "scripts/package-lambdas.sh\" $(ARCH_FLAG) $(HK_PACKAGE_ARGS) --ca-bundle \"$(CA)\" \
         --function $(1) --out \"$(ARTIFACTS_DIR)\""
    ));
    let script = std::fs::read_to_string(root().join("scripts/package-lambdas.sh")).unwrap();
    assert!(script.contains("--features shared/vendored-openssl"));
    // The package's CA bundle is where the functions look for it.
    assert_eq!(
        t["Parameters"]["DatabaseCaBundlePath"]["Default"],
        "/var/task/rds-global-bundle.pem"
    );
    assert!(script.contains("$out/rds-global-bundle.pem"));
}

#[test]
fn reserved_concurrency_defaults_to_none_and_is_set_only_when_asked() {
    let t = template();
    let p = &t["Parameters"]["ReservedConcurrency"];
    assert_eq!(
        p["Default"].as_u64(),
        Some(0),
        "a new account has no room to reserve"
    );
    let d = p["Description"].as_str().unwrap();
    assert!(
        d.contains("Concurrent executions") && d.contains("L-B99A9384"),
        "{d}"
    );
    assert_eq!(
        t["Globals"]["Function"]["ReservedConcurrentExecutions"],
        serde_yaml::from_str::<Value>(
            "!If [HasReservedConcurrency, !Ref ReservedConcurrency, !Ref AWS::NoValue]"
        )
        .unwrap()
    );
    assert_eq!(
        t["Conditions"]["HasReservedConcurrency"],
        serde_yaml::from_str::<Value>("!Not [!Equals [!Ref ReservedConcurrency, 0]]").unwrap()
    );
}

#[test]
fn every_function_may_decrypt_the_secrets_with_the_kms_key_given() {
    let t = template();
    let want: Value = serde_yaml::from_str(
        "!If
  - HasSecretsKmsKey
  - Statement:
      - Effect: Allow
        Action: kms:Decrypt
        Resource: !Ref SecretsKmsKeyArn
        Condition:
          StringEquals:
            kms:ViaService: !Sub secretsmanager.${AWS::Region}.amazonaws.com
  - !Ref AWS::NoValue",
    )
    .unwrap();
    for f in Function::ALL.iter().copied() {
        let logical = format!("{}Function", camel(f.name()));
        let policies = resource(&t, &logical)["Properties"]["Policies"]
            .as_sequence()
            .unwrap();
        assert!(
            policies.contains(&want),
            "{logical}: no kms:Decrypt statement"
        );
    }
    assert_eq!(t["Parameters"]["SecretsKmsKeyArn"]["Default"], "");
    assert_eq!(
        t["Conditions"]["HasSecretsKmsKey"],
        serde_yaml::from_str::<Value>("!Not [!Equals [!Ref SecretsKmsKeyArn, \"\"]]").unwrap()
    );
}
