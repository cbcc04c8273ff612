"""Verilog parameters and expected ports of every block: one source of truth.

The parameters come from the machine configuration, the timing table, the NPU timing model and
the ISA table; the test bench rebuilds its model from the same configuration.
"""
from __future__ import annotations

from archsim.cosim.blocks import get_block
from archsim.cosim.common import CosimError, clog2
from archsim.cosim.models import (isa_engines, npu_min_rows, pim_fill_cycles, pim_fp_format,
                                  pim_operand_bits)


def verilog_parameters(block_name: str, cfg, dtype: str | None = None) -> dict[str, int]:
    """The Verilog parameters of ``block_name`` for the machine ``cfg`` (and, for
    ``pim_mac_fp``, the operand ``dtype`` of the variant: fp16 or bf16).

    Every value comes from the configuration or from the Python model it is checked against:
    the test bench builds that model from the same ``cfg``.

    The rule belongs to the block's Verilog module (a replay block has the parameters of the
    module it drives).

    Raises CosimError for an unknown block, a missing model, a missing or unknown ``dtype``
    of ``pim_mac_fp`` or a ``pim.acc_bits`` other than 32 there (its accumulator is fp32), or
    a timing table ``pim_channel`` does not implement.
    """
    block_name = get_block(block_name).toplevel
    if block_name == "pim_channel":
        from archsim.cosim.channel import channel_verilog_parameters

        return channel_verilog_parameters(cfg)
    if block_name == "pim_mac_fp":
        if cfg.pim.acc_bits != 32:
            raise CosimError(f"pim_mac_fp accumulates in fp32: pim.acc_bits must be 32, got "
                             f"{cfg.pim.acc_bits}")
        exp_w, man_w = pim_fp_format(dtype or "")
        return {"LANES": cfg.pim.multipliers_per_bank, "EXP_W": exp_w, "MAN_W": man_w,
                "FILL_CYCLES": pim_fill_cycles(cfg)}
    if block_name == "systolic_array":
        h, w = cfg.npu.array_height, cfg.npu.array_width
        data_w = 8 * cfg.npu.dtype_bytes
        return {"H": h, "W": w, "DATA_W": data_w, "ACC_W": 2 * data_w + clog2(h),
                "MIN_ROWS": npu_min_rows(cfg), "NROWS_W": 16}
    if block_name == "pim_mac":
        return {"LANES": cfg.pim.multipliers_per_bank, "DATA_W": pim_operand_bits(cfg),
                "ACC_W": cfg.pim.acc_bits, "FILL_CYCLES": pim_fill_cycles(cfg)}
    if block_name == "bank_dual_rowbuf":
        return bank_verilog_parameters(cfg)
    if block_name == "isa_decoder":
        return isa_verilog_parameters()
    raise CosimError(f"no parameter rule for block '{block_name}'")  # pragma: no cover


def expected_ports(block_name: str, params: dict[str, int]) -> dict[str, tuple[str, int]]:
    """The ports (direction, width) the Python side drives and reads for ``block_name``."""
    p = params
    block_name = get_block(block_name).toplevel
    if block_name == "pim_channel":
        from archsim.cosim.channel import channel_expected_ports

        return channel_expected_ports(p)
    if block_name == "systolic_array":
        return {"clk": ("input", 1), "rst_n": ("input", 1), "load": ("input", 1),
                "w_ready": ("output", 1), "w_data": ("input", p["W"] * p["DATA_W"]),
                "load_ready": ("output", 1), "shadow_valid": ("output", 1),
                "start": ("input", 1), "swap": ("input", 1), "n_rows": ("input", p["NROWS_W"]),
                "start_ready": ("output", 1), "a_ready": ("output", 1),
                "a_data": ("input", p["H"] * p["DATA_W"]), "c_valid": ("output", 1),
                "c_data": ("output", p["W"] * p["ACC_W"]), "done": ("output", 1)}
    if block_name == "pim_mac":
        return {"clk": ("input", 1), "rst_n": ("input", 1), "in_valid": ("input", 1),
                "in_first": ("input", 1), "bank_data": ("input", p["LANES"] * p["DATA_W"]),
                "gb_data": ("input", p["LANES"] * p["DATA_W"]), "out_valid": ("output", 1),
                "acc": ("output", p["ACC_W"])}
    if block_name == "pim_mac_fp":
        dw = 1 + p["EXP_W"] + p["MAN_W"]
        return {"clk": ("input", 1), "rst_n": ("input", 1), "in_valid": ("input", 1),
                "in_first": ("input", 1), "bank_data": ("input", p["LANES"] * dw),
                "gb_data": ("input", p["LANES"] * dw), "out_valid": ("output", 1),
                "acc": ("output", 32), "res": ("output", dw)}
    if block_name == "bank_dual_rowbuf":
        return bank_expected_ports(p)
    if block_name == "isa_decoder":
        return isa_expected_ports(p)
    raise CosimError(f"no port list for block '{block_name}'")  # pragma: no cover


