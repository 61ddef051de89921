#!/usr/bin/env python3
"""Train longserve's bundled tiny long-context model: a ~11.5M-parameter Llama (GQA, RoPE 5e5, 32K
positions) with its own byte-level BPE tokenizer, on RULER-style retrieval tasks generated here
(scripts/model/retrieval_tasks.py), in one call of at most ~8 minutes on one H100/H200.

    python3 scripts/model/train_tiny.py --out models/tiny-longctx --report train_report.json
    python3 scripts/model/train_tiny.py --smoke --out /tmp/tiny --report /tmp/tiny.json  # CPU, 1 min
    python3 scripts/model/train_tiny.py --emit-only --tokenizer-dir models/tiny-longctx \\
        --emit-eval-jsonl niah.jsonl                                               # prompts only

docs/training.md documents the data formats, the plan and the expected accuracies.
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import copy
import json
import math
import multiprocessing as mp
import os
import shutil
import signal
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import retrieval_tasks as rt  # noqa: E402
import tokenizer_recipes as recipes  # noqa: E402

# Llama-3 Instruct chat format: BOS, then per message a role header, the trimmed content and
# <|eot_id|>.
CHAT_TEMPLATE = (
    "{{- bos_token }}{%- for message in messages %}{{- '<|start_header_id|>' + message['role'] + "
    "'<|end_header_id|>\\n\\n' + message['content'] | trim + '<|eot_id|>' }}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}"
    "{%- endif %}")

MODEL_PRESETS = {
    # 11.54M parameters (2.1M in the tied embedding): 23.1 MB in bf16.
    "full": dict(hidden_size=512, num_hidden_layers=6, num_attention_heads=8, num_key_value_heads=4,
                 head_dim=64, intermediate_size=512),
    "smoke": dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                  head_dim=16, intermediate_size=128),
}

# Curriculum: (end of stage as a fraction of the steps, {row length: probability}, longest
# document (None: the row), probability that a row is one document). Short documents first, where
# attention to the needle is strong enough for the retrieval circuit to form.
STAGES = (
    (0.15, {1024: 1.0}, 384, 0.0),
    (0.35, {1024: 0.4, 2048: 0.6}, None, 0.3),
    (0.55, {1024: 0.1, 2048: 0.3, 4096: 0.6}, None, 0.5),
    (0.78, {2048: 0.2, 4096: 0.4, 8192: 0.4}, None, 0.5),
    (1.00, {2048: 0.1, 4096: 0.3, 8192: 0.3, 16384: 0.3}, None, 0.5),
)

STOP = {"signal": None}


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--out", help="Hugging Face model directory to write")
    p.add_argument("--report", help="JSON report path")
    p.add_argument("--emit-eval-jsonl", help="write the evaluation prompts as JSONL")
    p.add_argument("--emit-only", action="store_true", help="only write --emit-eval-jsonl")
    p.add_argument("--tokenizer-dir", help="with --emit-only: use this directory's tokenizer.json")
    p.add_argument("--smoke", action="store_true", help="tiny CPU settings for an end-to-end check")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--time-budget-s", type=float, default=None,
                   help="training-loop wall budget incl. the speed probe (360; smoke 40)")
    p.add_argument("--deadline-s", type=float, default=None,
                   help="wall budget of the whole run; training stops early to keep eval+save "
                        "inside it (480; smoke 300)")
    p.add_argument("--max-steps", type=int, default=0,
                   help="fix the number of steps (0: plan it from a speed probe and the budget)")
    p.add_argument("--tokens-per-step", type=int, default=None, help="65536 (smoke 2048)")
    p.add_argument("--max-context", type=int, default=None, help="longest row (16384; smoke 512)")
    p.add_argument("--lr", type=float, default=6e-4,
                   help="peak; at 2e-3 the copy circuit did not form until the decay passed ~8e-4")
    p.add_argument("--min-lr-frac", type=float, default=0.1)
    p.add_argument("--warmup-frac", type=float, default=0.03)
    p.add_argument("--weight-decay", type=float, default=0.1)
    p.add_argument("--lm-weight", type=float, default=0.1, help="weight of the filler LM loss")
    p.add_argument("--lm-fraction", type=float, default=0.25,
                   help="fraction of non-answer positions in the LM loss")
    p.add_argument("--chat-fraction", type=float, default=0.2)
    p.add_argument("--echo-prob", type=float, default=0.8,
                   help="fraction of training documents with echo-needle pairs")
    p.add_argument("--repeat-prob", type=float, default=0.7,
                   help="fraction of training documents with repeated filler runs")
    p.add_argument("--repeat-weight", type=float, default=0.5,
                   help="weight of the repeated-filler (induction) loss")
    p.add_argument("--vocab-size", type=int, default=4096)
    p.add_argument("--pool-sentences", type=int, default=None,
                   help="filler pool (100000; smoke 5000)")
    p.add_argument("--workers", type=int, default=None, help="data processes (0: in-process)")
    p.add_argument("--eval-lengths", default=None, help="1024,2048,4096,8192,16384 (smoke 256,512)")
    p.add_argument("--eval-samples", type=int, default=None,
                   help="prompts per (task, length); niah_single spreads them over the depth grid "
                        "(44; smoke 3)")
    p.add_argument("--eval-depths", type=int, default=None, help="depth grid points (11; smoke 3)")
    p.add_argument("--save-every-s", type=float, default=90.0)
    p.add_argument("--deterministic", action="store_true",
                   help="torch.use_deterministic_algorithms (slower; see docs/training.md)")
    p.add_argument("--device", default=None, help="cuda or cpu (default: cuda if available)")
    a = p.parse_args(argv)
    defaults = dict(time_budget_s=(40, 360), deadline_s=(300, 480), tokens_per_step=(2048, 65536),
                    max_context=(512, 16384), pool_sentences=(5000, 100000),
                    eval_lengths=("256,512", "1024,2048,4096,8192,16384"), eval_samples=(3, 44),
                    eval_depths=(3, 11))
    for name, (smoke, full) in defaults.items():
        if getattr(a, name) is None:
            setattr(a, name, smoke if a.smoke else full)
    a.eval_lengths = [int(x) for x in str(a.eval_lengths).split(",")]
    if not a.emit_only and not a.out:
        p.error("--out is required unless --emit-only")
    if a.emit_only and not a.emit_eval_jsonl:
        p.error("--emit-only needs --emit-eval-jsonl")
    return a


# --- tokenizer and data -----------------------------------------------------------------------


def make_tokenizer(args):
    from tokenizers import Tokenizer

    if args.tokenizer_dir:
        return Tokenizer.from_file(os.path.join(args.tokenizer_dir, "tokenizer.json"))
    corpus = rt.tokenizer_corpus(args.seed) + recipes.default_corpus()
    return recipes.build_tokenizer("llama3", corpus, args.vocab_size)


def check_tokenization(tok, enc: rt.Encoder, pool: rt.FillerPool, seed: int) -> int:
    """Token-level assembly must equal tokenizing the text (raw prompt, and the chat template
    rendered as transformers renders it); otherwise training would not match evaluation."""
    import jinja2

    env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True)
    template = env.from_string(CHAT_TEMPLATE)
    checked = 0
    for t_idx, task in enumerate(rt.TASKS):
        for chat in (False, True):
            for i, length in enumerate((200, 700, 3000)):
                rng = np.random.default_rng([seed, 0xC4EC, t_idx, i, int(chat)])
                doc = rt.build_doc(task, rng, enc, pool, max_prompt_tokens=length, chat=chat,
                                   params=rt.sample_train_params(task, rng, length),
                                   with_text=True)
                if chat:
                    text = template.render(messages=[{"role": "user", "content": doc.user_message}],
                                           add_generation_prompt=True,
                                           bos_token="<|begin_of_text|>")
                    want = tok.encode(text + doc.chat_answer, add_special_tokens=False).ids
                    want.append(enc.eot_id)
                else:
                    want = tok.encode(doc.prompt + " " + doc.answer).ids + [enc.eos_id]
                got = [int(x) for x in np.concatenate([doc.prompt_ids, doc.answer_ids])]
                if got != want:
                    first = next(k for k in range(min(len(got), len(want))) if got[k] != want[k])
                    raise RuntimeError(
                        f"token-level assembly differs from the tokenizer for {task} chat={chat} "
                        f"at token {first}: {tok.decode(got[max(0, first - 5):first + 5])!r}")
                for b, e in doc.copy_spans:  # echo values are the digits after "... is"
                    if not tok.decode(got[b:e]).strip().isdigit():
                        raise RuntimeError(f"bad echo span {tok.decode(got[b - 3:e + 1])!r}")
                for b, e in doc.repeat_spans:  # a repeated span occurs earlier too
                    text = tok.decode(got[b:e])
                    if tok.decode(got[:b]).count(text) < 1:
                        raise RuntimeError(f"repeated span {text!r} has no earlier copy")
                checked += 1
    return checked


class Prefetcher:
    """Builds training batches ahead of the GPU in worker processes (or inline with workers=0).
    A batch depends only on (seed, stream, index), never on timing or on the worker."""

    def __init__(self, tok_json: str, args) -> None:
        self.ahead = max(2, 2 * args.workers)
        self.futures: dict[tuple, cf.Future] = {}
        if args.workers > 0:
            self.ex = cf.ProcessPoolExecutor(
                args.workers, mp_context=mp.get_context("spawn"), initializer=rt.init_worker,
                initargs=(tok_json, args.pool_sentences, args.seed))
        else:
            self.ex = None
            rt.init_worker(tok_json, args.pool_sentences, args.seed)

    def get(self, job: dict, upcoming: list[dict]) -> dict:
        key = (job["stream"], job["index"])
        if self.ex is None:
            return rt.worker_rows(job)
        for j in [job] + upcoming[: self.ahead]:
            k = (j["stream"], j["index"])
            if k not in self.futures:
                self.futures[k] = self.ex.submit(rt.worker_rows, j)
        return self.futures.pop(key).result()

    def close(self) -> None:
        if self.ex is not None:
            for f in self.futures.values():
                f.cancel()
            self.ex.shutdown(wait=False, cancel_futures=True)


def stage_at(progress: float):
    return next(st for st in STAGES if progress < st[0] or st is STAGES[-1])


def stage_mix(progress: float, max_context: int) -> dict[int, float]:
    out: dict[int, float] = {}
    for r, w in stage_at(progress)[1].items():
        out[min(r, max_context)] = out.get(min(r, max_context), 0.0) + w
    return out


def make_job(args, step: int, total_steps: int, stream: int = 0x7A1B, row_tokens: int = 0) -> dict:
    """The recipe of one step's batch: a pure function of (seed, step, total_steps)."""
    progress = step / max(1, total_steps)
    _, _, doc_max, whole_row_prob = stage_at(progress)
    if not row_tokens:
        mix = stage_mix(progress, args.max_context)
        rng = np.random.default_rng([args.seed, 0x5EED, step])
        rows = sorted(mix)
        row_tokens = rows[int(rng.choice(len(rows), p=[mix[r] for r in rows]))]
    return dict(seed=args.seed, stream=stream, index=step, row_tokens=row_tokens,
                num_rows=max(1, args.tokens_per_step // row_tokens),
                doc_min_tokens=128 if row_tokens <= 2048 else row_tokens // 16,
                doc_max_tokens=min(row_tokens, doc_max or row_tokens),
                whole_row_prob=whole_row_prob, echo_prob=args.echo_prob,
                repeat_prob=args.repeat_prob,
                chat_fraction=args.chat_fraction, lm_fraction=args.lm_fraction)


def lr_at(step: int, total: int, args) -> float:
    warmup = max(10, int(args.warmup_frac * total))
    if step < warmup:
        return args.lr * (step + 1) / warmup
    t = min(1.0, (step - warmup) / max(1, total - warmup))
    return args.lr * (args.min_lr_frac + (1 - args.min_lr_frac) * 0.5 * (1 + math.cos(math.pi * t)))


# --- model, loss, steps -----------------------------------------------------------------------


def make_model(args, vocab_size: int, enc: rt.Encoder):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(args.seed)
    cfg = LlamaConfig(
        vocab_size=vocab_size, max_position_embeddings=32768, rope_theta=500000.0,
        rms_norm_eps=1e-5, tie_word_embeddings=True, hidden_act="silu",
        bos_token_id=enc.bos_id, eos_token_id=[enc.eos_id, enc.eot_id], pad_token_id=enc.eos_id,
        attn_implementation="sdpa", **MODEL_PRESETS["smoke" if args.smoke else "full"])
    return LlamaForCausalLM(cfg)


def batch_loss(model, ids, masks: dict, counts: dict, weights: dict):
    """Loss of one micro-batch: mean CE over answer and echo-value tokens, plus weighted mean CEs
    over repeated filler and sampled filler positions, normalised by the whole step's counts so
    that splitting a step into micro-batches does not change the gradient.
    Returns (loss, {mask: CE sum})."""
    import torch.nn.functional as F

    hidden = model.model(input_ids=ids, use_cache=False).last_hidden_state  # [B, R, hidden]
    sel = (masks["answer"] | masks["copy"] | masks["repeat"] | masks["lm"])[:, :-1]  # [B, R-1]
    logits = model.lm_head(hidden[:, :-1][sel]).float()  # [num_selected, vocab]
    ce = F.cross_entropy(logits, ids[:, 1:][sel], reduction="none")  # [num_selected]
    sums = {k: ce[m[:, :-1][sel]].sum() for k, m in masks.items()}
    n_task = max(1, counts["answer"] + counts["copy"])
    loss = (sums["answer"] + sums["copy"]) / n_task + sum(
        w * sums[k] / max(1, counts[k]) for k, w in weights.items())
    return loss, {k: v.detach() for k, v in sums.items()}


class Trainer:
    def __init__(self, model, args, device) -> None:
        import torch

        self.torch = torch
        self.model, self.args, self.device = model, args, device
        decay = [p for n, p in model.named_parameters() if p.ndim >= 2 and "embed" not in n]
        no_decay = [p for n, p in model.named_parameters() if p.ndim < 2 or "embed" in n]
        self.opt = torch.optim.AdamW(
            [{"params": decay, "weight_decay": args.weight_decay},
             {"params": no_decay, "weight_decay": 0.0}],
            lr=args.lr, betas=(0.9, 0.95), eps=1e-8, fused=device.type == "cuda")
        self.micro_rows: dict[int, int] = {}  # row length -> rows per micro-batch that fit
        self.loss_weights = {"repeat": args.repeat_weight, "lm": args.lm_weight}

    def _autocast(self):
        t = self.torch
        if self.device.type == "cuda":
            return t.autocast("cuda", dtype=t.bfloat16)
        return t.autocast("cpu", enabled=False)

    def grads(self, batch: dict) -> dict[str, float]:
        """Forward and backward of one step in micro-batches; halves the micro-batch on OOM and
        retries the same data. Returns the mean CE per mask (answer, copy, repeat, lm)."""
        t = self.torch
        ids = t.from_numpy(batch["ids"].astype(np.int64)).to(self.device, non_blocking=True)
        masks = {k: t.from_numpy(batch[k + "_mask"]).to(self.device, non_blocking=True)
                 for k in ("answer", "copy", "repeat", "lm")}
        counts = {k: int(batch[k + "_mask"][:, :-1].sum()) for k in masks}
        rows, row_tokens = ids.shape
        while True:
            mb = min(rows, self.micro_rows.get(row_tokens, rows))
            try:
                self.opt.zero_grad(set_to_none=True)
                total = {k: 0.0 for k in masks}
                for s in range(0, rows, mb):
                    with self._autocast():
                        loss, sums = batch_loss(self.model, ids[s:s + mb],
                                                {k: m[s:s + mb] for k, m in masks.items()},
                                                counts, self.loss_weights)
                    loss.backward()
                    total = {k: total[k] + sums[k] for k in total}
                self.micro_rows[row_tokens] = mb
                return {k: float(total[k]) / max(1, counts[k]) for k in total}
            except t.OutOfMemoryError:
                self.opt.zero_grad(set_to_none=True)
                t.cuda.empty_cache()
                if mb == 1:
                    raise
                self.micro_rows[row_tokens] = mb // 2
                log(f"OOM at {mb} rows x {row_tokens} tokens: micro-batch -> {mb // 2}")

    def step(self, batch: dict, lr: float) -> dict:
        ce = self.grads(batch)
        norm = float(self.torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0))
        skipped = not math.isfinite(norm)
        if skipped:  # a non-finite step is dropped rather than poisoning the weights
            self.opt.zero_grad(set_to_none=True)
        else:
            for g in self.opt.param_groups:
                g["lr"] = lr
            self.opt.step()
        return {**ce, "grad_norm": norm, "skipped": skipped}

    def sync(self) -> None:
        if self.device.type == "cuda":
            self.torch.cuda.synchronize()


