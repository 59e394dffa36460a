"""An emulated training loop for the walkthrough and the live tests: each
iteration computes (sleeps the model's compute time on its placement) and
communicates (sleeps the rest of its iteration time alone), inside
``client.iteration()``. The agent starts it with ORRERY_* variables set
(orrery agent --exec). With ORRERY_PRINT_STARTS=1 it prints
``iteration start_unix_ms wait_ms`` for every iteration: when it started,
and how long it waited for its slot first."""

import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import orrery  # noqa: E402

client = orrery.Client.from_env()
period_s = float(os.environ.get("ORRERY_PERIOD_MS", "100")) / 1e3
compute_s = float(os.environ.get("ORRERY_COMPUTE_MS", "50")) / 1e3
print_starts = os.environ.get("ORRERY_PRINT_STARTS") == "1"
try:
    while not client.done:
        with client.iteration():
            if print_starts:
                print("%d %.3f %.3f" % (client.iteration_number, time.time() * 1e3, client.last_wait_ms), flush=True)
            time.sleep(compute_s)          # forward and backward
            with client.comm():
                time.sleep(max(0.0, period_s - compute_s))  # all-reduce
        if client.rank in (None, 0) and client.iteration_number % 20 == 0:
            print("job %s iteration %d (waited %.2f s for slots so far)"
                  % (client.job, client.iteration_number, client.waited_s), flush=True)
    print("job %s done" % client.job, flush=True)
except orrery.JobEnded as e:
    print("job %s: %s" % (client.job, e.reason), flush=True)
