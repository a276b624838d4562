"""`sam package` from the repository root, as `sam deploy` packages, into a local S3.

Run with the SAM CLI's Python (.venv-sam), after `sam build` wrote .aws-sam/build:

    sam_package_check.py --ca-bundle PEM --moto-python PY [--build-dir DIR]

It starts a moto server (tests/deploy/moto_launcher.py, with the moto venv's Python),
runs `sam package --s3-bucket …` from the root exactly as `sam deploy` packages (the
template and options from samconfig.toml; no -t), then:

1. opens every uploaded function zip: it must hold exactly `bootstrap` (executable,
   byte for byte the one `sam build` wrote for that function) and
   `rds-global-bundle.pem` (the CA bundle given), nothing from the source tree;
2. creates the packaged template as a stack in moto (SAM's translator offline, the
   CodeUri as packaged, samconfig's `prod` answers from parameters_check.py) and
   checks that every Lambda function of the stack runs the zip uploaded for it
   (CodeSha256).

Then the same packaging with a broken configuration beside it: samconfig.toml with
`template_file` under [default.global.parameters], the bug this guards against (SAM
then packages infra/template.yaml's source folders). The check must fail on it, or the
check proves nothing.

Prints `sam package: N passed, M failed` and exits non-zero on a failure.
"""

import argparse
import base64
import hashlib
import io
import json
import os
import pathlib
import shutil
import stat
import subprocess
import sys
import tempfile
import time
import zipfile

import boto3
from samcli.yamlhelper import yaml_parse

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from parameters_check import prod_overrides  # noqa: E402
from translate import translate  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[2]
BUCKET = "hk-package"
REGION = "us-east-1"
EXPECTED = ["bootstrap", "rds-global-bundle.pem"]


def start_moto(py: str, tmp: pathlib.Path) -> tuple[subprocess.Popen, str]:
    port_file = tmp / "moto.port"
    log = open(tmp / "moto.log", "w")
    p = subprocess.Popen(
        [py, str(ROOT / "tests/deploy/moto_launcher.py"), str(port_file)],
        stdin=subprocess.DEVNULL, stdout=log, stderr=log,
    )
    deadline = time.monotonic() + 180  # moto imports every service model first
    while not port_file.exists():
        if p.poll() is not None or time.monotonic() > deadline:
            p.kill()
            sys.exit(f"moto_launcher.py did not start: {(tmp / 'moto.log').read_text()}")
        time.sleep(0.2)
    return p, f"http://127.0.0.1:{port_file.read_text().strip()}"


def package(endpoint: str, out: pathlib.Path, config: pathlib.Path | None) -> None:
    sam = pathlib.Path(sys.executable).parent / "sam"
    env = dict(os.environ)
    env.update(
        SAM_CLI_TELEMETRY="0",
        AWS_DEFAULT_REGION=REGION,
        AWS_ACCESS_KEY_ID="testing",
        AWS_SECRET_ACCESS_KEY="testing",
        AWS_ENDPOINT_URL=endpoint,
    )
    env.pop("AWS_PROFILE", None)
    cmd = [str(sam), "package", "--s3-bucket", BUCKET, "--output-template-file", str(out)]
    if config is not None:
        cmd += ["--config-file", str(config)]
    run = subprocess.run(cmd, cwd=ROOT, env=env, stdin=subprocess.DEVNULL,
                         capture_output=True, text=True)
    if run.returncode != 0:
        sys.stdout.write(run.stdout[-4000:] + run.stderr[-4000:])
        raise SystemExit(f"sam package failed (exit {run.returncode})")


def zips(s3, packaged: dict) -> dict[str, bytes]:
    out = {}
    for logical, res in sorted(packaged["Resources"].items()):
        if res.get("Type") != "AWS::Serverless::Function":
            continue
        uri = res["Properties"]["CodeUri"]
        if not isinstance(uri, str) or not uri.startswith(f"s3://{BUCKET}/"):
            out[logical] = b""
            continue
        key = uri[len(f"s3://{BUCKET}/"):]
        out[logical] = s3.get_object(Bucket=BUCKET, Key=key)["Body"].read()
    return out


def check_zips(found: dict[str, bytes], build: pathlib.Path, ca: bytes) -> dict[str, list[str]]:
    problems = {}
    for logical, data in found.items():
        p = []
        if not data:
            problems[logical] = ["no zip uploaded to the bucket"]
            continue
        z = zipfile.ZipFile(io.BytesIO(data))
        names = sorted(i.filename for i in z.infolist())
        if names != EXPECTED:
            p.append(f"holds {names[:6]}{'…' if len(names) > 6 else ''}, not {EXPECTED}")
        if "bootstrap" in names:
            info = z.getinfo("bootstrap")
            mode = info.external_attr >> 16
            if not mode & stat.S_IXUSR:
                p.append(f"bootstrap is not executable (mode {oct(mode)})")
            built = build / logical / "bootstrap"
            if not built.is_file() or z.read("bootstrap") != built.read_bytes():
                p.append(f"bootstrap is not the one sam build wrote ({built})")
        if "rds-global-bundle.pem" in names and z.read("rds-global-bundle.pem") != ca:
            p.append("rds-global-bundle.pem is not the CA bundle given")
        if p:
            problems[logical] = p
    return problems


