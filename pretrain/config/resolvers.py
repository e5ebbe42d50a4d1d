"""OmegaConf resolvers for derived values. Arithmetic only: no `eval`, configs never run code."""
from omegaconf import OmegaConf

from pretrain.config.branch import run_suffix

# lazy imports (hydra): +~95 ms; a rank reads its frozen config without Hydra


def _mul(*xs):
    out = 1
    for x in xs:
        out = out * x
    return out


def _div(a, b):
    # Floor division for integers so the config always resolves; the validator reports a
    # pair that does not divide, with its factors (e.g. global batch vs micro-batch x dp).
    if isinstance(a, int) and isinstance(b, int):
        return a // b if b else 0
    return a / b


def _branch(phase, lr_peak):
    return run_suffix(phase, lr_peak)


def _choice(group, name):
    """The option picked for `group` on the command line (model=mine -> mine), else `name`: a
    user's option file that extends another without its own `name:` still gets its own run dir.
    Outside a Hydra app (compose() in tests and tools) there is no choice to read."""
    from hydra.core.hydra_config import HydraConfig
    if HydraConfig.initialized():
        return HydraConfig.get().runtime.choices.get(group, name)
    return name


def register() -> None:
    for name, fn in {"pt.mul": _mul, "pt.div": _div, "pt.branch": _branch, "pt.choice": _choice}.items():
        if not OmegaConf.has_resolver(name):
            OmegaConf.register_new_resolver(name, fn)
