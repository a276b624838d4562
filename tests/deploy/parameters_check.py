"""What CloudFormation would say of a deploy's parameters, offline.

Run with the SAM CLI's Python (.venv-sam, requirements-sam.txt):

    parameters_check.py REPORT.json

moto validates neither `AllowedPattern` nor `Rules`, so this evaluates them as
CloudFormation does before it changes anything: every parameter without a default
must be given; `AllowedValues`, `AllowedPattern` (the whole value must match),
`MinValue`/`MaxValue`; then each rule whose `RuleCondition` holds must have every
`Assertions` entry true. Rule functions: Ref, Fn::Equals, Fn::Not, Fn::And, Fn::Or,
Fn::Contains, Fn::EachMemberEquals, Fn::EachMemberIn (a CommaDelimitedList is a list).

The cases (tests/it/deployment/template/first_deploy.rs asserts the report):

- `no_answers`: nothing given;
- `placeholders`: valid answers, but GitLab's URL, the sender and the relay at example.com;
- `prod_untouched`: samconfig.toml's [prod.deploy.parameters] as shipped (placeholders);
- `prod_answered`: the same with every `<…>` replaced by ANSWERS;
- `no_vpc` and `no_vpc_said`: prod_answered without the VPC, then with
  DatabaseReachableWithoutVpc=true;
- `notices_without_key_base`: prod_answered with the pat-expiring cron on and no
  GitlabDbKeyBaseSecretArn;
- `storage_without_instance`: prod_answered with a storage kind on and no
  GitlabInstanceUuid.

REPORT: {case: {"refused": bool, "why": [str]}, "required": [names without a
default], "prod_keys": [names samconfig's prod environment answers]}.
"""

import json
import pathlib
import re
import sys
import tomllib

from samcli.yamlhelper import yaml_parse

ROOT = pathlib.Path(__file__).resolve().parents[2]
REGION = "us-east-1"
ACCOUNT = "123456789012"

# What an operator would answer for samconfig.toml's prod placeholders (by parameter).
ANSWERS = {
    "DatabaseSecretArn": f"arn:aws:secretsmanager:{REGION}:{ACCOUNT}:secret:gitlab-db-AbCdEf",
    "SubnetIds": "subnet-0a1b2c3d,subnet-4e5f6a7b",
    "SecurityGroupIds": "sg-0a1b2c3d",
    "GitlabBaseUrl": "https://gitlab.acme-corp.internal",
    "GitlabVersion": "18.11",
    "GitlabDbKeyBaseSecretArn": f"arn:aws:secretsmanager:{REGION}:{ACCOUNT}:secret:gitlab-key-base-AbCdEf",
    "MailFrom": "gitlab@acme-corp.internal",
    "SmtpHost": "smtp.acme-corp.internal",
    "SmtpUsername": "gitlab",
    "SmtpSecretArn": f"arn:aws:secretsmanager:{REGION}:{ACCOUNT}:secret:gitlab-smtp-AbCdEf",
    "PageTopicArn": f"arn:aws:sns:{REGION}:{ACCOUNT}:pager",
    "TicketTopicArn": f"arn:aws:sns:{REGION}:{ACCOUNT}:tickets",
    "RunbookBaseUrl": "https://gitlab.acme-corp.internal/platform/housekeeping/-/blob/main/docs/runbook.md",
    "ServiceName": "gitlab-housekeeping-prod",
}


def template() -> dict:
    return yaml_parse((ROOT / "infra/template.yaml").read_text())


def prod_overrides(answer: bool) -> dict[str, str]:
    """samconfig.toml's prod environment, `<…>` replaced by ANSWERS when `answer`."""
    conf = tomllib.loads((ROOT / "samconfig.toml").read_text())
    raw = conf["prod"]["deploy"]["parameters"]["parameter_overrides"]
    items = raw if isinstance(raw, list) else raw.split()
    out = {}
    for item in items:
        k, _, v = item.partition("=")
        if answer and "<" in v:
            if k not in ANSWERS:
                raise SystemExit(f"no test answer for samconfig's prod placeholder {k}")
            v = ANSWERS[k]
        out[k] = v
    return out


def value(t: dict, given: dict[str, str], name: str):
    p = t["Parameters"][name]
    v = given.get(name, p.get("Default"))
    if v is None:
        return None
    v = str(v)
    if p.get("Type") == "CommaDelimitedList":
        return v.split(",")
    return v


