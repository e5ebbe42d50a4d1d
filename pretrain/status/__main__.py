"""`python -m pretrain.status RUN_DIR` (or `pretrain status RUN_DIR`): is the run healthy, when will it
finish, what has it lost so far. Read-only; exit 0 healthy, 1 degraded, 2 stalled or failed."""
import argparse
import json
import sys
import time
from pathlib import Path
from typing import List, Optional

from pretrain.config.errors import USER_ERRORS

# lazy imports (pretrain.status): `pretrain status --help` answers before the report loads (+~100-250 ms)


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="pretrain status", description=__doc__.split("\n")[0])
    ap.add_argument("run_dir", type=Path, help="the run directory, e.g. runs/tiny-single-cpu")
    ap.add_argument("--json", action="store_true", help="the whole report as one JSON object")
    ap.add_argument("--watch", type=float, metavar="N", help="refresh every N seconds (Ctrl-C ends)")
    ap.add_argument("--plot", metavar="PNG", help="write the loss and step timeline to this PNG")
    ap.add_argument("--verify", action="store_true",
                    help="check the newest checkpoint's sha256 (reads it whole); else its files' sizes")
    a = ap.parse_args(argv)
    from pretrain.status import render, report
    from pretrain.status.jsonl import JsonlFile

    try:
        while True:
            r = report.gather(a.run_dir, full_verify=a.verify)
            if a.json:
                print(json.dumps(r, default=str), flush=True)
            else:
                print(("\033[2J\033[H" if a.watch else "") + render.text(r), flush=True)
            if a.plot:
                metrics = a.run_dir / "metrics.jsonl"
                samples = JsonlFile(metrics).sample(0, 2000) if metrics.is_file() else []
                render.plot(r, samples, a.plot)
            if not a.watch:
                return r["exit"]
            time.sleep(a.watch)
    except USER_ERRORS as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 0


if __name__ == "__main__":
    sys.exit(main())
