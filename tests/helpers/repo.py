"""The checkout the tests run in, and the options of its config groups."""
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CONF = REPO / "conf"


def options(group: str):
    return sorted(p.stem for p in (CONF / group).glob("*.yaml"))
