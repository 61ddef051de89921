"""Synthetic long-context retrieval tasks (RULER-style) for the bundled tiny model.

One generator serves training (token-level assembly, fast) and evaluation (the same token ids plus
the exact prompt text), so the C++ harness can load `--emit-eval-jsonl` prompts or mirror the
formats documented in docs/training.md. Needs numpy and `tokenizers` only (no torch), so data
workers start quickly.

A prompt is

    {header}\n {e_1} {e_2} ... {e_n}\n{question}\nAnswer: {answer prefix}

where the e_i are filler sentences with the task's needles (or variable statements) inserted
between them, each preceded by one space (so the haystack line starts with a space). The answer
prefix repeats the needle's words up to the value ("The special magic number for {key} is"); the
model continues with " {answer}" and then <|end_of_text|>. In chat form the user message is the
same text up to the question, and the assistant replies "{answer prefix} {answer}" then <|eot_id|>.

Token-level assembly concatenates the encodings of " " + element, which equals the tokenization of
the joined text because every element starts with " " + a letter and ends with "." (the Llama-3
split regex never merges across that boundary). The tail (last element + question) is encoded as one
piece because "." + "\\n" would merge. `train_tiny.py --smoke` checks the equality on every task.
"""

from __future__ import annotations

import dataclasses
import os
import zlib
from typing import Sequence

import numpy as np

TASKS = ("niah_single", "niah_multikey", "niah_multivalue", "vt")

HEADER_NIAH = ("Some special magic numbers are hidden within the following text. Make sure to "
               "memorize them. I will quiz you about the numbers afterwards.")
HEADER_VT = "Memorize and track the chain(s) of variable assignment hidden in the following text."
NEEDLE = "The special magic number for {key} is {value}."
QUESTION_ONE = "What is the special magic number for {key} mentioned in the provided text?"
QUESTION_ALL = "What are all the special magic numbers for {key} mentioned in the provided text?"
VT_FIRST = "VAR {name} = {value}."
VT_NEXT = "VAR {name} = VAR {prev}."
QUESTION_VT = "Find all variables that are assigned the value {value} in the text above."
ANSWER_CUE = "Answer:"
# The answer prefix repeats the needle's words up to the value, so that retrieval is an induction
# step (match "for {key} is", copy what followed), as in RULER's answer prefixes.
ANSWER_ONE = "The special magic number for {key} is"
ANSWER_ALL = "The special magic numbers for {key} are"
ANSWER_VT = "The variables assigned the value {value} are"
# Separator between answer items: values are listed "a, b, c"; variable names "A B C".
ITEM_SEP = {"niah_single": ", ", "niah_multikey": ", ", "niah_multivalue": ", ", "vt": " "}

# Task sizes used for evaluation (and emitted prompts); training samples around them.
EVAL_PARAMS = {
    "niah_single": {},
    "niah_multikey": {"num_keys": 4},
    "niah_multivalue": {"num_values": 4},
    "vt": {"num_chains": 2, "num_hops": 3},
}

# --- word lists -------------------------------------------------------------------------------
# Filler words and key words are disjoint, so a key is only ever seen in needles and questions.

NAMES = ("Anna Ben Clara David Elena Felix Grace Henry Iris Jack Laura Martin Nina Oscar Paula "
         "Quentin Rosa Samuel Tara Victor Wendy Adam Bella Carl Diana Emil Fiona George Hanna Ivan "
         "Julia Karl Lena Marco Nora Peter Ruth Simon Vera Walter").split()
NOUNS = ("farmer teacher child doctor baker sailor student painter driver neighbor writer singer "
         "river house garden letter market window bridge road book table dog cat bird tree boat "
         "train village city song story door field hill lamp cup basket blanket bottle bread "
         "candle chair clock coat fence flower forest glass horse island kitchen lake meadow moon "
         "mountain orchard paper pencil picture pond rain roof school shop shore sky stone street "
         "sun tower valley wagon wall well wheel wind").split()
ADJECTIVES = ("small large old young happy tired busy careful friendly heavy warm cold bright dark "
              "early late simple famous local calm green yellow tall short narrow wide soft loud "
              "clean empty full strange kind patient curious sleepy hungry cheerful quick slow "
              "gray brown round flat smooth rough distant nearby wet dry").split()
VERBS_T = ("found carried painted opened closed watched visited cleaned fixed followed noticed "
           "remembered bought sold built moved pushed pulled lifted washed counted borrowed "
           "described admired ignored greeted answered filled covered crossed").split()
VERBS_I = ("waited slept laughed walked rested smiled listened worked arrived returned wandered "
           "sang danced paused stayed travelled shivered hurried whistled nodded").split()
