"""Print the public API of whichever ``tay`` package is importable, as JSON.

Run by test_api_parity.py under both interpreters: ours and the real tay-client 1.4.0.
"""

import inspect
import json
import sys

import tay


def describe_callable(obj):
    try:
        signature = inspect.signature(obj)
    except (TypeError, ValueError):
        return None
    return [[p.name, p.kind.name, repr(p.default) if p.default is not p.empty else None]
            for p in signature.parameters.values()]


def describe(name):
    obj = getattr(tay, name)
    if not inspect.isclass(obj):
        return {"kind": "callable", "signature": describe_callable(obj)}
    members = {}
    for member, value in vars(obj).items():
        if member.startswith("_") and member != "__init__":
            continue
        if isinstance(value, property):
            members[member] = {"kind": "property"}
        elif isinstance(value, (classmethod, staticmethod)) or callable(value):
            function = getattr(obj, member)
            members[member] = {"kind": "async" if inspect.iscoroutinefunction(function) else "method",
                               "signature": describe_callable(function)}
    return {"kind": "class", "mro": [base.__name__ for base in obj.__mro__], "members": members,
            "fields": sorted(getattr(obj, "__dataclass_fields__", {}))}


names = sorted(tay.__all__)
json.dump({"all": names, "api": {name: describe(name) for name in names}}, sys.stdout)
