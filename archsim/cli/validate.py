"""``archsim validate``: compiled programs against PyTorch (golden validation, DESIGN §5.1).

``archsim validate --model tiny-llama --batch 4 --system npu,npu-pim,neupims --dtype fp32,fp16``
prefills a batch of requests of different lengths, runs ``--steps`` decode steps, and for each
(system, dtype) compiles every step with the mapper, executes it in functional mode through the
simulated memory layout, and compares every request's layer outputs, appended K/V rows and
(host LM head) logits with the PyTorch reference. It prints one table per run (max absolute
and relative error per tensor, the tolerance, how much of it was used) and exits 1 when any
element is past its tolerance (2 for a usage error). ``--reference hf`` uses a Hugging Face
``transformers`` GPT-2 / LLaMA with random weights instead (optional extra ``hf``).
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

HELP_SYSTEM = ("comma-separated systems: npu, npu-pim, neupims (presets npu-only, "
               "npu-pim-blocked, neupims), another preset, or a YAML config file")


def _split(text: str) -> list[str]:
    return [t.strip() for t in text.split(",") if t.strip()]


def _console() -> Console:
    return Console(highlight=False, soft_wrap=False,
                   width=None if sys.stdout.isatty() else 130)


def _table(report) -> Table:
    from archsim.validation.bounds import TOLERANCE_FACTOR

    attn = "PIM" if report.attention_engine == "pim" else "NPU vector units"
    t = Table(title=(f"{report.model} · {report.system} ({report.preset}) · {report.dtype} · "
                     f"{len(report.requests)} requests · {report.steps} decode steps · "
                     f"attention on {attn}"), title_justify="left",
              caption=(f"errors: max over requests, elements and steps; rel = abs / max|ref|; "
                       f"tolerance per element = {TOLERANCE_FACTOR:g} x probabilistic error "
                       "scale (+ reference's own error); used = max err/tolerance; worst-case "
                       "= deterministic bound (reported, not checked)"),
              caption_justify="left")
    for col, just in (("tensor", "left"), ("computed on", "left"), ("max abs err", "right"),
                      ("max rel err", "right"), ("tolerance", "right"), ("used", "right"),
                      ("worst-case bound", "right"), ("", "left")):
        t.add_column(col, justify=just, no_wrap=True)
    worst = {}
    for c in report.checks:
        worst[c.name] = max(worst.get(c.name, 0.0), c.worst_case_bound)
    for s in report.summary():
        t.add_row(s["tensor"], s["where"], f"{s['max_abs_err']:.3g}", f"{s['max_rel_err']:.3g}",
                  f"{s['max_allowed']:.3g}", f"{s['usage']:.1%}", f"{worst[s['tensor']]:.3g}",
                  "[green]ok[/]" if s["passed"] else "[red]FAIL[/]")
    return t


def register(app: typer.Typer) -> None:
    """Add ``validate`` to ``app``."""

    @app.command("validate")
    def validate_cmd(
        model: str = typer.Option("tiny-gpt", "--model", "-m",
                                  help="tiny-gpt, tiny-llama (any registry model) or a Hugging "
                                       "Face config.json"),
        batch: int = typer.Option(None, "--batch", "-b", min=1,
                                  help="requests (prompts of different lengths; default 3)"),
        system: str = typer.Option("neupims", "--system", "-s", help=HELP_SYSTEM),
        dtype: str = typer.Option("fp16", "--dtype",
                                  help="comma-separated storage types: fp32, fp16, bf16"),
        seed: int = typer.Option(0, "--seed", min=0, help="seed of the weights and the prompts"),
        steps: int = typer.Option(2, "--steps", min=1, help="decode steps"),
        prompt_lens: str = typer.Option(None, "--prompt-lens",
                                        help="explicit comma-separated prompt lengths "
                                             "(instead of --batch)"),
        reference: str = typer.Option("torch", "--reference",
                                      help="torch (workloads.reference) or hf (Hugging Face "
                                           "transformers GPT-2/LLaMA, random weights)"),
        overrides: list[str] = typer.Option([], "--set",
                                            help="config override key=value (repeatable)"),
        json_path: Path = typer.Option(None, "--json", help="write the results as JSON here"),
        per_step: bool = typer.Option(False, "--per-step",
                                      help="also print every step's checks"),
        quiet: bool = typer.Option(False, "--quiet", "-q", help="print the verdict only"),
    ) -> None:
        """Run the mapper's programs on values and compare with PyTorch (exit 1 on a failure)."""
        from archsim.extras import require

        require("validate")
        if reference == "hf":
            require("hf", "archsim validate --reference hf")
        from archsim.validation import (DTYPES, ValidationError, default_prompt_lens,
                                        resolve_model, resolve_system, run_validation)

        dtypes = _split(dtype)
        bad = [d for d in dtypes if d not in DTYPES]
        if bad or not dtypes:
            raise ValidationError(f"--dtype {dtype!r}: each must be one of {list(DTYPES)}")
        systems = _split(system)
        if not systems:
            raise ValidationError(f"--system {system!r}: name at least one system")
        if reference not in ("torch", "hf"):
            raise ValidationError(f"--reference {reference!r} not one of torch, hf")
        resolved = [resolve_system(s, overrides) for s in systems]   # fail early on a typo
        from archsim.cli.boundary import check_output_file, simulating

        check_output_file(json_path, "--json")
        if prompt_lens and batch is not None:
            raise ValidationError("--prompt-lens and --batch are exclusive: the list of prompt "
                                  "lengths sets the batch")
        if prompt_lens:
            try:
                lens = [int(x) for x in _split(prompt_lens)]
            except ValueError:
                raise ValidationError(f"--prompt-lens {prompt_lens!r}: integers separated by "
                                      "commas") from None
        else:
            lens = None
        import torch

        # the references are tiny float64 models: one thread avoids pool contention
        torch.set_num_threads(1)
        con = _console()
        err = Console(stderr=True)
        reports = []
        for dt in dtypes:
            ref = _reference(reference, model, dt, seed)
            spec = ref.spec
            run_lens = lens or default_prompt_lens(batch or 3, seed, spec.max_seq_len - steps)
            for label, cfg in resolved:
                if not quiet and err.is_terminal:
                    err.print(f"validating {spec.name} on {label} in {dt} ...")
                if reference == "hf":   # fresh per-request state
                    ref = _reference(reference, model, dt, seed)
                with simulating():
                    rep = run_validation(ref, cfg, system=label, prompt_lens=run_lens,
                                         steps=steps, seed=seed)
                reports.append(rep)
                if not quiet:
                    con.print(_table(rep))
                    if per_step:
                        _print_steps(con, rep)
                a, r = rep.max_errors()
                verdict = "PASS" if rep.passed else "FAIL"
                top1 = ("" if rep.top1_agreement is None else
                        f", greedy token agreement {rep.top1_agreement:.0%}")
                con.print(f"{verdict}: {rep.model} on {rep.system} in {rep.dtype}: max abs "
                          f"error {a:.3g}, max rel error {r:.3g} (device tensors){top1}, "
                          f"{rep.elapsed_s:.1f} s")
                if not rep.passed:
                    for c in rep.failures()[:5]:
                        con.print(f"  {c.name} step {c.step}: error {c.max_abs_err:.3g} > "
                                  f"tolerance (used {c.usage:.1f}x), worst request "
                                  f"{c.worst_request}")
        ok = all(r.passed for r in reports)
        if not quiet:
            for note in dict.fromkeys(n for r in reports for n in r.notes):
                con.print(f"note: {note}")
        if json_path is not None:
            doc = {"passed": ok, "runs": [r.to_json() for r in reports]}
            try:
                json_path.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
            except OSError as exc:
                raise ValidationError(f"{json_path}: cannot write ({exc.strerror})") from None
        if len(reports) > 1:
            con.print(f"{sum(r.passed for r in reports)}/{len(reports)} runs passed")
        if not ok:
            raise typer.Exit(code=1)


def _reference(kind: str, model: str, dtype: str, seed: int):
    from archsim.validation import resolve_model
    from archsim.validation.reference import ModelReference

    if kind == "hf":
        from archsim.validation.hf import hf_reference

        return hf_reference(model, dtype, seed)
    return ModelReference(resolve_model(model), seed, dtype)


def _print_steps(con: Console, rep) -> None:
    t = Table(title="per step", title_justify="left")
    for col in ("step", "tensor", "max abs err", "max rel err", "tolerance", "used",
                "worst request"):
        t.add_column(col, justify="right" if col != "tensor" else "left")
    for c in rep.checks:
        t.add_row(str(c.step), c.name, f"{c.max_abs_err:.3g}", f"{c.max_rel_err:.3g}",
                  f"{c.max_allowed:.3g}", f"{c.usage:.1%}", str(c.worst_request))
    con.print(t)