VERBS_BASE = ("see carry paint open close watch visit clean fix follow notice remember buy sell "
              "build move lift wash count borrow").split()
AUX = "will can should might could would must may".split()
ADVERBS = ("slowly quickly quietly happily carefully gently loudly often rarely again together "
           "alone softly early later patiently suddenly calmly briefly warmly").split()
PREPS = "near behind beside under above across along around inside outside beyond past".split()
PLACES = ("station harbor library bakery square chapel barn cottage workshop museum theater "
          "hospital castle mill fountain stable quarry pier tavern lighthouse").split()
TIMES = ("morning evening night afternoon winter summer spring autumn week month Sunday "
         "Monday weekend holiday dawn").split()
DETERMINERS = "the this that one every".split()

KEY_ADJECTIVES = ("amber azure crimson golden silver scarlet violet ivory jade coral copper bronze "
                  "cobalt emerald indigo ochre olive teal maroon russet tawny velvet marble "
                  "granite crystal frozen hidden silent ancient brave clever gentle humble lively "
                  "mellow nimble polite rapid shiny sturdy swift tidy vivid witty fuzzy jolly "
                  "lucky merry noble proud rusty sandy snowy sunny windy wooden woolly dusty "
                  "frosty misty stormy").split()
KEY_NOUNS = ("falcon otter badger heron lynx panther walrus gecko toucan bison cobra dolphin "
             "ferret gazelle hamster iguana jackal koala lemur marmot narwhal ocelot pelican quail "
             "raccoon salmon tapir urchin vulture wombat zebra anchor beacon compass lantern harp "
             "violin trumpet kettle mirror saddle spindle teapot thimble trowel whistle anvil "
             "bellows chisel goblet hammock locket mallet pendant quill ribbon scepter turbine "
             "cactus tulip").split()

# (template, weight). Upper-case slots are filled from the lists above.
TEMPLATES = (
    "DET ADJ NOUN VT DET NOUN PREP the PLACE",
    "NAME VI ADV PREP the PLACE",
    "PREP the PLACE , the ADJ NOUN VI ADV",
    "DET NOUN AUX VB the ADJ NOUN",
    "when the NOUN VI , NAME VT the NOUN",
    "NAME said that the NOUN was ADJ",
    "every TIME , the ADJ NOUN VT the NOUN",
    "there was one ADJ NOUN PREP the PLACE",
    "NAME and NAME VT the ADJ NOUN in the TIME",
    "the NOUN of the PLACE was ADJ and ADJ",
    "after the TIME , NAME VI PREP the NOUN",
    "NAME VT the NOUN because it was ADJ",
)
_SLOTS = {"NAME": NAMES, "NOUN": NOUNS, "ADJ": ADJECTIVES, "VT": VERBS_T, "VI": VERBS_I,
          "VB": VERBS_BASE, "AUX": AUX, "ADV": ADVERBS, "PREP": PREPS, "PLACE": PLACES,
          "TIME": TIMES, "DET": DETERMINERS}
_TEMPLATE_PARTS = tuple(t.split() for t in TEMPLATES)


def _check_word_lists() -> None:
    filler = {w.lower() for words in _SLOTS.values() for w in words}
    keys = set(KEY_ADJECTIVES) | set(KEY_NOUNS)
    clash = filler & keys
    assert not clash, f"filler and key words overlap: {sorted(clash)}"
    assert len(set(KEY_ADJECTIVES)) == len(KEY_ADJECTIVES) and len(set(KEY_NOUNS)) == len(KEY_NOUNS)


_check_word_lists()


def filler_sentence(rng: np.random.Generator) -> str:
    """One sentence from the grammar: a template, each slot an independent uniform draw."""
    parts = _TEMPLATE_PARTS[int(rng.integers(len(_TEMPLATE_PARTS)))]
    words = []
    for p in parts:
        choices = _SLOTS.get(p)
        words.append(choices[int(rng.integers(len(choices)))] if choices else p)
    text = " ".join(words).replace(" ,", ",")
    return text[0].upper() + text[1:] + "."


def is_eval_key(key: str) -> bool:
    """Keys are split 90/10 by a fixed hash: evaluation keys never occur in training."""
    return zlib.crc32(key.encode()) % 10 == 0


def sample_key(rng: np.random.Generator, split: str, avoid: set[str]) -> str:
    while True:
        key = (KEY_ADJECTIVES[int(rng.integers(len(KEY_ADJECTIVES)))] + "-" +
               KEY_NOUNS[int(rng.integers(len(KEY_NOUNS)))])
        if key not in avoid and is_eval_key(key) == (split == "eval"):
            avoid.add(key)
            return key


