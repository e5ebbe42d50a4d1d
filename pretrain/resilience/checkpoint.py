"""Atomic, verified checkpoints with retention.

Layout of a run's checkpoint directory:

    step_00000200/                  one complete checkpoint (or step_00000200-<tag>/)
        weights.safetensors         every Parameter of the saved Cell (with an optimizer: weights,
                                    Adam moments, global_step, learning_rate)
        state.json                  the caller's JSON extras (phase, data position, RNG, guards ...)
        manifest.json               size + sha256 of each file above, step, tag, config hash
    latest                          name of the newest published checkpoint (for people and tools)
    quarantine/step_00000300/       a checkpoint that failed verification, moved aside (with
    quarantine/step_00000300.reason why): kept for a person, never pruned, never counted
    .tmp-step_00000300-<pid>/       a save in progress, or a crashed one: readers never look here

A save writes into the .tmp dir, fsyncs every file and the dir, writes the manifest last, then
renames the dir into place (atomic on POSIX) and only then rewrites `latest`. So a crash at any
moment leaves either the complete new checkpoint or none of it. Readers do not trust `latest`:
latest() scans the step_* dirs newest first and returns the first whose manifest verifies, so a
truncated or bit-flipped checkpoint is skipped (with a `fallback` event) rather than loaded, and
moved into quarantine/ (a `quarantine` event) so retention neither counts nor deletes it. When no
checkpoint verifies but some were there, latest() refuses to let the run start from step 0 over
them unless start_fresh is set: a silent fresh start would overwrite weeks of progress.

One writer per directory: only one process (rank 0 under data parallelism) saves into it.
"""
import hashlib
import json
import logging
import os
import re
import shutil
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple, Union

from pretrain.config.errors import PretrainConfigError, PretrainRunError
from pretrain.io import fsync_path, write_atomic
from pretrain.resilience.events import EventLog

# lazy imports (mindspore): by design, its 3-10 s import stays out of planning, status and dry runs

log = logging.getLogger(__name__)

WEIGHTS = "weights.safetensors"
STATE = "state.json"
MANIFEST = "manifest.json"
POINTER = "latest"
QUARANTINE = "quarantine"
MANIFEST_VERSION = 1
_NAME = re.compile(r"^step_(\d{8,})(?:-([A-Za-z0-9._-]+))?$")
_TAG = re.compile(r"^[A-Za-z0-9._-]+$")
_LEFTOVER_PREFIXES = (".tmp-", ".trash-", ".latest.tmp-")


@dataclass(frozen=True)
class CheckpointInfo:
    step: int
    path: Path
    tag: Optional[str]
    created: float                       # unix time the save started (from the manifest)
    verified: bool = False               # every file's size and sha256 matched the manifest


def checkpoint_name(step: int, tag: Optional[str] = None) -> str:
    if tag is not None and not _TAG.match(tag):
        raise ValueError(f"checkpoint tag {tag!r} may only use letters, digits, '.', '_' and '-'")
    return f"step_{step:08d}" + (f"-{tag}" if tag else "")


