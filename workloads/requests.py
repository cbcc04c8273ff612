"""Requests, batches, request-file loaders, length distributions, warm-up and channel-cost models.
Over 800 lines because the request vocabulary below, the file formats that carry it and the
warm-up that writes snapshots in those formats are one contract with the NeuPIMs trace files,
imported by name from ``workloads.requests`` by 32 modules (the loaders are the seam of a
future split).

Which channel a run places a request on is decided by :mod:`mapping.channels` (policy, or the
trace's own ``ch_idx``); the warm-up here writes channels into a snapshot the way the NeuPIMs
trace generator does (data of the trace).

Vocabulary (used consistently by :mod:`workloads.graph` and the mapper):

* ``input_len``: prompt tokens of a request; ``output_len``: tokens it will generate.
* ``seq_len``: the request's *current* sequence length, i.e. the number of key/value positions its
  attention covers in the iteration being modelled (cached tokens plus the token being processed).
  For a request that has generated ``g`` tokens, ``seq_len = min(input_len + g, max_seq_len)``, the
  convention of the NeuPIMs trace generator (``trace-generator/get_distributions.py``), whose decode
  snapshots (``seq_len,ch_idx`` CSV) this package reads and reproduces. In the prefill phase a
  request's ``seq_len`` is its prompt length (all tokens processed at once).
* ``q_tokens``: tokens the request processes in the iteration (its query rows): 1 in decode,
  ``seq_len`` for a whole prompt, ``C <= seq_len`` for a chunk of a prompt whose first
  ``seq_len - C`` tokens are already in the KV cache (chunked prefill, the ``mixed`` phase).
* ``channel``: the HBM/PIM channel holding the request's KV cache (``None`` = not assigned).

File formats:

* length table (TSV): header ``input_toks<TAB>output_toks`` (optionally ``<TAB>ch_idx``), then
  one request per line;
* decode snapshot (CSV): header ``seq_len,ch_idx``, then one request per line;
* ShareGPT-style JSON: a list of
  ``{"conversations": [{"from": "human"|"gpt", "value": str}, ...]}``;
  each human turn followed directly by a model turn is one request (``input`` = the human turn,
  ``output`` = the answer; earlier turns are not added to the prompt). Tokens are counted with
  :func:`approx_token_count` unless a tokenizer function is passed.

Built-in length distributions (``'sharegpt'``, ``'alpaca'``) come from
``workloads/data/length_summary.json`` (made by ``scripts/make_length_summary.py`` from the NeuPIMs
length tables; the package does not need those tables).
"""
from __future__ import annotations

import csv
import json
import math
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Union

import numpy as np

from workloads.errors import WorkloadError, read_text

if TYPE_CHECKING:  # pragma: no cover
    from workloads.models import ModelSpec

ChannelPolicy = Literal["round_robin", "min_load"]
CostFn = Callable[[np.ndarray], np.ndarray]
_POLICIES = ("round_robin", "min_load")
BUILTIN_DATASETS = ("sharegpt", "alpaca")


# ------------------------------------------------------------------------------ request, batch
@dataclass(frozen=True, slots=True)
class Request:
    """One inference request.

    Attributes:
        id: unique identifier within its batch (non-negative).
        input_len: prompt tokens (``None`` when unknown, e.g. read from a decode snapshot).
        output_len: tokens to generate (``None`` when unknown).
        seq_len: current sequence length in tokens (>= 1), see the module docstring.
        channel: PIM/HBM channel index holding the KV cache, or ``None``.
        arrival_s: arrival time in seconds (0 when the source has no timing).
        q_tokens: tokens processed in this iteration (``1 <= q_tokens <= seq_len``; None: the
            phase's own count, 1 in decode and ``seq_len`` in prefill). Read in the ``mixed``
            phase (:mod:`workloads.graph`): 1 is a decode step (or a one-token prompt chunk,
            the same computation), more is a prompt chunk whose ``seq_len - q_tokens`` earlier
            tokens are cached.

    Raises:
        WorkloadError: a negative or non-integer field, ``q_tokens`` outside ``1..seq_len``.
    """

    id: int
    input_len: int | None
    output_len: int | None
    seq_len: int
    channel: int | None = None
    arrival_s: float = 0.0
    q_tokens: int | None = None

    def __post_init__(self) -> None:
        for key in ("id", "input_len", "output_len", "seq_len", "channel"):
            value = getattr(self, key)
            if value is None and key in ("input_len", "output_len", "channel"):
                continue
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
                raise WorkloadError(f"request {self.id!r}: {key} must be a non-negative "
                                    f"integer, got {value!r}")
            object.__setattr__(self, key, int(value))
        if self.seq_len < 1:
            raise WorkloadError(f"request {self.id}: seq_len must be >= 1, got {self.seq_len}")
        if not (self.arrival_s >= 0):
            raise WorkloadError(f"request {self.id}: arrival_s must be >= 0, got "
                                f"{self.arrival_s!r}")
        q = self.q_tokens
        if q is not None:
            if isinstance(q, bool) or not isinstance(q, (int, np.integer)) or not (
                    1 <= q <= self.seq_len):
                raise WorkloadError(f"request {self.id}: q_tokens must be an integer in "
                                    f"1..seq_len={self.seq_len}, got {q!r}")
            object.__setattr__(self, "q_tokens", int(q))


