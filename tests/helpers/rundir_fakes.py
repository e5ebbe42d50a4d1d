"""Fake checkpoints for the run-directory tests: the files, manifest and state a real save writes,
without MindSpore (the launcher's checks read only the manifest and state.json, never weights)."""
import json
import os
from pathlib import Path

from omegaconf import OmegaConf

from pretrain.resilience.checkpoint import MANIFEST, STATE, WEIGHTS, _describe, checkpoint_name
from tests.helpers import cli

# Keep the runs that must be refused tiny, so that a refusal that did NOT happen fails fast.
SMALL = ["train.total_tokens=20480", "model.seq_length=64", "model.max_position_embeddings=64"]


def fake_checkpoint(directory: Path, step: int, config=None, phase="general", tag=None) -> Path:
    path = Path(directory) / checkpoint_name(step, tag)
    path.mkdir(parents=True)
    (path / WEIGHTS).write_bytes(os.urandom(256))
    state = {"global_step": step, "phase": phase, "phase_step": step, "phases_done": []}
    if config is not None:
        state["config"] = config
    (path / STATE).write_text(json.dumps(state))
    manifest = {"version": 1, "step": step, "tag": tag, "created": 1000.0 + step, "config_hash": "",
                "files": {name: _describe(path / name) for name in (WEIGHTS, STATE)}}
    (path / MANIFEST).write_text(json.dumps(manifest))
    return path


def corrupt(checkpoint: Path) -> None:
    target = checkpoint / WEIGHTS
    data = bytearray(target.read_bytes())
    data[10] ^= 0xFF
    target.write_bytes(bytes(data))


def pretrain(cwd: Path, *args: str, module: str = "pretrain", timeout: int = 120):
    return cli.run(*args, cwd=cwd, module=module, timeout=timeout)


def trained_run_dir(tmp_path: Path, *overrides: str, steps=(3, 6)) -> Path:
    """A run dir as a run leaves it: the frozen config.yaml and plan.json (from a dry run) and
    checkpoints whose state holds that resolved config (with dry_run=false, as a real run has it)."""
    run_dir = tmp_path / "run"
    proc = pretrain(tmp_path, f"run_dir={run_dir}", "dry_run=true", *SMALL, *overrides)
    assert proc.returncode == 0, proc.stderr
    config = OmegaConf.to_container(OmegaConf.load(run_dir / "config.yaml"))
    config["dry_run"] = False
    for step in steps:
        fake_checkpoint(run_dir / "checkpoints", step, config=config)
    return run_dir