class CheckpointManager:
    def __init__(self, directory: Union[str, os.PathLike], *, keep_latest: int,
                 events: Optional[EventLog] = None, config_hash: str = "", async_save: bool = False,
                 writes_run_files: bool = True, start_fresh: bool = False):
        """`writes_run_files`: this process owns the directory (rank 0): only it saves, prunes and
        quarantines.
        `start_fresh`: when no checkpoint verifies, quarantine them and let the run start from step 0
        (resilience.start_fresh) instead of refusing."""
        if keep_latest < 1:
            raise PretrainConfigError(f"train.keep_checkpoint_max={keep_latest}: must be >= 1, the newest "
                                      "checkpoint is what a restart resumes from")
        self.directory = Path(directory)
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
        except (FileExistsError, NotADirectoryError):
            raise PretrainRunError(f"{self.directory} is not a directory: move it away, the run keeps its "
                                   f"checkpoints there") from None
        except OSError as e:
            raise PretrainRunError(f"cannot create {self.directory} ({e.strerror}): make the run_dir "
                                   f"writable or choose another run_dir") from None
        self.writes_run_files = writes_run_files
        self.start_fresh = start_fresh
        self.keep_latest = keep_latest
        self.events = events
        self.config_hash = config_hash
        self.async_save = async_save
        self.last_stall_s = 0.0          # how long the last save() blocked its caller
        self._writer: Optional[threading.Thread] = None
        self._writer_error: Optional[PretrainRunError] = None

    # ----------------------------------------------------------------- saving
    def save(self, step: int, cell: Any, state: Dict[str, Any], tag: Optional[str] = None) -> Path:
        """Checkpoint `cell`'s parameters and `state`; returns the final path. With async_save the
        parameters are copied in memory here and written by a background thread: the path exists
        once wait() returns, and a write error is raised by the next save(), wait() or close()."""
        started = time.perf_counter()
        self.wait()
        final = self.directory / checkpoint_name(step, tag)
        # Serialised now: the caller may mutate `state` while an async write is running, and a
        # non-JSON value should fail here, in the caller's stack, not in the writer thread.
        state_bytes = json.dumps(state, sort_keys=True, indent=1).encode("utf-8")
        self._remove_leftovers()
        if self.async_save:
            snapshot = _snapshot_parameters(cell)
            self.last_stall_s = time.perf_counter() - started

            def write_weights(path: Path) -> None:
                import mindspore as ms
                ms.save_checkpoint(snapshot, str(path), format="safetensors")

            self._writer = threading.Thread(
                target=self._write_in_background, name="checkpoint-writer",
                args=(step, tag, final, write_weights, state_bytes, self.last_stall_s))
            self._writer.start()
        else:
            def write_weights(path: Path) -> None:
                import mindspore as ms
                ms.save_checkpoint(cell, str(path), format="safetensors")

            self._publish(step, tag, final, write_weights, state_bytes, stall_s=None)
            self.last_stall_s = time.perf_counter() - started
        return final

    def wait(self) -> None:
        """Block until an async save is durable; raise its error if it failed."""
        if self._writer is not None:
            self._writer.join()
            self._writer = None
        if self._writer_error is not None:
            error, self._writer_error = self._writer_error, None
            raise error

    def close(self) -> None:
        self.wait()

    def __enter__(self) -> "CheckpointManager":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _write_in_background(self, step: int, tag: Optional[str], final: Path,
                             write_weights: Callable[[Path], None], state_bytes: bytes,
                             stall_s: float) -> None:
        try:
            self._publish(step, tag, final, write_weights, state_bytes, stall_s=stall_s)
        except Exception as e:  # a thread cannot raise to the loop: keep it for the next call
            self._writer_error = e if isinstance(e, PretrainRunError) else PretrainRunError(
                f"checkpoint writer for step {step} failed: {type(e).__name__}: {e}".replace("\n", " "))

    def _publish(self, step: int, tag: Optional[str], final: Path, write_weights: Callable[[Path], None],
                 state_bytes: bytes, stall_s: Optional[float]) -> None:
        started = time.perf_counter()
        created = time.time()
        tmp = self.directory / f".tmp-{final.name}-{os.getpid()}"
        previous = self._read_pointer()
        aside: Optional[Path] = None
        try:
            tmp.mkdir()
            write_weights(tmp / WEIGHTS)
            write_atomic(tmp / STATE, state_bytes)
            fsync_path(tmp / WEIGHTS)
            manifest = {"version": MANIFEST_VERSION, "step": step, "tag": tag, "created": created,
                        "config_hash": self.config_hash,
                        "files": {name: _describe(tmp / name) for name in (WEIGHTS, STATE)}}
            write_atomic(tmp / MANIFEST, json.dumps(manifest, indent=1))   # fsyncs tmp/ too
            if final.exists():
                # The same step saved again (resumed past a corrupt copy of it): the new one wins.
                aside = self.directory / f".trash-{final.name}-{os.getpid()}"
                os.rename(final, aside)
            os.rename(tmp, final)
            fsync_path(self.directory)
        except Exception as e:  # the disk, the serializer or the rename: all leave nothing published
            shutil.rmtree(tmp, ignore_errors=True)
            if aside is not None and not final.exists():
                os.rename(aside, final)
            raise self._save_error(step, final, previous, e) from e
        if aside is not None:
            shutil.rmtree(aside, ignore_errors=True)
        try:
            self._write_pointer(final.name)
        except OSError as e:
            raise self._save_error(step, final, previous, e, published=True) from e
        write_s = time.perf_counter() - started
        size = sum(f.stat().st_size for f in final.iterdir())
        self._log("save", step=step, tag=tag, path=str(final), bytes=size, write_s=round(write_s, 4),
                  stall_s=round(write_s if stall_s is None else stall_s, 4), async_save=stall_s is not None)
        self._prune()

    def _save_error(self, step: int, final: Path, previous: Optional[str], e: BaseException,
                    published: bool = False) -> PretrainRunError:
        reason = f"{type(e).__name__}: {e}".replace("\n", " ")
        if published:
            what = f"{final.name} is complete but the `latest` pointer still names {previous or 'nothing'}"
        else:
            what = (f"nothing was published; the previous checkpoint ({previous or 'none'}) and `latest` "
                    f"are intact")
        self._log("error", step=step, path=str(final), reason=reason)
        return PretrainRunError(f"checkpoint save of step {step} to {final} failed ({reason}); {what}. "
                                f"Free space / fix permissions under {self.directory} and restart to resume.")

    def _prune(self) -> None:
        untagged = [info for info in self._scan() if info.tag is None]
        for info in untagged[self.keep_latest:]:
            self._remove(info, reason=f"keep_latest={self.keep_latest}")

    def discard_from(self, step: int, reason: str) -> List[CheckpointInfo]:
        """Delete every checkpoint at `step` or later, tagged or not (a spike rollback: those hold
        the diverging weights, and a crash must not resume from them). Repoints `latest`."""
        self.wait()
        doomed = [info for info in self._scan() if info.step >= step]
        for info in doomed:
            self._remove(info, reason=reason)
        remaining = self._scan()
        if remaining:
            self._write_pointer(remaining[0].path.name)
        else:
            (self.directory / POINTER).unlink(missing_ok=True)
        return doomed

    def _remove(self, info: CheckpointInfo, reason: str) -> None:
        # Renamed out of the step_* namespace first, so a crash mid-delete leaves nothing a reader
        # could mistake for a checkpoint.
        trash = self.directory / f".trash-{info.path.name}-{os.getpid()}"
        try:
            os.rename(info.path, trash)
        except OSError as e:
            self._log("error", step=info.step, path=str(info.path), reason=f"prune failed: {e}")
            return
        shutil.rmtree(trash, ignore_errors=True)
        self._log("prune", step=info.step, tag=info.tag, path=str(info.path), reason=reason)

    def _remove_leftovers(self) -> None:
        for entry in self.directory.iterdir():
            if entry.name.startswith(_LEFTOVER_PREFIXES):
                if entry.is_dir():
                    shutil.rmtree(entry, ignore_errors=True)
                else:
                    entry.unlink(missing_ok=True)
                self._log("prune", path=str(entry), reason="leftover of an interrupted save")

    # ---------------------------------------------------------------- reading
    def list(self) -> List[CheckpointInfo]:
        """Every published checkpoint, newest first, not verified."""
        self.wait()
        return self._scan()

    def _scan(self) -> List[CheckpointInfo]:
        return published(self.directory)

    def latest(self, tag: Optional[str] = None,
               before_step: Optional[int] = None) -> Optional[CheckpointInfo]:
        """The newest checkpoint that verifies (optionally: with this tag; with step < before_step).
        Each newer one that fails verification is logged as a `fallback` with its reason and moved
        into quarantine/. Unfiltered (where a run starts), no verified checkpoint among some that
        exist, or were quarantined before, is an error unless start_fresh is set."""
        found, bad = None, []
        for info in self.list():
            if tag is not None and info.tag != tag:
                continue
            if before_step is not None and info.step >= before_step:
                continue
            problem = verify(info.path)
            if problem is None:
                found = replace(info, verified=True)
                break
            log.warning("checkpoint %s is unusable (%s)", info.path, problem)
            bad.append((info, problem))
        for info, problem in bad:
            if found is not None:
                self._log("fallback", step=info.step, path=str(info.path), reason=problem,
                          resumes_from=found.path.name)
            self._quarantine(info, problem)
        if found is None and tag is None and before_step is None:
            self._no_fresh_start_over(bad)
        return found

    def quarantined(self) -> List[Tuple[str, str]]:
        """(name, reason) of every checkpoint in quarantine/, oldest name first."""
        qdir = self.directory / QUARANTINE
        if not qdir.is_dir():
            return []
        out = []
        for entry in sorted(qdir.iterdir()):
            if entry.is_dir():
                try:
                    reason = entry.with_name(entry.name + ".reason").read_text(encoding="utf-8").strip()
                except OSError:
                    reason = "reason not recorded (see events.jsonl)"
                out.append((entry.name, reason))
        return out

    def _quarantine(self, info: CheckpointInfo, problem: str) -> None:
        """Move an unusable checkpoint out of the step_* namespace (so no reader, retention or
        keep_latest count sees it again) into quarantine/, with its reason beside it."""
        if not self.writes_run_files:   # another rank owns the directory; it moves it
            return
        qdir = self.directory / QUARANTINE
        target, n = qdir / info.path.name, 1
        while target.exists():   # the same step went bad twice: keep both
            target, n = qdir / f"{info.path.name}.{n}", n + 1
        try:
            qdir.mkdir(exist_ok=True)
            os.rename(info.path, target)
            fsync_path(self.directory)
            write_atomic(target.with_name(target.name + ".reason"), problem + "\n")
        except OSError as e:
            self._log("error", step=info.step, path=str(info.path), reason=f"quarantine failed: {e}")
            return
        if self._read_pointer() == info.path.name:
            (self.directory / POINTER).unlink(missing_ok=True)   # the next save points it again
        self._log("quarantine", step=info.step, path=str(info.path), to=str(target), reason=problem)

    def _no_fresh_start_over(self, bad: List[Tuple[CheckpointInfo, str]]) -> None:
        """The run would start from step 0 in a directory whose checkpoints all failed: refuse (one
        line naming each and why) unless start_fresh says that is what the user wants."""
        named = {name: reason for name, reason in self.quarantined()}
        for info, problem in bad:
            named.setdefault(info.path.name, problem)
        if not named:
            return
        if self.start_fresh:
            log.warning("no checkpoint in %s verifies; resilience.start_fresh=true: starting from step 0",
                        self.directory)
            return
        where = (f"moved to {self.directory / QUARANTINE}" if self.writes_run_files
                 else f"left in {self.directory}")
        listed = "; ".join(f"{name} ({reason})" for name, reason in sorted(named.items(), reverse=True))
        raise PretrainRunError(
            f"no usable checkpoint in {self.directory}, nothing was started: {listed}; {where}. Put a good "
            f"copy back into {self.directory}, or set resilience.start_fresh=true to train from step 0 in "
            f"this run_dir")

    def load(self, info: CheckpointInfo, cell: Any, *, allow_config_change: bool = False) -> Dict[str, Any]:
        """Load the checkpoint's parameters into `cell` (every parameter of the cell must be in it,
        with the same shape) and return its state dict."""
        import mindspore as ms

        self.wait()
        path = Path(info.path)
        problem = None if info.verified else verify(path)
        if problem is not None:
            raise PretrainRunError(f"checkpoint {path} does not verify ({problem}); "
                                   f"use CheckpointManager.latest() to pick one that does")
        manifest = json.loads((path / MANIFEST).read_text(encoding="utf-8"))
        written_by = manifest.get("config_hash")
        if self.config_hash and written_by and written_by != self.config_hash and not allow_config_change:
            raise PretrainRunError(f"checkpoint {path} was written with config hash {written_by}, "
                                   f"this run's is {self.config_hash}: resume with the same config, or "
                                   f"start a new run_dir")
        saved = ms.load_checkpoint(str(path / WEIGHTS), format="safetensors")
        _check_same_architecture(cell, saved, path)
        for _, param in cell.parameters_and_names():
            # In place: a graph compiled before the load (a loss-spike rollback) keeps reading the
            # parameter's own memory; set_data (what load_param_into_net does) swaps in a new buffer
            # the compiled graph never sees, so the run would go on from the unloaded values.
            param.copy_(saved[param.name])
        return json.loads((path / STATE).read_text(encoding="utf-8"))

    # ---------------------------------------------------------------- helpers
    def _read_pointer(self) -> Optional[str]:
        try:
            return (self.directory / POINTER).read_text(encoding="utf-8").strip() or None
        except FileNotFoundError:
            return None

    def _write_pointer(self, name: str) -> None:
        write_atomic(self.directory / POINTER, name + "\n")

    def _log(self, kind: str, **fields: Any) -> None:
        if self.events is None:
            return
        try:
            self.events.log(kind, **fields)
        except OSError as e:   # a full disk must not turn into a second, less clear error
            log.warning("could not write %s event to %s: %s", kind, self.events.path, e)


