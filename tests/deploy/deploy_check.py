"""Deploy the translated template into a moto server and check its wiring.

Run with the moto venv (.venv, requirements-dev.txt), against a server started by
moto_launcher.py:

    deploy_check.py PLAN.json REPORT.json

PLAN: {"endpoint", "template" (translate.py's output), "emitted" (the metrics the code
emits: a list of {namespace, metric, dimensions, function}), "code_bucket", "code_key",
"deployments": [{"stack", "parameters": "defaults" | "operations", "mutation": null |
name}]}. Each deployment is created in the server (for a mutation, the template
changed by MUTATIONS[name] first) and every check below reads the result through the
service APIs (CloudFormation, SQS, Lambda, IAM, Scheduler, CloudWatch), iterating over
whatever the stack holds.

REPORT: {stack: {"failures": [{"check", "detail"}], "schedules": [{"schedule",
"function", "input", "expression"}], "mutation", "applicable", "why"}}. The cron
message itself is checked by the Rust test with the project's envelope parser.
"""

import copy
import fnmatch
import io
import json
import re
import sys
import zipfile
from typing import Any, Callable

import boto3
from botocore.config import Config

REGION = "us-east-1"
ACCOUNT = "123456789012"
RUNBOOK_URL = "https://gitlab.acme-corp.internal/platform/housekeeping/-/blob/main/docs/runbook.md"

# Every check this file makes (the Rust test knows the same names).
CHECKS = [
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
    "alarm_metric",
    "alarm_aws_dimension",
    "alarm_actions",
    "dashboard_metric",
]


def kebab(logical: str, suffix: str) -> str:
    """`DeleteUserFunction`, "Function" -> `delete-user`."""
    base = logical[: -len(suffix)] if logical.endswith(suffix) else logical
    return re.sub(r"(?<!^)(?=[A-Z])", "-", base).lower()


def camel(name: str) -> str:
    return "".join(w[:1].upper() + w[1:] for w in name.split("-"))


# ------------------------------------------------------------------ template helpers
def resources_of(t: dict, typ: str) -> dict[str, dict]:
    return {k: v for k, v in sorted(t["Resources"].items()) if v.get("Type") == typ}


def parameter_values(
    t: dict, which: str, topic_arn: str | None, ticket_arn: str | None = None
) -> dict[str, str]:
    """The parameter set: 'defaults' (only the required ones given) or 'operations'
    (page and ticket topics set, every …ScheduleEnabled false, VPC set, x86_64, a
    KMS key for the secrets, storage removal on with its services and buckets)."""
    values = {}
    for name, p in t.get("Parameters", {}).items():
        if name == "RunbookBaseUrl":
            values[name] = RUNBOOK_URL
        elif "Default" not in p:
            values[name] = f"arn:aws:secretsmanager:{REGION}:{ACCOUNT}:secret:{name}-AbCdEf"
    if which == "operations":
        for name in t.get("Parameters", {}):
            if name.endswith("ScheduleEnabled"):
                values[name] = "false"
        values["PageTopicArn"] = topic_arn
        values["TicketTopicArn"] = ticket_arn
        values["SubnetIds"] = "subnet-0a1b2c3d,subnet-4e5f6a7b"
        values["SecurityGroupIds"] = "sg-0a1b2c3d"
        values["Architecture"] = "x86_64"
        if "SecretsKmsKeyArn" in t.get("Parameters", {}):
            values["SecretsKmsKeyArn"] = f"arn:aws:kms:{REGION}:{ACCOUNT}:key/1234abcd-12ab-34cd-56ef-1234567890ab"
        # Storage removal on (issue 37): storage-cleanup's conditional grants deploy too.
        storage = {
            "StorageGitaly": "on",
            "StorageRegistry": "on",
            "StorageObjects": "on",
            "GitalyAddresses": "default=tcp://gitaly.internal:8075",
            "GitalyTokenSecretArn": f"arn:aws:secretsmanager:{REGION}:{ACCOUNT}:secret:gitaly-token-AbCdEf",
            "RegistryApiUrl": "http://registry.internal:5000",
            "RegistryKeySecretArn": f"arn:aws:secretsmanager:{REGION}:{ACCOUNT}:secret:registry-key-AbCdEf",
            "ObjectStorageBucketUploads": "gitlab-uploads",
            "ObjectStorageBucketLfs": "gitlab-lfs",
            "ObjectStorageBucketPackages": "gitlab-packages/prefix",
            "GitlabInstanceUuid": "0a1b2c3d-4e5f-6a7b-8c9d-0e1f2a3b4c5d",
        }
        for name, value in storage.items():
            if name in t.get("Parameters", {}):
                values[name] = value
    elif which != "defaults":
        raise ValueError(f"unknown parameter set {which}")
    return values


