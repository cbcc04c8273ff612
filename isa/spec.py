"""The instruction set as one table: the single source of truth.

Every other part of the ISA is derived from :data:`SPEC`: the 128-bit encoding
(:mod:`isa.encoding`), the text assembly (:mod:`isa.asm`), the Markdown reference
(:mod:`isa.doc`), the RTL decoder's field constants (``rtl/``), the simulator's execution
(``archsim``) and the compiler's output (``mapping``).

Encoding (fixed width, one instruction per 128-bit word, little-endian when stored as bytes):

* bits ``[7:0]`` hold the opcode;
* the operand fields follow from bit 8 upward, in the order the table lists them, each
  ``width`` bits wide (the field's ``lsb`` is computed here, see :func:`_layout`);
* every bit above the last field is reserved and must be zero (a decoder rejects the word
  otherwise).

Field kinds:

* ``u`` unsigned integer in ``[min_value, 2**width - 1]`` (``min_value`` is 1 for sizes: a
  tile of zero rows is not an instruction);
* ``s`` two's-complement signed integer;
* ``enum`` a name from ``enum`` stored as its index; indices past the list are illegal;
* ``f32`` an IEEE-754 binary32 immediate stored as its 32 raw bits.

A field may have ``aliases``: names for special values (``array=any`` is the all-ones code).

Conventions used by the semantics below: scratchpad (``spad``) addresses are byte addresses;
2-D operands in the scratchpad are dense row-major ``[rows, cols]`` tiles of the instruction's
``dtype``; HBM addresses are byte addresses in the device's flat address space (see the data
section of :class:`isa.program.Program`); sizes ``rows``/``cols``/``m``/``n``/``k`` count
elements. Semaphores are global counters shared by all streams of a program, starting at 0.

Sources: instruction classes follow NeuPIMs (Heo et al., ASPLOS 2024) and its reference
simulator (MOVIN/MOVOUT, GEMM_PRELOAD/GEMM, vector ops, PIM_HEADER/GWRITE/COMP/READRES/
PIM_COMPS_READRES); PIM commands follow Newton (He et al., MICRO 2020).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from enum import Enum

WORD_BITS = 128
"""Width of one encoded instruction."""
OPCODE_BITS = 8
"""Width of the opcode field, bits [7:0]."""
OPERAND_BITS = WORD_BITS - OPCODE_BITS
"""Bits available to operand fields."""

SPAD_ADDR_BITS = 26
"""Scratchpad byte address width: 64 MiB addressable (NeuPIMs preset: 32 MiB)."""
HBM_ADDR_BITS = 36
"""HBM byte address width: 64 GiB addressable (NeuPIMs preset: 32 GiB)."""

DTYPES: tuple[str, ...] = ("fp16", "bf16", "fp32")
"""Element types, in encoding order (a 2-bit field; code 3 is illegal)."""
DTYPE_BYTES: dict[str, int] = {"fp16": 2, "bf16": 2, "fp32": 4}
"""Storage size of one element of each dtype, in bytes."""

SOFTMAX_MASKS: tuple[str, ...] = ("none", "causal", "length")
"""Masks of VU_SOFTMAX: none; causal (row i keeps cols j <= i + len); length (keeps j < len)."""
COLLECTIVE_ALGOS: tuple[str, ...] = ("ring",)
"""All-reduce algorithms of ALL_REDUCE, in encoding order: ``ring`` is reduce-scatter then
all-gather around a ring of ``group`` devices (Patarasuk & Yuan, JPDC 2009); timed by
``archsim.npu.timing.ring_allreduce_cycles``."""
DOT_ORDERS: tuple[str, ...] = ("seq", "pim")
"""Reduction orders of VU_DOT: sequential in index order, or the PIM order (chunks of
``pim.multipliers_per_bank`` products, pairwise adder tree, chunk sums accumulated in order)."""
GELU_FORMS: tuple[str, ...] = ("erf", "tanh")
"""GELU forms: exact (erf) or the tanh approximation (GPT-2 'gelu_new')."""


class Engine(str, Enum):
    """The engine an instruction runs on; each program stream belongs to one engine kind."""

    DMA = "dma"
    SA = "sa"
    VU = "vu"
    PIM = "pim"
    SYNC = "sync"
    LINK = "link"


ENGINE_TITLES: dict[Engine, str] = {
    Engine.DMA: "DMA engine (HBM <-> scratchpad tiles)",
    Engine.SA: "Systolic arrays (weight-stationary)",
    Engine.VU: "Vector units (SIMD)",
    Engine.PIM: "PIM channel (broadcast to all banks of one HBM channel)",
    Engine.SYNC: "Synchronisation (allowed in every stream)",
    Engine.LINK: "Device links (tensor- and expert-parallel collectives, pipeline-parallel "
                 "hand-off)",
}


@dataclass(frozen=True)
class FieldSpec:
    """One operand field of an instruction.

    Attributes:
        name: operand name used by the assembler (``rows=128``) and the decoder.
        width: bits in the encoding.
        kind: ``u`` unsigned, ``s`` signed, ``enum`` (see ``enum``), ``f32`` float immediate.
        meaning: one line for the reference (units included).
        enum: names of an ``enum`` field, by code.
        min_value: smallest legal value of a ``u`` field.
        aliases: special names for values, e.g. ``(("any", 63),)``.
        lsb: position of the field's least significant bit in the word (set by the layout).
    """

    name: str
    width: int
    kind: str
    meaning: str
    enum: tuple[str, ...] = ()
    min_value: int = 0
    aliases: tuple[tuple[str, int], ...] = ()
    lsb: int = 0

    @property
    def msb(self) -> int:
        """Position of the field's most significant bit."""
        return self.lsb + self.width - 1

    @property
    def mask(self) -> int:
        """``2**width - 1``."""
        return (1 << self.width) - 1

    @property
    def lo(self) -> int:
        """Smallest legal integer value (the raw code for enums, the bits for f32)."""
        if self.kind == "s":
            return -(1 << (self.width - 1))
        return self.min_value if self.kind == "u" else 0

    @property
    def hi(self) -> int:
        """Largest legal integer value (the raw code for enums, the bits for f32)."""
        if self.kind == "s":
            return (1 << (self.width - 1)) - 1
        if self.kind == "enum":
            return len(self.enum) - 1
        return self.mask

    def range_text(self) -> str:
        """Human-readable legal range, e.g. ``1..16383`` or ``fp16|bf16|fp32``."""
        if self.kind == "enum":
            return "|".join(self.enum)
        if self.kind == "f32":
            return "binary32"
        text = f"{self.lo}..{self.hi}"
        if self.aliases:
            text += ", " + ", ".join(f"{n}={v}" for n, v in self.aliases)
        return text

    def kind_text(self) -> str:
        """``14-bit unsigned`` and the like, for error messages and the reference."""
        words = {"u": "unsigned", "s": "signed", "enum": "enum", "f32": "float"}
        return f"{self.width}-bit {words[self.kind]}"