def _sample_near_key(rng: np.random.Generator, key: str, split: str, avoid: set[str]) -> str:
    """A distractor key sharing the adjective or the noun with `key` (else a random one)."""
    adj, noun = key.split("-")
    for _ in range(20):
        if rng.random() < 0.5:
            cand = adj + "-" + KEY_NOUNS[int(rng.integers(len(KEY_NOUNS)))]
        else:
            cand = KEY_ADJECTIVES[int(rng.integers(len(KEY_ADJECTIVES)))] + "-" + noun
        if cand not in avoid and is_eval_key(cand) == (split == "eval"):
            avoid.add(cand)
            return cand
    return sample_key(rng, split, avoid)


def _distinct_ints(rng: np.random.Generator, n: int, lo: int, hi: int) -> list[int]:
    out: list[int] = []
    while len(out) < n:
        v = int(rng.integers(lo, hi))
        if v not in out:
            out.append(v)
    return out


def _var_names(rng: np.random.Generator, n: int) -> list[str]:
    out: list[str] = []
    while len(out) < n:
        name = "".join(chr(ord("A") + int(c)) for c in rng.integers(0, 26, size=5))
        if name not in out:
            out.append(name)
    return out


# --- tokenizer and filler pool ----------------------------------------------------------------


class Encoder:
    """The tokenizer plus the ids the task formats need."""

    def __init__(self, tokenizer) -> None:
        self.tok = tokenizer
        ids = {s: tokenizer.token_to_id(s) for s in (
            "<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>",
            "<|eot_id|>")}
        missing = [s for s, i in ids.items() if i is None]
        if missing:
            raise ValueError(f"tokenizer lacks special tokens {missing}")
        self.bos_id = ids["<|begin_of_text|>"]
        self.eos_id = ids["<|end_of_text|>"]
        self.eot_id = ids["<|eot_id|>"]
        # <|start_header_id|>user<|end_header_id|> and the assistant header + "\n\n".
        self.user_header = np.array(
            [ids["<|start_header_id|>"], *self.encode("user"), ids["<|end_header_id|>"]], np.int32)
        self.assistant_header = np.array(
            [self.eot_id, ids["<|start_header_id|>"], *self.encode("assistant"),
             ids["<|end_header_id|>"], *self.encode("\n\n")], np.int32)
        self._cache: dict[str, np.ndarray] = {}

    def encode(self, text: str) -> np.ndarray:
        return np.asarray(self.tok.encode(text, add_special_tokens=False).ids, np.int32)

    def encode_cached(self, text: str) -> np.ndarray:
        ids = self._cache.get(text)
        if ids is None:
            if len(self._cache) > 4096:
                self._cache.clear()
            ids = self._cache[text] = self.encode(text)
        return ids

    def encode_batch(self, texts: Sequence[str]) -> list[np.ndarray]:
        return [np.asarray(e.ids, np.int32)
                for e in self.tok.encode_batch(list(texts), add_special_tokens=False)]


class FillerPool:
    """Grammar sentences pre-tokenized with their leading space, for fast token-level assembly."""

    def __init__(self, enc: Encoder, num_sentences: int, seed: int) -> None:
        rng = np.random.default_rng([seed, 0xF111E4])
        self.texts = [filler_sentence(rng) for _ in range(num_sentences)]
        encoded = enc.encode_batch([" " + t for t in self.texts])
        self.lens = np.array([len(e) for e in encoded], np.int64)  # [num_sentences]
        self.starts = np.concatenate([[0], np.cumsum(self.lens)[:-1]])  # [num_sentences]
        self.flat = np.concatenate(encoded).astype(np.int32)  # [sum(lens)] token ids
        self.mean_len = float(self.lens.mean())

    def sample(self, rng: np.random.Generator, budget_tokens: int) -> np.ndarray:
        """Indices of i.i.d. sentences whose total length stays within budget_tokens."""
        if budget_tokens <= 0:
            return np.zeros(0, np.int64)
        n = int(budget_tokens / self.mean_len * 1.2) + 8
        idx = rng.integers(0, len(self.texts), size=n)
        total = np.cumsum(self.lens[idx])
        while total[-1] <= budget_tokens:  # rare: draw more
            more = rng.integers(0, len(self.texts), size=n)
            idx = np.concatenate([idx, more])
            total = np.cumsum(self.lens[idx])
        return idx[: int(np.searchsorted(total, budget_tokens, side="right"))]

    def gather(self, idx: np.ndarray) -> np.ndarray:
        """Concatenated token ids of the sentences idx, as one [sum(lens[idx])] int32 array."""
        if len(idx) == 0:
            return np.zeros(0, np.int32)
        lens = self.lens[idx]
        out_starts = np.concatenate([[0], np.cumsum(lens)[:-1]])
        pos = np.arange(int(lens.sum())) + np.repeat(self.starts[idx] - out_starts, lens)
        return self.flat[pos]


