"""`sam build` from the repository root, offline, and what it produced.

Run with the SAM CLI's Python (.venv-sam, requirements-sam.txt), from anywhere:

    sam_build_check.py --arch x86_64|arm64 --ca-bundle PEM [--package-args ARGS] [--build-dir DIR]

It runs `sam build` exactly as the README says (samconfig.toml names
infra/template.yaml), with HK_LAMBDA_ARCH, HK_CA_BUNDLE and HK_PACKAGE_ARGS for
infra/Makefile, and checks, for every AWS::Serverless::Function of the template:

- its Metadata says BuildMethod makefile (so sam build runs infra/Makefile's
  build-<LogicalId>, which runs scripts/package-lambdas.sh for the function);
- its build folder holds exactly `bootstrap` and `rds-global-bundle.pem`;
- `bootstrap` is an executable ELF for the architecture asked, byte for byte the one the
  package script left in cargo's target/lambda/<function>/ (the same build);
- `rds-global-bundle.pem` is the CA bundle given (where DATABASE_CA_BUNDLE points);
- the built template's CodeUri is that folder (what sam deploy uploads).

scripts/test.sh runs it right after `package-lambdas.sh --x86-64 --check`, with the
same flags, so each function's build is a cargo no-op and the check takes seconds: a
second release build of ten functions would cost CI minutes for nothing the first did
not prove. It prints `sam build: N passed, M failed` and exits non-zero on a failure.
"""

import argparse
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile

from samcli.yamlhelper import yaml_parse

ROOT = pathlib.Path(__file__).resolve().parents[2]
ELF_MACHINE = {"x86_64": 0x3E, "arm64": 0xB7}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--arch", choices=sorted(ELF_MACHINE), required=True)
    ap.add_argument("--ca-bundle", required=True)
    ap.add_argument("--package-args", default="")
    ap.add_argument("--build-dir")
    a = ap.parse_args()
    ca = pathlib.Path(a.ca_bundle).resolve()
    build_dir = pathlib.Path(a.build_dir or tempfile.mkdtemp(prefix="hk-sam-build-")).resolve()
    try:
        return check(a, ca, build_dir)
    finally:
        if not a.build_dir:
            shutil.rmtree(build_dir, ignore_errors=True)


def check(a: argparse.Namespace, ca: pathlib.Path, build_dir: pathlib.Path) -> int:
    sam = pathlib.Path(sys.executable).parent / "sam"
    env = dict(os.environ)
    env.update(
        SAM_CLI_TELEMETRY="0",
        AWS_DEFAULT_REGION=env.get("AWS_DEFAULT_REGION", "us-east-1"),
        HK_LAMBDA_ARCH=a.arch,
        HK_CA_BUNDLE=str(ca),
        HK_PACKAGE_ARGS=a.package_args,
    )
    # Exactly the README's command, from the root, where samconfig.toml is read.
    run = subprocess.run(
        [str(sam), "build", "--build-dir", str(build_dir)],
        cwd=ROOT, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True,
    )
    sys.stdout.write(run.stdout[-6000:])
    sys.stderr.write(run.stderr[-6000:])
    if run.returncode != 0:
        print(f"sam build failed (exit {run.returncode})")
        print("sam build: 0 passed, 1 failed")
        return 1

    template = yaml_parse((ROOT / "infra/template.yaml").read_text())
    built = yaml_parse((build_dir / "template.yaml").read_text())
    lambda_dir = pathlib.Path(env.get("CARGO_TARGET_DIR") or ROOT / "target")
    if not lambda_dir.is_absolute():
        lambda_dir = ROOT / lambda_dir
    lambda_dir = lambda_dir / "lambda"
    passed, failed = 0, []
    for logical, res in sorted(template["Resources"].items()):
        if res.get("Type") != "AWS::Serverless::Function":
            continue
        problems = []
        meta = res.get("Metadata") or {}
        if meta.get("BuildMethod") != "makefile":
            problems.append(f"Metadata.BuildMethod is {meta.get('BuildMethod')!r}, not makefile")
        function = pathlib.PurePosixPath(res["Properties"]["CodeUri"]).name
        out = build_dir / logical
        files = sorted(p.name for p in out.iterdir()) if out.is_dir() else []
        if files != ["bootstrap", "rds-global-bundle.pem"]:
            problems.append(f"{out} holds {files}, not bootstrap + rds-global-bundle.pem")
        boot = out / "bootstrap"
        if boot.is_file():
            head = boot.read_bytes()[:20]
            machine = int.from_bytes(head[18:20], "little") if len(head) == 20 else None
            if head[:4] != b"\x7fELF" or machine != ELF_MACHINE[a.arch]:
                problems.append(f"bootstrap is not an ELF for {a.arch} (machine {machine})")
            if not os.access(boot, os.X_OK):
                problems.append("bootstrap is not executable")
            packaged = lambda_dir / function / "bootstrap"
            if not packaged.is_file() or packaged.read_bytes() != boot.read_bytes():
                problems.append(f"bootstrap differs from the package script's {packaged}")
        pem = out / "rds-global-bundle.pem"
        if pem.is_file() and pem.read_bytes() != ca.read_bytes():
            problems.append("rds-global-bundle.pem is not the CA bundle given")
        uri = built["Resources"].get(logical, {}).get("Properties", {}).get("CodeUri")
        if uri != logical:
            problems.append(f"the built template's CodeUri is {uri!r}, not {logical}")
        if problems:
            failed.append((logical, problems))
        else:
            passed += 1
    for logical, problems in failed:
        for p in problems:
            print(f"FAIL {logical}: {p}")
    if passed + len(failed) < 10:
        failed.append(("template", [f"only {passed + len(failed)} functions"]))
        print(f"FAIL: only {passed + len(failed) - 1} functions in the template")
    print(f"sam build: {passed} passed, {len(failed)} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