@dataclass(frozen=True)
class InstrSpec:
    """One instruction: opcode, mnemonic, engine, operand fields and semantics.

    Attributes:
        opcode: 8-bit opcode (bits [7:0] of the word).
        mnemonic: assembler name (upper case).
        engine: the engine kind that executes it.
        fields: operand fields in encoding order (lsb set by the layout).
        semantics: one line stating what it does.
        latency_key: the ``npu.vector.latency_cycles`` key that times a VU instruction.
    """

    opcode: int
    mnemonic: str
    engine: Engine
    fields: tuple[FieldSpec, ...]
    semantics: str
    latency_key: str = ""

    @property
    def used_bits(self) -> int:
        """Opcode plus operand bits; the rest of the word is reserved (zero)."""
        return OPCODE_BITS + sum(f.width for f in self.fields)

    def field(self, name: str) -> FieldSpec:
        """The field called ``name``; KeyError when the instruction has none."""
        for f in self.fields:
            if f.name == name:
                return f
        raise KeyError(name)

    @property
    def field_names(self) -> tuple[str, ...]:
        """Operand names in encoding order."""
        return tuple(f.name for f in self.fields)


# ---- field constructors ----------------------------------------------------------------------
def _u(name: str, width: int, meaning: str, min_value: int = 0,
       aliases: tuple[tuple[str, int], ...] = ()) -> FieldSpec:
    return FieldSpec(name, width, "u", meaning, min_value=min_value, aliases=aliases)


def _enum(name: str, names: tuple[str, ...], width: int, meaning: str) -> FieldSpec:
    return FieldSpec(name, width, "enum", meaning, enum=names)


def _f32(name: str, meaning: str) -> FieldSpec:
    return FieldSpec(name, 32, "f32", meaning)


def _spad(name: str, meaning: str) -> FieldSpec:
    return _u(name, SPAD_ADDR_BITS, f"scratchpad byte address of {meaning}")


