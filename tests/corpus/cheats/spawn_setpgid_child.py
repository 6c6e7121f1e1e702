# problem: matmul_small
# expect: rejected
# reason: timeout
# device: cpu
# class: spawns a child that leaves the candidate's process group with setpgid(0, 0) (not setsid) and a double-forked grandchild, each a sleeper named after the candidate's folder, then hangs
"""A process-group kill misses a child that moved to a group of its own, and a grandchild
whose parent exited (reparented away from the candidate). Each sleeper's command line ends
with the candidate's working folder, so a test can find exactly the ones its run started."""

import os
import subprocess
import sys
import time

_SLEEP = "import time; time.sleep(601)"


def kernel(a, b):
    tag = os.getcwd()
    subprocess.Popen([sys.executable, "-c", _SLEEP, tag], preexec_fn=lambda: os.setpgid(0, 0), stdin=subprocess.DEVNULL,
                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    if os.fork() == 0:  # double fork: the grandchild's parent exits at once
        if os.fork() == 0:
            os.setpgid(0, 0)
            os.execv(sys.executable, [sys.executable, "-c", _SLEEP, tag])
        os._exit(0)
    while True:
        time.sleep(1)
