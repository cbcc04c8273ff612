"""128-bit encoding: round trips over the whole table and rejection of illegal words."""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from isa.encoding import Instruction, decode, decode_bytes, encode, encode_bytes
from isa.errors import IllegalInstruction, OperandError
from isa.spec import BY_MNEMONIC, BY_OPCODE, SPEC, WORD_BITS

from isa.strategies import instruction_of, instructions


@pytest.mark.parametrize("spec", SPEC, ids=lambda s: s.mnemonic)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_encode_then_decode_is_identity_for_every_instruction(spec, data):
    ins = data.draw(instruction_of(spec))
    word = encode(ins)
    assert 0 <= word < 1 << WORD_BITS
    assert word & 0xFF == spec.opcode
    assert decode(word) == ins
    assert decode_bytes(encode_bytes(ins)) == ins


@settings(max_examples=400, deadline=None)
@given(word=st.integers(0, (1 << WORD_BITS) - 1))
def test_random_word_decodes_or_raises_illegal_instruction(word):
    try:
        ins = decode(word)
    except IllegalInstruction:
        return
    assert encode(ins) == word


@settings(max_examples=400, deadline=None)
@given(opcode=st.sampled_from(sorted(BY_OPCODE)), upper=st.integers(0, (1 << 120) - 1))
def test_word_with_known_opcode_decodes_or_raises_illegal_instruction(opcode, upper):
    word = opcode | (upper << 8)
    try:
        ins = decode(word)
    except IllegalInstruction as exc:
        assert "reserved bits" in str(exc) or "bad enum" in str(exc) or "minimum" in str(exc)
        return
    assert encode(ins) == word


@settings(max_examples=200, deadline=None)
@given(ins=instructions, bit=st.integers(0, WORD_BITS - 1))
def test_one_flipped_bit_decodes_or_raises_illegal_instruction(ins, bit):
    word = encode(ins) ^ (1 << bit)
    try:
        assert encode(decode(word)) == word
    except IllegalInstruction:
        pass


def test_unknown_opcode_is_named():
    with pytest.raises(IllegalInstruction, match="unknown opcode 0x7e"):
        decode(0x7E)


def test_nonzero_reserved_bits_are_illegal():
    with pytest.raises(IllegalInstruction, match=r"NOP\): reserved bits \[127:8\]"):
        decode(0x01 | (1 << 100))


def test_bad_enum_value_is_illegal():
    spec = BY_MNEMONIC["DMA_LOAD"]
    f = spec.field("dtype")
    ok = encode(Instruction("DMA_LOAD", spad=0, hbm=0, rows=1, cols=1, stride=0, dtype="fp16"))
    with pytest.raises(IllegalInstruction, match="field dtype has bad enum value 3"):
        decode(ok | (3 << f.lsb))


def test_zero_size_is_illegal():
    with pytest.raises(IllegalInstruction, match="field rows = 0 is below its minimum 1"):
        decode(0x10)


def test_operand_out_of_range_names_field_and_width():
    with pytest.raises(OperandError, match=r"rows = 16384 out of range for field rows "
                                           r"\(14-bit unsigned, 1..16383\)"):
        Instruction("DMA_LOAD", spad=0, hbm=0, rows=16384, cols=1, stride=0, dtype="fp16")


def test_missing_and_unknown_operands_are_named():
    with pytest.raises(OperandError, match="missing operand"):
        Instruction("WAIT", sem=1)
    with pytest.raises(OperandError, match="unknown operand 'x'"):
        Instruction("WAIT", sem=1, count=1, x=3)


def test_float_immediate_keeps_nan_payload_bits():
    spec = BY_MNEMONIC["VU_SCALE"]
    ins = Instruction("VU_SCALE", dst=0, src=0, rows=1, cols=1, dtype="fp32", imm=1.0)
    codes = list(ins.codes)
    codes[spec.field_names.index("imm")] = 0x7F800001  # signalling NaN
    snan = Instruction.from_codes(spec, codes)
    assert decode(encode(snan)).code("imm") == 0x7F800001


def test_item_access_returns_meaningful_values():
    ins = Instruction("SA_LOADW", array="any", w=64, k=3, n=5, dtype="bf16")
    assert ins["array"] == 63 and ins["dtype"] == "bf16" and ins.code("dtype") == 1
    assert ins.replace(k=7)["k"] == 7
    assert hash(ins) == hash(Instruction("SA_LOADW", array=63, w=64, k=3, n=5, dtype="bf16"))