# --- documents --------------------------------------------------------------------------------


@dataclasses.dataclass
class Doc:
    task: str
    chat: bool
    prompt_ids: np.ndarray  # [num_prompt_tokens] int32: BOS ... answer prefix (raw) or the
    #                         assistant header + "\n\n" (chat)
    answer_ids: np.ndarray  # [num_answer_tokens] int32: the continuation, then eos (raw) or eot
    item_spans: list[tuple[int, int]]  # [begin, end) of each answer item inside answer_ids
    copy_spans: list[tuple[int, int]]  # [begin, end) in prompt_ids of echo-needle values (training)
    repeat_spans: list[tuple[int, int]]  # [begin, end) in prompt_ids of repeated filler (training)
    answer: str  # expected raw continuation, whitespace-stripped: "4829137" / "1234567, 7654321"
    answers: list[str]  # the answer's items
    chat_answer: str  # expected assistant reply: answer prefix + " " + answer
    depth: float  # depth of the first answer item (the queried needle for niah tasks)
    needle_depths: list[float]  # depth of every inserted item, in insertion order
    needle_positions: list[int]  # prompt token index of each item's first token, in text order
    prompt: str | None = None  # raw prompt text (no BOS); None when built without text
    user_message: str | None = None  # chat user message; None when built without text

    @property
    def num_prompt_tokens(self) -> int:
        return len(self.prompt_ids)


@dataclasses.dataclass
class _Item:
    text: str
    depth: float
    order: int  # tie-break at equal insertion points (keeps chains and echo pairs in order)
    copy_value: str | None = None  # echo needles: the value whose tokens are trained


@dataclasses.dataclass
class _Content:
    header: str
    items: list[_Item]
    question: str
    answer_prefix: str
    answers: list[str]
    first_depth: float


def _needle_items(rng, split, avoid, num_pairs: int, order0: int) -> list[_Item]:
    """Echo pairs (training only): a needle with a fresh key and, later, the same needle again; the
    repeated value is predictable only by finding the first one, a dense version of the task.
    Values have 7 to 40 digits: past the first, each 3-digit token follows a random 3-digit token,
    so one-token induction (attend to after the earlier copy of the current token) is exact; that
    is the easy first step towards matching on the key."""
    items = []
    for i in range(num_pairs):
        key = sample_key(rng, split, avoid)
        n = 7 if rng.random() < 0.3 else int(rng.integers(8, 41))
        value = str(int(rng.integers(1, 10))) + "".join(map(str, rng.integers(0, 10, size=n - 1)))
        a, b = sorted(float(x) for x in rng.random(2))
        text = NEEDLE.format(key=key, value=value)
        items += [_Item(text, a, order0 + 2 * i), _Item(text, b, order0 + 2 * i + 1, str(value))]
    return items