@dataclass(frozen=True)
class Batch:
    """An immutable, ordered batch of :class:`Request` objects with unique ids.

    Attributes:
        requests: the requests (a tuple; a list is accepted and converted).
        source: where the batch came from (file path, generator and seed), for reports.
        lines: line of ``source`` each request was read from (empty when not from a file), so
            that a check of a later stage (a channel the machine lacks) can name it.

    Raises:
        WorkloadError: duplicate request ids (names the id and both indices).
    """

    requests: tuple[Request, ...]
    source: str = ""
    lines: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        reqs = tuple(self.requests)
        object.__setattr__(self, "requests", reqs)
        object.__setattr__(self, "lines", tuple(self.lines))
        seen: dict[int, int] = {}
        for i, r in enumerate(reqs):
            if not isinstance(r, Request):
                raise WorkloadError(f"batch element {i} is {type(r).__name__}, not a Request")
            if r.id in seen:
                raise WorkloadError(f"batch: duplicate request id {r.id} at indices "
                                    f"{seen[r.id]} and {i}")
            seen[r.id] = i

    def __len__(self) -> int:
        return len(self.requests)

    def __iter__(self) -> Iterator[Request]:
        return iter(self.requests)

    def __getitem__(self, index: int) -> Request:
        return self.requests[index]

    @property
    def ids(self) -> np.ndarray:
        """Request ids, shape ``[n]``."""
        return np.array([r.id for r in self.requests], dtype=np.int64)

    @property
    def seq_lens(self) -> np.ndarray:
        """Current sequence lengths, shape ``[n]`` (tokens)."""
        return np.array([r.seq_len for r in self.requests], dtype=np.int64)

    @property
    def channels(self) -> np.ndarray:
        """Channel of each request, shape ``[n]``; ``-1`` where unassigned."""
        return np.array([-1 if r.channel is None else r.channel for r in self.requests],
                        dtype=np.int64)

    def q_tokens(self, phase: str) -> np.ndarray:
        """Query tokens of each request in ``phase``, shape ``[n]``: 1 in decode, ``seq_len``
        in prefill, the request's ``q_tokens`` (default 1) in ``mixed``.

        Raises:
            WorkloadError: an unknown phase.
        """
        if phase == "decode":
            return np.ones(len(self.requests), dtype=np.int64)
        if phase == "prefill":
            return self.seq_lens
        if phase == "mixed":
            return np.array([1 if r.q_tokens is None else r.q_tokens for r in self.requests],
                            dtype=np.int64)
        raise WorkloadError(f"phase {phase!r} not one of ['prefill', 'decode', 'mixed']")

    def tokens(self, phase: str) -> int:
        """Tokens processed in one iteration: ``n`` in decode, ``sum(seq_len)`` in prefill,
        ``sum(q_tokens)`` in mixed."""
        return int(self.q_tokens(phase).sum())

    def validate_for_model(self, model: "ModelSpec") -> None:
        """Check that every request's current ``seq_len`` fits the model's context.

        Only ``seq_len`` (what the iteration processes) is checked: like the NeuPIMs trace
        generator, a warmed-up request whose prompt plus output outgrows the context keeps
        decoding with ``seq_len`` clamped to ``max_seq_len``.

        Raises:
            WorkloadError: the first request whose ``seq_len`` exceeds ``model.max_seq_len``,
                naming its index and id; or an empty batch.
        """
        if not self.requests:
            raise WorkloadError(f"batch{self._src()} is empty")
        for i, r in enumerate(self.requests):
            if r.seq_len > model.max_seq_len:
                raise WorkloadError(
                    f"batch{self._src()}: request index {i} (id {r.id}) has seq_len "
                    f"{r.seq_len} > max_seq_len {model.max_seq_len} of model '{model.name}'")

    def _src(self) -> str:
        return f" from {self.source}" if self.source else ""

    def with_channels(self, channels: Sequence[int] | np.ndarray) -> "Batch":
        """A copy whose request ``i`` sits on ``channels[i]``."""
        if len(channels) != len(self.requests):
            raise WorkloadError(f"with_channels: {len(channels)} channels for "
                                f"{len(self.requests)} requests")
        return Batch(tuple(replace(r, channel=int(c)) for r, c in zip(self.requests, channels)),
                     self.source, self.lines)

    def head(self, n: int) -> "Batch":
        """The first ``n`` requests (source and lines kept)."""
        return Batch(self.requests[:n], self.source, self.lines[:n])

    def by_channel(self) -> dict[int, list[Request]]:
        """Requests grouped by channel (unassigned under key ``-1``), channels ascending."""
        out: dict[int, list[Request]] = {}
        for r in self.requests:
            out.setdefault(-1 if r.channel is None else r.channel, []).append(r)
        return dict(sorted(out.items()))

    def summary(self) -> dict[str, Any]:
        """Counts and sequence-length statistics (JSON-serialisable)."""
        s = self.seq_lens
        ch = self.channels
        return {
            "requests": len(s),
            "seq_len_mean": float(s.mean()) if len(s) else 0.0,
            "seq_len_min": int(s.min()) if len(s) else 0,
            "seq_len_max": int(s.max()) if len(s) else 0,
            "seq_len_sum": int(s.sum()),
            "channels_used": int(np.unique(ch[ch >= 0]).size),
            "source": self.source,
        }