def resolved_parameters(t: dict, given: dict[str, str]) -> dict[str, Any]:
    out = {}
    for name, p in t.get("Parameters", {}).items():
        out[name] = given.get(name, p.get("Default"))
    return out


def evaluate(node: Any, t: dict, params: dict[str, Any]) -> Any:
    """A value of the template with parameters and conditions resolved (Ref to a
    parameter, Fn::If, Fn::Equals/Not/And/Or, Condition); enough for the properties
    the checks compare with their parameter (schedule State, mapping Enabled)."""
    if isinstance(node, dict) and len(node) == 1:
        (k, v), = node.items()
        if k == "Ref":
            if v in params:
                return params[v]
            raise ValueError(f"cannot evaluate Ref {v}")
        if k == "Condition":
            return evaluate(t["Conditions"][v], t, params)
        if k == "Fn::If":
            cond, yes, no = v
            return evaluate(yes if evaluate(t["Conditions"][cond], t, params) else no, t, params)
        if k == "Fn::Equals":
            a, b = (evaluate(x, t, params) for x in v)
            return str(a) == str(b)
        if k == "Fn::Not":
            return not evaluate(v[0], t, params)
        if k == "Fn::And":
            return all(evaluate(x, t, params) for x in v)
        if k == "Fn::Or":
            return any(evaluate(x, t, params) for x in v)
    return node


def as_bool(v: Any) -> bool:
    if isinstance(v, str):
        return v.lower() == "true"
    return bool(v)


# ------------------------------------------------------------------ mutations
# Each breaks exactly one check; it returns a reason when the template has nothing
# it applies to (the Rust test decides which ones must apply).
def _first(d: dict[str, dict], pred: Callable[[str, dict], bool]) -> tuple[str, dict] | None:
    for k, v in d.items():
        if pred(k, v):
            return k, v
    return None


def source_queue_logicals(t: dict) -> list[str]:
    out = []
    for esm in resources_of(t, "AWS::Lambda::EventSourceMapping").values():
        arn = esm["Properties"].get("EventSourceArn")
        if isinstance(arn, dict) and "Fn::GetAtt" in arn:
            out.append(arn["Fn::GetAtt"][0])
    return out


def m_redrive(t, params):
    hit = _first(resources_of(t, "AWS::SQS::Queue"), lambda k, v: "RedrivePolicy" in v["Properties"])
    if not hit:
        return "no queue has a RedrivePolicy"
    del hit[1]["Properties"]["RedrivePolicy"]


def m_visibility_timeout(t, params):
    for esm in resources_of(t, "AWS::Lambda::EventSourceMapping").values():
        q = esm["Properties"]["EventSourceArn"]["Fn::GetAtt"][0]
        fn = esm["Properties"]["FunctionName"]["Ref"]
        timeout = t["Resources"][fn]["Properties"].get("Timeout", 3)
        t["Resources"][q]["Properties"]["VisibilityTimeout"] = 6 * int(timeout) - 1
        return
    return "no event-source mapping"


def m_event_source_mapping(t, params):
    hit = _first(
        resources_of(t, "AWS::Lambda::EventSourceMapping"),
        lambda k, v: "ReportBatchItemFailures" in v["Properties"].get("FunctionResponseTypes", []),
    )
    if not hit:
        return "no mapping reports batch item failures"
    del hit[1]["Properties"]["FunctionResponseTypes"]


def _invert(node: Any, t: dict, params: dict) -> Any:
    if isinstance(node, dict) and "Fn::If" in node:
        c, yes, no = node["Fn::If"]
        return {"Fn::If": [c, no, yes]}
    v = evaluate(node, t, params)
    if isinstance(v, bool):
        return not v
    if isinstance(v, str) and v.lower() in ("true", "false"):
        return "false" if v.lower() == "true" else "true"
    return {"ENABLED": "DISABLED", "DISABLED": "ENABLED"}[v]


def m_event_source_enabled(t, params):
    hit = _first(resources_of(t, "AWS::Lambda::EventSourceMapping"), lambda k, v: "Enabled" in v["Properties"])
    if not hit:
        return "no event-source mapping has an Enabled property (no Enabled parameter yet)"
    p = hit[1]["Properties"]
    p["Enabled"] = _invert(p["Enabled"], t, params)


