"""Where the data stages' tasks run: `local` (a process pool on this machine) or `ray` (tasks on a
Ray cluster, data.ray.address, or a Ray instance started here when none is given).

Both engines run the same task functions (pretrain.data.stages) on the same task lists and hand
back results in task order, so the prepared bytes never depend on the engine. Tasks read and
write the shared cache directory (a shared file system on a cluster): only small completion
records travel back to the driver.

Ray is imported only here, and only when engine=ray runs: compose/validate/plan never load it.
MindSpore cannot be imported into a process that imported Ray first (Ray loads protobuf, and
MindSpore's own protobuf modules then fail to load), so the driver loads MindSpore before Ray (it
may go on to train in the same process). The tasks never import mindspore: the MindRecord writers
load MindSpore's C++ writer alone (pretrain.data.mindrecord_file), which loads beside Ray.
"""
import os
import sys
from contextlib import closing
from pathlib import Path
from typing import Callable, Iterator, List, Optional, Sequence

from pretrain.config.errors import PretrainDataError
from pretrain.data.pool import make_pool, ordered_map

# lazy imports (mindspore, ray): by design, in the order the docstring gives


def _noop() -> None:
    pass


class LocalEngine:
    name = "local"

    def __init__(self, workers: int) -> None:
        self.workers = workers
        self._pool = None       # one set of worker processes for every stage of this prepare()

    def map(self, fn: Callable, tasks: Sequence) -> Iterator:
        """Results in task order; a single task runs in this process (no worker start-up for it)."""
        if self.workers <= 1 or len(tasks) <= 1:
            yield from map(fn, tasks)
            return
        if self._pool is None:
            self._pool = make_pool(self.workers, _noop)
        try:
            with closing(ordered_map(fn, tasks, self.workers, _noop, pool=self._pool)) as results:
                yield from results
        except BaseException:
            self._pool = None       # ordered_map stopped its workers
            raise

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None


class RayEngine:
    name = "ray"

    def __init__(self, address: Optional[str], workers: int, temp_dir: Optional[Path] = None) -> None:
        if "ray" not in sys.modules:
            # This process may train later: MindSpore must be loaded before Ray is.
            import mindspore.mindrecord  # noqa: F401
        try:
            import ray
        except ImportError:
            raise PretrainDataError("data.engine=ray needs the ray package: pip install 'pretrain[ray]' "
                                    "(or data.engine=local)") from None
        self.ray, self.workers = ray, workers
        self._started = False
        # Ray's workers are not this process's children: what they import from, and the run's own
        # PRETRAIN_* settings, go to them explicitly
        env = {k: v for k, v in os.environ.items() if k == "PYTHONPATH" or k.startswith("PRETRAIN_")}
        kwargs = dict(runtime_env={"env_vars": env} if env else None, logging_level="ERROR",
                      log_to_driver=False)
        if not ray.is_initialized():
            if address:
                try:
                    ray.init(address=address, **kwargs)
                except (ConnectionError, RuntimeError, ValueError) as exc:
                    raise PretrainDataError(f"data.ray.address={address}: cannot connect to a Ray cluster "
                                            f"({exc}); start one (ray start --head) or leave "
                                            f"data.ray.address unset to start Ray here") from None
            else:
                # A private instance on this machine: as many CPUs as data.workers, no dashboard. "local":
                # without it ray.init joins the newest cluster `ray start` recorded in the temp dir (or
                # RAY_ADDRESS), and then refuses num_cpus ("When connecting to an existing cluster ...").
                ray.init(address="local", num_cpus=workers, include_dashboard=False,
                         _temp_dir=str(temp_dir) if temp_dir else None, **kwargs)
            self._started = True
        self._call = ray.remote(self._run)
        self._pending: List = []

    @staticmethod
    def _run(fn: Callable, task):
        return fn(task)

    def map(self, fn: Callable, tasks: Sequence) -> Iterator:
        """Results in task order; at most 2 x the cluster's CPUs in flight. A task whose worker or
        node dies is retried by Ray (max_retries); a task that raises fails the stage. A stage of
        one task (components; the writer of a one-shard dataset) runs here, as on the local
        engine: no scheduling round trip."""
        ray = self.ray
        if len(tasks) == 1:
            yield fn(tasks[0])
            return
        width = max(2, 2 * int(ray.cluster_resources().get("CPU", self.workers)))
        call = self._call.options(max_retries=3, retry_exceptions=False)
        todo = iter(tasks)
        try:
            for task in todo:
                self._pending.append(call.remote(fn, task))
                if len(self._pending) >= width:
                    break
            while self._pending:
                ref = self._pending.pop(0)
                try:
                    result = ray.get(ref)
                except ray.exceptions.RayTaskError as exc:
                    cause = exc.as_instanceof_cause()
                    raise (cause if isinstance(cause, (PretrainDataError, OSError)) else
                           RuntimeError(f"a Ray task of {fn.__name__} failed: {exc}")) from None
                for task in todo:
                    self._pending.append(call.remote(fn, task))
                    break
                yield result
        finally:
            for ref in self._pending:     # an error or an interrupt: nothing keeps running
                ray.cancel(ref, force=True)
            self._pending = []

    def close(self) -> None:
        if self._started:
            self.ray.shutdown()
            self._started = False


def make_engine(cfg, scratch: Optional[Path] = None):
    """The engine data.engine names. scratch: where a Ray instance started here keeps its files."""
    if str(cfg.get("engine", "local")) == "ray":
        address = cfg.get("ray", {}).get("address") if cfg.get("ray") is not None else None
        return RayEngine(address or None, int(cfg.workers), scratch)
    return LocalEngine(int(cfg.workers))