@dataclass(frozen=True)
class LengthTable:
    """Pairs of (input, output) token counts: a request-length *population*, not a batch.

    Attributes:
        input_toks: prompt lengths, int64 ``[n]``.
        output_toks: generated lengths, int64 ``[n]``.
        source: file it was read from.
        channels: int64 ``[n]`` KV channel of each request (the ``ch_idx`` column of a ``.tsv``
            table), or None when the table has no such column.
        lines: line of ``source`` of each row (empty when not from a file).
    """

    input_toks: np.ndarray
    output_toks: np.ndarray
    source: str = ""
    channels: np.ndarray | None = None
    lines: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        i = np.asarray(self.input_toks, dtype=np.int64)
        o = np.asarray(self.output_toks, dtype=np.int64)
        if i.shape != o.shape or i.ndim != 1:
            raise WorkloadError(f"length table {self.source}: input and output must be 1-D of "
                                f"equal length, got {i.shape} and {o.shape}")
        i.setflags(write=False)
        o.setflags(write=False)
        object.__setattr__(self, "input_toks", i)
        object.__setattr__(self, "output_toks", o)
        object.__setattr__(self, "lines", tuple(self.lines))
        if self.channels is not None:
            c = np.asarray(self.channels, dtype=np.int64)
            if c.shape != i.shape:
                raise WorkloadError(f"length table {self.source}: {c.size} channels for "
                                    f"{i.size} rows")
            c.setflags(write=False)
            object.__setattr__(self, "channels", c)

    def __len__(self) -> int:
        return int(self.input_toks.size)

    def to_batch(self, limit: int | None = None) -> Batch:
        """The first ``limit`` (default all) rows as requests awaiting prefill.

        ``seq_len = max(input, 1)``, ids are row indices.
        """
        n = len(self) if limit is None else min(limit, len(self))
        return Batch(tuple(Request(k, int(self.input_toks[k]), int(self.output_toks[k]),
                                   max(1, int(self.input_toks[k]))) for k in range(n)),
                     source=self.source)


# ---------------------------------------------------------------------------------- loaders
def _open_text(path: Path) -> Iterator[tuple[int, str]]:
    try:
        with path.open(encoding="utf-8") as f:
            for lineno, line in enumerate(f, start=1):
                yield lineno, line.rstrip("\r\n")
    except OSError as exc:
        raise WorkloadError(f"{path}: cannot read ({exc.strerror})") from None
    except UnicodeDecodeError as exc:
        raise WorkloadError(f"{path}: not a text file (byte {exc.start} is not UTF-8; binary?)") \
            from None


def _parse_int(path: Path, lineno: int, key: str, text: str, minimum: int) -> int:
    try:
        value = int(text.strip())
    except ValueError:
        raise WorkloadError(f"{path}:{lineno}: {key} = {text!r} is not an integer") from None
    if value < minimum:
        raise WorkloadError(f"{path}:{lineno}: {key} = {value} must be >= {minimum}")
    return value


def load_length_table(path: str | Path) -> LengthTable:
    """Read a request-length table (TSV, header ``input_toks<TAB>output_toks``, optionally a
    third column ``ch_idx``: the KV channel of each request, kept by ``--keep-channels``).

    Blank lines are ignored. Returns a :class:`LengthTable`.

    Raises:
        WorkloadError: missing file, wrong header, or a malformed line (names file and line).
    """
    p = Path(path)
    ins: list[int] = []
    outs: list[int] = []
    chans: list[int] = []
    lines: list[int] = []
    cols: list[str] = []
    for lineno, line in _open_text(p):
        if not line.strip():
            continue
        fields = line.split("\t")
        if not cols:
            names = [f.strip() for f in fields]
            if names not in (["input_toks", "output_toks"],
                             ["input_toks", "output_toks", "ch_idx"]):
                raise WorkloadError(f"{p}:{lineno}: expected header 'input_toks<TAB>output_toks'"
                                    f" (optionally <TAB>ch_idx), got {line!r}")
            cols = names
            continue
        if len(fields) != len(cols):
            raise WorkloadError(f"{p}:{lineno}: expected {len(cols)} tab-separated fields "
                                f"({', '.join(cols)}), got {len(fields)}: {line!r}")
        ins.append(_parse_int(p, lineno, "input_toks", fields[0], 0))
        outs.append(_parse_int(p, lineno, "output_toks", fields[1], 0))
        if len(cols) == 3:
            chans.append(_parse_int(p, lineno, "ch_idx", fields[2], 0))
        lines.append(lineno)
    if not cols:
        raise WorkloadError(f"{p}: empty file (expected header 'input_toks<TAB>output_toks')")
    if not ins:
        raise WorkloadError(f"{p}: no rows after the header")
    return LengthTable(np.array(ins), np.array(outs), source=str(p),
                       channels=np.array(chans) if len(cols) == 3 else None,
                       lines=tuple(lines))