def m_queue_urls(t, params):
    for fn in resources_of(t, "AWS::Lambda::Function").values():
        env = fn["Properties"].get("Environment", {}).get("Variables", {})
        keys = [k for k in sorted(env) if k.startswith("QUEUE_URL_")]
        if len(keys) >= 2:
            a, b = keys[:2]
            env[a], env[b] = env[b], env[a]
            return
    return "no function has two QUEUE_URL_* variables"


def m_send_permission(t, params):
    for fn in resources_of(t, "AWS::Lambda::Function").values():
        env = fn["Properties"].get("Environment", {}).get("Variables", {})
        if not any(k.startswith("QUEUE_URL_") for k in env):
            continue
        role = t["Resources"][fn["Properties"]["Role"]["Fn::GetAtt"][0]]["Properties"]
        pols = role.get("Policies", [])
        # (An Fn::If item, such as the optional kms:Decrypt policy, is kept as it is.)
        keep = [p for p in pols if "sqs:SendMessage" not in json.dumps(p.get("PolicyDocument", {}))]
        if len(keep) < len(pols):
            # Drop one send permission only.
            drop = next(p for p in pols if p not in keep)
            role["Policies"] = [p for p in pols if p is not drop]
            return
    return "no function role grants sqs:SendMessage"


def m_schedule_target(t, params):
    scheds = resources_of(t, "AWS::Scheduler::Schedule")
    sources = source_queue_logicals(t)
    for s in scheds.values():
        own = s["Properties"]["Target"]["Arn"]["Fn::GetAtt"][0]
        other = next((q for q in sources if q != own), None)
        if other:
            s["Properties"]["Target"]["Arn"] = {"Fn::GetAtt": [other, "Arn"]}
            return
    return "no schedule, or a single queue"


def m_schedule_state(t, params):
    hit = _first(resources_of(t, "AWS::Scheduler::Schedule"), lambda k, v: "State" in v["Properties"])
    if not hit:
        return "no schedule has a State"
    p = hit[1]["Properties"]
    p["State"] = _invert(p["State"], t, params)


def m_schedule_message(t, params):
    scheds = list(resources_of(t, "AWS::Scheduler::Schedule").values())
    if len(scheds) < 2:
        return "fewer than two schedules"
    a, b = scheds[0]["Properties"]["Target"], scheds[1]["Properties"]["Target"]
    a["Input"], b["Input"] = b["Input"], a["Input"]


def _custom(alarm: dict) -> bool:
    return not str(alarm["Properties"].get("Namespace", "AWS/")).startswith("AWS/")


def m_alarm_metric(t, params):
    hit = _first(resources_of(t, "AWS::CloudWatch::Alarm"), lambda k, v: _custom(v) and "MetricName" in v["Properties"])
    if not hit:
        return "no alarm on the code's own namespace"
    hit[1]["Properties"]["MetricName"] = "no_such_metric"


def m_alarm_aws_dimension(t, params):
    hit = _first(
        resources_of(t, "AWS::CloudWatch::Alarm"),
        lambda k, v: not _custom(v) and v["Properties"].get("Dimensions"),
    )
    if not hit:
        return "no AWS/* alarm with dimensions"
    hit[1]["Properties"]["Dimensions"][0]["Value"] = "not-a-resource-of-this-stack"


def m_alarm_actions(t, params):
    hit = _first(resources_of(t, "AWS::CloudWatch::Alarm"), lambda k, v: "AlarmActions" in v["Properties"])
    if not hit:
        return "no alarm has AlarmActions"
    del hit[1]["Properties"]["AlarmActions"]


def m_dashboard_metric(t, params):
    for d in resources_of(t, "AWS::CloudWatch::Dashboard").values():
        body = json.dumps(d["Properties"]["DashboardBody"])
        # The first metric of the code's namespace (a dashboard row starts
        # ["GitLabHousekeeping", "<metric>", …]).
        new, n = re.subn(r'(\\"GitLabHousekeeping\\"\s*,\s*\\")([a-z_]+)(\\")', r"\1no_such_metric\3", body, count=1)
        if n:
            d["Properties"]["DashboardBody"] = json.loads(new)
            return
    return "no dashboard with a metric of the code's namespace"


