"""Typed errors. The entrypoint turns them into one line on stderr and exit code 2."""


class PretrainConfigError(ValueError):
    """A composed config breaks a rule; the message names the keys and every factor."""


class PretrainDataError(RuntimeError):
    """An input, tokenizer or prepared dataset is missing or does not match the config."""


class PretrainRunError(RuntimeError):
    """Training or launching failed in a way the user can act on (message says how)."""


# What the entrypoints (pretrain.app, pretrain.worker, MindFormers' engine) turn into one line and exit 2.
USER_ERRORS = (PretrainConfigError, PretrainDataError, PretrainRunError)
