"""What CloudWatch does with composite alarms, which moto 5.2.5 neither evaluates nor
acts on: the state of a composite from its AlarmRule and its children's states, and
who is notified when states change.

Used by paging_check.py and cutover_check.py on alarms read back from moto with
describe_alarms (metric alarms and composites alike, by AlarmName).

CloudWatch's documented semantics followed here:
- AlarmRule: ALARM(x), OK(x), INSUFFICIENT_DATA(x) with x an alarm name or ARN,
  quoted or not, TRUE, FALSE, AND, OR, NOT and parentheses;
- a state change notifies AlarmActions (to ALARM) or OKActions (to OK), only with
  ActionsEnabled;
- a composite whose ActionsSuppressor is in ALARM performs no action (the wait and
  extension periods cover a suppressor that fires after, or recovers before, the
  composite; the states compared here are the settled ones, so the suppressor counts
  when it was in ALARM before or after the change).
"""

import re

_TOKEN = re.compile(r'\s*(ALARM|OK|INSUFFICIENT_DATA)\(\s*"?([^")]+)"?\s*\)|\s*(AND|OR|NOT|TRUE|FALSE|\(|\))')


def _name(ref: str) -> str:
    """An alarm reference (name or ARN) as the alarm's name."""
    return ref.split(":alarm:", 1)[1] if ":alarm:" in ref else ref


def children(rule: str) -> list[str]:
    """The alarm names a rule refers to."""
    return [_name(m.group(2)) for m in _TOKEN.finditer(rule) if m.group(1)]


def rule_holds(rule: str, states: dict[str, str]) -> bool:
    """Whether `rule` holds for `states` (alarm name -> state)."""
    out, pos = [], 0
    rule = rule.strip()
    while pos < len(rule):
        m = _TOKEN.match(rule, pos)
        if not m:
            raise ValueError(f"cannot read the alarm rule at {rule[pos:pos + 40]!r}")
        pos = m.end()
        if m.group(1):
            name = _name(m.group(2))
            if name not in states:
                raise ValueError(f"the rule refers to {name}, which does not exist")
            out.append(repr(states[name] == m.group(1)))
        else:
            out.append({"AND": "and", "OR": "or", "NOT": "not", "TRUE": "True", "FALSE": "False"}.get(
                m.group(3), m.group(3)))
        while pos < len(rule) and rule[pos].isspace():
            pos += 1
    return bool(eval(" ".join(out), {"__builtins__": {}}))  # noqa: S307 (tokens only)


def settle(alarms: dict[str, dict], states: dict[str, str]) -> dict[str, str]:
    """`states` with every composite's state evaluated from its children, composites of
    composites included (repeated until nothing changes)."""
    out = dict(states)
    for _ in range(len(alarms) + 1):
        changed = False
        for name, a in alarms.items():
            if "AlarmRule" in a:
                s = "ALARM" if rule_holds(a["AlarmRule"], out) else "OK"
                if out.get(name) != s:
                    out[name] = s
                    changed = True
        if not changed:
            return out
    raise ValueError("composite alarms refer to each other in a cycle")


def notifications(alarms: dict[str, dict], before: dict[str, str], after: dict[str, str]) -> list[dict]:
    """The notifications CloudWatch sends for the change from `before` to `after`:
    [{"alarm", "state", "topics"}] for every alarm whose state changed, acted on and
    not suppressed."""
    out = []
    for name, a in sorted(alarms.items()):
        old, new = before.get(name), after[name]
        if old == new or not a.get("ActionsEnabled", True):
            continue
        sup = a.get("ActionsSuppressor")
        if sup and "ALARM" in (before.get(_name(sup)), after.get(_name(sup))):
            continue
        topics = {"ALARM": a.get("AlarmActions", []), "OK": a.get("OKActions", [])}.get(
            new, a.get("InsufficientDataActions", []))
        if topics:
            out.append({"alarm": name, "state": new, "topics": list(topics)})
    return out