def read_state(info: CheckpointInfo) -> Dict[str, Any]:
    """The JSON state a checkpoint was saved with (no weights read, not verified)."""
    return json.loads((Path(info.path) / STATE).read_text(encoding="utf-8"))


def published(directory: Union[str, os.PathLike]) -> List[CheckpointInfo]:
    """Every published checkpoint in `directory`, newest first, not verified; read-only (a reader
    that is not the run, e.g. pretrain status, lists them without a manager)."""
    found = []
    try:
        entries = list(Path(directory).iterdir())
    except FileNotFoundError:
        return []
    for entry in entries:
        match = _NAME.match(entry.name)
        try:
            if match and entry.is_dir():
                found.append(CheckpointInfo(step=int(match.group(1)), path=entry, tag=match.group(2),
                                            created=_created(entry)))
        except FileNotFoundError:   # pruned by the saving rank while another rank scans
            continue
    return sorted(found, key=lambda info: (info.step, info.created), reverse=True)


def sizes_match(path: Union[str, os.PathLike]) -> Optional[str]:
    """verify() without the sha256: None when every file the manifest lists has its recorded size
    (cheap at any checkpoint size; a bit flip needs verify())."""
    path = Path(path)
    try:
        files = json.loads((path / MANIFEST).read_text(encoding="utf-8"))["files"]
        for name, expected in files.items():
            size = (path / name).stat().st_size
            if size != expected.get("size"):
                return f"{name} is {size} bytes, the manifest says {expected.get('size')}"
    except FileNotFoundError as e:
        return f"{Path(e.filename).name} missing"
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        return f"{MANIFEST} unreadable ({e})"
    return None


