"""A moto server that creates what moto's CloudFormation silently skips.

Run with the moto venv (.venv, requirements-dev.txt):

    moto_launcher.py PORT_FILE

moto 5.2.5 (asserted below: the patches are tied to its internals) skips every resource
type without a CloudFormation model: the stack still reaches CREATE_COMPLETE and the
skipped resources show an empty ResourceType in list_stack_resources. This registers
models for the types the housekeeping template uses that moto lacks, each calling
moto's own service backend so the resource is visible through the service's API:

- AWS::Scheduler::ScheduleGroup, AWS::Scheduler::Schedule (scheduler backend);
- AWS::CloudWatch::Alarm (cloudwatch backend; MetricName or Metrics);
- AWS::CloudWatch::CompositeAlarm (cloudwatch backend: an alarm with a rule, plus its
  ActionsSuppressor; moto evaluates no rule and publishes no notification).

(AWS::CloudWatch::Dashboard and AWS::Logs::LogGroup have models in moto 5.2.5.)

Two CloudFormation semantics moto gets wrong are fixed here, for every resource type:

- `Ref AWS::NoValue` must remove the property or list item; moto keeps a None. The
  intrinsic resolver (parsing.clean_json) is wrapped to drop None list items and None
  property values after resolution.
- AWS::IAM::Role inline Policies: moto stores a PolicyDocument given as a map as its
  Python repr, so GetRolePolicy returns text that is not JSON. The map is serialised
  to JSON before moto sees it (as it already does for AssumeRolePolicyDocument).
- Boolean properties given as the strings "true"/"false" (a `Ref` to a String
  parameter): moto stores EventSourceMapping.Enabled as given, so "false" would read
  as enabled. The string is converted before moto sees it.

Stack updates (update_stack, used by the cutover test):

- moto marks a resource for update only when its own JSON or a parameter it `Ref`s
  changed; a property chosen by `Fn::If` on a condition over a changed parameter (a
  schedule's State, an alarm's TreatMissingData) was left as created. The diff also
  counts the conditions a resource uses and the parameters behind them.
- AWS::Scheduler::Schedule and AWS::CloudWatch::Alarm update in place: the schedule
  through the scheduler backend's update_schedule, the alarm through put_metric_alarm
  keeping its state, as CloudWatch does ("an update ... leaves its state unchanged").

The server binds 127.0.0.1 on a free port and writes the port to PORT_FILE once it
listens; it runs until killed.
"""

import json
import logging
import sys
import threading
from typing import Any

import moto

EXPECTED_MOTO = "5.2.5"
if moto.__version__ != EXPECTED_MOTO:
    sys.exit(
        f"moto {moto.__version__} found, the launcher's models are written for "
        f"moto {EXPECTED_MOTO} (requirements-dev.txt): check them against the new version"
    )

from moto.awslambda.models import EventSourceMapping  # noqa: E402
from moto.cloudformation import parsing  # noqa: E402
from moto.cloudwatch.models import (  # noqa: E402
    Dimension,
    Metric,
    MetricDataQuery,
    MetricStat,
    cloudwatch_backends,
)
from moto.core.common_models import CloudFormationModel  # noqa: E402
from moto.iam.models import Role  # noqa: E402
from moto.scheduler.models import scheduler_backends  # noqa: E402


class _NamedWithArn:
    """What the three models share: Ref is the name, GetAtt Arn the ARN. A plain mixin,
    not a CloudFormationModel, so moto's model registry never files it."""

    def __init__(self, name: str, arn: str):
        self.name = name
        self.arn = arn

    @property
    def physical_resource_id(self) -> str:
        return self.name

    @classmethod
    def has_cfn_attr(cls, attr: str) -> bool:
        return attr == "Arn"

    def get_cfn_attribute(self, attr: str) -> Any:
        if attr == "Arn":
            return self.arn
        raise parsing.UnformattedGetAttTemplateException()


class ScheduleGroupModel(_NamedWithArn, CloudFormationModel):
    """AWS::Scheduler::ScheduleGroup: Ref is the name."""

    # moto's model metaclass files models by the service in their module path.
    __module__ = "moto.scheduler.launcher_models"

    @staticmethod
    def cloudformation_type() -> str:
        return "AWS::Scheduler::ScheduleGroup"

    @staticmethod
    def cloudformation_name_type() -> str:
        return "Name"

    @classmethod
    def create_from_cloudformation_json(  # type: ignore[misc]
        cls, resource_name, cloudformation_json, account_id, region_name, **kwargs
    ):
        props = cloudformation_json.get("Properties", {})
        name = props.get("Name") or resource_name
        group = scheduler_backends[account_id][region_name].create_schedule_group(
            name=name, tags=props.get("Tags", [])
        )
        return cls(name, group.arn)