def _dtype(name: str = "dtype", meaning: str = "element type of the operands") -> FieldSpec:
    return _enum(name, DTYPES, 2, meaning)


ARRAY_ANY = 63
"""Code of ``array=any`` (the all-ones value of the 6-bit array field)."""

_ROWS = _u("rows", 16, "rows of the tile (elements)", min_value=1)
_COLS = _u("cols", 16, "columns of the tile (elements)", min_value=1)
_CHANNEL = _u("channel", 10, "HBM/PIM channel; must equal the stream's index (pimN)")
_BG_MASK = _u("bg_mask", 16, "bank groups addressed (bit i = bank group i, every rank); 0 = all")
_COL = _u("col", 8, "first column step; element offset in the row = col x multipliers per bank")
_N_COMPS = _u("n_comps", 12, "COMP steps (each multipliers_per_bank elements)", min_value=1)
_SEM = _u("sem", 16, "semaphore number")
_COUNT = _u("count", 16, "amount added / required and subtracted", min_value=1)
_DMA_FIELDS = (
    _spad("spad", "the dense [rows, cols] tile"),
    _u("hbm", HBM_ADDR_BITS, "HBM byte address of row 0"),
    _u("rows", 14, "rows of the tile", min_value=1),
    _u("cols", 14, "elements per row", min_value=1),
    _u("stride", 28, "bytes between consecutive rows in HBM (0 repeats one row)"),
    _dtype(),
)
_LINK_BYTES = _u("bytes", HBM_ADDR_BITS, "bytes of the tensor (per device)", min_value=1)
_PEER = _u("peer", 10, "pipeline stage at the other end of the hand-off")
_ARRAY = _u("array", 6, "systolic array index, or any", aliases=(("any", ARRAY_ANY),))
_EPS = _u("eps_exp", 4, "epsilon = 10**-eps_exp")


def _unary(name: str, semantics: str, opcode: int, key: str, *extra: FieldSpec) -> InstrSpec:
    return InstrSpec(opcode, name, Engine.VU,
                     (_spad("dst", "the [rows, cols] result"),
                      _spad("src", "the [rows, cols] input"), _ROWS, _COLS, _dtype(), *extra), semantics, latency_key=key)


