"""One process of the tuning engine's compile pool, run in the judge's sandbox (pipeline.judge.launcher): it imports
the kernel file, user code. `python -m pipeline.tuning.compile_worker`.

Each line on stdin is one task from the parent, base64 of a pickle of (index, compiler, config) (the parent's own
objects: only the parent writes them); each answer on stdout is one JSON line, {"index", "facts" or null, "error"},
so nothing the worker sends back is unpickled.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import os
import pickle
import sys


def main() -> None:
    from pipeline.tuning import prune
    from pipeline.tuning.prune import compile_quietly

    prune.SANDBOXED = True  # this process runs in the judge's sandbox (started only by prune.JailedPool)

    out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # what the kernel file prints goes to the log, never into the answers
    sys.stdout = sys.stderr
    for line in sys.stdin:
        index, compiler, config = pickle.loads(base64.b64decode(line))
        compiled = compile_quietly(compiler, config)
        facts = dataclasses.asdict(compiled.facts) if compiled.facts is not None else None
        out.write(json.dumps({"index": index, "facts": facts, "error": compiled.error}) + "\n")
        out.flush()


if __name__ == "__main__":
    main()
