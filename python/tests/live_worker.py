"""A worker for the Rust live tests: runs its job's iterations as the
walkthrough's example does and prints `iteration start_unix_ms` per line."""

import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import orrery  # noqa: E402

client = orrery.Client.from_env()
period_s = float(os.environ.get("ORRERY_PERIOD_MS", "100")) / 1e3
compute_s = float(os.environ.get("ORRERY_COMPUTE_MS", "50")) / 1e3
try:
    while not client.done:
        with client.iteration():
            print("%d %.3f" % (client.iteration_number, time.time() * 1e3), flush=True)
            time.sleep(compute_s)
            with client.comm():
                time.sleep(max(0.0, period_s - compute_s))
    print("done", flush=True)
except orrery.JobEnded as e:
    print("ended %s" % e.reason, flush=True)