def load_decode_snapshot(path: str | Path) -> Batch:
    """Read a decode-batch snapshot (CSV, header ``seq_len,ch_idx``) as a :class:`Batch`.

    Request ids are the 0-based data-row indices; ``input_len``/``output_len`` are unknown
    (``None``). This is the format of the NeuPIMs request traces
    (``share-gpt2-bs512-ms7B-tp4-clb-0.csv``).

    Raises:
        WorkloadError: missing file, wrong header, or a malformed line (names file and line).
    """
    p = Path(path)
    reqs: list[Request] = []
    lines: list[int] = []
    header_seen = False
    for lineno, line in _open_text(p):
        if not line.strip():
            continue
        fields = line.split(",")
        if not header_seen:
            if [f.strip() for f in fields] != ["seq_len", "ch_idx"]:
                raise WorkloadError(f"{p}:{lineno}: expected header 'seq_len,ch_idx', "
                                    f"got {line!r}")
            header_seen = True
            continue
        if len(fields) != 2:
            raise WorkloadError(f"{p}:{lineno}: expected 2 comma-separated fields (seq_len, "
                                f"ch_idx), got {len(fields)}: {line!r}")
        seq = _parse_int(p, lineno, "seq_len", fields[0], 1)
        ch = _parse_int(p, lineno, "ch_idx", fields[1], 0)
        reqs.append(Request(len(reqs), None, None, seq, ch))
        lines.append(lineno)
    if not header_seen:
        raise WorkloadError(f"{p}: empty file (expected header 'seq_len,ch_idx')")
    if not reqs:
        raise WorkloadError(f"{p}: no rows after the header")
    return Batch(tuple(reqs), source=str(p), lines=tuple(lines))


def write_decode_snapshot(batch: Batch, path: str | Path) -> None:
    """Write ``batch`` as a ``seq_len,ch_idx`` CSV (unassigned channels are an error)."""
    ch = batch.channels
    if (ch < 0).any():
        raise WorkloadError(f"{path}: every request needs a channel to write a snapshot "
                            f"(request index {int(np.argmax(ch < 0))} has none)")
    with Path(path).open("w", newline="", encoding="utf-8") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(["seq_len", "ch_idx"])
        for r in batch:
            w.writerow([r.seq_len, r.channel])


_TOKEN_PIECE = re.compile(r"[^\W\d_]+|\d+|[^\w\s]|_+")


def approx_token_count(text: str) -> int:
    """Approximate BPE token count of ``text`` without a tokenizer (none can be downloaded here).

    The text is cut into pieces by the regex ``[^\\W\\d_]+|\\d+|[^\\w\\s]|_+`` (letter runs,
    digit runs, single punctuation/symbol characters, underscore runs). Then:

    * a run of ASCII letters counts ``4/3`` token (OpenAI's rule of thumb: 100 tokens ~ 75 English
      words), plus one more per 10 letters beyond the first 10 (long words split);
    * a run of non-ASCII letters (CJK, Cyrillic, ...) counts one token per character;
    * a digit run counts ``ceil(len / 3)`` tokens (GPT-2 BPE merges up to ~3 digits);
    * each punctuation/symbol piece counts one token.

    The total is rounded up. Expect roughly +-20 % against GPT-2 BPE on English prose and larger
    errors on code or other scripts; pass a real tokenizer to :func:`load_sharegpt_json` when
    precision matters.
    """
    total = 0.0
    for piece in _TOKEN_PIECE.findall(text):
        c = piece[0]
        if c.isdigit():
            total += math.ceil(len(piece) / 3)
        elif c.isalpha():
            if piece.isascii():
                total += 4.0 / 3.0 + max(0, len(piece) - 10) // 10
            else:
                total += len(piece)
        else:
            total += 1
    return math.ceil(total - 1e-9)


_HUMAN_ROLES = ("human", "user")
_MODEL_ROLES = ("gpt", "assistant", "chatgpt", "bard", "bing", "model")
_OTHER_ROLES = ("system",)