def verify(path: Union[str, os.PathLike]) -> Optional[str]:
    """None when every file listed in the manifest has its recorded size and sha256; else why not."""
    path = Path(path)
    try:
        manifest = json.loads((path / MANIFEST).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return f"{MANIFEST} missing"
    except (OSError, ValueError) as e:
        return f"{MANIFEST} unreadable ({e})"
    files = manifest.get("files") if isinstance(manifest, dict) else None
    if not isinstance(files, dict) or WEIGHTS not in files or STATE not in files:
        return f"{MANIFEST} does not list {WEIGHTS} and {STATE}"
    for name, expected in files.items():
        try:
            size = (path / name).stat().st_size
        except FileNotFoundError:
            return f"{name} missing"
        if size != expected.get("size"):
            return f"{name} is {size} bytes, the manifest says {expected.get('size')} (truncated or replaced)"
        if _sha256(path / name) != expected.get("sha256"):
            return f"{name} sha256 differs from the manifest (corrupted bytes)"
    return None


def _check_same_architecture(cell: Any, saved: Dict[str, Any], path: Path) -> None:
    params = {p.name: p for _, p in cell.parameters_and_names()}
    missing = [name for name in params if name not in saved]
    if missing:
        raise PretrainRunError(f"checkpoint {path} lacks parameter {missing[0]!r} ({len(missing)} of the "
                               f"model's {len(params)} missing): a checkpoint of another architecture or "
                               f"optimizer")
    extra = [name for name in saved if name not in params]
    if extra:
        raise PretrainRunError(f"checkpoint {path} has parameter {extra[0]!r} the model lacks "
                               f"({len(extra)} extra): a checkpoint of another architecture")
    for name, param in params.items():
        if tuple(saved[name].shape) != tuple(param.shape):
            raise PretrainRunError(f"checkpoint of another architecture: {name!r} has shape "
                                   f"{tuple(saved[name].shape)} in {path} but {tuple(param.shape)} in the "
                                   f"model")


def _snapshot_parameters(cell: Any) -> List[Dict[str, Any]]:
    """Private copies of every parameter, for a writer thread that runs while training goes on.
    The copy matters: on CPU asnumpy() shares memory with the parameter, which the next optimizer
    step overwrites in place (from_numpy then shares the private copy instead of copying again)."""
    from mindspore import Tensor

    copies: Dict[str, Any] = {}
    for _, param in cell.parameters_and_names():
        if param.name not in copies:
            copies[param.name] = Tensor.from_numpy(param.asnumpy().copy())
    return [{"name": name, "data": data} for name, data in copies.items()]


def _created(path: Path) -> float:
    try:
        return float(json.loads((path / MANIFEST).read_text(encoding="utf-8"))["created"])
    except (OSError, ValueError, KeyError, TypeError):
        return path.stat().st_mtime


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()


def _describe(path: Path) -> Dict[str, Any]:
    return {"size": path.stat().st_size, "sha256": _sha256(path)}