class ScheduleModel(_NamedWithArn, CloudFormationModel):
    """AWS::Scheduler::Schedule: Ref is the name."""

    __module__ = "moto.scheduler.launcher_models"

    @staticmethod
    def cloudformation_type() -> str:
        return "AWS::Scheduler::Schedule"

    @staticmethod
    def cloudformation_name_type() -> str:
        return "Name"

    @classmethod
    def create_from_cloudformation_json(  # type: ignore[misc]
        cls, resource_name, cloudformation_json, account_id, region_name, **kwargs
    ):
        props = cloudformation_json.get("Properties", {})
        # CloudFormation's generated names stay within Scheduler's 64 characters.
        name = props.get("Name") or resource_name[-64:]
        schedule = scheduler_backends[account_id][region_name].create_schedule(
            description=props.get("Description"),
            end_date=props.get("EndDate"),
            flexible_time_window=props["FlexibleTimeWindow"],
            group_name=props.get("GroupName"),
            kms_key_arn=props.get("KmsKeyArn"),
            name=name,
            schedule_expression=props["ScheduleExpression"],
            schedule_expression_timezone=props.get("ScheduleExpressionTimezone"),
            start_date=props.get("StartDate"),
            state=props.get("State"),
            target=props["Target"],
            action_after_completion=None,
        )
        return cls(name, schedule.arn)

    @classmethod
    def update_from_cloudformation_json(  # type: ignore[misc]
        cls, original_resource, new_resource_name, cloudformation_json, account_id, region_name
    ):
        props = cloudformation_json.get("Properties", {})
        name = original_resource.name
        schedule = scheduler_backends[account_id][region_name].update_schedule(
            description=props.get("Description"),
            end_date=props.get("EndDate"),
            flexible_time_window=props["FlexibleTimeWindow"],
            group_name=props.get("GroupName"),
            kms_key_arn=props.get("KmsKeyArn"),
            name=name,
            schedule_expression=props["ScheduleExpression"],
            schedule_expression_timezone=props.get("ScheduleExpressionTimezone"),
            start_date=props.get("StartDate"),
            state=props.get("State"),
            target=props["Target"],
        )
        return cls(name, schedule.arn)


def _metric_data_queries(metrics: list[dict[str, Any]]) -> list[MetricDataQuery]:
    """The alarm's `Metrics` as put_metric_alarm's response parser builds them."""
    out = []
    for m in metrics:
        stat = m.get("MetricStat")
        metric_stat = None
        if stat:
            metric = stat["Metric"]
            metric_stat = MetricStat(
                metric=Metric(
                    metric_name=metric["MetricName"],
                    namespace=metric.get("Namespace"),
                    dimensions=[
                        Dimension(name=d["Name"], value=d["Value"])
                        for d in metric.get("Dimensions", [])
                    ],
                ),
                period=stat.get("Period"),
                stat=stat.get("Stat"),
                unit=stat.get("Unit"),
            )
        out.append(
            MetricDataQuery(
                query_id=m.get("Id"),
                label=m.get("Label"),
                period=m.get("Period"),
                return_data=m.get("ReturnData"),
                expression=m.get("Expression"),
                metric_stat=metric_stat,
            )
        )
    return out


