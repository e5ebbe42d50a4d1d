"""The manifest of a prepared dataset, and the summary table printed after preparing.

Manifest (manifest.json, written last, so its presence means the dataset is complete):
  documents   in / kept / train / val / dropped{reason: n} / split_for_length; in == kept + dropped.
              Units are documents as read (a jsonl line, a parquet row, a .txt file); a document
              longer than clean.max_chars enters as several pieces, counted as documents too.
  train, val  rows, tokens (document tokens incl. EOD), padding tokens and fraction, truncated
              documents (split across rows), shards [{file, rows, tokens, bytes, sha256, index_bytes,
              index_sha256}].
  tokenizer   path (relative to the cache when inside it, else absolute), sha256, vocab_size,
              eod_id, pad_id, bos_id, unk_id.
  layout      how a row is stored and how the loader turns it into inputs/labels.
  keys        the cache key and the hashes of the inputs and config it is made of.
"""
from typing import Dict

from pretrain.config.errors import PretrainDataError

LAYOUT = ("row = input_ids int32[seq_length+1] + seg_lens int32[k]: the lengths of the k document "
          "pieces in the row, in order; the rest is pad_id. Each document ends with eod_id. Training "
          "takes inputs = row[:-1], labels = row[1:]; a label counts only inside its own document.")


def check(manifest: Dict) -> None:
    """The reconciliation every manifest must satisfy before it is published."""
    d = manifest["documents"]
    if d["in"] != d["kept"] + sum(d["dropped"].values()) or d["kept"] != d["train"] + d["val"]:
        raise PretrainDataError(f"dataset {manifest['name']}: documents do not reconcile ({d}); "
                                f"this is a bug in pretrain.data, please report it")


def summary_table(prepared: Dict, val_fraction: float = 0.0) -> str:
    """One line per prepared dataset: documents, tokens, padding, truncation, shards, cache; a note
    for a dataset left without validation rows although `val_fraction` (data.val_fraction) asks for
    them, which training then needs train.eval_every=0 for."""
    head = (f"{'dataset':<12} {'docs in':>8} {'kept':>8} {'dropped':>8} {'train tok':>11} {'val tok':>9} "
            f"{'pad %':>6} {'trunc':>6} {'shards':>6}  cache")
    lines = [head, "-" * len(head)]
    for name, p in prepared.items():
        m = p.manifest
        d, t, v = m["documents"], m["train"], m["val"]
        dropped = sum(d["dropped"].values())
        lines.append(f"{name:<12} {d['in']:>8} {d['kept']:>8} {dropped:>8} {t['tokens']:>11,} "
                     f"{v['tokens']:>9,} {100 * t['padding_fraction']:>6.2f} {t['truncated_documents']:>6} "
                     f"{len(t['shards']):>6}  {'reused' if p.reused else 'built'}: {p.dir}")
    reasons: Dict[str, int] = {}
    for p in prepared.values():
        for r, n in p.manifest["documents"]["dropped"].items():
            reasons[r] = reasons.get(r, 0) + n
    if reasons:
        lines.append("dropped: " + ", ".join(f"{r} {n}" for r, n in sorted(reasons.items())))
    empty = [name for name, p in prepared.items() if not p.manifest["val"]["rows"]]
    if val_fraction > 0 and empty:
        lines.append(f"note: {', '.join(empty)}: no validation rows (too little data for data.val_fraction="
                     f"{val_fraction}); training validates only with more data, train.eval_every=0 trains "
                     f"without validation")
    first = next(iter(prepared.values()), None)
    if first:
        tok = first.manifest["tokenizer"]
        lines.append(f"tokenizer: {first.tokenizer_path} (vocab {tok['vocab_size']}, eod id {tok['eod_id']}, "
                     f"pad id {tok['pad_id']})")
    return "\n".join(lines)