def bank_verilog_parameters(cfg) -> dict[str, int]:
    """Parameters of ``bank_dual_rowbuf`` for ``cfg``: the primitive timing values of
    :func:`archsim.memory.spec.latency_names`, the tFAW window (span, activation budget and
    weights) of the compiled constraint table, and the row-buffer mode.

    The RTL combines the primitive values into per-command-pair latencies itself (it is an
    independent implementation of the table's rules for one bank); the model is
    :class:`archsim.memory.bank.BankTimingModel` built from the same ``cfg``.
    """
    from archsim.memory.spec import CMD_INDEX, compile_table, latency_names

    n = latency_names(cfg)
    mode = cfg.pim.row_buffer_mode
    table = compile_table(cfg, mode)
    faw = [w for lv in table.windows.values() for w in lv if w[0] == "tFAW"]
    if len(faw) != 1:
        raise CosimError(f"the constraint table has {len(faw)} tFAW windows; bank_dual_rowbuf "
                         "implements exactly one")
    _, _, n_max, span, weights = faw[0]
    params = {"DUAL": int(mode == "dual"), "ROW_W": max(1, clog2(cfg.memory.org.rows))}
    for key, name in (("T_RCDRD", "tRCDRD"), ("T_RCDWR", "tRCDWR"), ("T_RAS", "tRAS"),
                      ("T_RC", "tRC"), ("T_RP", "tRP"), ("T_RRD_S", "tRRD_S"),
                      ("T_RRD_L", "tRRD_L"), ("T_CCD_S", "tCCD_S"), ("T_CCD_L", "tCCD_L"),
                      ("T_WTR_S", "tWTR_S"), ("T_WTR_L", "tWTR_L"), ("T_RTP_S", "tRTP_L"),
                      ("T_RTP_L", "tRTP_L"), ("T_WR", "tWR"), ("CL", "CL"), ("CWL", "CWL"),
                      ("BL", "BL")):
        params[key] = int(n[name])
    params.update({"T_FAW": int(span), "FAW_ACTS": int(n_max),
                   "ACT_WEIGHT": int(weights[CMD_INDEX["ACT"]]),
                   "GACT_WEIGHT": int(weights[CMD_INDEX["G_ACT"]])})
    longest = max(params["T_RC"], params["CWL"] + params["BL"] + params["T_WR"],
                  params["CWL"] + params["BL"] + max(params["T_WTR_S"], params["T_WTR_L"]),
                  params["CL"] + params["BL"], params["T_FAW"], params["T_RAS"])
    params["CNT_W"] = clog2(longest + 2) + 1
    return params


def bank_expected_ports(params: dict[str, int]) -> dict[str, tuple[str, int]]:
    """Ports of ``bank_dual_rowbuf`` as the test bench drives and reads them."""
    r = params["ROW_W"]
    return {"clk": ("input", 1), "rst_n": ("input", 1), "cmd": ("input", 3), "row": ("input", r),
            "can_issue": ("output", 8), "accept": ("output", 1), "mem_open": ("output", 1),
            "mem_row": ("output", r), "pim_open": ("output", 1), "pim_row": ("output", r)}


def isa_verilog_parameters() -> dict[str, int]:
    """Parameters of ``isa_decoder`` from the ISA table (:data:`isa.spec.SPEC`): word and
    opcode widths, the most fields of any instruction (output slots) and the widest field."""
    from isa import spec

    return {"WORD_BITS": spec.WORD_BITS, "OPCODE_BITS": spec.OPCODE_BITS,
            "MAX_FIELDS": max(len(s.fields) for s in spec.SPEC),
            "FIELD_W": max(f.width for s in spec.SPEC for f in s.fields),
            "SLOT_BITS": max(1, clog2(max(len(s.fields) for s in spec.SPEC) + 1)),
            "ENGINE_BITS": max(1, clog2(len(isa_engines())))}


def isa_expected_ports(params: dict[str, int]) -> dict[str, tuple[str, int]]:
    """Ports of ``isa_decoder`` as the test bench drives and reads them."""
    p = params
    return {"clk": ("input", 1), "rst_n": ("input", 1), "in_valid": ("input", 1),
            "instr": ("input", p["WORD_BITS"]), "out_valid": ("output", 1),
            "opcode": ("output", p["OPCODE_BITS"]), "legal": ("output", 1),
            "err_opcode": ("output", 1), "err_reserved": ("output", 1),
            "err_field": ("output", 1), "engine": ("output", p["ENGINE_BITS"]),
            "n_fields": ("output", p["SLOT_BITS"]),
            "fields": ("output", p["MAX_FIELDS"] * p["FIELD_W"])}