def _repeat_runs(rng: np.random.Generator, idx: np.ndarray, num_runs: int) -> set[int]:
    """Training only: copies num_runs runs of 3-8 consecutive filler sentences verbatim to a later
    place (in place, so the length is unchanged), one run per equal segment of the haystack so runs
    never overlap. Every token of a copy after its first is predictable by an induction head, which
    bootstraps the copy circuit that retrieval needs. Returns the positions in idx of the copies."""
    out: set[int] = set()
    m = len(idx)
    seg = m // max(1, num_runs)
    for r in range(num_runs if seg >= 8 else 0):
        k = int(rng.integers(3, min(8, seg // 2) + 1))
        s = r * seg + int(rng.integers(0, seg - 2 * k + 1))
        j = int(rng.integers(s + k, r * seg + seg - k + 1))
        idx[j:j + k] = idx[s:s + k]
        out.update(range(j, j + k))
    return out


def _task_content(task: str, rng: np.random.Generator, split: str, params: dict,
                  depth: float | None) -> _Content:
    avoid: set[str] = set()
    d0 = float(rng.random()) if depth is None else float(depth)
    if task in ("niah_single", "niah_multikey"):
        num_keys = 1 if task == "niah_single" else int(params.get("num_keys", 4))
        key = sample_key(rng, split, avoid)
        keys = [key] + [_sample_near_key(rng, key, split, avoid) if rng.random() < 0.3
                        else sample_key(rng, split, avoid) for _ in range(num_keys - 1)]
        values = _distinct_ints(rng, num_keys, 1_000_000, 10_000_000)
        depths = [d0] + [float(rng.random()) for _ in range(num_keys - 1)]
        order = rng.permutation(num_keys)  # the queried needle's rank among equal depths is random
        items = [_Item(NEEDLE.format(key=k, value=v), d, int(o))
                 for k, v, d, o in zip(keys, values, depths, order)]
        content = _Content(HEADER_NIAH, items, QUESTION_ONE.format(key=key),
                           ANSWER_ONE.format(key=key), [str(values[0])], d0)
    elif task == "niah_multivalue":
        num_values = int(params.get("num_values", 4))
        key = sample_key(rng, split, avoid)
        values = _distinct_ints(rng, num_values, 1_000_000, 10_000_000)
        if depth is None:
            depths = sorted(float(x) for x in rng.random(num_values))
        else:  # the first value sits at `depth`, the others after it
            depths = [d0] + sorted(float(rng.uniform(d0, 1.0)) for _ in range(num_values - 1))
        items = [_Item(NEEDLE.format(key=key, value=v), d, i)
                 for i, (v, d) in enumerate(zip(values, depths))]
        content = _Content(HEADER_NIAH, items, QUESTION_ALL.format(key=key),
                           ANSWER_ALL.format(key=key), [str(v) for v in values], depths[0])
    elif task == "vt":
        num_chains = int(params.get("num_chains", 2))
        num_hops = int(params.get("num_hops", 3))
        names = _var_names(rng, num_chains * (num_hops + 1))
        values = _distinct_ints(rng, num_chains, 10_000, 100_000)
        items, chains = [], []
        for c in range(num_chains):
            chain = names[c * (num_hops + 1):(c + 1) * (num_hops + 1)]
            if c == 0 and depth is not None:
                ds = [d0] + sorted(float(rng.uniform(d0, 1.0)) for _ in range(num_hops))
            else:
                ds = sorted(float(x) for x in rng.random(num_hops + 1))
            for h, (name, d) in enumerate(zip(chain, ds)):
                text = (VT_FIRST.format(name=name, value=values[c]) if h == 0
                        else VT_NEXT.format(name=name, prev=chain[h - 1]))
                items.append(_Item(text, d, c * 100 + h))
            chains.append((chain, ds[0]))
        q = int(rng.integers(num_chains)) if depth is None else 0
        chain, first_depth = chains[q]
        content = _Content(HEADER_VT, items, QUESTION_VT.format(value=values[q]),
                           ANSWER_VT.format(value=values[q]), list(chain), first_depth)
    else:
        raise ValueError(f"unknown task {task!r}")
    echo_pairs = int(params.get("echo_pairs", 0))
    if echo_pairs:
        content.items += _needle_items(rng, split, avoid, echo_pairs, 10_000)
    return content


def build_doc(task: str, rng: np.random.Generator, enc: Encoder, pool: FillerPool, *,
              max_prompt_tokens: int | None = None, max_total_tokens: int | None = None,
              depth: float | None = None, split: str = "train", chat: bool = False,
              params: dict | None = None, with_text: bool = False) -> Doc:
    """One task instance whose prompt fills max_prompt_tokens (or prompt + answer fills
    max_total_tokens) up to less than one filler sentence.

    depth (0 = right after the header, 1 = right before the question) places the first answer item;
    None draws it uniformly. Item k is inserted before filler sentence round(depth_k * m), m being
    the number of filler sentences.
    """
    params = EVAL_PARAMS[task] if params is None else params
    c = _task_content(task, rng, split, params, depth)
    sep = ITEM_SEP[task]
    answer = sep.join(c.answers)

    if chat:
        head = np.concatenate([[enc.bos_id], enc.user_header,
                               enc.encode_cached("\n\n" + c.header + "\n")]).astype(np.int32)
        tail_suffix = "\n" + c.question
        end = enc.assistant_header
    else:
        head = np.concatenate([[enc.bos_id], enc.encode_cached(c.header + "\n")]).astype(np.int32)
        tail_suffix = "\n" + c.question + "\n" + ANSWER_CUE + " " + c.answer_prefix
        end = np.zeros(0, np.int32)
    items = c.items
    echoes = [k for k, it in enumerate(items) if it.copy_value is not None]
    # Raw: the prompt ends with the answer prefix, the model continues " a, b". Chat: the reply is
    # "prefix a, b" right after the assistant header's "\n\n".
    pieces = ([c.answer_prefix] if chat else []) + \
        [" " + c.answers[0]] + [sep + a for a in c.answers[1:]]
    # One tokenizer call for everything but the tail: answer pieces, items, the tail's question
    # part (for the length budget) and, for echo needles, the words before the value and the value.
    encoded = enc.encode_batch(
        pieces + [" " + it.text for it in items] + [tail_suffix] +
        [" " + items[k].text.split(items[k].copy_value)[0].rstrip() for k in echoes] +
        [" " + items[k].copy_value for k in echoes])
    parts = encoded[:len(pieces)]
    item_ids = encoded[len(pieces):len(pieces) + len(items)]
    tail_suffix_len = len(encoded[len(pieces) + len(items)])
    rest = encoded[len(pieces) + len(items) + 1:]
    # Echo needles train their value tokens: (offset, length) of the value inside the item's ids.
    copy_at = {k: (len(rest[i]), len(rest[len(echoes) + i])) for i, k in enumerate(echoes)}
    spans, pos = [], 0
    for part in parts:
        spans.append((pos, pos + len(part)))
        pos += len(part)
    item_spans = spans[1:] if chat else spans
    answer_ids = np.concatenate(parts + [np.array([enc.eot_id if chat else enc.eos_id], np.int32)])

    if max_prompt_tokens is not None:
        limit = max_prompt_tokens
    elif max_total_tokens is not None:
        limit = max_total_tokens - len(answer_ids)
    else:
        raise ValueError("build_doc needs max_prompt_tokens or max_total_tokens")
    fixed = len(head) + len(end) + sum(len(i) for i in item_ids) + tail_suffix_len
    idx = pool.sample(rng, limit - fixed)  # [m] filler sentence ids in text order
    repeated = _repeat_runs(rng, idx, int(params.get("repeat_runs", 0)))

    while True:
        m = len(idx)
        slots = [min(m, int(round(it.depth * m))) for it in items]
        order = sorted(range(len(items)), key=lambda k: (slots[k], items[k].order))
        # Elements in text order: ("f", position in idx) or ("i", item index).
        elements: list[tuple[str, int]] = []
        nxt = 0
        for k in order:
            elements += [("f", p) for p in range(nxt, slots[k])]
            nxt = max(nxt, slots[k])
            elements.append(("i", k))
        elements += [("f", p) for p in range(nxt, m)]

        chunks, positions, copy_spans, repeat_spans = [head], [], [], []
        cur = len(head)
        run: list[int] = []
        for e, (kind, k) in enumerate(elements):
            if kind == "f" and e < len(elements) - 1:
                run.append(k)
                continue
            if run:
                chunks.append(pool.gather(idx[run]))
                if repeated:  # token ranges of copied sentences (the first token of a copy is new)
                    ends = cur + np.cumsum(pool.lens[idx[run]])
                    for p, b, t in zip(run, ends - pool.lens[idx[run]], ends):
                        if p in repeated:
                            repeat_spans.append((int(b) + (p - 1 not in repeated), int(t)))
                cur += len(chunks[-1])
                run = []
            if kind == "i":
                positions.append(cur)
                if k in copy_at:
                    off, n = copy_at[k]
                    copy_spans.append((cur + off, cur + off + n))
            if e == len(elements) - 1:  # "." + "\n" merge: the last element goes with the tail
                last_text = pool.texts[idx[k]] if kind == "f" else items[k].text
                chunks.append(enc.encode(" " + last_text + tail_suffix))
            else:
                chunks.append(item_ids[k])
            cur += len(chunks[-1])
        chunks.append(end)
        prompt_ids = np.concatenate(chunks).astype(np.int32)
        if len(prompt_ids) <= limit or m == 0:
            break
        idx = idx[:-1]  # boundary merges made it a token or two too long

    doc = Doc(task=task, chat=chat, prompt_ids=prompt_ids, answer_ids=answer_ids,
              item_spans=item_spans, copy_spans=copy_spans, repeat_spans=repeat_spans,
              answer=answer,
              answers=list(c.answers), chat_answer=c.answer_prefix + " " + answer,
              depth=round(c.first_depth, 4),
              needle_depths=[round(it.depth, 4) for it in items if it.copy_value is None],
              needle_positions=positions)
    if with_text:
        texts = [pool.texts[idx[k]] if kind == "f" else items[k].text for kind, k in elements]
        doc.user_message = c.header + "\n" + "".join(" " + t for t in texts) + "\n" + c.question
        doc.prompt = doc.user_message + "\n" + ANSWER_CUE + " " + c.answer_prefix
    return doc


def doc_to_json(doc: Doc, doc_id: str, context_tokens: int) -> dict:
    """The record `--emit-eval-jsonl` writes (one JSON object per line)."""
    return {
        "id": doc_id,
        "task": doc.task,
        "context_tokens": context_tokens,
        "num_prompt_tokens": doc.num_prompt_tokens,
        "depth": doc.depth,
        "prompt": doc.prompt,
        "answer": doc.answer,
        "answers": doc.answers,
        "user_message": doc.user_message,
        "chat_answer": doc.chat_answer,
        "needle_depths": doc.needle_depths,
        "needle_positions": doc.needle_positions,
    }


def eval_docs(enc: Encoder, pool: FillerPool, seed: int, lengths: Sequence[int],
              samples_per_cell: int, depths: Sequence[float | None], tasks: Sequence[str] = TASKS,
              chat: bool = False, with_text: bool = True) -> list[tuple[str, int, Doc]]:
    """The held-out grid: samples_per_cell prompts per (task, length); niah_single divides them
    over the depth grid (ceil(samples / len(depths)) per depth), the other tasks draw depths.

    Every document has its own RNG stream derived from (seed, task, length, depth, sample), so a
    cell does not change when other cells are added. Returns (id, context_tokens, doc) triples.
    """
    out = []
    for t_idx, task in enumerate(tasks):
        for length in lengths:
            cell_depths = list(depths) if task == "niah_single" else [None]
            per_depth = -(-samples_per_cell // len(cell_depths))
            for d_idx, depth in enumerate(cell_depths):
                for s in range(per_depth):
                    rng = np.random.default_rng([seed, 0xE7A1, t_idx, length, d_idx, s, int(chat)])
                    doc = build_doc(task, rng, enc, pool, max_prompt_tokens=length, depth=depth,
                                    split="eval", chat=chat, with_text=with_text)
                    dtag = "rand" if depth is None else f"{depth:.2f}"
                    out.append((f"{task}-{length}-{dtag}-{s}{'-chat' if chat else ''}", length,
                                doc))
    return out


def score_text(prediction: str, doc_answer: str, doc_answers: Sequence[str]) -> tuple[bool, float]:
    """How the harness scores free generation: cut at the first newline, strip, compare exactly;
    recall is RULER's string_match_all (fraction of items found anywhere in the cut text)."""
    cut = prediction.split("\n", 1)[0].strip()
    recall = sum(a in cut for a in doc_answers) / max(1, len(doc_answers))
    return cut == doc_answer, recall


# --- training rows ----------------------------------------------------------------------------

TRAIN_TASK_WEIGHTS = {"niah_single": 0.3, "niah_multikey": 0.25, "niah_multivalue": 0.2, "vt": 0.25}


def sample_train_params(task: str, rng: np.random.Generator, doc_tokens: int,
                        echo_prob: float = 0.8, repeat_prob: float = 0.7) -> dict:
    """Training varies the task sizes around EVAL_PARAMS and adds echo pairs (about one per 160
    tokens when present, at most 24) and repeated filler runs (about one per 1K tokens) for dense
    copy supervision."""
    p: dict = {}
    if task == "niah_multikey":
        p = {"num_keys": int(rng.integers(2, 7))}
    elif task == "niah_multivalue":
        p = {"num_values": int(rng.integers(2, 6))}
    elif task == "vt":
        p = {"num_chains": int(rng.integers(1, 4)), "num_hops": int(rng.integers(1, 5))}
    if rng.random() < echo_prob:
        p["echo_pairs"] = int(rng.integers(1, 2 + min(24, doc_tokens // 80)))
    if rng.random() < repeat_prob:
        p["repeat_runs"] = int(rng.integers(1, 2 + doc_tokens // 512))
    return p


def build_training_rows(enc: Encoder, pool: FillerPool, rng: np.random.Generator, row_tokens: int,
                        num_rows: int, doc_min_tokens: int, doc_max_tokens: int,
                        chat_fraction: float, lm_fraction: float, whole_row_prob: float = 0.5,
                        echo_prob: float = 0.8, repeat_prob: float = 0.7,
                        task_weights: dict[str, float] = TRAIN_TASK_WEIGHTS) -> dict:
    """Rows of exactly row_tokens tokens. With probability whole_row_prob a row is one document as
    long as the row (so the longest contexts are trained); otherwise it is packed with documents of
    log-uniform length in [doc_min_tokens, doc_max_tokens] (the last one takes the rest of the row;
    a remainder shorter than doc_min_tokens is filler). Documents are not masked from each other;
    each starts with BOS.

    Returns ids [num_rows, row_tokens] int32; answer_mask, copy_mask, repeat_mask and lm_mask
    [num_rows, row_tokens] bool, where mask[r, t] marks that the prediction made at t (of
    ids[r, t + 1]) is trained: answer tokens (incl. the end-of-turn id), echo-needle values,
    repeated filler, and a random lm_fraction of the other positions; and num_docs.
    """
    tasks = list(task_weights)
    probs = np.array([task_weights[t] for t in tasks], np.float64)
    probs /= probs.sum()
    ids = np.zeros((num_rows, row_tokens), np.int32)
    answer_mask = np.zeros((num_rows, row_tokens), bool)
    copy_mask = np.zeros((num_rows, row_tokens), bool)
    repeat_mask = np.zeros((num_rows, row_tokens), bool)
    num_docs = 0
    for r in range(num_rows):
        pos = 0
        whole = rng.random() < whole_row_prob
        while row_tokens - pos >= doc_min_tokens:
            room = row_tokens - pos
            hi = min(doc_max_tokens, room)
            n = hi if whole or hi <= doc_min_tokens else \
                int(np.exp(rng.uniform(np.log(doc_min_tokens), np.log(hi))))
            if room - n < doc_min_tokens:
                n = room
            task = tasks[int(rng.choice(len(tasks), p=probs))]
            doc = build_doc(task, rng, enc, pool, max_total_tokens=n,
                            chat=bool(rng.random() < chat_fraction),
                            params=sample_train_params(task, rng, n, echo_prob, repeat_prob))
            full = np.concatenate([doc.prompt_ids, doc.answer_ids])
            if len(full) > room:  # too many items for a tiny document: leave the room to filler
                break
            ids[r, pos:pos + len(full)] = full
            a0 = pos + len(doc.prompt_ids)
            answer_mask[r, a0 - 1:a0 - 1 + len(doc.answer_ids)] = True
            for b, e in doc.copy_spans:
                copy_mask[r, pos + b - 1:pos + e - 1] = True
            for b, e in doc.repeat_spans:
                repeat_mask[r, pos + b - 1:pos + e - 1] = True
            pos += len(full)
            num_docs += 1
        if pos < row_tokens:
            fill = pool.gather(pool.sample(rng, row_tokens - pos + 64))
            ids[r, pos:] = fill[:row_tokens - pos]
    lm_mask = ((rng.random((num_rows, row_tokens)) < lm_fraction) & ~answer_mask & ~copy_mask &
               ~repeat_mask)
    lm_mask[:, -1] = False
    lm_mask[:, :-1] &= ids[:, 1:] != enc.bos_id
    return {"ids": ids, "answer_mask": answer_mask, "copy_mask": copy_mask,
            "repeat_mask": repeat_mask, "lm_mask": lm_mask, "num_docs": num_docs}


def tokenizer_corpus(seed: int, num_filler: int = 20000, num_needles: int = 16000) -> list[str]:
    """Task text for training the BPE tokenizer: filler, needles (every 3-digit group many times),
    variable statements, headers, questions and chat words."""
    rng = np.random.default_rng([seed, 0xC0])
    texts = [" ".join(filler_sentence(rng) for _ in range(20)) for _ in range(num_filler // 20)]
    avoid: set[str] = set()
    for i in range(num_needles):
        if len(avoid) > 3000:
            avoid.clear()
        key = sample_key(rng, "eval" if i % 10 == 0 else "train", avoid)
        value = int(rng.integers(1_000_000, 10_000_000))
        texts.append(" " + NEEDLE.format(key=key, value=value) + " " + QUESTION_ONE.format(key=key)
                     + "\n" + ANSWER_CUE + " " + ANSWER_ONE.format(key=key) + f" {value}, {value}")
    for _ in range(num_needles // 4):
        a, b = _var_names(rng, 2)
        v = int(rng.integers(10_000, 100_000))
        texts.append(f" {VT_FIRST.format(name=a, value=v)} {VT_NEXT.format(name=b, prev=a)} "
                     f"{QUESTION_VT.format(value=v)}\n{ANSWER_CUE} {ANSWER_VT.format(value=v)}"
                     f" {a} {b}")
    texts += [HEADER_NIAH + "\n", HEADER_VT + "\n", QUESTION_ALL.format(key="amber-falcon"),
              ANSWER_ALL.format(key="amber-falcon"), "user\n\nassistant\n\n"] * 50
    return texts


# --- data workers (spawned processes; no torch) ------------------------------------------------

_WORKER: dict = {}


def init_worker(tokenizer_json: str, pool_sentences: int, seed: int) -> None:
    """Process-pool initializer: every worker rebuilds the same encoder and filler pool."""
    os.environ["TOKENIZERS_PARALLELISM"] = "false"  # one thread per worker process
    from tokenizers import Tokenizer

    enc = Encoder(Tokenizer.from_str(tokenizer_json))
    _WORKER["enc"] = enc
    _WORKER["pool"] = FillerPool(enc, pool_sentences, seed)


def worker_rows(job: dict) -> dict:
    """One training step's rows; the RNG stream depends on (seed, stream, index) only."""
    rng = np.random.default_rng([job["seed"], job["stream"], job["index"]])
    return build_training_rows(_WORKER["enc"], _WORKER["pool"], rng, job["row_tokens"],
                               job["num_rows"], job["doc_min_tokens"], job["doc_max_tokens"],
                               job["chat_fraction"], job["lm_fraction"], job["whole_row_prob"],
                               job["echo_prob"], job["repeat_prob"])
