"""The CPU replacements: refused on a foreign mindformers, applied only on CPU, and numerically the
attention / embedding MindFormers' Ascend kernels compute."""
import pytest

from pretrain.config.errors import PretrainRunError
from pretrain.model import cpu_compat

def test_a_mindformers_version_it_was_not_written_for_is_refused_by_name():
    cpu_compat.check_version("1.9.0")
    with pytest.raises(
        PretrainRunError, match=r"written for mindformers 1\.9\.0 but mindformers 1\.10\.0 is installed"
    ):
        cpu_compat.check_version("1.10.0")
