"""The recorded history of a schedule: plain data that prints, serialises and replays.

Steps name stages and axes by name ("C", "i.outer"), never by position, so a history
stays valid when a cache stage or an rfactor inserts a stage.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field

from ..errors import ScheduleError


@dataclass
class Step:
    prim: str
    stage: str
    args: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {"prim": self.prim, "stage": self.stage, "args": self.args}

    def __str__(self) -> str:
        """The step as the Python call that makes it (TVM TE spelling)."""
        a, s = self.args, f"s[{self.stage!r}]"
        if self.prim == "split":
            return f"{s}.split({a['axis']!r}, factor={a['factor']})"
        if self.prim in ("fuse", "reorder"):
            return f"{s}.{self.prim}({', '.join(map(repr, a['axes']))})"
        if self.prim in ("vectorize", "unroll", "parallel"):
            return f"{s}.{self.prim}({a['axis']!r})"
        if self.prim == "bind":
            return f"{s}.bind({a['axis']!r}, {a['tag']!r})"
        if self.prim == "pragma":
            return f"{s}.pragma({a['axis']!r}, {a['name']!r}, {a['value']})"
        if self.prim == "compute_at":
            return f"{s}.compute_at(s[{a['parent']!r}], {a['axis']!r})"
        if self.prim in ("compute_inline", "compute_root"):
            return f"{s}.{self.prim}()"
        if self.prim == "cache_read":
            lay = f", layout={a['layout']!r}" if "layout" in a else ""
            return f"s.cache_read({self.stage!r}, {a['scope']!r}, {a['readers']!r}{lay})"
        if self.prim == "cache_write":
            lay = f", layout={a['layout']!r}" if "layout" in a else ""
            return f"s.cache_write({self.stage!r}, {a['scope']!r}{lay})"
        if self.prim == "rfactor":
            return f"s.rfactor({self.stage!r}, {a['axis']!r})"
        return f"{self.prim}({self.stage!r}, {a})"


class History(list):
    """A schedule's steps; `print(s.history)` shows them as the Python that makes them."""

    def __str__(self) -> str:
        return "\n".join(str(st) for st in self)


def steps_to_json(steps: list[Step]) -> str:
    return json.dumps([s.to_dict() for s in steps])


def steps_from_json(text: str) -> list[Step]:
    try:
        return [Step(d["prim"], d["stage"], dict(d.get("args", {}))) for d in json.loads(text)]
    except (ValueError, KeyError, TypeError) as e:
        raise ScheduleError(f"unreadable schedule history: {e}") from None


def apply_step(sch, step: Step) -> None:
    """Re-run one recorded step on `sch` (a schedule of the same computation)."""
    st, a = sch.stage(step.stage), step.args
    p = step.prim
    if p == "split":
        st.split(st.find(a["axis"]), factor=a["factor"])
    elif p in ("fuse", "reorder"):
        getattr(st, p)(*[st.find(n) for n in a["axes"]])
    elif p in ("vectorize", "unroll", "parallel"):
        getattr(st, p)(st.find(a["axis"]))
    elif p == "bind":
        st.bind(st.find(a["axis"]), a["tag"])
    elif p == "pragma":
        st.pragma(st.find(a["axis"]), a["name"], a["value"])
    elif p == "compute_at":
        parent = sch.stage(a["parent"])
        st.compute_at(parent, parent.find(a["axis"]))
    elif p in ("compute_inline", "compute_root"):
        getattr(st, p)()
    elif p == "cache_read":
        sch.cache_read(st.op.output(), a["scope"], [sch.stage(r).op.output() for r in a["readers"]],
                       layout=a.get("layout"))
    elif p == "cache_write":
        sch.cache_write(st.op.output(), a["scope"], layout=a.get("layout"))
    elif p == "rfactor":
        sch.rfactor(st.op.output(), st.find(a["axis"]))
    else:
        raise ScheduleError(f"unknown schedule step {p!r} on stage {step.stage!r}")


def replay(sch, steps: list[Step]) -> None:
    for step in steps:
        apply_step(sch, step)
