"""Deploy with every schedule off, update to on, and follow each cron heartbeat.

Run with the moto venv (.venv), against a server started by moto_launcher.py:

    cutover_check.py PLAN.json REPORT.json

PLAN: {"endpoint", "template" (translate.py's output), "code_bucket", "code_key",
"stacks": [{"stack", "mutation": null | "heartbeat_actions_follow_schedule"}]}.

moto evaluates no alarm by itself, so this does what CloudWatch would, from the alarm
definitions the stack produced (read back with describe_alarms) and CloudWatch's
documented rules: each period of the evaluation range is the metric's sum or missing;
missing periods count as TreatMissingData says; ALARM when at least DatapointsToAlarm
periods breach, INSUFFICIENT_DATA when no period counts; a notification goes to
AlarmActions / OKActions only on a change of state, and only with ActionsEnabled; a
heartbeat pages through its composite alarm (`<Cron>MissedRunAlarm`), whose state and
notifications alarm_rules.py derives from the heartbeat's (moto evaluates no composite). The
state CloudWatch would hold is stored in moto with set_alarm_state, and the stack
update (update_stack, schedules on) keeps it, as CloudWatch keeps an updated alarm's
state.

For each heartbeat (an alarm on the code's `outcome_done` of a cron function) and each
stack, the timeline (P = the alarm's period, N its evaluation periods):

1. created with every …ScheduleEnabled false: starts INSUFFICIENT_DATA; evaluated at
   T (no data ever): `off` = the state and who was notified;
2. scenario "no_run": updated to on at T + 60 s and no run finishes afterwards; evaluated
   at T + 120 s: `no_run` = the state change and who is notified (the first missed run
   cannot go unnoticed);
3. scenario "tick_then_missed" (from the state after 1): a run finishes at T + 60 s
   (the cutover tick), the update at T + 120 s, evaluated at T + 180 s (`after_update`)
   and again once the tick left the range, T + 60 s + N × P + P (`first_missed`).

REPORT: {stack: {"page_topic", "alarms": {alarm: {"config_off", "config_on",
"state_kept_by_update", "off", "no_run", "after_update", "first_missed"}}}}, each
step {"state", "notified": [topics]}.
"""

import copy
import json
import sys
from datetime import datetime, timedelta, timezone

import boto3
from botocore.config import Config

import alarm_rules
from deploy_check import REGION, parameter_values, resources_of, tiny_zip

T = datetime(2026, 3, 2, 12, 0, tzinfo=timezone.utc)


def heartbeat_logicals(t: dict) -> list[str]:
    return [
        k for k, v in resources_of(t, "AWS::CloudWatch::Alarm").items()
        if v["Properties"].get("MetricName") == "outcome_done"
    ]


def mutate_old_design(t: dict) -> None:
    """The design issue 35 found: actions switched by the schedule parameter, missing
    data always breaching (the actions are those of the heartbeat's paging composite,
    `<Cron>MissedRunAlarm`, since issue 51)."""
    for k in heartbeat_logicals(t):
        p = t["Resources"][k]["Properties"]
        cond = p["TreatMissingData"]["Fn::If"][0]
        p["TreatMissingData"] = "breaching"
        p["ActionsEnabled"] = {"Fn::If": [cond, True, False]}
        page = t["Resources"][k.replace("HeartbeatAlarm", "MissedRunAlarm")]["Properties"]
        page["ActionsEnabled"] = {"Fn::If": [cond, True, False]}


def compare(value: float, op: str, threshold: float) -> bool:
    return {
        "GreaterThanThreshold": value > threshold,
        "GreaterThanOrEqualToThreshold": value >= threshold,
        "LessThanThreshold": value < threshold,
        "LessThanOrEqualToThreshold": value <= threshold,
    }[op]


def evaluate(alarm: dict, points: list[tuple[datetime, float]], now: datetime) -> str:
    """CloudWatch's state for `alarm` at `now` given the metric's datapoints."""
    period = int(alarm["Period"])
    n = int(alarm["EvaluationPeriods"])
    m = int(alarm.get("DatapointsToAlarm") or n)
    treat = alarm.get("TreatMissingData") or "missing"
    counted = breaching = 0
    for i in range(n):
        start = now - timedelta(seconds=(n - i) * period)
        end = start + timedelta(seconds=period)
        values = [v for ts, v in points if start <= ts < end]
        if not values:
            if treat == "breaching":
                counted += 1
                breaching += 1
            elif treat == "notBreaching":
                counted += 1
            continue
        counted += 1
        if compare(sum(values), alarm["ComparisonOperator"], float(alarm["Threshold"])):
            breaching += 1
    if counted == 0:
        return "INSUFFICIENT_DATA"
    return "ALARM" if breaching >= m else "OK"