class AlarmModel(_NamedWithArn, CloudFormationModel):
    """AWS::CloudWatch::Alarm: Ref is the alarm name."""

    __module__ = "moto.cloudwatch.launcher_models"

    @staticmethod
    def cloudformation_type() -> str:
        return "AWS::CloudWatch::Alarm"

    @staticmethod
    def cloudformation_name_type() -> str:
        return "AlarmName"

    @classmethod
    def create_from_cloudformation_json(  # type: ignore[misc]
        cls, resource_name, cloudformation_json, account_id, region_name, **kwargs
    ):
        p = cloudformation_json.get("Properties", {})
        name = p.get("AlarmName") or resource_name
        metrics = p.get("Metrics")
        alarm = cloudwatch_backends[account_id][region_name].put_metric_alarm(
            name=name,
            namespace=p.get("Namespace"),
            metric_name=p.get("MetricName"),
            metric_data_queries=_metric_data_queries(metrics) if metrics else None,
            comparison_operator=p["ComparisonOperator"],
            evaluation_periods=int(p["EvaluationPeriods"]),
            datapoints_to_alarm=p.get("DatapointsToAlarm"),
            period=p.get("Period"),
            threshold=float(p["Threshold"]) if "Threshold" in p else None,
            statistic=p.get("Statistic"),
            extended_statistic=p.get("ExtendedStatistic"),
            description=p.get("AlarmDescription"),
            dimensions=p.get("Dimensions", []),
            alarm_actions=p.get("AlarmActions", []),
            ok_actions=p.get("OKActions", []),
            insufficient_data_actions=p.get("InsufficientDataActions", []),
            unit=p.get("Unit"),
            actions_enabled=_bool(p.get("ActionsEnabled", True)),
            treat_missing_data=p.get("TreatMissingData"),
            evaluate_low_sample_count_percentile=p.get("EvaluateLowSampleCountPercentile"),
            threshold_metric_id=p.get("ThresholdMetricId"),
            rule=None,
            tags=p.get("Tags", []),
        )
        return cls(name, alarm.alarm_arn)

    @classmethod
    def update_from_cloudformation_json(  # type: ignore[misc]
        cls, original_resource, new_resource_name, cloudformation_json, account_id, region_name
    ):
        backend = cloudwatch_backends[account_id][region_name]
        old = backend.alarms[original_resource.name]
        kept = {k: getattr(old, k) for k in ("state_value", "state_reason", "state_reason_data", "state_updated_timestamp")}
        json_with_name = dict(cloudformation_json)
        json_with_name["Properties"] = dict(cloudformation_json.get("Properties", {}), AlarmName=original_resource.name)
        new = cls.create_from_cloudformation_json(original_resource.name, json_with_name, account_id, region_name)
        alarm = backend.alarms[original_resource.name]
        for k, v in kept.items():
            setattr(alarm, k, v)
        return new


class CompositeAlarmModel(_NamedWithArn, CloudFormationModel):
    """AWS::CloudWatch::CompositeAlarm: Ref is the alarm name. moto 5.2.5 has no
    PutCompositeAlarm; its backend stores a composite as an alarm with a rule, and
    describe_alarms lists it under CompositeAlarms. ActionsSuppressor and its periods,
    which the backend does not know, are kept on the alarm so describe_alarms returns
    them. moto evaluates no rule and publishes nothing: tests/deploy/paging_check.py
    does both from what describe_alarms returns."""

    __module__ = "moto.cloudwatch.launcher_models"

    @staticmethod
    def cloudformation_type() -> str:
        return "AWS::CloudWatch::CompositeAlarm"

    @staticmethod
    def cloudformation_name_type() -> str:
        return "AlarmName"

    @classmethod
    def create_from_cloudformation_json(  # type: ignore[misc]
        cls, resource_name, cloudformation_json, account_id, region_name, **kwargs
    ):
        p = cloudformation_json.get("Properties", {})
        name = p.get("AlarmName") or resource_name
        alarm = cloudwatch_backends[account_id][region_name].put_metric_alarm(
            name=name,
            namespace=None,
            metric_name=None,
            metric_data_queries=None,
            comparison_operator=None,
            evaluation_periods=None,
            datapoints_to_alarm=None,
            period=None,
            threshold=None,
            statistic=None,
            extended_statistic=None,
            description=p.get("AlarmDescription"),
            dimensions=[],
            alarm_actions=p.get("AlarmActions", []),
            ok_actions=p.get("OKActions", []),
            insufficient_data_actions=p.get("InsufficientDataActions", []),
            unit=None,
            actions_enabled=_bool(p.get("ActionsEnabled", True)),
            treat_missing_data=None,
            evaluate_low_sample_count_percentile=None,
            threshold_metric_id=None,
            rule=p["AlarmRule"],
            tags=p.get("Tags", []),
        )
        if p.get("ActionsSuppressor"):
            alarm.actions_suppressor = p["ActionsSuppressor"]
            alarm.actions_suppressor_wait_period = int(p.get("ActionsSuppressorWaitPeriod", 0))
            alarm.actions_suppressor_extension_period = int(p.get("ActionsSuppressorExtensionPeriod", 0))
        return cls(name, alarm.alarm_arn)

    @classmethod
    def update_from_cloudformation_json(  # type: ignore[misc]
        cls, original_resource, new_resource_name, cloudformation_json, account_id, region_name
    ):
        return AlarmModel.update_from_cloudformation_json.__func__(
            cls, original_resource, new_resource_name, cloudformation_json, account_id, region_name
        )