def probe_speed(trainer: Trainer, prefetch: Prefetcher, args) -> dict[int, float]:
    """Seconds per step for each row length, measured with forward+backward only (the weights do
    not change); also finds the micro-batch that fits."""
    lengths = sorted({min(r, args.max_context) for st in STAGES for r in st[1]})
    out = {}
    for i, r in enumerate(lengths):
        batch = prefetch.get(make_job(args, i, 1, stream=0x960BE, row_tokens=r), [])
        times = []
        for _ in range(2):
            trainer.sync()
            t0 = time.perf_counter()
            trainer.grads(batch)
            trainer.sync()
            times.append(time.perf_counter() - t0)
        trainer.opt.zero_grad(set_to_none=True)
        out[r] = times[-1] + 0.004  # + the optimizer step
        log(f"probe: rows of {r} tokens: {out[r] * 1000:.0f} ms/step "
            f"({args.tokens_per_step / out[r] / 1e3:.0f}K tok/s), micro-batch "
            f"{trainer.micro_rows.get(r)} rows")
    return out


def plan_steps(step_s: dict[int, float], budget_s: float, args) -> tuple[int, float]:
    """Most steps whose expected time (curriculum mix x measured step time) fits the budget, less
    6% for the monitor evals and periodic saves (an H100 run planned without it stopped at 98%)."""
    grid = np.linspace(0, 1, 201)[:-1] + 1 / 400
    mean = float(np.mean([sum(w * step_s[r] for r, w in stage_mix(p, args.max_context).items())
                          for p in grid]))
    return max(10, int(0.94 * budget_s / mean)), mean


