"""How the launcher reads its ranks (pretrain.launch.msrun.RankWatch) from the files
pretrain.worker leaves in RUN_DIR/logs/, with real processes standing in for msrun and the ranks."""
import socket

import pytest

from pretrain.config.errors import PretrainRunError
from pretrain.launch import measured
from pretrain.launch.msrun import check_port_free, last_lines


@pytest.fixture
def logs(tmp_path):
    d = tmp_path / "logs"
    d.mkdir()
    return d


def test_a_busy_master_port_is_refused_before_msrun_starts(compose_many):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        cfg = compose_many(["parallel=dp2", "hardware=cpu_2proc", f"hardware.master_port={port}"])
        with pytest.raises(PretrainRunError, match=f"hardware.master_port={port} .* is in use"):
            check_port_free(cfg.hardware)
    check_port_free(cfg.hardware)         # free again


def test_last_lines_of_a_log_without_errors_say_so(tmp_path):
    log = tmp_path / "worker_0.log"
    log.write_text("[WARNING] a\n[WARNING] b\n")
    assert last_lines(log) == ["(no error in the log; it ends with)", "[WARNING] a", "[WARNING] b"]


def test_measured_throughput_is_trained_tokens_over_training_time():
    summary = {"phases": [{"tokens_per_s": 100.0, "wall_s": 10.0}, {"tokens_per_s": 400.0, "wall_s": 5.0},
                          {"tokens_per_s": None, "wall_s": 0.1}]}   # a phase a resumed run had finished
    assert measured(summary) == {"measured_tokens_per_s": pytest.approx(3000 / 15)}
    summary["measured"] = {"step_s": 0.25, "memory_gb": 4.5}   # the loop's, after compile (train/measure.py)
    assert measured(summary) == {"measured_tokens_per_s": pytest.approx(3000 / 15), "measured_step_s": 0.25,
                                 "measured_gb": 4.5}
    assert measured({"phases": []}) == {}
