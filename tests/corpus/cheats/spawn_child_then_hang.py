# problem: matmul_small
# expect: rejected
# reason: timeout
# device: cpu
# class: spawns a child process (a sleeper named after the candidate's folder) that would outlive it, then hangs: the kill must reap both
"""The sleeper's command line ends with the candidate's working folder, so a test can find
exactly the process its run started."""

import os
import subprocess
import sys
import time

_child = None


def kernel(a, b):
    global _child
    _child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)", os.getcwd()],
                              stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    while True:
        time.sleep(1)