def train_loop(args, trainer: Trainer, prefetch: Prefetcher, total_steps: int, train_start: float,
               train_end: float, save, monitor) -> dict:
    """Runs the planned steps until done, out of time or signalled; saves every save_every_s and
    runs the monitor (a small teacher-forced eval) at every tenth of the plan (at least 10 steps
    apart)."""
    step, tokens_seen, last_save, curve, monitors, n_skipped = 0, 0, time.time(), [], [], 0
    data_wait_s, grad_norm, row_tokens = 0.0, 0.0, 0
    win_t, win_tokens, win = time.time(), 0, {"answer": [], "copy": [], "repeat": [], "lm": []}

    def log_window() -> None:
        nonlocal win_t, win_tokens, win
        trainer.sync()
        entry = {"step": step, "elapsed_s": round(time.time() - train_start, 1),
                 "row_tokens": row_tokens, "lr": lr_at(step - 1, total_steps, args),
                 "tok_per_s": round(win_tokens / (time.time() - win_t)),
                 **{f"{k}_ce": round(float(np.mean(v)), 4) for k, v in win.items()}}
        curve.append(entry)
        log(f"step {step}/{total_steps} R={row_tokens} answer_ce {entry['answer_ce']:.3f}"
            f" copy_ce {entry['copy_ce']:.3f} repeat_ce {entry['repeat_ce']:.3f}"
            f" lm_ce {entry['lm_ce']:.3f} lr {entry['lr']:.2e}"
            f" {entry['tok_per_s'] / 1e3:.0f}K tok/s grad_norm {grad_norm:.2f}"
            f" data_wait {data_wait_s:.1f}s")
        win_t, win_tokens, win = time.time(), 0, {k: [] for k in win}

    monitor_every = max(10, total_steps // 10)
    while step < total_steps:
        if STOP["signal"] is not None or time.time() > train_end:
            log(f"stopping at step {step}/{total_steps}: "
                f"{'signal' if STOP['signal'] is not None else 'time budget'}")
            break
        job = make_job(args, step, total_steps)
        upcoming = [make_job(args, s, total_steps)
                    for s in range(step + 1, min(total_steps, step + 1 + prefetch.ahead))]
        t_wait = time.time()
        batch = prefetch.get(job, upcoming)
        data_wait_s += time.time() - t_wait
        stats = trainer.step(batch, lr_at(step, total_steps, args))
        n_skipped += stats["skipped"]
        grad_norm, row_tokens = stats["grad_norm"], job["row_tokens"]
        tokens_seen += batch["ids"].size
        win_tokens += batch["ids"].size
        for k in win:
            win[k].append(stats[k])
        step += 1
        if step % 10 == 0 or step == total_steps:
            log_window()
        if step % monitor_every == 0 or step == total_steps:
            m = {"step": step, **monitor()}
            monitors.append(m)
            log(f"monitor (teacher-forced exact match): {m}")
            win_t = time.time()
        if time.time() - last_save > args.save_every_s:
            save()
            last_save = win_t = time.time()
    if win["answer"]:
        log_window()
    return {"steps": step, "planned_steps": total_steps, "tokens": tokens_seen,
            "seconds": round(time.time() - train_start, 1), "skipped_steps": n_skipped,
            "data_wait_s": round(data_wait_s, 1),
            "curve": curve, "monitor": monitors, "stopped_by_signal": STOP["signal"] is not None}


# --- evaluation -------------------------------------------------------------------------------


def terminator_ids(tok, enc: rt.Encoder) -> set[int]:
    """Tokens that end an answer the way the harness cuts it: end of text/turn or a newline."""
    ids = {enc.eos_id, enc.eot_id}
    for i in tok.get_vocab().values():
        if tok.decode([i]).startswith("\n"):
            ids.add(i)
    return ids


def teacher_forced(model, docs: list[rt.Doc], device, stop_ids: set[int], batch_tokens: int,
                   deadline: float = float("inf")) -> list[dict]:
    """Greedy exact match without a decode loop: greedy decoding reproduces the answer iff the
    argmax at every answer position, fed the gold prefix, is the gold token, and the argmax after
    the last item ends the answer (end id or a newline token). Also per-item correctness."""
    import torch

    results: list[dict | None] = [None] * len(docs)
    order = sorted(range(len(docs)), key=lambda i: len(docs[i].prompt_ids))
    i = 0
    while i < len(order):
        if time.time() > deadline:
            break
        n = 1
        while (i + n < len(order) and (n + 1) * (len(docs[order[i + n]].prompt_ids) +
                                                  len(docs[order[i + n]].answer_ids) + 64)
               <= batch_tokens):
            n += 1
        group = [order[k] for k in range(i, i + n)]
        width = max(len(docs[g].prompt_ids) + len(docs[g].answer_ids) for g in group)
        # [len(group), width] int64: prompt + gold answer, right-padded with the end id (causal,
        # so padding never reaches the positions that are scored)
        ids = np.full((len(group), width), docs[group[0]].answer_ids[-1], np.int64)
        for r, g in enumerate(group):
            full = np.concatenate([docs[g].prompt_ids, docs[g].answer_ids])
            ids[r, :len(full)] = full
        with torch.no_grad():
            hidden = model.model(input_ids=torch.from_numpy(ids).to(device),
                                 use_cache=False).last_hidden_state  # [len(group), width, hidden]
            for r, g in enumerate(group):
                d = docs[g]
                p0 = len(d.prompt_ids) - 1
                logits = model.lm_head(hidden[r, p0:p0 + len(d.answer_ids)])
                pred = logits.argmax(-1).cpu().numpy()
                ok = pred[:-1] == d.answer_ids[:-1]
                exact = bool(ok.all()) and int(pred[-1]) in stop_ids
                items = [bool(ok[b:e].all()) for b, e in d.item_spans]
                results[g] = {"exact": exact, "item_acc": float(np.mean(items))}
        i += n
    return results


def summarize(entries: list[tuple[str, int, rt.Doc]], results: list[dict | None]) -> dict:
    table: dict = {}
    grid: dict = {}
    for (doc_id, length, doc), res in zip(entries, results):
        if res is None:
            continue
        cell = table.setdefault(doc.task, {}).setdefault(str(length), [0, 0.0, 0])
        cell[0] += res["exact"]
        cell[1] += res["item_acc"]
        cell[2] += 1
        if doc.task == "niah_single":
            g = grid.setdefault(str(length), {}).setdefault(f"{doc.depth:.2f}", [0, 0])
            g[0] += res["exact"]
            g[1] += 1
    acc = {t: {L: {"exact": c[0] / c[2], "item_acc": c[1] / c[2], "n": c[2]}
               for L, c in cells.items()} for t, cells in table.items()}
    heat = {L: {d: v[0] / v[1] for d, v in cells.items()} for L, cells in grid.items()}
    return {"accuracy": acc, "niah_depth_grid": heat}


def format_table(acc: dict) -> str:
    lengths = sorted({int(L) for cells in acc.values() for L in cells})
    lines = ["task".ljust(16) + "".join(f"{L:>8}" for L in lengths)]
    for task, cells in acc.items():
        lines.append(task.ljust(16) + "".join(
            f"{cells[str(L)]['exact']:8.2f}" if str(L) in cells else "       -" for L in lengths))
    return "\n".join(lines)


# --- saving -----------------------------------------------------------------------------------


def save_model_dir(model, tok, enc: rt.Encoder, out_dir: str, report: dict | None) -> None:
    """Writes a complete Hugging Face directory next to out_dir, then swaps it in, so a kill at
    any moment leaves the previous complete save in place."""
    import torch
    from transformers import GenerationConfig

    tmp = out_dir.rstrip("/") + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    bf16 = copy.deepcopy(model).to("cpu", torch.bfloat16)
    bf16.save_pretrained(tmp, safe_serialization=True)
    with open(os.path.join(tmp, "config.json"), encoding="utf-8") as f:
        cfg = json.load(f)
    cfg["rope_theta"] = cfg.get("rope_parameters", {}).get("rope_theta", 500000.0)
    cfg["torch_dtype"] = "bfloat16"
    with open(os.path.join(tmp, "config.json"), "w", encoding="utf-8") as f:
        json.dump(cfg, f, indent=2)
        f.write("\n")
    GenerationConfig(bos_token_id=enc.bos_id, eos_token_id=[enc.eos_id, enc.eot_id],
                     pad_token_id=enc.eos_id, do_sample=False).save_pretrained(tmp)
    recipes.save_tokenizer_dir(tok, tmp, "llama3", chat_template=CHAT_TEMPLATE)
    if report is not None:
        with open(os.path.join(tmp, "train_report.json"), "w", encoding="utf-8") as f:
            json.dump(report, f, indent=1)
    old = out_dir.rstrip("/") + ".old"
    shutil.rmtree(old, ignore_errors=True)
    if os.path.exists(out_dir):
        os.replace(out_dir, old)
    os.replace(tmp, out_dir)
    shutil.rmtree(old, ignore_errors=True)


def verify_saved(out_dir: str, entries, results, device) -> dict:
    """Reloads the saved directory the way users will (transformers + tokenizers), generates
    greedily for one prompt per task (raw) and one chat prompt, and scores the text."""
    import torch
    from tokenizers import Tokenizer
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(out_dir, dtype=torch.bfloat16).to(device).eval()
    tok = Tokenizer.from_file(os.path.join(out_dir, "tokenizer.json"))
    hf_tok = AutoTokenizer.from_pretrained(out_dir)
    seen, checks = set(), []
    for (doc_id, length, doc), res in zip(entries, results):
        if doc.task in seen:
            continue
        seen.add(doc.task)
        for chat in (False, True) if doc.task == "niah_single" else (False,):
            if chat:
                text = hf_tok.apply_chat_template([{"role": "user", "content": doc.user_message}],
                                                  tokenize=False, add_generation_prompt=True)
                ids = tok.encode(text, add_special_tokens=False).ids
            else:
                ids = tok.encode(doc.prompt).ids
            if ids[: len(doc.prompt_ids)] != [int(x) for x in doc.prompt_ids] and not chat:
                raise RuntimeError("reloaded tokenizer does not reproduce the prompt ids")
            inp = torch.tensor([ids], device=device)
            expected = doc.chat_answer if chat else doc.answer
            with torch.no_grad():
                out = model.generate(inp, attention_mask=torch.ones_like(inp), do_sample=False,
                                     max_new_tokens=len(tok.encode(expected).ids) + 6)
            text_out = tok.decode(out[0, len(ids):].tolist(), skip_special_tokens=True)
            exact, recall = rt.score_text(text_out, expected, doc.answers)
            checks.append({"id": doc_id + ("-chat" if chat else ""), "context_tokens": length,
                           "expected": expected, "generated": text_out, "exact": exact,
                           "recall": recall,
                           "teacher_forced_exact": None if chat or res is None else res["exact"]})
    return {"dtype": str(next(model.parameters()).dtype),
            "num_parameters": sum(p.numel() for p in model.parameters()), "generations": checks}


# --- main -------------------------------------------------------------------------------------


def emit_jsonl(path: str, entries) -> None:
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        for doc_id, length, doc in entries:
            f.write(json.dumps(rt.doc_to_json(doc, doc_id, length), ensure_ascii=False) + "\n")
    log(f"wrote {len(entries)} evaluation prompts to {path}")


def eval_entries(enc, pool, args):
    depths = [round(x, 2) for x in np.linspace(0.0, 1.0, args.eval_depths)]
    return rt.eval_docs(enc, pool, args.seed, args.eval_lengths, args.eval_samples, depths)


def write_report(path: str | None, report: dict) -> None:
    if path:
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        with open(path + ".tmp", "w", encoding="utf-8") as f:
            json.dump(report, f, indent=1)
        os.replace(path + ".tmp", path)


def main(argv=None) -> int:
    args = parse_args(argv)
    t_start = time.time()
    deadline = t_start + args.deadline_s
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda s, f: STOP.__setitem__("signal", s))

    tok = make_tokenizer(args)
    enc = rt.Encoder(tok)
    eval_pool = rt.FillerPool(enc, min(args.pool_sentences, 20000), args.seed + 1)
    log(f"tokenizer: {tok.get_vocab_size()} tokens ({time.time() - t_start:.1f}s)")
    if args.emit_only:
        emit_jsonl(args.emit_eval_jsonl, eval_entries(enc, eval_pool, args))
        return 0

    import torch
    import transformers

    transformers.utils.logging.disable_progress_bar()
    if args.deterministic:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.use_deterministic_algorithms(True, warn_only=True)
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    if args.workers is None:
        args.workers = 0 if device.type == "cpu" else max(1, min(12, (os.cpu_count() or 4) - 2))
    n_checked = check_tokenization(tok, enc, eval_pool, args.seed)
    log(f"token-level assembly matches the tokenizer on {n_checked} documents")
    prefetch = Prefetcher(tok.to_str(), args)

    vocab = tok.get_vocab_size()
    model = make_model(args, vocab, enc).to(device)
    n_params = sum(p.numel() for p in model.parameters())
    log(f"model: {n_params / 1e6:.2f}M parameters ({2 * n_params / 1e6:.1f} MB bf16), "
        f"device {device}, {args.workers} data workers")
    report = {
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                     "tokenizers": __import__("tokenizers").__version__, "python": sys.version},
        "device": torch.cuda.get_device_name(0) if device.type == "cuda" else "cpu",
        "args": {k: v for k, v in vars(args).items()},
        "model": {"num_parameters": n_params, **MODEL_PRESETS["smoke" if args.smoke else "full"],
                  "vocab_size": vocab, "rope_theta": 500000.0, "max_position_embeddings": 32768},
        "stages": [[end, {str(k): v for k, v in mix.items()}, dmax, whole]
                   for end, mix, dmax, whole in STAGES],
    }
    trainer = Trainer(model, args, device)
    save_model_dir(model, tok, enc, args.out, None)  # a loadable directory from the start

    train_start = time.time()
    train_end = min(train_start + args.time_budget_s, deadline - (60 if not args.smoke else 30))
    if args.max_steps:
        total_steps, step_s = args.max_steps, {}
    else:
        step_s = probe_speed(trainer, prefetch, args)
        total_steps, mean_s = plan_steps(step_s, train_end - time.time(), args)
        log(f"plan: {total_steps} steps at {mean_s * 1000:.0f} ms mean "
            f"(reproduce with --max-steps {total_steps})")
    report["plan"] = {"total_steps": total_steps, "probe_s_per_step": {str(k): v for k, v
                                                                        in step_s.items()}}

    n_mon = 2 if args.smoke else 16
    monitor_docs = rt.eval_docs(enc, eval_pool, args.seed + 7, [min(1024, args.max_context)], n_mon,
                                [None], tasks=rt.TASKS, with_text=False)
    monitor_docs += rt.eval_docs(enc, eval_pool, args.seed + 7, [args.max_context // 2], n_mon,
                                 [None], tasks=("niah_single",), with_text=False)
    stop_ids = terminator_ids(tok, enc)

    def monitor() -> dict:
        model.eval()
        with trainer._autocast():
            res = teacher_forced(model, [d for _, _, d in monitor_docs], device, stop_ids,
                                 batch_tokens=65536 if device.type == "cuda" else 4096)
        model.train()
        acc = summarize(monitor_docs, res)["accuracy"]
        return {f"{t}@{L}": round(c["exact"], 2) for t, cells in acc.items()
                for L, c in cells.items()}

    report["training"] = train_loop(args, trainer, prefetch, total_steps, train_start, train_end,
                                    lambda: save_model_dir(model, tok, enc, args.out, None),
                                    monitor)
    prefetch.close()
    save_model_dir(model, tok, enc, args.out, report)
    write_report(args.report, report)
    log(f"saved {args.out} after {report['training']['steps']} steps, "
        f"{report['training']['tokens'] / 1e6:.1f}M tokens")
    if STOP["signal"] is not None:
        return 1

    # Evaluate the weights as saved (bf16), on held-out keys and fresh filler.
    entries = eval_entries(enc, eval_pool, args)
    if args.emit_eval_jsonl:
        emit_jsonl(args.emit_eval_jsonl, entries)
    eval_model = copy.deepcopy(model).to(torch.bfloat16).eval()
    t_eval = time.time()
    results = teacher_forced(eval_model, [d for _, _, d in entries], device, stop_ids,
                             batch_tokens=131072 if device.type == "cuda" else 4096,
                             deadline=deadline - 20)
    report["eval"] = summarize(entries, results)
    report["eval"]["num_evaluated"] = sum(r is not None for r in results)
    report["eval"]["seconds"] = round(time.time() - t_eval, 1)
    log("exact-match accuracy (teacher-forced greedy), held-out keys:\n" +
        format_table(report["eval"]["accuracy"]))
    del eval_model
    try:
        report["verify"] = verify_saved(args.out, entries, results, device)
        for c in report["verify"]["generations"]:
            log(f"generate {c['id']}: expected {c['expected']!r} got {c['generated']!r}")
    except Exception as e:  # the model is saved; a failed check must not lose the report
        report["verify"] = {"error": repr(e)}
        log(f"verification failed: {e!r}")
    report["wall_s"] = round(time.time() - t_start, 1)
    write_report(args.report, report)
    with open(os.path.join(args.out, "train_report.json"), "w", encoding="utf-8") as f:
        json.dump(report, f, indent=1)
    log(f"done in {report['wall_s']}s")
    return 0 if "error" not in report["verify"] else 2


if __name__ == "__main__":
    sys.exit(main())