def load_sharegpt_json(path: str | Path,
                       count_tokens: Callable[[str], int] = approx_token_count) -> LengthTable:
    """Read a ShareGPT-style conversations file into a :class:`LengthTable`.

    Format: a JSON list (or JSON Lines, one object per line, when the suffix is ``.jsonl``) of
    objects ``{"conversations": [{"from": ROLE, "value": TEXT}, ...]}``. Roles ``human``/``user``
    start a request; the immediately following ``gpt``/``assistant``/``chatgpt``/``bard``/
    ``bing``/``model`` turn is its answer; ``system`` turns are skipped. A human turn without an
    answer is dropped. ``input_toks = count_tokens(human text)``,
    ``output_toks = count_tokens(answer)`` (the NeuPIMs tokenize_stat.py also counts single turns,
    with the openai-gpt tokenizer).

    Args:
        path: the JSON / JSONL file.
        count_tokens: text -> token count; default :func:`approx_token_count`.

    Raises:
        WorkloadError: unreadable or invalid JSON, wrong structure or an unknown role (names the
            file, the conversation index and the turn index), or no request found.
    """
    p = Path(path)
    text = read_text(p, "ShareGPT conversations (JSON)")
    items: list[Any]
    try:
        if p.suffix == ".jsonl":
            items = []
            for lineno, line in enumerate(text.splitlines(), start=1):
                if line.strip():
                    try:
                        items.append(json.loads(line))
                    except json.JSONDecodeError as exc:
                        raise WorkloadError(f"{p}:{lineno}: invalid JSON ({exc.msg})") from None
        else:
            items = json.loads(text)
    except json.JSONDecodeError as exc:
        raise WorkloadError(f"{p}:{exc.lineno}: invalid JSON ({exc.msg})") from None
    if not isinstance(items, list):
        raise WorkloadError(f"{p}: expected a JSON list of conversations at top level")
    ins: list[int] = []
    outs: list[int] = []
    for i, item in enumerate(items):
        if not isinstance(item, dict) or not isinstance(item.get("conversations"), list):
            raise WorkloadError(f"{p}: conversation index {i}: expected an object with key "
                                "'conversations' (a list of turns)")
        pending: str | None = None
        for t, turn in enumerate(item["conversations"]):
            if not isinstance(turn, dict) or "from" not in turn or "value" not in turn:
                raise WorkloadError(f"{p}: conversation index {i}, turn {t}: expected keys "
                                    "'from' and 'value'")
            role, value = turn["from"], turn["value"]
            if not isinstance(value, str):
                raise WorkloadError(f"{p}: conversation index {i}, turn {t}: 'value' must be a "
                                    "string")
            if role in _HUMAN_ROLES:
                pending = value
            elif role in _MODEL_ROLES:
                if pending is not None:
                    ins.append(int(count_tokens(pending)))
                    outs.append(int(count_tokens(value)))
                pending = None
            elif role not in _OTHER_ROLES:
                raise WorkloadError(
                    f"{p}: conversation index {i}, turn {t}: key 'from' = {role!r} not one of "
                    f"{list(_HUMAN_ROLES + _MODEL_ROLES + _OTHER_ROLES)}")
    if not ins:
        raise WorkloadError(f"{p}: no (human, answer) turn pair found")
    return LengthTable(np.array(ins), np.array(outs), source=str(p))


def load_request_file(path: str | Path) -> Batch | LengthTable:
    """Load any supported request file, chosen by suffix.

    ``.csv`` -> decode snapshot (:class:`Batch`); ``.tsv`` -> :class:`LengthTable`;
    ``.json``/``.jsonl`` -> ShareGPT conversations (:class:`LengthTable`).

    Raises:
        WorkloadError: unknown suffix (lists the allowed ones) or a loader error.
    """
    p = Path(path)
    suffix = p.suffix.lower()
    if suffix == ".csv":
        return load_decode_snapshot(p)
    if suffix == ".tsv":
        return load_length_table(p)
    if suffix in (".json", ".jsonl"):
        return load_sharegpt_json(p)
    raise WorkloadError(f"{p}: unknown request file type {suffix!r}; allowed: .csv (decode "
                        "snapshot seq_len,ch_idx), .tsv (length table), .json/.jsonl (ShareGPT)")


