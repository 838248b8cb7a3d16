"""Inside the python grader sandbox: a supervisor that never runs grader code, and one child per grading unit.

sandbox.WorkerPool starts `python -I _worker.py CONFIG_JSON` inside bubblewrap (see pool.py and
docs/sandbox.md). That process, the supervisor, is trusted: it reads requests (marshal, from the trusted
rfteval process) on stdin and imports what a grader source imports, never running a line of it. In the
sandbox's PID namespace it forks, per source, a template that runs the source's module-level code once and is
kept only when that left nothing a forked unit would share (Supervisor.template_hazard); every grading unit (the
samples of one model for one item) is then a fresh child forked from the template, its samples sent to it alone.
Without a template (unsafe mode, or a refused one) the child is forked from the supervisor and loads the source
itself. The child grades the unit's samples and writes each result into a shared memory region of its own; the
supervisor reads that region, checks and bounds every record (it comes from grader code), keeps the time with its
own clock, kills the child and everything it started when the unit ends, wipes /tmp, and sends the results to
rfteval on stdout. Nothing a child does outlives its unit or reaches another unit's results.

Wire format to rfteval: 8-byte little-endian length, then JSON `[done, [[score, type, message, stdout], ...]]`,
results in request order (rfteval checks them again; see wire.decode_reply).

A "tools" request (sandbox/turns.py) runs a tools module the same way: loaded once in a template, each unit a tool
turn (one rollout's calls of one model turn) in a fresh child, with the same limits, clean-up and checks; what a
turn's child runs and what it reports are _tool_unit.py's, imported only then, so the grading path never loads it.

The program is this script and the modules it imports, each the standard library only (the interpreter may lack
rfteval's packages): _worker_protocol.py (what its processes share), _capture.py (a unit's output),
_child.py (a unit's child), _template.py (a template process), _preload.py (a source made ready),
_supervisor.py with its roles _supervisor_results.py, _supervisor_processes.py and _supervisor_templates.py.
This script starts the supervisor and serves rfteval's requests.
"""

from __future__ import annotations

import gc
import json
import marshal
import os
import signal
import sys
from typing import TYPE_CHECKING


def _own_rfteval() -> None:
    """Make the rfteval package this script belongs to the one it imports (not another installed copy), while a
    grader's imports find the directory that holds it last, as they find any package: that directory (a checkout,
    with its tests/ and scripts/) must not shadow an installed package of the same name."""
    here = os.path.dirname(os.path.abspath(__file__))
    if sys.path and os.path.abspath(sys.path[0] or ".") == here:
        del sys.path[0]  # `import template` in a grader must not find rfteval's modules
    root = os.path.dirname(os.path.dirname(here))  # rfteval/sandbox/_worker.py: the directory that holds rfteval
    sys.path.insert(0, root)
    try:
        import rfteval.sandbox  # noqa: F401  (the package and its submodules, from root: they are found there next)
    finally:
        sys.path.remove(root)
    if root not in sys.path:
        sys.path.append(root)  # last: for rfteval.data.sample (and rfteval.data.grades, lazily) in a child


if not __package__:  # run as the program (python -I _worker.py), not imported by the checker or a test
    _own_rfteval()

from rfteval.sandbox._child import sample_functions  # noqa: E402  (after _own_rfteval)
from rfteval.sandbox._supervisor import Supervisor  # noqa: E402
from rfteval.sandbox._worker_protocol import (  # noqa: E402
    LIMITS,
    PR_SET_CHILD_SUBREAPER,
    PR_SET_DUMPABLE,
    PR_SET_PDEATHSIG,
    prctl,
    recv,
    send,
    use_msgspec_encoder,
)

if TYPE_CHECKING:
    from rfteval.sandbox._worker_protocol import WorkerConfig

THREAD_ENV = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMEXPR_NUM_THREADS",
              "VECLIB_MAXIMUM_THREADS")


def setup(config: WorkerConfig) -> tuple[int, int, dict[str, int | str | bool]]:
    """Private protocol fds, fds 0-2 away from them, and what the supervisor must be before any child exists:
    not dumpable (children cannot read its memory, fds or environment through /proc), the reaper of every
    orphan of a unit (in the PID namespace), killed with its parent."""
    in_fd, reply_fd = os.dup(0), os.dup(1)  # non-inheritable
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(2, 1)  # what a package prints on import goes to the start-up log, never into a reply
    os.close(null)
    sys.stdin = open(os.devnull)  # noqa: SIM115
    for name in THREAD_ENV:
        os.environ[name] = "1"
    # what every child needs, set once here and inherited: default SIGINT, SIGXFSZ ignored (a write past the file
    # size limit fails with EFBIG), and faulthandler writing a crash's traceback to fd 2 (the unit's output)
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    import faulthandler

    faulthandler.enable(file=2)
    prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    prctl(PR_SET_DUMPABLE, 0)
    subreaper = bool(config.get("pid_namespace")) and prctl(PR_SET_CHILD_SUBREAPER, 1)
    LIMITS["memory"] = f"{config['memory_mb']} MB" if config.get("memory_mb") else "none"
    LIMITS["timeout"] = f"{float(config['timeout_s']):g} s"
    os.chdir(config["workdir"])
    return in_fd, reply_fd, {"pid": os.getpid(), "python": sys.version.split()[0], "subreaper": subreaper,
                             "uid": os.getuid()}


def main(argv: list[str]) -> int:
    config = json.loads(argv[1])
    in_fd, reply_fd, facts = setup(config)
    sample_functions()  # rfteval.data.sample: json and msgspec, before any child exists
    use_msgspec_encoder()  # floats written to round-trip exactly
    supervisor = Supervisor(config, reply_fd)
    gc.collect()
    gc.freeze()
    send(reply_fd, json.dumps({"ready": True, **facts}).encode())
    while True:
        message = recv(in_fd)
        if message is None:
            return 0
        request = marshal.loads(message)
        if request[0] in ("grade", "tools"):  # a grading request, or a tool turn (_tool_unit.py)
            supervisor.grade(request)
        elif request[0] == "prepare":  # load a source's imports; rfteval then sets the memory limit above them
            supervisor.code_for(*request[1:])  # key, source[, kind]
            supervisor.flush(True)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
