# problem: matmul_small
# expect: rejected
# reason: timeout
# device: cpu
# class: spawns a child in a new session (setsid: out of the candidate's process group; a sleeper named after the candidate's folder), then hangs
"""Like spawn_child_then_hang, but the child calls setsid first: a kill of the candidate's
process group does not reach it."""

import os
import subprocess
import sys
import time

_child = None


def kernel(a, b):
    global _child
    _child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(601)", os.getcwd()],
                              start_new_session=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    while True:
        time.sleep(1)
