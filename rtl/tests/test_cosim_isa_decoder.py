"""isa_decoder.v decodes every word as isa.encoding.decode does; its field constants are
generated from the ISA table."""
from __future__ import annotations

import pytest

from archsim import cosim

BLOCK = "isa_decoder"

pytestmark = pytest.mark.cosim


def test_committed_isa_fields_include_is_generated_from_the_isa_table():
    committed = cosim.ISA_FIELDS_VH.read_text()
    assert committed == cosim.generate_isa_fields_vh(), (
        f"{cosim.ISA_FIELDS_VH} is stale: the ISA table changed; regenerate it with "
        "'archsim cosim --write-isa-fields' and commit it")


def test_generated_include_lists_every_opcode_and_field_of_the_table():
    from isa import spec

    text = cosim.generate_isa_fields_vh()
    for s in spec.SPEC:
        assert f"localparam [7:0] OP_{s.mnemonic} = 8'h{s.opcode:02X};" in text
        for f in s.fields:
            name = f"{s.mnemonic}_{f.name.upper()}"
            assert f"{name}_LSB = {f.lsb}, {name}_W = {f.width};" in text


def test_ports_and_parameters_match_the_isa_table():
    cosim.require_icarus_or_skip()  # pyverilog preprocesses with iverilog -E
    assert cosim.check_interface(BLOCK, cosim.load_cosim_config("neupims")) == []


@pytest.mark.parametrize("simulator", cosim.bench_simulators())
def test_words_decode_like_the_python_decoder_every_cycle(simulator):
    cosim.assert_cosim_passes(BLOCK, "default", simulator=simulator)


def test_python_decoder_perturbed_by_one_bit_is_detected():
    # bit 0 of the last operand code of every decoded instruction flipped
    cosim.assert_mutation_detected(BLOCK, "default", "bit")
