"""A plan judged against a measurement (`python -m pretrain.bench.plan` prints it): a config
is within the tolerance by its measured / planned step ratio, judged per round and, over several
rounds, by the median of its ratios."""
import statistics

TOLERANCE = 0.15


def medians(rounds):
    """Per config, the measured / planned step ratio of each round (each its own calibration) and
    their median, which is what is judged against the tolerance."""
    lines = [f"{'hardware':<10}{'seq':>5}{'batch':>6}  ratios per round{'':>10}{'median':>8}{'<15%':>6}"]
    within = 0
    for k, row in enumerate(rounds[0]):
        ratios = [r[k]["measured_step_s"] / r[k]["planned_step_s"] for r in rounds]
        median = statistics.median(ratios)
        within += abs(median - 1) <= TOLERANCE
        lines.append(f"{row['hardware']:<10}{row['seq']:>5}{row['batch']:>6}  "
                     f"{' '.join(f'{x:.2f}' for x in ratios):<26}{median:>8.2f}"
                     f"{'yes' if abs(median - 1) <= TOLERANCE else 'NO':>6}")
    lines.append(f"{within} of {len(rounds[0])} within {TOLERANCE:.0%} by the median of {len(rounds)} rounds")
    return "\n".join(lines)


def row_line(r):
    """One measured config beside its plan, as the table prints it (the benchmark prints each as it ends)."""
    ratio = r["measured_step_s"] / r["planned_step_s"]
    return (f"{r['hardware']:<10}{r['seq']:>5}{r['batch']:>6}{r['planned_step_s']:>10.3f}{r['measured_step_s']:>10.3f}"
            f"{ratio:>7.2f}{'yes' if abs(ratio - 1) <= TOLERANCE else 'NO':>6}{r['planned_gb']:>9.2f}"
            f"{r['measured_gb']:>9.2f}{r['wall_s']:>8.0f}"
            + (f"{r['planned_comm_s']:>10.3f}{r['measured_comm_s']:>10.3f}" if r["measured_comm_s"] else ""))


def table(rows):
    head = (f"{'hardware':<10}{'seq':>5}{'batch':>6}{'plan s':>10}{'meas s':>10}{'ratio':>7}{'<15%':>6}"
            f"{'plan GB':>9}{'meas GB':>9}{'wall s':>8}{'plan ar s':>10}{'meas ar s':>10}")
    within = sum(abs(r["measured_step_s"] / r["planned_step_s"] - 1) <= TOLERANCE for r in rows)
    return "\n".join([head, *map(row_line, rows), f"{within} of {len(rows)} within {TOLERANCE:.0%} "
                      f"(calibration: {rows[0]['source'] if rows else '-'})"])