def check_stack(endpoint: str, packaged: dict, found: dict[str, bytes]) -> list[str]:
    cfn_template = translate(packaged)
    kw = dict(endpoint_url=endpoint, region_name=REGION,
              aws_access_key_id="testing", aws_secret_access_key="testing")
    cfn = boto3.client("cloudformation", **kw)
    lam = boto3.client("lambda", **kw)
    params = prod_overrides(True)
    cfn.create_stack(
        StackName="hk-packaged",
        TemplateBody=json.dumps(cfn_template),
        Parameters=[{"ParameterKey": k, "ParameterValue": v} for k, v in params.items()],
        Capabilities=["CAPABILITY_IAM", "CAPABILITY_NAMED_IAM", "CAPABILITY_AUTO_EXPAND"],
    )
    status = cfn.describe_stacks(StackName="hk-packaged")["Stacks"][0]["StackStatus"]
    if status != "CREATE_COMPLETE":
        return [f"the packaged stack is {status}"]
    problems = []
    resources = cfn.list_stack_resources(StackName="hk-packaged")["StackResourceSummaries"]
    functions = {r["LogicalResourceId"]: r["PhysicalResourceId"]
                 for r in resources if r["ResourceType"] == "AWS::Lambda::Function"}
    if sorted(functions) != sorted(found):
        problems.append(f"the stack's functions {sorted(functions)} are not the packaged {sorted(found)}")
    for logical, physical in sorted(functions.items()):
        want = base64.b64encode(hashlib.sha256(found.get(logical, b"")).digest()).decode()
        got = lam.get_function(FunctionName=physical)["Configuration"]["CodeSha256"]
        if got != want:
            problems.append(f"{logical} runs code {got}, not the zip packaged for it ({want})")
    return problems


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ca-bundle", required=True)
    ap.add_argument("--moto-python", required=True)
    ap.add_argument("--build-dir", default=str(ROOT / ".aws-sam/build"))
    a = ap.parse_args()
    build = pathlib.Path(a.build_dir).resolve()
    ca = pathlib.Path(a.ca_bundle).read_bytes()
    if not (build / "template.yaml").is_file():
        print(f"no {build}/template.yaml: run sam build first")
        print("sam package: 0 passed, 1 failed")
        return 1
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="hk-sam-package-"))
    moto, endpoint = start_moto(a.moto_python, tmp)
    try:
        s3 = boto3.client("s3", endpoint_url=endpoint, region_name=REGION,
                          aws_access_key_id="testing", aws_secret_access_key="testing")
        s3.create_bucket(Bucket=BUCKET)
        out = tmp / "packaged.yaml"
        package(endpoint, out, None)
        packaged = yaml_parse(out.read_text())
        found = zips(s3, packaged)
        problems = check_zips(found, build, ca)
        failed = [f"{k}: {p}" for k, ps in sorted(problems.items()) for p in ps]
        if len(found) < 10:
            failed.append(f"only {len(found)} functions packaged")
        if not failed:
            failed += check_stack(endpoint, packaged, found)
        for f in failed:
            print(f"FAIL {f}")

        # The check itself: the configuration this fixes must fail it.
        broken = tmp / "samconfig-broken.toml"
        text = (ROOT / "samconfig.toml").read_text()
        broken.write_text(text.replace(
            "[default.global.parameters]\n",
            '[default.global.parameters]\ntemplate_file = "infra/template.yaml"\n', 1))
        for o in s3.list_objects_v2(Bucket=BUCKET).get("Contents", []):
            s3.delete_object(Bucket=BUCKET, Key=o["Key"])
        out_broken = tmp / "packaged-broken.yaml"
        package(endpoint, out_broken, broken)
        caught = check_zips(zips(s3, yaml_parse(out_broken.read_text())), build, ca)
        if len(caught) < len(found) or not all(
            any("not ['bootstrap'" in p for p in ps) for ps in caught.values()
        ):
            failed.append(
                "the broken samconfig (template_file for every command) was not caught: "
                f"{json.dumps(caught)[:400]}"
            )
            print(f"FAIL {failed[-1]}")
        else:
            print(f"ok: the broken samconfig is caught ({len(caught)} zips of sources)")
        passed = len(found) - len(problems)
        print(f"sam package: {passed} passed, {len(failed)} failed")
        return 1 if failed else 0
    finally:
        moto.kill()
        moto.wait()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
