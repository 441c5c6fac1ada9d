"""Instructions per job of tay serve under callgrind (repeatable whatever the load).

usage: cg.py MODE JOBS [interval]   MODE = per-event | group
"""
import os, sys, subprocess, time, shutil, json, glob
from dataclasses import replace
from tay.bench.harness import _run_load
from tay.bench.profile import load_profile
from tay.bench.server import ServerProcess, ServerSettings


def main():
    mode, jobs = sys.argv[1], int(sys.argv[2])
    root = os.path.abspath(".scratch/cg")
    shutil.rmtree(root, ignore_errors=True); os.makedirs(root)
    profile = replace(load_profile("reference"), jobs=jobs, expected_events=3 * jobs)
    me, iv = (1, 0) if mode == "per-event" else (64, 0)
    settings = ServerSettings(data_dir=os.path.join(root, "data"), socket_path=os.path.join(root, "s.sock"),
        queues=profile.queues, group_commit_max_events=me, group_commit_interval_ms=iv,
        log_path=os.path.join(root, "server.log"))
    out = os.path.join(root, "cg.out")
    argv = settings.argv()
    settings.argv = lambda: ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}",
                             "--dump-instr=no", "--collect-atstart=yes"] + argv
    server = ServerProcess(settings, ready_timeout_s=300); server.start()
    subprocess.run(["callgrind_control", "-z", str(server.pid)], check=True, capture_output=True)
    load = _run_load(profile, settings.socket_path, server.pid, False, mode)
    time.sleep(1.0)
    subprocess.run(["callgrind_control", "-d", "load", str(server.pid)], check=True, capture_output=True)
    server.stop(timeout_s=120)
    dumps = sorted(glob.glob(out + "*"))
    total = None
    for d in dumps:
        text = open(d).read()
        if "load" in text.split("\n", 20)[0:20].__str__():
            for line in text.splitlines():
                if line.startswith("summary:") or line.startswith("totals:"):
                    total = int(line.split()[1])
    print(json.dumps({"mode": mode, "jobs": jobs, "instr_per_job": round(total / jobs) if total else None, "dumps": dumps}))


if __name__ == "__main__":
    main()
