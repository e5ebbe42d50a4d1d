"""What a launch checks in pure Python before it builds the model and reads data: a config these
accept, the tests trust to train."""
from pretrain.config import validate
from pretrain.config.phases import phase_steps, phases as phases_of


def accepted_by_training(cfg) -> None:
    """The pure-Python steps a launch takes before the model and data: the rules, the phases' steps
    and LR schedules, and the MindFormers export every rank builds its model from."""
    from pretrain.model import mindformers_config as mfc
    from pretrain.train.schedule import curriculum
    validate.check(cfg)
    validate.check_trainable(cfg)
    plist = phases_of(cfg)
    steps = [phase_steps(cfg, p) for p in plist]
    lrs = curriculum(plist, steps, start=float(cfg.train.lr_peak))
    mfc.export(cfg, first_phase=plist[0], first_phase_steps=steps[0], first_phase_peak=lrs[0].peak)
    mfc.parallel_blocks(cfg)
