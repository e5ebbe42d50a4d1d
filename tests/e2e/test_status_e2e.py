"""`pretrain status` on synthetic run dirs written by the run's own writers (EventLog, MetricsWriter,
the run-dir lock), and the goodput accounting it shares with the summary and the chaos benchmark."""
import json

from pretrain.resilience.events import EventLog
from tests.helpers.cli import run as cli_run
from tests.helpers.status_run import status_run_dir


def test_the_command_line(tmp_path):
    run = status_run_dir(tmp_path)
    with EventLog(run / "events.jsonl") as ev:
        ev.log("finish", step=30)
    out = cli_run(str(run), "--json", "--plot", str(tmp_path / "s.png"), cwd=tmp_path, module="pretrain.status")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["verdict"] == "finished at step 30"
    assert (tmp_path / "s.png").stat().st_size > 1000
    text = cli_run("status", str(run), cwd=tmp_path)
    assert text.returncode == 0 and text.stdout.strip().endswith("finished at step 30"), text.stderr
    bad = cli_run(str(tmp_path), cwd=tmp_path, module="pretrain.status")
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "not a pretrain run dir" in bad.stderr
