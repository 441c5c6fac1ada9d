"""Our public API against the real tay-client 1.4.0: same names, bases and signatures.

The real SDK runs in its own interpreter (``python -I`` from outside the repo, since its
package is also called ``tay``) and prints its API with api_dump.py; so does ours.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conformance.harness import require_client

HERE = Path(__file__).parent
REPO = HERE.parents[1]


def dump(python, *, isolated):
    command = [python, "-I", str(HERE / "api_dump.py")] if isolated else [python, str(HERE / "api_dump.py")]
    env = {**os.environ, "PYTHONPATH": str(REPO)} if not isolated else None
    output = subprocess.run(command, check=True, capture_output=True, text=True, cwd="/", env=env, timeout=60).stdout
    return json.loads(output)


@pytest.fixture(scope="module")
def apis():
    return dump(require_client(), isolated=True), dump(sys.executable, isolated=False)


def compatible(theirs, ours):
    """Ours keeps every parameter of theirs (name, kind, default, order); extras are keyword-only with defaults."""
    if theirs is None:
        return True
    ours_shared = [p for p in ours if p[0] in {t[0] for t in theirs}]
    extras = [p for p in ours if p[0] not in {t[0] for t in theirs}]
    return ours_shared == theirs and all(kind == "KEYWORD_ONLY" and default is not None for _, kind, default in extras)


# Names tay exports beyond tay-client 1.4.0 (docs/sdk.md documents each); nothing else.
OUR_ADDITIONS = {"ResultTimeout", "SyncJobHandle", "SyncTay"}


def test_every_public_name_of_tay_client_and_only_the_documented_additions(apis):
    theirs, ours = apis
    assert set(theirs["all"]) <= set(ours["all"])
    assert set(ours["all"]) - set(theirs["all"]) == OUR_ADDITIONS


def test_same_classes_bases_members_and_signatures(apis):
    theirs, ours = apis
    problems = []
    for name, reference in theirs["api"].items():
        mine = ours["api"][name]
        if mine["kind"] != reference["kind"]:
            problems.append(f"{name}: {mine['kind']} instead of {reference['kind']}")
            continue
        if reference["kind"] == "callable":
            if not compatible(reference["signature"], mine["signature"]):
                problems.append(f"{name}{mine['signature']} != {reference['signature']}")
            continue
        # typing.Generic (Task[P, R], JobHandle[R]) adds no behaviour, only subscripting
        if [base for base in mine["mro"] if base != "Generic"] != reference["mro"]:
            problems.append(f"{name} bases {mine['mro']} != {reference['mro']}")
        if mine["fields"] != reference["fields"]:
            problems.append(f"{name} dataclass fields {mine['fields']} != {reference['fields']}")
        for member, spec in reference["members"].items():
            got = mine["members"].get(member)
            if got is None:
                problems.append(f"{name}.{member} is missing")
            elif got["kind"] != spec["kind"]:
                problems.append(f"{name}.{member} is {got['kind']}, reference {spec['kind']}")
            elif not compatible(spec.get("signature"), got.get("signature")):
                problems.append(f"{name}.{member}{got.get('signature')} != {spec.get('signature')}")
    assert not problems, "\n".join(problems)


def test_tay_1_8_schedule_reads_are_present_on_both_transports(apis):
    _, ours = apis
    for transport in ("Tay", "TayHTTP"):
        members = ours["api"][transport]["members"]
        assert {"schedule", "every", "schedules", "schedule_page", "get_schedule"} <= set(members)
    assert {"status", "cancel"} <= set(ours["api"]["ScheduleHandle"]["members"])
