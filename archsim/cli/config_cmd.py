"""``archsim config``: list presets, show the effective configuration, validate a file."""
from __future__ import annotations

import typer
from rich.console import Console
from rich.syntax import Syntax

from archsim.config import config_to_yaml, list_presets, load_config

SET_HELP = "Override a key, e.g. --set memory.timing.tRCDRD=16 (repeatable; value parsed as YAML)."


def register(app: typer.Typer) -> None:
    """Add the ``config`` command group to ``app``."""
    grp = typer.Typer(help="Machine configurations: presets, effective values, validation.",
                      no_args_is_help=True)

    @grp.command("list")
    def list_cmd() -> None:
        """List the shipped presets."""
        for name in list_presets():
            cfg = load_config(name)
            engines = "+".join(cfg.system.engines)
            rb = cfg.pim.row_buffer_mode if cfg.system.has_pim else "-"
            typer.echo(f"{name:18s} engines={engines:8s} row_buffers={rb:6s} "
                       f"sub_batches={cfg.system.sub_batches} "
                       f"channels={cfg.system.channel_policy}")

    @grp.command("show")
    def show_cmd(name: str = typer.Argument("neupims", help="preset name or YAML file"),
                 set_: list[str] = typer.Option([], "--set", help=SET_HELP)) -> None:
        """Print the effective configuration (defaults filled in, overrides applied) as YAML."""
        cfg = load_config(name, set_)
        Console().print(Syntax(config_to_yaml(cfg), "yaml", background_color="default"))

    @grp.command("validate")
    def validate_cmd(path: str = typer.Argument(..., help="YAML file to check"),
                     set_: list[str] = typer.Option([], "--set", help=SET_HELP)) -> None:
        """Check a configuration file; exit 0 and print a summary when it is valid."""
        cfg = load_config(path, set_)
        m = cfg.memory
        typer.echo(f"{path}: valid ({cfg.name}): {cfg.npu.n_arrays} arrays of "
                   f"{cfg.npu.array_height}x{cfg.npu.array_width} at {cfg.npu.freq_mhz:g} MHz; "
                   f"HBM {m.org.channels} channels x {m.org.banks_per_channel} banks, "
                   f"{m.org.capacity_bytes / 2**30:g} GiB, peak "
                   f"{m.peak_bandwidth_bytes_per_s / 1e9:.1f} GB/s per device; "
                   f"engines {'+'.join(cfg.system.engines)}")

    app.add_typer(grp, name="config")