# ---- the table -------------------------------------------------------------------------------
_TABLE: tuple[InstrSpec, ...] = (
    # --- synchronisation ---
    InstrSpec(0x01, "NOP", Engine.SYNC, (), "Does nothing."),
    InstrSpec(0x02, "SIGNAL", Engine.SYNC, (_SEM, _COUNT),
              "When every earlier instruction of this stream has completed, sem += count "
              "(does not stall later instructions)."),
    InstrSpec(0x03, "WAIT", Engine.SYNC, (_SEM, _COUNT),
              "Stall this stream until sem >= count, then sem -= count."),
    InstrSpec(0x0F, "END", Engine.SYNC, (),
              "End of the stream: it finishes when all its instructions have completed."),
    # --- DMA ---
    InstrSpec(0x10, "DMA_LOAD", Engine.DMA, _DMA_FIELDS,
              "spad[rows, cols] <- HBM rows at hbm + r*stride (cols*size(dtype) bytes each)."),
    InstrSpec(0x11, "DMA_STORE", Engine.DMA, _DMA_FIELDS,
              "HBM rows at hbm + r*stride <- spad[rows, cols]."),
    # --- systolic arrays ---
    InstrSpec(0x20, "SA_LOADW", Engine.SA,
              (_ARRAY, _spad("w", "the [k, n] weight tile"),
               _u("k", 12, "weight rows (reduction length), <= array height H", min_value=1),
               _u("n", 12, "weight columns (outputs), <= array width W", min_value=1),
               _dtype()),
              "Preload weights W[k, n] into the array's shadow buffer (overlaps the running "
              "matmul); the next SA_MATMUL on that array switches to them."),
    InstrSpec(0x21, "SA_MATMUL", Engine.SA,
              (_ARRAY, _spad("src", "the [m, k] input rows"), _spad("dst", "the [m, n] output"),
               _u("m", 16, "input rows streamed through the array", min_value=1),
               _u("n", 12, "output columns; must equal the loaded weights' n", min_value=1),
               _u("k", 12, "reduction length; must equal the loaded weights' k", min_value=1),
               _u("acc", 1, "1: dst += result, 0: dst = result"),
               _dtype("dtype", "element type of src and of the weights"),
               _dtype("out_dtype", "element type of dst")),
              "dst[m, n] (+)= src[m, k] @ W[k, n], fp32 partial sums down the array (k in "
              "order), rounded once to out_dtype."),
    # --- vector units ---
    InstrSpec(0x30, "VU_ADD", Engine.VU,
              (_spad("dst", "the [rows, cols] result"), _spad("a", "the [rows, cols] input"),
               _spad("b", "the [rows, cols] input, or [1, cols] with bcast=1"), _ROWS, _COLS,
               _u("bcast", 1, "1: b is one row broadcast over all rows"), _dtype()),
              "dst = a + b (elementwise, fp32 arithmetic).", latency_key="add"),
    InstrSpec(0x31, "VU_MUL", Engine.VU,
              (_spad("dst", "the [rows, cols] result"), _spad("a", "the [rows, cols] input"),
               _spad("b", "the [rows, cols] input, or [1, cols] with bcast=1"), _ROWS, _COLS,
               _u("bcast", 1, "1: b is one row broadcast over all rows"), _dtype()),
              "dst = a * b (elementwise, fp32 arithmetic).", latency_key="mul"),
    _unary("VU_SCALE", "dst = src * imm.", 0x32, "scale", _f32("imm", "scale factor")),
    InstrSpec(0x33, "VU_LAYERNORM", Engine.VU,
              (_spad("dst", "the [rows, cols] result"), _spad("src", "the [rows, cols] input"),
               _spad("params", "[2, cols]: gamma row then beta row (dtype)"), _ROWS, _COLS,
               _dtype(), _EPS),
              "Row-wise dst = (x - mean) / sqrt(var + eps) * gamma + beta (biased variance).",
              latency_key="layernorm"),
    InstrSpec(0x34, "VU_RMSNORM", Engine.VU,
              (_spad("dst", "the [rows, cols] result"), _spad("src", "the [rows, cols] input"),
               _spad("gamma", "[1, cols] gain (dtype)"), _ROWS, _COLS, _dtype(), _EPS),
              "Row-wise dst = x / sqrt(mean(x^2) + eps) * gamma.", latency_key="rmsnorm"),
    _unary("VU_SOFTMAX", "Row-wise softmax; masked entries (see mask) are set to 0. With "
           "lse=1 it also writes each row's log-sum-exp of its kept entries, log(sum(exp(x))) "
           "(-inf for a row that keeps none), fp32 [rows] at dst + rows*cols*size(dtype): the "
           "statistic that merges softmaxes of key blocks (blocked attention; Milakov & "
           "Gimelshein 2018, Dao et al. 2023 Flash-Decoding).", 0x35,
           "softmax", _enum("mask", SOFTMAX_MASKS, 2,
                            "none | causal: keep j <= i + len | length: keep j < len"),
           _u("len", 16, "causal offset or valid length (elements)"),
           _u("lse", 1, "1: also write the rows' log-sum-exp (fp32) after the result")),
    _unary("VU_GELU", "dst = gelu(src).", 0x36, "gelu",
           _enum("form", GELU_FORMS, 1, "erf (exact) or tanh approximation")),
    _unary("VU_SILU", "dst = src * sigmoid(src).", 0x37, "silu"),
    InstrSpec(0x38, "VU_ROPE", Engine.VU,
              (_spad("dst", "the [rows, cols] result"), _spad("src", "the [rows, cols] input"),
               _spad("table", "fp32 [rows, 2, half_dim]: cos then sin per row"), _ROWS, _COLS,
               _u("half_dim", 8, "head_dim / 2; cols is a multiple of head_dim", min_value=1),
               _dtype()),
              "Rotary embedding per head (rotate-half form): x1' = x1 cos - x2 sin, "
              "x2' = x2 cos + x1 sin.", latency_key="rope"),
    InstrSpec(0x39, "VU_COPY", Engine.VU,
              (_spad("dst", "the result rows"), _spad("src", "the input rows"), _ROWS, _COLS,
               _u("src_stride", 16, "elements between src rows; 0 = cols (dense)"),
               _u("dst_stride", 16, "elements between dst rows; 0 = cols (dense)"),
               _dtype("dtype", "element type of src"), _dtype("out_dtype", "element type of dst")),
              "dst rows <- src rows, converted from dtype to out_dtype (round to nearest even).",
              latency_key="copy"),
    _unary("VU_TRANSPOSE", "dst[cols, rows] = src[rows, cols] transposed.", 0x3A, "copy"),
    InstrSpec(0x3B, "VU_DOT", Engine.VU,
              (_spad("dst", "the result vector"), _spad("mat", "the [rows, cols] matrix"),
               _spad("vec", "the input vector"), _ROWS, _COLS,
               _u("trans", 1, "0: dst[rows] = mat @ vec[cols]; 1: dst[cols] = vec[rows] @ mat"),
               _dtype("dtype", "element type of mat and vec"),
               _dtype("out_dtype", "element type of dst"),
               _enum("order", DOT_ORDERS, 1,
                     "seq: fp32 sum in index order | pim: PIM lanes + adder tree per chunk")),
              "Matrix-vector product for NPU attention, fp32, in the reduction order chosen "
              "(pim: bit-identical to COMP).", latency_key="dot"),
    InstrSpec(0x3C, "VU_TOPK", Engine.VU,
              (_spad("dst", "the [rows, cols] gate matrix"),
               _spad("src", "the [rows, cols] router logits"), _ROWS,
               _u("cols", 12, "experts (elements per row)", min_value=1),
               _u("k", 8, "experts kept per row (top-k), <= cols", min_value=1),
               _dtype("dtype", "element type of src"), _dtype("out_dtype", "element type of dst")),
              "Mixture-of-experts router, per row: the k largest of src (ties: lower column), "
              "weights softmax over those k (= softmax over the row, top-k, renormalised); dst "
              "row = the weights in their columns, 0 elsewhere (float64, rounded once). Timed "
              "as VU_SOFTMAX over the row.", latency_key="softmax"),
    InstrSpec(0x3D, "VU_AXPY", Engine.VU,
              (_spad("dst", "the [rows, cols] accumulator"), _spad("x", "the [rows, cols] input"),
               _spad("scale", "the [rows] per-row scale factors"), _ROWS, _COLS,
               _u("acc", 1, "1: dst += scale x, 0: dst = scale x"), _dtype()),
              "dst[r, :] (+)= scale[r] * x[r, :] (fp32 arithmetic, one rounding; the "
              "mixture-of-experts combine). Timed as VU_MUL.", latency_key="mul"),
    # --- PIM (one broadcast command to all banks of a channel) ---
    InstrSpec(0x50, "PIM_HEADER", Engine.PIM,
              (_CHANNEL, _u("n_gemvs", 16, "row-GEMVs the following commands perform", 1)),
              "Announces a GEMV's size so the controller can fit it before a refresh."),
    InstrSpec(0x51, "GWRITE", Engine.PIM,
              (_CHANNEL, _spad("src", "the vector"),
               _u("len", 12, "elements (<= global buffer bytes / size(dtype))", min_value=1),
               _dtype()),
              "Global buffer <- spad[len] (rest zero-filled)."),
    InstrSpec(0x52, "G_ACT", Engine.PIM, (_CHANNEL, _u("row", 20, "DRAM row"), _BG_MASK),
              "Open `row` in the PIM row buffer of every bank of the selected bank groups."),
    InstrSpec(0x53, "COMP", Engine.PIM, (_CHANNEL, _COL, _N_COMPS, _dtype()),
              "Every bank with an open PIM row: acc += row[cols of step] . gbuf[same], "
              "n_comps steps (adder tree: see archsim.functional.pim_comp_step)."),
    InstrSpec(0x54, "READRES", Engine.PIM,
              (_CHANNEL, _spad("dst", "the [banks] results"),
               _dtype("dtype", "element type written to dst")),
              "spad[dst][bank] <- acc[bank] for every bank of the channel; acc <- 0."),
    InstrSpec(0x55, "PIM_GEMV", Engine.PIM,
              (_CHANNEL, _COL, _N_COMPS, _spad("dst", "the [banks] results"),
               _dtype("dtype", "element type of the rows and the global buffer"),
               _dtype("out_dtype", "element type written to dst")),
              "Fused COMP x n_comps then READRES (NeuPIMs PIM_COMPS_READRES)."),
    InstrSpec(0x56, "PIM_PRECHARGE", Engine.PIM, (_CHANNEL, _BG_MASK),
              "Close the PIM row buffer of every bank of the selected bank groups."),
    # --- device links (collectives between devices of a tensor/pipeline-parallel system) ---
    InstrSpec(0x60, "ALL_REDUCE", Engine.LINK,
              (_LINK_BYTES, _u("group", 10, "devices in the tensor-parallel group", min_value=1),
               _enum("algo", COLLECTIVE_ALGOS, 2, "all-reduce algorithm: ring")),
              "Sum the tensor of `bytes` bytes over the `group` devices in place (the "
              "stream's WAITs order it after its producers); the stream is busy for the "
              "algorithm's time on system.interconnect."),
    InstrSpec(0x61, "SEND", Engine.LINK, (_LINK_BYTES, _PEER),
              "Pipeline-parallel hand-off: send the stage's output (`bytes` bytes) to stage "
              "`peer`; the stream is busy until the last byte has arrived."),
    InstrSpec(0x62, "RECV", Engine.LINK, (_LINK_BYTES, _PEER),
              "Pipeline-parallel hand-off: receive the stage's input (`bytes` bytes) from "
              "stage `peer`; it completes when the matching SEND has (a device simulated "
              "alone starts with its input received)."),
    InstrSpec(0x63, "ALL_TO_ALL", Engine.LINK,
              (_u("bytes", HBM_ADDR_BITS, "larger of the bytes this device sends and receives",
                  min_value=1),
               _u("group", 10, "devices in the expert-parallel group", min_value=1)),
              "Expert-parallel all-to-all (dispatch of token rows to the devices of their "
              "experts, or their return): the stream is busy for the pairwise-exchange time "
              "on system.interconnect (archsim.npu.timing.all_to_all_cycles)."),
)