def m_bucket_permission(t, params):
    # The packages bucket's ListBucket resource as `name/prefix` itself: not a bucket
    # ARN (the statement may sit inside an Fn::If).
    def walk(node):
        if isinstance(node, dict):
            if node.get("Action") == "s3:ListBucket" and "ObjectStorageBucketPackages" in json.dumps(node):
                node["Resource"] = {"Fn::Sub": "arn:${AWS::Partition}:s3:::${ObjectStorageBucketPackages}"}
                return True
            return any(walk(v) for v in node.values())
        if isinstance(node, list):
            return any(walk(v) for v in node)
        return False

    if not walk(t["Resources"]):
        return "no s3:ListBucket statement on the packages bucket"


def m_no_skipped_resource(t, params):
    # A type moto 5.2.5 has no CloudFormation model for (and the launcher adds none).
    t["Resources"]["UnmodelledResource"] = {
        "Type": "AWS::XRay::Group",
        "Properties": {"GroupName": "unmodelled"},
    }


MUTATIONS: dict[str, Callable[[dict, dict], str | None]] = {
    "no_skipped_resource": m_no_skipped_resource,
    "redrive": m_redrive,
    "visibility_timeout": m_visibility_timeout,
    "event_source_mapping": m_event_source_mapping,
    "event_source_enabled": m_event_source_enabled,
    "queue_urls": m_queue_urls,
    "send_permission": m_send_permission,
    "bucket_permission": m_bucket_permission,
    "schedule_target": m_schedule_target,
    "schedule_state": m_schedule_state,
    "schedule_message": m_schedule_message,
    "alarm_metric": m_alarm_metric,
    "alarm_aws_dimension": m_alarm_aws_dimension,
    "alarm_actions": m_alarm_actions,
    "dashboard_metric": m_dashboard_metric,
}


# ------------------------------------------------------------------ IAM evaluation
def statements(doc: Any) -> list[dict]:
    if isinstance(doc, str):
        doc = json.loads(doc)
    st = doc.get("Statement", [])
    return st if isinstance(st, list) else [st]


def listify(v: Any) -> list:
    return v if isinstance(v, list) else [v]


def allows(stmts: list[dict], action: str, resource: str) -> bool:
    def matches(s):
        acts = listify(s.get("Action", []))
        ress = listify(s.get("Resource", []))
        return any(fnmatch.fnmatchcase(action.lower(), a.lower()) for a in acts) and any(
            fnmatch.fnmatchcase(resource, r) for r in ress
        )

    if any(s.get("Effect") == "Deny" and matches(s) for s in stmts):
        return False
    return any(s.get("Effect") == "Allow" and matches(s) for s in stmts)


# ------------------------------------------------------------------ the checks
class Stack:
    def __init__(self, clients: dict, name: str):
        self.c = clients
        self.name = name
        pages = clients["cloudformation"].get_paginator("list_stack_resources").paginate(StackName=name)
        self.resources = [r for p in pages for r in p["StackResourceSummaries"]]

    def of(self, typ: str) -> dict[str, str]:
        return {r["LogicalResourceId"]: r["PhysicalResourceId"] for r in self.resources if r["ResourceType"] == typ}