def evaluate(node, t: dict, given: dict[str, str]):
    if isinstance(node, dict) and len(node) == 1:
        ((k, v),) = node.items()
        if k == "Ref":
            return value(t, given, v)
        args = [evaluate(a, t, given) for a in v] if isinstance(v, list) else v
        if k == "Fn::Equals":
            return str(args[0]) == str(args[1])
        if k == "Fn::Not":
            return not args[0]
        if k == "Fn::And":
            return all(args)
        if k == "Fn::Or":
            return any(args)
        if k == "Fn::Contains":
            return args[1] in args[0]
        if k == "Fn::EachMemberEquals":
            return all(m == args[1] for m in args[0])
        if k == "Fn::EachMemberIn":
            return all(m in args[1] for m in args[0])
        raise ValueError(f"rule function {k} is not evaluated here")
    return node


def validate(t: dict, given: dict[str, str]) -> list[str]:
    why = []
    for name in given:
        if name not in t["Parameters"]:
            why.append(f"{name}: not a parameter of the template")
    for name, p in t["Parameters"].items():
        v = given.get(name, p.get("Default"))
        if v is None:
            why.append(f"{name}: no value (it has no default)")
            continue
        v = str(v)
        if "AllowedValues" in p and v not in [str(a) for a in p["AllowedValues"]]:
            why.append(f"{name}: {v!r} not among {p['AllowedValues']}")
        pattern = p.get("AllowedPattern")
        if pattern and p.get("Type", "String") == "String" and not re.fullmatch(pattern, v):
            why.append(f"{name}: {v!r} does not match {pattern}")
        if p.get("Type") == "Number":
            n = float(v)
            if "MinValue" in p and n < float(p["MinValue"]):
                why.append(f"{name}: below {p['MinValue']}")
            if "MaxValue" in p and n > float(p["MaxValue"]):
                why.append(f"{name}: above {p['MaxValue']}")
    if why:
        return why  # CloudFormation stops at the parameters
    for rule, r in (t.get("Rules") or {}).items():
        if "RuleCondition" in r and not evaluate(r["RuleCondition"], t, given):
            continue
        for a in r.get("Assertions", []):
            if not evaluate(a["Assert"], t, given):
                why.append(f"rule {rule}: {' '.join(str(a.get('AssertDescription', '')).split())}")
    return why


def main() -> int:
    t = template()
    answered = prod_overrides(True)
    placeholders = dict(answered)
    placeholders.update(
        GitlabBaseUrl="https://gitlab.example.com",
        MailFrom="gitlab@example.com",
        SmtpHost="smtp.example.com",
        RunbookBaseUrl="https://gitlab.example.com/platform/housekeeping/-/blob/main/docs/runbook.md",
    )
    no_vpc = {k: v for k, v in answered.items() if k not in ("SubnetIds", "SecurityGroupIds")}
    notices = {k: v for k, v in answered.items() if k != "GitlabDbKeyBaseSecretArn"}
    notices["PatExpiringScheduleEnabled"] = "true"
    storage = dict(answered, StorageRegistry="on")
    cases = {
        "no_answers": {},
        "placeholders": placeholders,
        "prod_untouched": prod_overrides(False),
        "prod_answered": answered,
        "no_vpc": no_vpc,
        "no_vpc_said": dict(no_vpc, DatabaseReachableWithoutVpc="true"),
        "notices_without_key_base": notices,
        "storage_without_instance": storage,
        "storage_with_instance": dict(storage, GitlabInstanceUuid="0a1b2c3d-4e5f-6a7b-8c9d-0e1f2a3b4c5d"),
    }
    report = {}
    for case, given in cases.items():
        why = validate(t, given)
        report[case] = {"refused": bool(why), "why": why}
    report["required"] = sorted(n for n, p in t["Parameters"].items() if "Default" not in p)
    report["prod_keys"] = sorted(prod_overrides(False))
    pathlib.Path(sys.argv[1]).write_text(json.dumps(report, indent=1))
    for case in cases:
        print(f"{case}: {'refused' if report[case]['refused'] else 'accepted'}")
        for w in report[case]["why"]:
            print(f"  {w}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