def _layout(spec: InstrSpec) -> InstrSpec:
    """Assign each field its lsb: packed from bit 8 upward in table order."""
    pos = OPCODE_BITS
    out = []
    for f in spec.fields:
        out.append(replace(f, lsb=pos))
        pos += f.width
    if pos > WORD_BITS:
        raise AssertionError(f"{spec.mnemonic}: fields need {pos} bits > {WORD_BITS}")
    return replace(spec, fields=tuple(out))


def _check(table: tuple[InstrSpec, ...]) -> None:
    """Consistency of the table itself (runs at import; a broken table is a bug, not input)."""
    seen_ops: dict[int, str] = {}
    seen_names: set[str] = set()
    for s in table:
        if not 0 < s.opcode < (1 << OPCODE_BITS):
            raise AssertionError(f"{s.mnemonic}: opcode {s.opcode:#x} out of range")
        if s.opcode in seen_ops:
            raise AssertionError(f"opcode {s.opcode:#x} used by {seen_ops[s.opcode]} and "
                                 f"{s.mnemonic}")
        if s.mnemonic in seen_names:
            raise AssertionError(f"mnemonic {s.mnemonic} twice")
        seen_ops[s.opcode] = s.mnemonic
        seen_names.add(s.mnemonic)
        names = [f.name for f in s.fields]
        if len(set(names)) != len(names):
            raise AssertionError(f"{s.mnemonic}: duplicate field name")
        for f in s.fields:
            if f.kind == "enum" and len(f.enum) > (1 << f.width):
                raise AssertionError(f"{s.mnemonic}.{f.name}: enum does not fit")
            if f.kind == "f32" and f.width != 32:
                raise AssertionError(f"{s.mnemonic}.{f.name}: f32 must be 32 bits")


