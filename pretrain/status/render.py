"""The report as the person on call reads it: a few lines, the verdict last (and first in --watch)."""
import time
from typing import Any, Dict, List, Optional

from pretrain.resilience.goodput import CAUSES, duration

# lazy imports (matplotlib): by design; only --plot draws


def _f(value: Optional[float], fmt: str = "{:.3f}") -> str:
    return "-" if value is None else fmt.format(value)


def _days(value: Optional[float]) -> str:
    return "-" if value is None else (f"{value:.2f} d" if value >= 0.1 else duration(value * 86400))


def _trend(t: Optional[Dict[str, Any]]) -> str:
    return f"{t['from']:.3f} -> {t['to']:.3f} (steps {t['from_step']}-{t['to_step']})" if t else "-"


def text(r: Dict[str, Any]) -> str:
    p, loss, good, ck = r["progress"], r["loss"], r["goodput"], r["checkpoint"]
    lines: List[str] = [f"run {r['run_dir']}: {'running (lock held)' if r['running'] else 'not running'}"]
    where = f", phase {p['phase']}" if p["phase"] else ""
    lines.append(f"step {p['step']:,} of {p['total_steps']:,}{where}")
    for ph in p["phases"]:
        tokens = f"{ph['tokens']:,.0f} tokens" if ph["tokens"] is not None else "- tokens"
        sources = ", ".join(f"{s} {t:,.0f}" for s, t in ph["by_source"].items()) if ph["by_source"] else ""
        lines.append(f"  {ph['phase']:<10} {ph['done']:>9,} / {ph['steps']:<9,} {tokens}"
                     + (f" ({sources})" if sources and len(ph["by_source"]) > 1 else ""))
    lines.append(f"step time {_f(p['step_s'])} s measured / {_f(p['planned_step_s'])} s planned; "
                 f"left: {_days(p['days_left'])} at the measured step, "
                 + (f"{_days(p['days_left'] / good['goodput'])} at the goodput so far, "
                    if p["days_left"] is not None and good.get("goodput") else "")
                 + f"{_days(p['planned_days_left'])} planned "
                 f"(whole run planned {_days(p['planned_total_days'])})")
    hour, run = loss.get("hour"), loss.get("run")
    lines.append(f"loss {_f(loss['last'])}; last hour {_trend(hour)}; run {_trend(run)}")
    val = f"{loss['val_last']:.3f} at step {loss['val_step']}" if loss["val_last"] is not None else "-"
    lines.append(f"val loss {val}; spikes {loss['spikes']}, rollbacks {len(loss['rollbacks'])}, "
                 f"non-finite steps skipped {loss['nonfinite_skipped']}")
    for x in r["restarts"]:
        who = f"node {x['node']}" if x.get("node") is not None else f"rank {x.get('rank')}"
        down = duration(x["down_s"]) if x["down_s"] is not None else "-"
        shrink = f", dp {x['dp'][0]} -> {x['dp'][1]}" if x.get("dp") else ""
        when = time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(x['ts']))
        named = x["cause"].startswith(f"{who}:")   # the controller's causes begin with the node already
        lines.append(f"{x['kind']} {when}: {x['cause']}{'' if named else f' ({who})'}; "
                     f"{x['steps_lost']} steps lost, {down} to the next step{shrink}")
    if not r["restarts"]:
        lines.append("restarts: none")
    if ck.get("newest"):
        ok = f"verifies ({ck['check']})" if ck["verified"] else f"DOES NOT VERIFY: {ck['problem']}"
        room = f"{ck['free_checkpoints']:,} more fit" if ck.get("free_checkpoints") is not None else "-"
        lines.append(f"checkpoint {ck['newest']} (step {ck['step']}), {duration(ck['age_s'])} old, {ok}; "
                     f"{ck['count']} kept, {ck['quarantined']} quarantined; free space: {room} "
                     f"({ck['free_bytes'] / 1e9:.1f} GB)")
    else:
        lines.append("checkpoint: none yet")
    if good.get("goodput") is not None:
        bad = ", ".join(f"{c.replace('_', ' ')} {good['badput'][c]:.1%}" for c in CAUSES
                        if good["badput"].get(c))
        lines.append(f"goodput {good['goodput']:.1%} of {duration(good['wall_s'])} since the first start; "
                     f"badput: {bad or 'none'}")
    lines.append(r["verdict"])
    return "\n".join(lines)


def plot(r: Dict[str, Any], samples: List[Dict[str, Any]], path: str) -> None:
    """Loss over steps and the run's timeline (steps against wall time, restarts marked) as a PNG."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4))
    a.plot([s["step"] for s in samples], [s["loss"] for s in samples], lw=1, label="train loss (sampled)")
    a.set_xlabel("step"), a.set_ylabel("loss"), a.legend()
    timed = [s for s in samples if "ts" in s]
    if timed:
        t0 = min(s["ts"] for s in timed)
        b.plot([(s["ts"] - t0) / 3600 for s in timed], [s["step"] for s in timed], lw=1, label="step")
        for x in r["restarts"]:
            b.axvline((x["ts"] - t0) / 3600, color="r", lw=0.8)
        b.set_xlabel("hours since the first sampled step"), b.set_ylabel("step")
    good = r["goodput"].get("goodput")
    b.set_title(f"goodput {good:.1%}" if good is not None else "goodput -")
    fig.suptitle(r["verdict"][:100])
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