def describe_all(cw) -> dict[str, dict]:
    """Every alarm, metric and composite, by name."""
    out = {}
    for p in cw.get_paginator("describe_alarms").paginate(AlarmTypes=["MetricAlarm", "CompositeAlarm"]):
        for a in p["MetricAlarms"] + p["CompositeAlarms"]:
            out[a["AlarmName"]] = a
    return out


def step(cw, alarm: dict, old: str, points, now) -> dict:
    """The heartbeat's new state at `now`, stored in moto, and the topics notified by
    the change: the heartbeat pages through its composite, whose state alarm_rules.py
    derives (moto evaluates no composite)."""
    new = evaluate(alarm, points, now)
    everything = describe_all(cw)
    # This heartbeat alone: every other metric alarm held OK, so that several crons
    # missing at once (the stalled page, which suppresses the missed-run pages: see
    # paging_check.py) does not hide the change this timeline follows.
    name = alarm["AlarmName"]
    base = {n: "OK" for n, a in everything.items() if "AlarmRule" not in a}
    before = alarm_rules.settle(everything, dict(base, **{name: old}))
    after = alarm_rules.settle(everything, dict(base, **{name: new}))
    if new != everything[name]["StateValue"]:
        cw.set_alarm_state(AlarmName=name, StateValue=new, StateReason="cutover_check")
    notified = sorted({t for n in alarm_rules.notifications(everything, before, after) for t in n["topics"]})
    return {"state": new, "notified": notified}


def config(alarm: dict) -> dict:
    keys = ("TreatMissingData", "ActionsEnabled", "AlarmActions", "OKActions", "Period",
            "EvaluationPeriods", "DatapointsToAlarm", "StateValue")
    return {k: alarm.get(k) for k in keys}


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
    report = {}
    for spec in plan["stacks"]:
        stack = spec["stack"]
        t = copy.deepcopy(template)
        if spec.get("mutation") == "heartbeat_actions_follow_schedule":
            mutate_old_design(t)
        page = c["sns"].create_topic(Name=f"{stack}-page")["TopicArn"]
        ticket = c["sns"].create_topic(Name=f"{stack}-ticket")["TopicArn"]
        off = parameter_values(t, "operations", page, ticket)
        on = dict(off)
        for k in on:
            if k.endswith("ScheduleEnabled"):
                on[k] = "true"
        body = json.dumps(t)
        caps = ["CAPABILITY_IAM", "CAPABILITY_NAMED_IAM", "CAPABILITY_AUTO_EXPAND"]

        def params(values):
            return [{"ParameterKey": k, "ParameterValue": v} for k, v in values.items()]

        cfn.create_stack(StackName=stack, TemplateBody=body, Parameters=params(off), Capabilities=caps)
        pages = cfn.get_paginator("list_stack_resources").paginate(StackName=stack)
        names = {
            r["LogicalResourceId"]: r["PhysicalResourceId"]
            for p in pages for r in p["StackResourceSummaries"]
        }
        hearts = {k: names[k] for k in heartbeat_logicals(t)}

        def describe():
            got = cw.describe_alarms(AlarmNames=list(hearts.values()))["MetricAlarms"]
            return {a["AlarmName"]: a for a in got}

        out = {}
        before = describe()
        for logical, name in hearts.items():
            cw.set_alarm_state(AlarmName=name, StateValue="INSUFFICIENT_DATA", StateReason="created")
            a = before[name]
            out[logical] = {"config_off": config(a), "off": step(cw, a, "INSUFFICIENT_DATA", [], T)}
        off_states = {k: v["off"]["state"] for k, v in out.items()}
        cfn.update_stack(StackName=stack, TemplateBody=body, Parameters=params(on), Capabilities=caps)
        after = describe()
        for logical, name in hearts.items():
            a = after[name]
            e = out[logical]
            e["config_on"] = config(a)
            e["state_kept_by_update"] = a["StateValue"] == off_states[logical]
            # Scenario no_run: nothing finishes after the update.
            e["no_run"] = step(cw, a, off_states[logical], [], T + timedelta(seconds=120))
            # Scenario tick_then_missed, from the state before the update.
            cw.set_alarm_state(AlarmName=name, StateValue=off_states[logical], StateReason="replay")
            tick = [(T + timedelta(seconds=60), 1.0)]
            e["after_update"] = step(cw, a, off_states[logical], tick, T + timedelta(seconds=180))
            window = int(a["Period"]) * (int(a["EvaluationPeriods"]) + 1)
            e["first_missed"] = step(
                cw, a, e["after_update"]["state"], tick, T + timedelta(seconds=60 + window)
            )
        report[stack] = {"page_topic": page, "ticket_topic": ticket, "alarms": out}
    with open(report_path, "w") as f:
        json.dump(report, f, indent=1, default=str)


if __name__ == "__main__":
    main()