def check_stack(clients: dict, stack: str, t: dict, params: dict, emitted: list[dict]) -> tuple[list, list]:
    fails: list[dict] = []

    def fail(check: str, detail: str) -> None:
        fails.append({"check": check, "detail": detail})

    cfn, sqs, lam, iam = (clients[k] for k in ("cloudformation", "sqs", "lambda", "iam"))
    status = cfn.describe_stacks(StackName=stack)["Stacks"][0]["StackStatus"]
    if status != "CREATE_COMPLETE":
        fail("no_skipped_resource", f"stack {stack} is {status}")
    s = Stack(clients, stack)
    for r in s.resources:
        if not r["ResourceType"]:
            fail("no_skipped_resource", f"a resource was skipped by moto (empty ResourceType): {r}")
    declared = {k for k, v in t["Resources"].items() if "Condition" not in v or evaluate({"Condition": v["Condition"]}, t, params)}
    created = {r["LogicalResourceId"] for r in s.resources if r["ResourceType"]}
    for missing in sorted(declared - created):
        fail("no_skipped_resource", f"{missing} is in the template but not in the stack")

    # Queues: URL, ARN, attributes.
    queues = {}
    for logical, url in s.of("AWS::SQS::Queue").items():
        attrs = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
        queues[logical] = {"url": url, "arn": attrs["QueueArn"], "attrs": attrs}
    by_arn = {q["arn"]: logical for logical, q in queues.items()}

    # Functions: configuration and role.
    functions = {}
    for logical, name in s.of("AWS::Lambda::Function").items():
        cfg = lam.get_function(FunctionName=name)["Configuration"]
        functions[logical] = cfg
    fn_by_arn = {cfg["FunctionArn"]: logical for logical, cfg in functions.items()}

    # Event-source mappings of the stack's queues.
    esms_by_queue: dict[str, list] = {q: [] for q in queues}
    for m in lam.list_event_source_mappings()["EventSourceMappings"]:
        q = by_arn.get(m["EventSourceArn"])
        if q is not None:
            esms_by_queue[q].append(m)
    sources = [q for q, ms in esms_by_queue.items() if ms]

    # redrive: every source queue to its own DLQ (a queue nothing consumes), with the
    # template's maxReceiveCount; every other queue is exactly one source's DLQ.
    dlq_of: dict[str, str] = {}
    for q in sources:
        raw = queues[q]["attrs"].get("RedrivePolicy")
        if not raw:
            fail("redrive", f"{q} has no RedrivePolicy")
            continue
        rp = json.loads(raw)
        dlq = by_arn.get(rp.get("deadLetterTargetArn"))
        if dlq is None or dlq in sources:
            fail("redrive", f"{q} redrives to {rp.get('deadLetterTargetArn')}, not a DLQ of the stack")
            continue
        if dlq in dlq_of.values():
            fail("redrive", f"{q} shares its DLQ {dlq}")
        dlq_of[q] = dlq
        want = t["Resources"][q]["Properties"].get("RedrivePolicy", {}).get("maxReceiveCount")
        if want is None or int(rp.get("maxReceiveCount", -1)) != int(want):
            fail("redrive", f"{q}: maxReceiveCount {rp.get('maxReceiveCount')}, the template says {want}")
    for q in queues:
        if q not in sources and q not in dlq_of.values():
            fail("redrive", f"{q} is neither consumed by a function nor any queue's DLQ")

    # event_source_mapping / event_source_enabled / visibility_timeout.
    for q in sorted(queues):
        ms = esms_by_queue[q]
        if q not in sources:
            continue
        if len(ms) != 1:
            fail("event_source_mapping", f"{q} has {len(ms)} event-source mappings")
        for m in ms:
            fn = fn_by_arn.get(m["FunctionArn"])
            if fn is None or kebab(fn, "Function") != kebab(q, "Queue"):
                fail("event_source_mapping", f"{q} feeds {m['FunctionArn']}, not its own function")
                continue
            if "ReportBatchItemFailures" not in (m.get("FunctionResponseTypes") or []):
                fail("event_source_mapping", f"{q} -> {fn}: no ReportBatchItemFailures")
            logical_esm = next(
                (k for k, v in resources_of(t, "AWS::Lambda::EventSourceMapping").items()
                 if v["Properties"].get("EventSourceArn") == {"Fn::GetAtt": [q, "Arn"]}),
                None,
            )
            # Its parameter: `<Function>…Enabled`, other than the schedule's.
            base = camel(kebab(fn, "Function"))
            switch = [
                n for n in t.get("Parameters", {})
                if n.startswith(base) and n.endswith("Enabled") and n != f"{base}ScheduleEnabled"
                and not any(n.startswith(o) and len(o) > len(base) for o in (camel(kebab(f, "Function")) for f in functions))
            ]
            has_prop = logical_esm and "Enabled" in t["Resources"][logical_esm]["Properties"]
            got = m.get("State") == "Enabled"
            if len(switch) > 1:
                fail("event_source_enabled", f"{q} -> {fn}: several parameters could switch it: {switch}")
            elif switch:
                want = as_bool(params[switch[0]])
                if got != want:
                    fail("event_source_enabled", f"{q} -> {fn}: mapping {m.get('State')}, {switch[0]}={params[switch[0]]}")
            elif has_prop:
                fail("event_source_enabled", f"{q} -> {fn}: Enabled is set but no <Function>…Enabled parameter exists")
            elif not got:
                fail("event_source_enabled", f"{q} -> {fn}: mapping {m.get('State')} and no parameter enables it")
            vis = int(queues[q]["attrs"]["VisibilityTimeout"])
            timeout = int(functions[fn]["Timeout"])
            if vis < 6 * timeout:
                fail("visibility_timeout", f"{q}: visibility {vis} s < 6 x {fn} timeout {timeout} s")

    # queue_urls / send_permission.
    role_stmts_cache: dict[str, list] = {}

    def role_statements(role_arn: str) -> list[dict]:
        if role_arn not in role_stmts_cache:
            name = role_arn.split("/")[-1]
            out = []
            for pn in iam.list_role_policies(RoleName=name)["PolicyNames"]:
                out += statements(iam.get_role_policy(RoleName=name, PolicyName=pn)["PolicyDocument"])
            role_stmts_cache[role_arn] = out
        return role_stmts_cache[role_arn]

    for fn, cfg in sorted(functions.items()):
        env = cfg.get("Environment", {}).get("Variables", {})
        for var, value in sorted(env.items()):
            if not var.startswith("QUEUE_URL_"):
                continue
            target = camel(var[len("QUEUE_URL_"):].lower().replace("_", "-")) + "Queue"
            if target not in queues:
                fail("queue_urls", f"{fn}: {var} names no queue of the stack ({target} missing)")
                continue
            if value != queues[target]["url"]:
                fail("queue_urls", f"{fn}: {var}={value}, expected {queues[target]['url']}")
            if not allows(role_statements(cfg["Role"]), "sqs:SendMessage", queues[target]["arn"]):
                fail("send_permission", f"{fn}: its role may not sqs:SendMessage to {target}")

    # bucket_permission: a bucket given as `name/prefix` (GitLab's bucket_prefix) is
    # listed on the bucket's own ARN, its objects under the prefix only.
    for var, param in (
        ("OBJECT_STORAGE_BUCKET_UPLOADS", "ObjectStorageBucketUploads"),
        ("OBJECT_STORAGE_BUCKET_LFS", "ObjectStorageBucketLfs"),
        ("OBJECT_STORAGE_BUCKET_PACKAGES", "ObjectStorageBucketPackages"),
    ):
        value = params.get(param) or ""
        if not value:
            continue
        bucket = value.split("/")[0]
        for fn, cfg in sorted(functions.items()):
            if (cfg.get("Environment", {}).get("Variables", {}) or {}).get(var) != value:
                continue
            stmts = role_statements(cfg["Role"])
            if not allows(stmts, "s3:ListBucket", f"arn:aws:s3:::{bucket}"):
                fail("bucket_permission", f"{fn}: may not s3:ListBucket on {bucket} ({param}={value})")
            if not allows(stmts, "s3:DeleteObject", f"arn:aws:s3:::{value}/x"):
                fail("bucket_permission", f"{fn}: may not s3:DeleteObject under {value}/")

    # Schedules.
    sched = clients["scheduler"]
    schedules_out = []
    group_of = {}
    for g in sched.list_schedule_groups()["ScheduleGroups"]:
        for sc in sched.list_schedules(GroupName=g["Name"])["Schedules"]:
            group_of[sc["Name"]] = g["Name"]
    for logical, name in sorted(s.of("AWS::Scheduler::Schedule").items()):
        got = sched.get_schedule(Name=name, GroupName=group_of.get(name, "default"))
        target = got["Target"]
        own = camel(kebab(logical, "Schedule")) + "Queue"
        tq = by_arn.get(target.get("Arn"))
        if tq != own:
            fail("schedule_target", f"{logical} targets {target.get('Arn')}, not its own queue {own}")
        if tq not in sources:
            fail("schedule_target", f"{logical}: its target is not a queue a function consumes")
        role = target.get("RoleArn", "")
        role_name = role.split("/")[-1]
        try:
            trust = iam.get_role(RoleName=role_name)["Role"]["AssumeRolePolicyDocument"]
            trusted = any(
                "scheduler.amazonaws.com" in listify(st.get("Principal", {}).get("Service", []))
                for st in statements(trust) if st.get("Effect") == "Allow"
            )
        except iam.exceptions.NoSuchEntityException:
            trusted = False
        if not trusted:
            fail("schedule_target", f"{logical}: role {role} is not one Scheduler may assume")
        elif tq and not allows(role_statements(role), "sqs:SendMessage", target["Arn"]):
            fail("schedule_target", f"{logical}: role {role} may not send to its target")
        dlq = by_arn.get(target.get("DeadLetterConfig", {}).get("Arn"))
        if dlq is None or dlq in sources:
            fail("schedule_target", f"{logical}: no dead-letter queue of the stack ({target.get('DeadLetterConfig')})")
        elif not allows(role_statements(role), "sqs:SendMessage", queues[dlq]["arn"]):
            fail("schedule_target", f"{logical}: role {role} may not send to its DLQ {dlq}")
        switch = f"{camel(kebab(logical, 'Schedule'))}ScheduleEnabled"
        if switch not in params:
            fail("schedule_state", f"{logical}: no {switch} parameter can pause it")
        else:
            want = "ENABLED" if as_bool(params[switch]) else "DISABLED"
            if got.get("State") != want:
                fail("schedule_state", f"{logical} is {got.get('State')}, {switch}={params[switch]}")
        schedules_out.append({
            "schedule": logical,
            "function": kebab(logical, "Schedule"),
            "input": target.get("Input", ""),
            "expression": got.get("ScheduleExpression"),
        })

    # Alarms.
    cw = clients["cloudwatch"]
    fn_by_name = {kebab(k, "Function"): cfg for k, cfg in functions.items()}
    fn_names = {cfg["FunctionName"] for cfg in functions.values()}
    queue_names = {q["arn"].split(":")[-1] for q in queues.values()}
    group_names = set(s.of("AWS::Scheduler::ScheduleGroup").values())
    schedule_names = set(s.of("AWS::Scheduler::Schedule").values())
    aws_dims = {
        "FunctionName": fn_names,
        "QueueName": queue_names,
        "ScheduleGroup": group_names,
        "ScheduleName": schedule_names,
    }

    def metric_problem(ns: str, metric: str, dims: list[dict]) -> tuple[str, str] | None:
        if ns.startswith("AWS/"):
            for d in dims:
                known = aws_dims.get(d["Name"])
                if known is None:
                    return "alarm_aws_dimension", f"{ns} {metric}: dimension {d['Name']} has no check"
                if d["Value"] not in known:
                    return "alarm_aws_dimension", f"{ns} {metric}: {d['Name']}={d['Value']} is no resource of the stack"
            return None
        names = sorted(d["Name"] for d in dims)
        values = {d["Name"]: d["Value"] for d in dims}
        match = [
            e for e in emitted
            if e["namespace"] == ns and e["metric"] == metric and sorted(e["dimensions"]) == names
            and ("function" not in values or values["function"] == e["function"])
        ]
        if not match:
            return "alarm_metric", f"{ns} {metric} {values}: the code emits no such metric with these dimensions"
        if "Service" in values:
            services = {
                (fn_by_name.get(e["function"]) or {}).get("Environment", {}).get("Variables", {}).get("SERVICE_NAME")
                for e in match
            }
            if values["Service"] not in services:
                return "alarm_metric", f"{ns} {metric}: Service={values['Service']} is not the functions' SERVICE_NAME {services}"
        return None

    alarm_names = list(s.of("AWS::CloudWatch::Alarm").values())
    alarms = []
    for i in range(0, len(alarm_names), 100):
        alarms += cw.describe_alarms(AlarmNames=alarm_names[i : i + 100])["MetricAlarms"]
    if len(alarms) != len(alarm_names):
        fail("no_skipped_resource", f"{len(alarm_names)} alarms in the stack, {len(alarms)} in CloudWatch")
    # An alarm whose description starts "Page:" notifies the page topic, "Ticket:" the
    # ticket topic (an empty topic parameter: no actions); the children of a paging
    # composite ("Feeds <alarm>:") and its suppressor notify nobody themselves.
    topic = params.get("PageTopicArn") or ""
    ticket = params.get("TicketTopicArn") or ""

    def expected_actions(description: str) -> list:
        if description.startswith("Page: "):
            return [topic] if topic else []
        if description.startswith("Ticket: "):
            return [ticket] if ticket else []
        return []

    composite_names = list(s.of("AWS::CloudWatch::CompositeAlarm").values())
    composites = []
    for i in range(0, len(composite_names), 100):
        composites += cw.describe_alarms(AlarmNames=composite_names[i : i + 100])["CompositeAlarms"]
    if len(composites) != len(composite_names):
        fail("no_skipped_resource", f"{len(composite_names)} composite alarms in the stack, {len(composites)} in CloudWatch")
    for a in composites:
        want = expected_actions(a.get("AlarmDescription") or "")
        if a.get("AlarmActions", []) != want or (a.get("OKActions") and a["OKActions"] != want):
            fail("alarm_actions", f"{a['AlarmName']}: AlarmActions {a.get('AlarmActions')}, OKActions {a.get('OKActions')}, expected {want}")
    for a in alarms:
        metrics = []
        if a.get("MetricName"):
            metrics.append((a["Namespace"], a["MetricName"], a.get("Dimensions", [])))
        for q in a.get("Metrics", []):
            st = q.get("MetricStat")
            if st:
                m = st["Metric"]
                metrics.append((m["Namespace"], m["MetricName"], m.get("Dimensions", [])))
        if not metrics:
            fail("alarm_metric", f"{a['AlarmName']} reads no metric")
        for ns, metric, dims in metrics:
            p = metric_problem(ns, metric, dims)
            if p:
                fail(p[0], f"{a['AlarmName']}: {p[1]}")
        want = expected_actions(a.get("AlarmDescription") or "")
        if a.get("AlarmActions", []) != want:
            fail("alarm_actions", f"{a['AlarmName']}: AlarmActions {a.get('AlarmActions')}, expected {want}")
        if a.get("OKActions") and a["OKActions"] != want:
            fail("alarm_actions", f"{a['AlarmName']}: OKActions {a.get('OKActions')}, expected {want}")

    # Dashboards: every metric row ([namespace, name, dim, value, …, {options}], with
    # "." repeating the row above) must be one the code emits or an AWS/* metric of
    # the stack's resources.
    for logical, name in sorted(s.of("AWS::CloudWatch::Dashboard").items()):
        body = json.loads(cw.get_dashboard(DashboardName=name)["DashboardBody"])
        checked_rows = 0
        for w in body.get("widgets", []):
            prev: list = []
            for row in (w.get("properties") or {}).get("metrics", []) or []:
                items = [x for x in row if not isinstance(x, dict)]
                items = [prev[i] if x == "." and i < len(prev) else x for i, x in enumerate(items)]
                prev = items
                if len(items) < 2 or not isinstance(items[0], str):
                    continue
                dims = [{"Name": items[i], "Value": items[i + 1]} for i in range(2, len(items) - 1, 2)]
                p = metric_problem(items[0], items[1], dims)
                checked_rows += items[0] == "GitLabHousekeeping"
                if p:
                    fail("dashboard_metric", f"{logical}: {p[1]}")
        if not checked_rows:
            fail("dashboard_metric", f"{logical}: no metric of the code's namespace was read back")
    return fails, schedules_out


