"""Profile one bench mode: start tay serve, attach py-spy, run the load, report CPU delta."""
import os, sys, subprocess, time, shutil, json
from dataclasses import replace
import psutil
from tay.bench.harness import _run_load
from tay.bench.profile import load_profile
from tay.bench.server import ServerProcess, ServerSettings

def main():
    mode = sys.argv[1]  # per-event | group
    jobs = int(sys.argv[2])
    spy = sys.argv[3] if len(sys.argv) > 3 else ""
    root = os.path.abspath(".scratch/prof")
    shutil.rmtree(root, ignore_errors=True); os.makedirs(root)
    profile = replace(load_profile("reference"), jobs=jobs, expected_events=3 * jobs)
    me, iv = (1, 0) if mode == "per-event" else (64, 0)
    if len(sys.argv) > 4: iv = int(sys.argv[4])
    settings = ServerSettings(data_dir=os.path.join(root, "data"), socket_path=os.path.join(root, "s.sock"),
        queues=profile.queues, group_commit_max_events=me, group_commit_interval_ms=iv,
        log_path=os.path.join(root, "server.log"))
    server = ServerProcess(settings); server.start()
    proc = psutil.Process(server.pid)
    spyp = None
    if spy:
        spyp = subprocess.Popen([".venv/bin/py-spy", "record", "-p", str(server.pid), "-r", "250", "-o", spy,
                                 "-f", "raw" if spy.endswith(".txt") else "flamegraph", "--threads"] + (["--native"] if "native" in spy else []),
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(1.0)
    t0 = proc.cpu_times(); w0 = time.perf_counter()
    ctx0 = proc.num_ctx_switches()
    load = _run_load(profile, settings.socket_path, server.pid, False, mode)
    t1 = proc.cpu_times(); w1 = time.perf_counter()
    reading = server.stop()
    if spyp: spyp.wait()
    cpu = (t1.user - t0.user) + (t1.system - t0.system)
    rt = sorted(load["round_trips"])
    print(json.dumps({"mode": mode, "jobs": jobs, "wall_s": round(w1 - w0, 3), "jobs_per_s": round(jobs / load["harness_elapsed_s"], 1),
      "cpu_us_per_job": round(cpu / jobs * 1e6, 1), "user_us": round((t1.user - t0.user) / jobs * 1e6, 1),
      "sys_us": round((t1.system - t0.system) / jobs * 1e6, 1),
      "p50_ms": round(rt[len(rt)//2] * 1e3, 3), "p99_ms": round(rt[int(len(rt)*0.99)] * 1e3, 3),
      "commit": reading.commit_stats, "rss_mb": round(reading.peak_rss_bytes / 2**20, 1)}))

if __name__ == '__main__':
    main()
