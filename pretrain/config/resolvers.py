"""OmegaConf resolvers for derived values. Arithmetic only: no `eval`, configs never run code."""
from omegaconf import OmegaConf


def _mul(*xs):
    out = 1
    for x in xs:
        out = out * x
    return out


def _div(a, b):
    # Integer division when exact; the validator reports a non-divisible pair with its factors.
    if isinstance(a, int) and isinstance(b, int):
        return a // b if b and a % b == 0 else (a / b if b else 0)
    return a / b


def register() -> None:
    for name, fn in {"pt.mul": _mul, "pt.div": _div}.items():
        if not OmegaConf.has_resolver(name):
            OmegaConf.register_new_resolver(name, fn)
