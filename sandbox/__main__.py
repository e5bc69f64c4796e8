"""Command line: run one solution against its tests in a sandbox and print the result as JSON.

    python -m sandbox --solution sol.py --tests tests.py --entry-point add
    python -m sandbox --solution sol.py --tests cases.json --format stdio --backend docker
    python -m sandbox --check --backend bubblewrap      # start-up check only

Exit status: 0 when a result was printed (whatever the solution did), 2 when the backend is unavailable
(the reason goes to stderr), 64 for bad arguments.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from sandbox.config import BACKENDS, FORMATS, CodeTask, SandboxConfig
from sandbox.pool import SandboxPool, SandboxUnavailable


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m sandbox", description=__doc__.splitlines()[0])
    p.add_argument("--solution", type=Path, help="file with the candidate's Python source")
    p.add_argument("--tests", type=Path, help="assert: Python with check(candidate); stdio: JSON [{input, output}]")
    p.add_argument("--format", choices=FORMATS, default="assert")
    p.add_argument("--entry-point", help="function under test (assert format)")
    p.add_argument("--backend", choices=BACKENDS, default="bubblewrap")
    p.add_argument("--timeout", type=float, default=10.0, help="wall deadline of the run, seconds")
    p.add_argument("--case-timeout", type=float, default=3.0, help="deadline of one test case, seconds")
    p.add_argument("--memory-mb", type=int, default=512)
    p.add_argument("--max-processes", type=int, default=64)
    p.add_argument("--max-output-bytes", type=int, default=4 * 1024 * 1024)
    p.add_argument("--cgroups", choices=("auto", "require", "off"), default="auto")
    p.add_argument("--docker-image", default=SandboxConfig.docker_image)
    p.add_argument("--check", action="store_true", help="only run the backend's start-up check")
    p.add_argument("--indent", type=int, default=2)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if not args.check and (args.solution is None or args.tests is None):
        print("--solution and --tests are required (or --check)", file=sys.stderr)
        return 64
    cfg = SandboxConfig(backend=args.backend, timeout_s=args.timeout, case_timeout_s=args.case_timeout,
                        memory_mb=args.memory_mb, max_processes=args.max_processes,
                        max_output_bytes=args.max_output_bytes, use_cgroups=args.cgroups,
                        docker_image=args.docker_image, workers=1, queue_size=1)
    try:
        task = None if args.check else CodeTask(
            solution=args.solution.read_text(encoding="utf-8"), tests=args.tests.read_text(encoding="utf-8"),
            format=args.format, entry_point=args.entry_point)
    except (OSError, ValueError) as exc:
        print(f"bad arguments: {exc}", file=sys.stderr)
        return 64
    try:
        pool = SandboxPool(cfg)
    except SandboxUnavailable as exc:
        print(f"sandbox unavailable: {exc}", file=sys.stderr)
        return 2
    with pool:
        out = {"available": True, **pool.describe()} if task is None else pool.run(task).to_dict()
    print(json.dumps(out, indent=args.indent or None))
    return 0


if __name__ == "__main__":
    sys.exit(main())