# ------------------------------------------------------------------------ length distributions
@dataclass(frozen=True)
class LengthDistribution:
    """A built-in (input, output) length distribution: marginal quantiles plus a rank copula.

    Attributes:
        name: ``'sharegpt'`` or ``'alpaca'``.
        input_q, input_v: quantile levels in [0, 1] and token counts of the input marginal
            (percentiles 0..100 plus tail quantiles), ascending.
        output_q, output_v: the same for the output marginal.
        joint: ``[B, B]`` counts of rows by (input rank bin, output rank bin).
        mean_input, mean_output: means of the source table (tokens).
        provenance: how the summary was made.
    """

    name: str
    input_q: np.ndarray
    input_v: np.ndarray
    output_q: np.ndarray
    output_v: np.ndarray
    joint: np.ndarray
    mean_input: float
    mean_output: float
    provenance: str = field(default="", repr=False)

    def sample(self, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """Draw ``n`` (input, output) pairs, int64 arrays ``[n]``.

        A cell ``(i, j)`` of the joint table is drawn with probability proportional to its count;
        the input rank is uniform in ``[i/B, (i+1)/B)`` and mapped through the piecewise-linear
        inverse CDF of the input quantiles (likewise for the output), then rounded. Marginals are
        reproduced to the quantile grid's resolution; input/output dependence to ``1/B`` in rank.
        Inputs and outputs are at least 1 token.
        """
        b = self.joint.shape[0]
        p = self.joint.ravel() / self.joint.sum()
        cells = rng.choice(p.size, size=n, p=p)
        ui = (cells // b + rng.random(n)) / b
        uo = (cells % b + rng.random(n)) / b
        inp = np.rint(np.interp(ui, self.input_q, self.input_v)).astype(np.int64)
        out = np.rint(np.interp(uo, self.output_q, self.output_v)).astype(np.int64)
        return np.maximum(inp, 1), np.maximum(out, 1)


def _grid(marg: dict) -> tuple[np.ndarray, np.ndarray]:
    q = np.concatenate([np.arange(101, dtype=float), np.asarray(marg["tail_quantiles"], float)])
    v = np.concatenate([np.asarray(marg["percentiles"], float),
                        np.asarray(marg["tail_values"], float)])
    order = np.argsort(q, kind="stable")
    return q[order] / 100.0, np.maximum.accumulate(v[order])


@lru_cache(maxsize=None)
def length_distribution(name: str) -> LengthDistribution:
    """The built-in length distribution ``name`` (``'sharegpt'`` or ``'alpaca'``).

    Raises:
        WorkloadError: unknown name (lists the valid ones) or a damaged summary file.
    """
    if name not in BUILTIN_DATASETS:
        raise WorkloadError(f"unknown dataset {name!r}; valid: {', '.join(BUILTIN_DATASETS)}")
    res = resources.files("workloads.data").joinpath("length_summary.json")
    try:
        data = json.loads(res.read_text(encoding="utf-8"))
        d = data["datasets"][name]
        iq, iv = _grid(d["input_toks"])
        oq, ov = _grid(d["output_toks"])
        joint = np.asarray(d["joint"]["counts"], dtype=np.float64)
    except (OSError, KeyError, ValueError) as exc:
        raise WorkloadError(f"{res}: damaged length summary ({exc!r}); regenerate it with "
                            "scripts/make_length_summary.py") from None
    return LengthDistribution(name, iq, iv, oq, ov, joint, float(d["input_toks"]["mean"]),
                              float(d["output_toks"]["mean"]), data.get("provenance", ""))


LengthSource = Union[str, LengthDistribution, LengthTable, Batch, Sequence[Request]]


class _PairSource:
    """Draws (input, output) pairs from any :data:`LengthSource`, in pre-drawn chunks."""

    def __init__(self, source: LengthSource, rng: np.random.Generator) -> None:
        self.rng = rng
        self.dist: LengthDistribution | None = None
        self.table: tuple[np.ndarray, np.ndarray] | None = None
        if isinstance(source, str):
            self.dist = length_distribution(source)
        elif isinstance(source, LengthDistribution):
            self.dist = source
        elif isinstance(source, LengthTable):
            keep = source.output_toks > 0
            if not keep.any():
                raise WorkloadError(f"length table {source.source}: every output_toks is 0")
            self.table = (np.maximum(source.input_toks[keep], 1), source.output_toks[keep])
        else:
            reqs = list(source)
            if not reqs:
                raise WorkloadError("request pool is empty")
            for i, r in enumerate(reqs):
                if r.input_len is None or r.output_len is None:
                    raise WorkloadError(f"request pool index {i} (id {r.id}) has no input_len/"
                                        "output_len; a decode snapshot cannot seed sampling")
            pairs = [(max(r.input_len, 1), r.output_len) for r in reqs if r.output_len]
            if not pairs:
                raise WorkloadError("request pool: every output_len is 0")
            arr = np.array(pairs, dtype=np.int64)
            self.table = (arr[:, 0], arr[:, 1])
        self._buf: tuple[np.ndarray, np.ndarray] = (np.empty(0, np.int64),) * 2
        self._pos = 0

    def draw(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        if self.dist is not None:
            return self.dist.sample(n, self.rng)
        assert self.table is not None
        idx = self.rng.integers(0, self.table[0].size, size=n)
        return self.table[0][idx], self.table[1][idx]

    def take(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        """Like :meth:`draw` but served from a pre-drawn buffer (fast for many small draws)."""
        if self._pos + n > self._buf[0].size:
            self._buf = self.draw(max(4096, n))
            self._pos = 0
        s = slice(self._pos, self._pos + n)
        self._pos += n
        return self._buf[0][s], self._buf[1][s]


def sample_requests(dataset: LengthSource, n: int, seed: int = 0,
                    max_seq_len: int | None = None) -> Batch:
    """Draw ``n`` requests awaiting prefill (``seq_len = input_len``), ids ``0..n-1``.

    Args:
        dataset: ``'sharegpt'``/``'alpaca'`` (built-in distribution, see
            :meth:`LengthDistribution.sample`), a :class:`LengthTable` or a request pool (rows
            drawn uniformly with replacement, zero-output rows skipped, like the NeuPIMs trace
            generator).
        n: number of requests (>= 1).
        seed: seed of ``numpy.random.default_rng``.
        max_seq_len: when given, pairs whose ``input_len`` exceeds it are redrawn.

    Raises:
        WorkloadError: bad ``n``/dataset, or no pair fits ``max_seq_len`` after many redraws.
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise WorkloadError(f"sample_requests: n must be a positive integer, got {n!r}")
    rng = np.random.default_rng(seed)
    src = _PairSource(dataset, rng)
    inp, out = src.draw(n)
    if max_seq_len is not None:
        for _ in range(100):
            bad = inp > max_seq_len
            if not bad.any():
                break
            ri, ro = src.draw(int(bad.sum()))
            inp, out = inp.copy(), out.copy()
            inp[bad], out[bad] = ri, ro
        else:
            raise WorkloadError(f"sample_requests: could not draw prompts <= max_seq_len "
                                f"{max_seq_len} from {_describe(dataset)}")
    reqs = tuple(Request(k, int(inp[k]), int(out[k]), int(inp[k])) for k in range(n))
    return Batch(reqs, source=f"sample_requests({_describe(dataset)}, n={n}, seed={seed})")


def _describe(source: LengthSource) -> str:
    if isinstance(source, str):
        return repr(source)
    if isinstance(source, LengthDistribution):
        return repr(source.name)
    if isinstance(source, (LengthTable, Batch)):
        return source.source or type(source).__name__
    return "request pool"


# -------------------------------------------------------------------- channel assignment costs
def cost_function(cost: str | CostFn) -> CostFn:
    """The attention cost per request used to balance channels: ``'seq_len'`` (tokens) or a
    callable ``f(seq_lens int[n]) -> float64[n]``.

    Raises:
        WorkloadError: an unknown name.
    """
    if callable(cost):
        return cost
    if cost == "seq_len":
        return lambda s: np.asarray(s, dtype=np.float64)
    raise WorkloadError(f"channel cost {cost!r} not one of ['seq_len'] or a callable")


def neupims_attention_cost(model: "ModelSpec", tp: int | None = None, page_elems: int = 512,
                           banks_per_channel: int = 32, gwrite_cycles: int = 100,
                           gemv_cycles: int = 184) -> CostFn:
    """PIM attention-latency estimate of the NeuPIMs trace generator, as a cost function.

    From ``trace-generator/channel_load_balancing.py`` (``estimate_mha_latency``) of the NeuPIMs
    artifact, for a request of sequence length ``L`` on one device (``E = d_model / tp``,
    ``h`` = query heads per device, ``hd`` = head_dim)::

        c1 = ceil(E / page_elems);            t1 = ceil(L / banks_per_channel)   # q . K^T
        c2 = ceil(L / page_elems) * h;        t2 = ceil(hd / banks_per_channel)  # p . V
        latency = c1 * gwrite + c1 * t1 * gemv + c2 * gwrite + c2 * t2 * gemv   (cycles)

    The reference multiplies ``c2`` by the model's *total* head count; here the heads on the
    device are used, consistent with ``E = d_model / tp`` (a constant factor for load balancing).
    The defaults are the reference's (page of 512 fp16 elements, 32 banks, GWRITE 100 cycles,
    fused GEMV 184 cycles); the mapper should pass the configured machine's values.

    Returns:
        ``f(seq_lens int[n]) -> float64[n]`` estimated cycles per request.
    """
    tp = model.tensor_parallel if tp is None else tp
    e = model.d_model / tp
    h = model.heads_per_device(tp)
    c1 = math.ceil(e / page_elems)
    t2 = math.ceil(model.head_dim / banks_per_channel)

    def cost(seq_lens: np.ndarray) -> np.ndarray:
        L = np.asarray(seq_lens, dtype=np.int64)
        t1 = -(-L // banks_per_channel)
        c2 = -(-L // page_elems) * h
        return (c1 * gwrite_cycles + c1 * t1 * gemv_cycles + c2 * gwrite_cycles
                + c2 * t2 * gemv_cycles).astype(np.float64)

    return cost


def channel_loads(batch: Batch, n_channels: int, cost: str | CostFn = "seq_len") -> np.ndarray:
    """Sum of request costs per channel, float64 ``[n_channels]``.

    Raises:
        WorkloadError: a request without a channel or with a channel >= ``n_channels``.
    """
    ch = batch.channels
    if (ch < 0).any() or (ch >= n_channels).any():
        i = int(np.argmax((ch < 0) | (ch >= n_channels)))
        raise WorkloadError(f"channel_loads: request index {i} has channel {int(ch[i])}, "
                            f"allowed 0..{n_channels - 1}")
    return np.bincount(ch, weights=cost_function(cost)(batch.seq_lens), minlength=n_channels)


# ------------------------------------------------------------------------- continuous batching
def default_warmup_iterations(max_seq_len: int) -> int:
    """Default warm-up length: ``8 * max_seq_len`` decode iterations.

    Every request whose output is shorter than that has been replaced several times, so the
    snapshot is in steady state except for the extreme output tail (ShareGPT: requests with more
    than 16k output tokens hold ~0.13 % of the batch slots in steady state).
    """
    return 8 * max_seq_len


def warmup_decode_snapshot(dataset: LengthSource, max_batch: int, max_seq_len: int = 2048,
                           seed: int = 0, iterations: int | None = None,
                           n_channels: int | None = 32, policy: ChannelPolicy = "min_load",
                           cost: str | CostFn = "seq_len") -> Batch:
    """Warm up a continuously batched decoder and return its decode batch (a snapshot).

    Follows the NeuPIMs trace generator (``get_distributions.py``, ``BatchedRequest``):

    1. fill ``max_batch`` slots with requests drawn from ``dataset`` (``generated = 0``);
    2. each decode iteration every request generates one token; a request that has generated
       ``output_len`` tokens leaves, and its slot is refilled with a new request (whose prefill is
       assumed to have just run), iteration-level scheduling as in ORCA;
    3. new requests get a channel when admitted and keep it: ``round_robin`` continues a global
       pointer, ``min_load`` puts the admitted requests (largest ``seq_len`` first) on the channel
       with the smallest total cost of the requests already there, at their current lengths;
    4. after ``iterations`` iterations (and the refill that follows the last one) the batch is
       returned with ``seq_len = min(input_len + generated, max_seq_len)`` (a request longer than
       the context keeps decoding with its attention window clamped, as in the reference).

    Differences from the reference, all second order: the reference removes finished requests
    only every 10 iterations, and its round robin skips channels without free KV capacity (the
    mapper, not this function, checks capacity). Time is jumped from one completion to the next,
    so the cost is proportional to the number of completions, not iterations x batch.

    Args:
        dataset: a built-in name, :class:`LengthDistribution`, :class:`LengthTable` or request
            pool (see :func:`sample_requests`).
        max_batch: batch size (slots).
        max_seq_len: context limit used to clamp ``seq_len`` (tokens).
        seed: seed of ``numpy.random.default_rng``.
        iterations: decode iterations to run (default :func:`default_warmup_iterations`).
        n_channels: channels to assign (``None``: leave channels unassigned).
        policy: ``'round_robin'`` or ``'min_load'``.
        cost: attention cost for ``min_load`` (see :func:`mapping.channels.place_channels`).

    Returns:
        a :class:`Batch` of ``max_batch`` requests; ids number admissions from 0 in order, so
        ``max(ids) + 1`` requests were admitted in total.

    Raises:
        WorkloadError: bad sizes, policy or dataset.
    """
    for key, value in (("max_batch", max_batch), ("max_seq_len", max_seq_len)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise WorkloadError(f"warmup_decode_snapshot: {key} must be a positive integer, "
                                f"got {value!r}")
    if policy not in _POLICIES:
        raise WorkloadError(f"warmup_decode_snapshot: policy {policy!r} not one of "
                            f"{list(_POLICIES)}")
    if n_channels is not None and (not isinstance(n_channels, int) or n_channels < 1):
        raise WorkloadError(f"warmup_decode_snapshot: n_channels must be a positive integer or "
                            f"None, got {n_channels!r}")
    iterations = default_warmup_iterations(max_seq_len) if iterations is None else iterations
    if isinstance(iterations, bool) or not isinstance(iterations, int) or iterations < 0:
        raise WorkloadError(f"warmup_decode_snapshot: iterations must be a non-negative "
                            f"integer, got {iterations!r}")
    cost_fn = cost_function(cost)
    rng = np.random.default_rng(seed)
    src = _PairSource(dataset, rng)

    inp, out = (a.copy() for a in src.draw(max_batch))
    start = np.zeros(max_batch, dtype=np.int64)        # iteration at which the request was admitted
    ids = np.arange(max_batch, dtype=np.int64)
    next_id = max_batch
    ch = np.full(max_batch, -1, dtype=np.int64)
    rr_next = 0

    def seq_at(t: int, sel: np.ndarray | slice = slice(None)) -> np.ndarray:
        return np.minimum(inp[sel] + (t - start[sel]), max_seq_len)

    def place(new: np.ndarray, t: int) -> None:
        nonlocal rr_next
        if n_channels is None or new.size == 0:
            return
        if policy == "round_robin":
            ch[new] = (rr_next + np.arange(new.size)) % n_channels
            rr_next = int((rr_next + new.size) % n_channels)
            return
        old = np.ones(max_batch, dtype=bool)
        old[new] = False
        loads = np.bincount(ch[old], weights=cost_fn(seq_at(t, old)), minlength=n_channels)
        new_seq = seq_at(t, new)
        # largest sequence first, as the reference sorts by get_seq_len()
        for k in np.argsort(-new_seq, kind="stable"):
            c = int(np.argmin(loads))
            ch[new[k]] = c
            loads[c] += float(cost_fn(new_seq[k:k + 1])[0])

    place(np.arange(max_batch), 0)
    t = 0
    finish = start + out
    while t < iterations:
        t = min(int(finish.min()), iterations)
        done = np.flatnonzero(finish <= t)
        if done.size:
            ni, no = src.take(done.size)
            inp[done], out[done], start[done] = ni, no, t
            ids[done] = np.arange(next_id, next_id + done.size)
            next_id += done.size
            finish[done] = t + no
            place(done, t)

    seq = np.maximum(seq_at(t), 1)
    reqs = tuple(Request(int(ids[k]), int(inp[k]), int(out[k]), int(seq[k]),
                         None if n_channels is None else int(ch[k]))
                 for k in range(max_batch))
    src_name = _describe(dataset)
    return Batch(reqs, source=(f"warmup_decode_snapshot({src_name}, max_batch={max_batch}, "
                               f"max_seq_len={max_seq_len}, seed={seed}, iterations={iterations},"
                               f" policy={policy if n_channels else None})"))


def default_batch(model: "ModelSpec", n: int = 256, dataset: LengthSource = "sharegpt",
                  seed: int = 0, n_channels: int | None = 32, policy: ChannelPolicy = "min_load",
                  iterations: int | None = None) -> Batch:
    """The default decode batch of the demo: a warmed-up snapshot of ``n`` requests.

    ``warmup_decode_snapshot(dataset, max_batch=n, max_seq_len=model.max_seq_len, seed=seed,
    n_channels=n_channels, policy=policy)``; every ``seq_len`` fits the model.
    """
    return warmup_decode_snapshot(dataset, max_batch=n, max_seq_len=model.max_seq_len, seed=seed,
                                  iterations=iterations, n_channels=n_channels, policy=policy)

