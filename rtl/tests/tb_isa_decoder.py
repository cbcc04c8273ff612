"""Co-simulation of rtl/isa_decoder.v against the ISA's own decoder (isa.encoding.decode).

Words are built with the ISA's encoder from random operand codes of random instructions
(legal by construction), then some are corrupted (a random bit flipped, random high bits,
random opcodes). Each word is offered for one cycle; one cycle later the RTL must say
``legal`` exactly when ``isa.encoding.decode`` accepts the word, and for a legal word give
its opcode, engine, field count and every field code as the Python decoder does.
"""
from __future__ import annotations

import cocotb

from archsim import cosim
from tb_common import (check_parameters, end_cycle, job, next_cycle_drive, rng_for, settle,
                       start_clock_and_reset, to_signed, unpack)

PARAMS = ["WORD_BITS", "OPCODE_BITS", "MAX_FIELDS", "FIELD_W", "SLOT_BITS", "ENGINE_BITS"]


def _spec():
    from isa import spec

    return spec


def _random_codes(rng, s, boundary=False):
    codes = []
    for f in s.fields:
        lo, hi = cosim._field_raw_range(f)
        if boundary:
            raw = rng.choice((lo, hi))
        else:
            raw = rng.choice((lo, hi, rng.randint(lo, hi), rng.randint(lo, hi)))
        codes.append(cosim.wrap_signed(raw, f.width) if f.kind == "s" else raw)
    return codes


def _legal_word(rng, boundary=False):
    s = rng.choice(_spec().SPEC)
    return cosim.isa_model_encode(s, _random_codes(rng, s, boundary))


def _corrupt(rng, word):
    wb = job().parameters["WORD_BITS"]
    choice = rng.random()
    if choice < 0.5:
        return word ^ (1 << rng.randrange(wb))                         # one bit flipped
    if choice < 0.7:
        return word | (rng.getrandbits(wb) & ~((1 << rng.randrange(8, wb)) - 1))  # high bits
    if choice < 0.85:
        return (word & ~0xFF) | rng.getrandbits(8)                     # another opcode byte
    return rng.getrandbits(wb)                                         # anything


async def _run(dut, name, words):
    """Offer ``words`` (with random idle cycles) and compare every cycle. Returns cycles."""
    p = job().parameters
    fw, nf = p["FIELD_W"], p["MAX_FIELDS"]
    spec = _spec()
    engines = cosim.isa_engines()
    rng = rng_for(name + ":gaps")
    prev = None          # word offered in the previous cycle (None: idle)
    cycle = 0
    queue = list(words)
    n_legal = 0
    while queue or prev is not None:
        word = None
        if queue and rng.random() < 0.9:
            word = queue.pop(0)
        await next_cycle_drive()
        dut.in_valid.value = int(word is not None)
        dut.instr.value = word if word is not None else rng.getrandbits(p["WORD_BITS"])
        await settle()
        ctx = f"{name}: cycle {cycle}"
        assert int(dut.out_valid.value) == int(prev is not None), f"{ctx}: out_valid differs"
        if prev is not None:
            ctx += f", word {prev:#034x} offered in cycle {cycle - 1}"
            try:
                ins = cosim.isa_model_decode(prev)           # the simulator's decoder
                why = ""
            except Exception as exc:                         # IllegalInstruction
                ins, why = None, str(exc)
            legal = int(dut.legal.value)
            errs = (int(dut.err_opcode.value), int(dut.err_reserved.value),
                    int(dut.err_field.value))
            assert legal == int(ins is not None), (
                f"{ctx}: RTL legal={legal} (errors opcode/reserved/field {errs}) but the Python "
                f"decoder {'accepts it as ' + repr(ins) if ins else 'rejects it: ' + why}")
            assert int(dut.opcode.value) == prev & 0xFF, f"{ctx}: opcode differs"
            assert errs[0] == int((prev & 0xFF) not in spec.BY_OPCODE), (
                f"{ctx}: err_opcode {errs[0]} disagrees with the ISA table")
            if ins is not None:
                n_legal += 1
                s = ins.spec
                got = unpack(int(dut.fields.value), nf, fw)
                got_codes = [got[i] if f.kind == "s" else got[i] & f.mask
                             for i, f in enumerate(s.fields)]
                want = {"engine": engines.index(s.engine), "n_fields": len(s.fields),
                        "codes": list(ins.codes), "errors": (0, 0, 0)}
                have = {"engine": int(dut.engine.value), "n_fields": int(dut.n_fields.value),
                        "codes": got_codes, "errors": errs}
                assert have == want, f"{ctx} ({s.mnemonic}): RTL {have} != Python {want}"
                unused = [to_signed(x, fw) for x in got[len(s.fields):]]
                assert not any(unused), f"{ctx}: slots past n_fields are not zero: {unused}"
        prev = word
        await end_cycle()
        cycle += 1
    job().record(name, stimuli=len(words), cycles=cycle, legal=n_legal)
    return cycle


async def _setup(dut):
    await start_clock_and_reset(dut, {"in_valid": 0, "instr": 0})
    check_parameters(dut, PARAMS)


@cocotb.test()
async def test_random_legal_instructions_decode_to_python_decoder_fields(dut):
    """Every instruction of the table with random operands: opcode, engine, field count and
    every field code equal isa.encoding.decode."""
    name = "test_random_legal_instructions_decode_to_python_decoder_fields"
    await _setup(dut)
    rng = rng_for(name)
    await _run(dut, name, [_legal_word(rng) for _ in range(job().count(1500))])


@cocotb.test()
async def test_corrupted_words_rejected_exactly_when_python_decoder_rejects(dut):
    """Legal words with a flipped bit, high garbage or another opcode, and random words: the
    RTL's legal flag equals the Python decoder's verdict."""
    name = "test_corrupted_words_rejected_exactly_when_python_decoder_rejects"
    await _setup(dut)
    rng = rng_for(name)
    await _run(dut, name, [_corrupt(rng, _legal_word(rng)) for _ in range(job().count(1500))])


@cocotb.test()
async def test_every_opcode_with_boundary_operands(dut):
    """Each instruction with every field at its minimum or maximum code, then one past each
    boundary (enum past its list, unsigned below its minimum, a reserved bit set)."""
    name = "test_every_opcode_with_boundary_operands"
    await _setup(dut)
    rng = rng_for(name)
    words = []
    for s in _spec().SPEC:
        for _ in range(4):
            codes = _random_codes(rng, s, boundary=True)
            word = cosim.isa_model_encode(s, codes)
            words.append(word)
            for f in s.fields:
                lo, hi = cosim._field_raw_range(f)
                if lo > 0:
                    words.append((word & ~(f.mask << f.lsb)) | ((lo - 1) << f.lsb))
                if hi < f.mask:
                    words.append((word & ~(f.mask << f.lsb)) | ((hi + 1) << f.lsb))
            word_bits = job().parameters["WORD_BITS"]
            if s.used_bits < word_bits:
                words.append(word | (1 << rng.randrange(s.used_bits, word_bits)))
    await _run(dut, name, words)