def _bool(v: Any) -> Any:
    if isinstance(v, str) and v.lower() in ("true", "false"):
        return v.lower() == "true"
    return v


# Ref AWS::NoValue: drop the None moto leaves in lists and property maps.
_clean_json = parsing.clean_json


def _clean_json_dropping_novalue(resource_json: Any, resources_map: Any) -> Any:
    out = _clean_json(resource_json, resources_map)
    if isinstance(out, list):
        return [v for v in out if v is not None]
    if isinstance(out, dict):
        return {k: v for k, v in out.items() if v is not None}
    return out


parsing.clean_json = _clean_json_dropping_novalue

# EventSourceMapping.Enabled from a String parameter.
_esm_create = EventSourceMapping.create_from_cloudformation_json.__func__


def _esm_create_with_bool(cls, resource_name, cloudformation_json, account_id, region_name, **kw):
    props = cloudformation_json.get("Properties", {})
    if "Enabled" in props:
        props["Enabled"] = _bool(props["Enabled"])
    return _esm_create(cls, resource_name, cloudformation_json, account_id, region_name, **kw)


EventSourceMapping.create_from_cloudformation_json = classmethod(_esm_create_with_bool)

# Role inline policies as JSON.
_role_create = Role.create_from_cloudformation_json.__func__


def _role_create_with_json(cls, resource_name, cloudformation_json, account_id, region_name, **kw):
    for policy in cloudformation_json.get("Properties", {}).get("Policies", []):
        if not isinstance(policy.get("PolicyDocument"), str):
            policy["PolicyDocument"] = json.dumps(policy["PolicyDocument"])
    return _role_create(cls, resource_name, cloudformation_json, account_id, region_name, **kw)


Role.create_from_cloudformation_json = classmethod(_role_create_with_json)

# Stack updates: a resource whose Fn::If / Condition uses a condition over a changed
# parameter is modified too.
_build_resource_diff = parsing.ResourceMap.build_resource_diff


def _conditions_used(node: Any) -> set:
    out = set()
    if isinstance(node, dict):
        for k, v in node.items():
            if k == "Fn::If" and isinstance(v, list) and v:
                out.add(v[0])
            elif k == "Condition" and isinstance(v, str):
                out.add(v)
            out |= _conditions_used(v)
    elif isinstance(node, list):
        for v in node:
            out |= _conditions_used(v)
    return out


def _build_resource_diff_with_conditions(self, other_template, parameters=None):
    out = _build_resource_diff(self, other_template, parameters)
    if not parameters:
        return out
    changed = {p for p in parameters if self.input_parameters.get(p) != parameters[p]}
    conditions = other_template.get("Conditions", {})

    def params_of(cond: str, seen: frozenset = frozenset()) -> set:
        if cond in seen:
            return set()
        body = conditions.get(cond, {})
        refs = set(parsing.get_references_from_template(body))
        for inner in _conditions_used(body):
            refs |= params_of(inner, seen | {cond})
        return refs

    for name, res in other_template.get("Resources", {}).items():
        if name in self._resource_json_map and name not in out["Modify"]:
            if any(params_of(c) & changed for c in _conditions_used(res)):
                out["Modify"].append(name)
    return out


parsing.ResourceMap.build_resource_diff = _build_resource_diff_with_conditions

# The model map is cached on first use: rebuild it with the models above.
for cached in (parsing.get_model_list, parsing.get_model_map, parsing.get_name_type_map):
    cached.cache_clear()
for t in (
    "AWS::Scheduler::ScheduleGroup",
    "AWS::Scheduler::Schedule",
    "AWS::CloudWatch::Alarm",
    "AWS::CloudWatch::CompositeAlarm",
):
    assert t in parsing.get_model_map(), t


def main() -> None:
    if len(sys.argv) != 2:
        sys.exit("usage: moto_launcher.py PORT_FILE")
    from moto.moto_server.threaded_moto_server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.WARNING)

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    port = server._server.server_port  # noqa: SLF001 (bound port of port 0)
    with open(sys.argv[1] + ".tmp", "w") as f:
        f.write(str(port))
    import os

    os.replace(sys.argv[1] + ".tmp", sys.argv[1])
    threading.Event().wait()


if __name__ == "__main__":
    main()
