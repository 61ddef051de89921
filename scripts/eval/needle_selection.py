#!/usr/bin/env python3
"""Why does page selection lose the needle? Quest's key min/max bound against the true attention.

For niah_single prompts (made by `longserve eval niah --emit-prompts`, wrapped in the model's chat
template as `--chat` wraps them, the true answer appended: teacher forcing), runs an independent
float32 numpy forward pass over gguf-py's dequantization of the GGUF file, and at every decode
position of the answer (the queries that produce the answer's 2nd..last tokens, which decode
steps with selection compute) measures, per layer and kv head:

  - needle mass: the share of the group's attention (mean over its query heads) on the pages
    that hold the needle's value tokens;
  - quest rank: the needle page's rank under longserve's quest score (kernels/cpu/page_select.cpp:
    per query head the bound sum_c max(q_c kmax_c, q_c kmin_c) over the page's post-RoPE keys,
    minus that head's best bound; the group takes the max over its query heads; the last page is
    always selected, so it is not a candidate);
  - maxlogit rank: the rank under the page's exact max over tokens of max_h q_h.k (what a perfect
    upper bound would give), and mass rank: under the true attention mass (the oracle);
  - coverage: the attention mass (mean over query heads) inside quest's selection of
    budget/page pages, and inside the oracle's.

  python3 scripts/eval/needle_selection.py --gguf SmolLM2-135M-Instruct.Q4_1.gguf \\
      --longserve build/longserve --lengths 2048,4096 --samples 3 --out docs/data/needle.json

Needs numpy, gguf and jinja2 (scripts/requirements.txt). Prints a summary; --out keeps the
per-(prompt, layer, head) numbers, --from-json summarizes such a file again without the forward
passes, and --pattern-out writes the median needle mass per (layer, kv head) as a DuoAttention
full_attention_heads.tsv (rows = layers, columns = kv heads) that `--head-pattern` reads: the
heads that retrieve the needle in the model's own attention, a retrieval score in the sense of
Wu et al.'s retrieval heads rather than `longserve calibrate`'s log-probability drop.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile

import jinja2
import numpy as np
import gguf

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures"))
from make_gguf_fixtures import gguf_model_weights, rms_norm  # noqa: E402


def tokenize(longserve: str, model: str, text: str) -> list[int]:
    out = subprocess.run([longserve, "tokenize", "--model", model, "--no-special-tokens",
                          "--text", text], capture_output=True, text=True, check=True).stdout
    return json.loads(out)


def chat_template(path: str) -> str:
    r = gguf.GGUFReader(path)
    return r.fields["tokenizer.chat_template"].contents()


def find_sub(seq: list[int], sub: list[int], end: int) -> int:
    for i in range(end - len(sub), -1, -1):
        if seq[i:i + len(sub)] == sub:
            return i
    return -1


def forward_capture(cfg, W, ids, q_from):
    """float32 forward; per layer the post-RoPE keys [kv, T, hd] and the queries of positions
    q_from.. [h, Tq, hd], and the attention probabilities of those queries [h, Tq, T]."""
    hidden, heads = cfg["hidden_size"], cfg["num_attention_heads"]
    kv_heads = cfg["num_key_value_heads"]
    hd = hidden // heads
    eps = cfg["rms_norm_eps"]
    inv_freq = 1.0 / cfg["rope_theta"] ** (np.arange(0, hd, 2, dtype=np.float64) / hd)
    T = len(ids)
    ang = np.concatenate([np.outer(np.arange(T, dtype=np.float64), inv_freq)] * 2, axis=-1)
    cos, sin = np.cos(ang).astype(np.float32), np.sin(ang).astype(np.float32)

    def rope(x):
        rot = np.concatenate([-x[..., hd // 2:], x[..., :hd // 2]], axis=-1)
        return x * cos + rot * sin

    x = W["model.embed_tokens.weight"][ids]
    rep = heads // kv_heads
    layers = []
    for l in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{l}."
        h = rms_norm(x, W[p + "input_layernorm.weight"], eps)
        q = rope((h @ W[p + "self_attn.q_proj.weight"].T).reshape(T, heads, hd).transpose(1, 0, 2))
        k = rope((h @ W[p + "self_attn.k_proj.weight"].T).reshape(T, kv_heads, hd).transpose(1, 0, 2))
        v = (h @ W[p + "self_attn.v_proj.weight"].T).reshape(T, kv_heads, hd).transpose(1, 0, 2)
        o = np.empty((heads, T, hd), dtype=np.float32)
        probs_tail = None
        # causal attention in row blocks; the answer queries form the last block
        blocks = [(b, min(q_from, b + 512)) for b in range(0, q_from, 512)] + [(q_from, T)]
        for b, e in blocks:
            for g in range(kv_heads):
                qs = q[g * rep:(g + 1) * rep, b:e]  # [rep, rows, hd]
                s = qs @ k[g, :e].T / math.sqrt(hd)
                s += np.triu(np.full((e - b, e), -np.inf, dtype=np.float32), b + 1)
                s = np.exp(s - s.max(-1, keepdims=True))
                s /= s.sum(-1, keepdims=True)
                o[g * rep:(g + 1) * rep, b:e] = s @ v[g, :e]
                if b == q_from:
                    if probs_tail is None:
                        probs_tail = np.zeros((heads, T - q_from, T), dtype=np.float32)
                    probs_tail[g * rep:(g + 1) * rep] = s
        layers.append({"k": k, "q": q[:, q_from:], "probs": probs_tail})
        x = x + o.transpose(1, 0, 2).reshape(T, heads * hd) @ W[p + "self_attn.o_proj.weight"].T
        h = rms_norm(x, W[p + "post_attention_layernorm.weight"], eps)
        gt = h @ W[p + "mlp.gate_proj.weight"].T
        u = h @ W[p + "mlp.up_proj.weight"].T
        x = x + ((gt / (1 + np.exp(-gt))) * u) @ W[p + "mlp.down_proj.weight"].T
    x = rms_norm(x, W["model.norm.weight"], eps)
    head = W.get("lm_head.weight", W["model.embed_tokens.weight"])
    logits_tail = x[q_from - 1:] @ head.T
    return layers, logits_tail


def rank_of(scores: np.ndarray, targets: list[int]) -> int:
    """1-based rank of the best target page among the scores (ties count against it)."""
    best = max(scores[t] for t in targets)
    return int((scores > best).sum() + (scores == best).sum())


def analyse(cfg, layers, t_abs, needle_pages, page, budget_pages):
    heads, kv_heads = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    rep = heads // kv_heads
    rows = []
    for l, L in enumerate(layers):
        for qi, t in enumerate(t_abs):
            n_tok = t + 1
            n_pages = (n_tok + page - 1) // page
            cand = n_pages - 1  # the last page is always selected
            if cand <= budget_pages - 1:
                continue  # everything selected
            for g in range(kv_heads):
                k = L["k"][g, :n_tok]  # [n, hd]
                pad = n_pages * page - n_tok
                kp = np.concatenate([k, np.full((pad, k.shape[1]), np.nan, np.float32)])
                kp = kp.reshape(n_pages, page, -1)
                kmax, kmin = np.nanmax(kp, 1), np.nanmin(kp, 1)  # [pages, hd]
                qs = L["q"][g * rep:(g + 1) * rep, qi]  # [rep, hd]
                bound = np.maximum(qs[:, None, :] * kmax[None], qs[:, None, :] * kmin[None]).sum(-1)
                quest = (bound - bound.max(1, keepdims=True)).max(0)  # [pages]
                logits = qs @ k.T  # [rep, n]
                lp = np.concatenate([logits, np.full((rep, pad), -np.inf, np.float32)], 1)
                maxlogit = lp.reshape(rep, n_pages, page).max(2).max(0)
                pr = L["probs"][g * rep:(g + 1) * rep, qi, :n_tok]  # [rep, n]
                pp = np.concatenate([pr, np.zeros((rep, pad), np.float32)], 1)
                mass = pp.reshape(rep, n_pages, page).sum(2).mean(0)  # [pages]
                c = slice(0, cand)
                # alternatives: each query head's own bound ranking, the group's bounds summed
                # (no per-head normalization), and the per-head maxima without normalization
                own = [rank_of(bound[h, c], needle_pages) for h in range(rep)]
                summed = rank_of(bound.sum(0)[c], needle_pages)
                raw_max = rank_of(bound.max(0)[c], needle_pages)
                head_mass = pp.reshape(rep, n_pages, page).sum(2)[:, needle_pages].sum(1)
                take = budget_pages - 1
                q_sel = np.argsort(-quest[c], kind="stable")[:take]
                o_sel = np.argsort(-mass[c], kind="stable")[:take]
                rows.append({
                    "layer": l, "kv_head": g, "query": qi,
                    "needle_mass": float(mass[needle_pages].sum()),
                    "quest_rank": rank_of(quest[c], needle_pages),
                    "maxlogit_rank": rank_of(maxlogit[c], needle_pages),
                    "mass_rank": rank_of(mass[c], needle_pages),
                    "candidates": cand,
                    "quest_coverage": float(mass[q_sel].sum() + mass[-1]),
                    "oracle_coverage": float(mass[o_sel].sum() + mass[-1]),
                    "last_page_mass": float(mass[-1]),
                    "sink_mass": float(mass[0]),
                    "sink_quest_rank": rank_of(quest[c], [0]),
                    "sink_mass_rank": rank_of(mass[c], [0]),
                    "quest_rank_per_qhead": own,
                    "needle_mass_per_qhead": [float(x) for x in head_mass],
                    "quest_rank_summed": summed,
                    "quest_rank_unnormalized_max": raw_max,
                    "bound_best_minus_needle_per_qhead": [
                        float(bound[h, c].max() - bound[h, needle_pages].max()) for h in range(rep)],
                })
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gguf", required=True)
    ap.add_argument("--longserve", default="build/longserve")
    ap.add_argument("--lengths", default="2048,4096")
    ap.add_argument("--depths", default="0.25,0.5,0.75")
    ap.add_argument("--samples", type=int, default=3)
    ap.add_argument("--page-tokens", type=int, default=16)
    ap.add_argument("--token-budget", type=int, default=1024)
    ap.add_argument("--out", default="")
    ap.add_argument("--from-json", default="", help="summarize an earlier --out file instead")
    ap.add_argument("--pattern-out", default="", help="write needle mass per head as a TSV")
    args = ap.parse_args()
    budget_pages = args.token_budget // args.page_tokens
    if args.from_json:
        with open(args.from_json) as f:
            saved = json.load(f)
        cfg = saved.get("model") or {  # files written before the config was kept
            "num_hidden_layers": 1 + max(r["layer"] for r in saved["rows"]),
            "num_key_value_heads": 1 + max(r["kv_head"] for r in saved["rows"])}
        summarize(saved["rows"], budget_pages, cfg)
        if args.pattern_out:
            write_pattern(args.pattern_out, saved["rows"], cfg)
        return 0

    cfg, W = gguf_model_weights(args.gguf)
    W = {k: v.astype(np.float32) for k, v in W.items()}
    template = jinja2.Environment(trim_blocks=True, lstrip_blocks=True).from_string(
        chat_template(args.gguf))
    with tempfile.TemporaryDirectory() as tmp:
        jl = os.path.join(tmp, "p.jsonl")
        subprocess.run([args.longserve, "eval", "niah", "--model", args.gguf, "--tasks",
                        "niah_single", "--lengths", args.lengths, "--depths", args.depths,
                        "--samples", str(args.samples), "--emit-prompts", jl, "--emit-only"],
                       check=True, capture_output=True)
        prompts = [json.loads(line) for line in open(jl)]

    all_rows, per_prompt = [], []
    for p in prompts:
        prefix = p["chat_answer"][: -len(p["answer"]) - 1]
        text = template.render(messages=[{"role": "user", "content": p["user_message"]}],
                               add_generation_prompt=True) + prefix
        ids = tokenize(args.longserve, args.gguf, text)
        ans = tokenize(args.longserve, args.gguf, " " + p["answer"])
        full = ids + ans
        needle = tokenize(args.longserve, args.gguf, p["answer"])
        # the needle's value in the context: the digits (SmolLM2 splits digits) before the prompt end
        at = find_sub(full, needle, len(ids))
        if at < 0:
            print(f"{p['id']}: needle tokens not found; skipped", file=sys.stderr)
            continue
        pages = sorted({i // args.page_tokens for i in range(at, at + len(needle))})
        # decode queries: the positions of the answer tokens that a decode step feeds
        q_from = len(ids)
        layers, logits = forward_capture(cfg, W, full, q_from)
        pred = logits.argmax(-1)  # predictions of the answer tokens (teacher forced)
        correct = int((pred[: len(ans)] == np.array(ans)).sum())
        t_abs = list(range(q_from, len(full) - 1))
        rows = analyse(cfg, layers, t_abs, pages, args.page_tokens, budget_pages)
        for r in rows:
            r["prompt"] = p["id"]
        all_rows += rows
        per_prompt.append({"id": p["id"], "tokens": len(full), "needle_at": at, "needle_pages": pages,
                           "dense_answer_tokens_correct": correct, "answer_tokens": len(ans)})
        print(f"{p['id']}: {len(full)} tokens, needle at {at} (pages {pages}), dense teacher-forced "
              f"{correct}/{len(ans)} answer tokens", file=sys.stderr, flush=True)

    summarize(all_rows, budget_pages, cfg)
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"config": vars(args), "model": cfg, "prompts": per_prompt,
                       "rows": all_rows}, f)
    if args.pattern_out:
        write_pattern(args.pattern_out, all_rows, cfg)
    return 0


def write_pattern(path, rows, cfg):
    L, G = cfg["num_hidden_layers"], cfg["num_key_value_heads"]
    with open(path, "w") as f:
        for l in range(L):
            vals = []
            for g in range(G):
                v = [r["needle_mass"] for r in rows if r["layer"] == l and r["kv_head"] == g]
                vals.append(float(np.median(v)) if v else 0.0)
            f.write("\t".join(f"{x:.6e}" for x in vals) + "\n")
    print(f"wrote {path}", file=sys.stderr)


def summarize(rows, budget_pages, cfg):
    take = budget_pages - 1
    L, G = cfg["num_hidden_layers"], cfg["num_key_value_heads"]
    print(f"\nper (layer, kv head), medians over prompts and answer positions; selected = needle "
          f"page among the top {take} candidates\n")
    print("| layer | kv head | needle mass | mass rank | maxlogit rank | quest rank | quest selects "
          "needle | quest coverage | oracle coverage |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for l in range(L):
        for g in range(G):
            rs = [r for r in rows if r["layer"] == l and r["kv_head"] == g]
            if not rs:
                continue
            med = lambda k: float(np.median([r[k] for r in rs]))  # noqa: E731
            sel = np.mean([r["quest_rank"] <= take for r in rs])
            print(f"| {l} | {g} | {med('needle_mass'):.3f} | {med('mass_rank'):.0f} | "
                  f"{med('maxlogit_rank'):.0f} | {med('quest_rank'):.0f} | {sel:.2f} | "
                  f"{med('quest_coverage'):.3f} | {med('oracle_coverage'):.3f} |")
    heavy = [r for r in rows if r["needle_mass"] >= 0.1]
    print(f"\nrows with needle mass >= 0.1 (retrieval): {len(heavy)} of {len(rows)}; quest selects the "
          f"needle in {np.mean([r['quest_rank'] <= take for r in heavy]) if heavy else float('nan'):.2f}"
          f", a max-logit ranking would in "
          f"{np.mean([r['maxlogit_rank'] <= take for r in heavy]) if heavy else float('nan'):.2f}")
    print(f"all rows: quest selects the needle in {np.mean([r['quest_rank'] <= take for r in rows]):.2f}, "
          f"median quest coverage {np.median([r['quest_coverage'] for r in rows]):.3f}, "
          f"oracle {np.median([r['oracle_coverage'] for r in rows]):.3f}")


if __name__ == "__main__":
    sys.exit(main())