SPEC: tuple[InstrSpec, ...] = tuple(_layout(s) for s in _TABLE)
"""The instruction table, fields laid out (lsb assigned)."""
_check(SPEC)

BY_MNEMONIC: dict[str, InstrSpec] = {s.mnemonic: s for s in SPEC}
"""Instruction specs by upper-case mnemonic."""
BY_OPCODE: dict[int, InstrSpec] = {s.opcode: s for s in SPEC}
"""Instruction specs by opcode."""

STREAM_KINDS: tuple[str, ...] = ("dma", "sa", "vu", "pim", "link")
"""Stream name prefixes: a stream is ``<kind>`` or ``<kind><index>`` (``dma0``, ``sa``,
``vu3``, ``pim17``, ``link``). A stream runs instructions of its engine kind plus SYNC
instructions."""


def spec_for(mnemonic: str) -> InstrSpec:
    """The spec of ``mnemonic`` (case-insensitive); KeyError when unknown."""
    return BY_MNEMONIC[mnemonic.upper()]


__all__ = [
    "WORD_BITS", "OPCODE_BITS", "OPERAND_BITS", "SPAD_ADDR_BITS", "HBM_ADDR_BITS", "DTYPES",
    "DTYPE_BYTES", "SOFTMAX_MASKS", "COLLECTIVE_ALGOS", "GELU_FORMS", "DOT_ORDERS", "Engine", "ENGINE_TITLES",
    "FieldSpec",
    "InstrSpec", "SPEC", "BY_MNEMONIC", "BY_OPCODE", "STREAM_KINDS", "ARRAY_ANY", "spec_for",
]