# ------------------------------------------------------------------ driver
def tiny_zip() -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("bootstrap", "#!/bin/sh\nexit 0\n")
    return buf.getvalue()


def main() -> None:
    plan_path, report_path = sys.argv[1:3]
    with open(plan_path) as f:
        plan = json.load(f)
    with open(plan["template"]) as f:
        template = json.load(f)
    with open(plan["emitted"]) as f:
        emitted = json.load(f)
    cfg = Config(retries={"max_attempts": 2})
    clients = {
        n: boto3.client(
            n, endpoint_url=plan["endpoint"], region_name=REGION,
            aws_access_key_id="testing", aws_secret_access_key="testing", config=cfg,
        )
        for n in ("cloudformation", "sqs", "lambda", "iam", "scheduler", "cloudwatch", "s3", "sns")
    }
    s3 = clients["s3"]
    if plan["code_bucket"] not in [b["Name"] for b in s3.list_buckets()["Buckets"]]:
        s3.create_bucket(Bucket=plan["code_bucket"])
        s3.put_object(Bucket=plan["code_bucket"], Key=plan["code_key"], Body=tiny_zip())
    report = {}
    for d in plan["deployments"]:
        stack = d["stack"]
        t = copy.deepcopy(template)
        entry = {"mutation": d.get("mutation"), "applicable": True, "why": None, "failures": [], "schedules": []}
        topic = ticket = None
        if d["parameters"] == "operations":
            topic = clients["sns"].create_topic(Name=f"{stack}-alarms")["TopicArn"]
            ticket = clients["sns"].create_topic(Name=f"{stack}-tickets")["TopicArn"]
        given = parameter_values(t, d["parameters"], topic, ticket)
        if d.get("mutation"):
            why = MUTATIONS[d["mutation"]](t, resolved_parameters(t, given))
            if why:
                entry.update(applicable=False, why=why)
                report[stack] = entry
                continue
        clients["cloudformation"].create_stack(
            StackName=stack,
            TemplateBody=json.dumps(t),
            Parameters=[{"ParameterKey": k, "ParameterValue": v} for k, v in given.items()],
            Capabilities=["CAPABILITY_IAM", "CAPABILITY_NAMED_IAM", "CAPABILITY_AUTO_EXPAND"],
        )
        params = resolved_parameters(t, given)
        params.update({"AWS::Region": REGION, "AWS::AccountId": ACCOUNT, "AWS::StackName": stack, "AWS::NoValue": None})
        entry["failures"], entry["schedules"] = check_stack(clients, stack, t, params, emitted)
        report[stack] = entry
    with open(report_path, "w") as f:
        json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
