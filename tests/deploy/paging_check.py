"""Who is paged, in moto: the stack deployed, its alarms put into the states an incident
produces, and the notifications counted per topic.

Run with the moto venv (.venv), against a server started by moto_launcher.py:

    paging_check.py PLAN.json REPORT.json

PLAN: {"endpoint", "template" (translate.py's output), "code_bucket", "code_key",
"stack"}.

moto 5.2.5 publishes no SNS notification when an alarm changes state, and evaluates no
composite alarm (it has no PutCompositeAlarm; moto_launcher.py creates the template's
composites in its backend). So the notifications are computed, the way
cutover_check.py follows the heartbeats: every alarm (metric and composite) is read
back from moto with describe_alarms; for each scenario the metric alarms an incident
trips are put into ALARM in moto with set_alarm_state, the composites' states are
evaluated from their AlarmRule over the states read back (alarm_rules.py) and stored
in moto too, and the notifications of every state change are counted on each topic
from the alarms' actions and ActionsSuppressor as moto returns them. Between
scenarios every alarm goes back to OK (its notifications are the scenario's
"recovery").

REPORT: {"page_topic", "ticket_topic", "alarms": {name: {"composite", "actions",
"ok_actions", "description", "suppressor"}}, "scenarios": {scenario: {"tripped":
[names], "notified": [{"alarm", "state", "topics"}], "recovery": [...]}}}.

Scenarios: "outage" (the database unreachable for every function: every function's
invocation errors, failed records, every-record and every-item failures, dead letters
and queue age, every cron's missed run); "schema" (a schema refused: the schema alarm,
every function's errors and every cron's missed run); and "alone:<alarm>" for every
metric alarm tripped on its own.
"""

import copy
import json
import sys

import boto3
from botocore.config import Config

import alarm_rules
from deploy_check import REGION, parameter_values, tiny_zip

OUTAGE_KINDS = ("ErrorsAlarm", "FailedRecordsAlarm", "AllRecordsFailedAlarm",
                "AllItemsFailedAlarm", "DLQAlarm", "QueueAgeAlarm", "HeartbeatAlarm")


def main() -> None:
    plan_path, report_path = sys.argv[1:3]
    with open(plan_path) as f:
        plan = json.load(f)
    with open(plan["template"]) as f:
        template = json.load(f)
    cfg = Config(retries={"max_attempts": 2})
    c = {
        n: boto3.client(n, endpoint_url=plan["endpoint"], region_name=REGION,
                        aws_access_key_id="testing", aws_secret_access_key="testing", config=cfg)
        for n in ("cloudformation", "cloudwatch", "s3", "sns")
    }
    c["s3"].create_bucket(Bucket=plan["code_bucket"])
    c["s3"].put_object(Bucket=plan["code_bucket"], Key=plan["code_key"], Body=tiny_zip())
    cfn, cw = c["cloudformation"], c["cloudwatch"]
    stack = plan["stack"]
    t = copy.deepcopy(template)
    page = c["sns"].create_topic(Name=f"{stack}-page")["TopicArn"]
    ticket = c["sns"].create_topic(Name=f"{stack}-ticket")["TopicArn"]
    params = parameter_values(t, "operations", page, ticket)
    cfn.create_stack(
        StackName=stack, TemplateBody=json.dumps(t),
        Parameters=[{"ParameterKey": k, "ParameterValue": v} for k, v in params.items()],
        Capabilities=["CAPABILITY_IAM", "CAPABILITY_NAMED_IAM", "CAPABILITY_AUTO_EXPAND"],
    )
    status = cfn.describe_stacks(StackName=stack)["Stacks"][0]["StackStatus"]
    assert status == "CREATE_COMPLETE", status

    def describe() -> dict[str, dict]:
        out = {}
        for p in cw.get_paginator("describe_alarms").paginate(
                AlarmTypes=["MetricAlarm", "CompositeAlarm"]):
            for a in p["MetricAlarms"] + p["CompositeAlarms"]:
                out[a["AlarmName"]] = a
        return out

    alarms = describe()
    states = {n: "OK" for n in alarms}
    for n in alarms:
        cw.set_alarm_state(AlarmName=n, StateValue="OK", StateReason="paging_check")

    def move(want: dict[str, str]) -> list[dict]:
        """Metric alarms to `want`, composites evaluated; both stored in moto, the
        states read back, and the notifications of the change returned."""
        nonlocal states
        for n, s in want.items():
            if states[n] != s:
                cw.set_alarm_state(AlarmName=n, StateValue=s, StateReason="paging_check")
        got = {n: a["StateValue"] for n, a in describe().items()}
        settled = alarm_rules.settle(alarms, got)
        for n, s in settled.items():
            if got[n] != s:
                cw.set_alarm_state(AlarmName=n, StateValue=s, StateReason="paging_check rule")
        after = {n: a["StateValue"] for n, a in describe().items()}
        assert after == settled, "moto did not keep the states set"
        out = alarm_rules.notifications(alarms, states, after)
        states = after
        return out

    metric = sorted(n for n, a in alarms.items() if "AlarmRule" not in a)
    prefix = f"{stack}-"

    def logical(n: str) -> str:
        return n[len(prefix):] if n.startswith(prefix) else n

    scenarios = {
        "outage": [n for n in metric if logical(n).endswith(OUTAGE_KINDS)],
        "schema": [n for n in metric if logical(n).startswith("SchemaRefused")
                   or logical(n).endswith(("ErrorsAlarm", "HeartbeatAlarm"))],
    }
    for n in metric:
        scenarios[f"alone:{logical(n)}"] = [n]
    report = {
        "page_topic": page,
        "ticket_topic": ticket,
        "stack": stack,
        "alarms": {
            n: {
                "composite": "AlarmRule" in a,
                "actions": a.get("AlarmActions", []),
                "ok_actions": a.get("OKActions", []),
                "description": a.get("AlarmDescription", ""),
                "suppressor": a.get("ActionsSuppressor"),
            }
            for n, a in alarms.items()
        },
        "scenarios": {},
    }
    everything_ok = {n: "OK" for n in metric}
    for name, tripped in scenarios.items():
        notified = move(dict(everything_ok, **{n: "ALARM" for n in tripped}))
        recovery = move(everything_ok)
        report["scenarios"][name] = {"tripped": tripped, "notified": notified, "recovery": recovery}
    with open(report_path, "w") as f:
        json.dump(report, f, indent=1, default=str)


if __name__ == "__main__":
    main()
