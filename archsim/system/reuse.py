"""Layer reuse: which simulated layers of a window time the layers that are not simulated.

A window of ``n_sim`` consecutive layers (:mod:`archsim.system.core`) is a prologue (layer 0),
a transient (1), steady-state layers and an epilogue (the last); the other layers of a
stage take the times of its steady-state layers (:func:`steady_layers`, in turn:
:func:`stage_layer_times`).
"""
from __future__ import annotations


def steady_layers(n_sim: int) -> list[int]:
    """The layers of a window of ``n_sim`` simulated layers whose times the reused layers take,
    in turn: ``2 … n_sim − 2`` (between the transient layer 1 and the epilogue) when the window
    has five layers or more, else its middle layer ``n_sim // 2`` alone (the default window of
    4: layer 2; serving's 3: layer 1).

    Identical layers do not take identical times: a small GPT3-7B prefill's layers vary by
    1.4-1.5 % (std, NPU cycles) along the 32 layers with how the arrays' weight streams
    interleave on the channels, decode layers on PIM by 0.3-0.5 % (docs/results.md, "What a
    layer window samples"), so one reused layer is one sample of that spread and a longer
    window takes several."""
    if n_sim >= 5:
        return list(range(2, n_sim - 1))
    return [n_sim // 2]


def stage_layer_times(sim_cycles: list[float], per: int
                      ) -> tuple[list[tuple[float, str, int | None]], str | None]:
    """The times of a stage's ``per`` layers from the window's simulated ones.

    Args:
        sim_cycles: the simulated layers' times, NPU cycles, ``[n_sim]`` (window order).
        per: layers per pipeline stage (``>= n_sim``).

    Returns:
        ``(timings, note)``: ``timings[per]`` of ``(cycles, source, reused_from)`` in layer
        order (``cycle-level`` with None, or ``reused`` with the simulated layer lent:
        layers ``0 … s`` of the window, the reused ones, then the window's layers after ``s``,
        ``s`` the last of :func:`steady_layers`), and the result's note on the reuse (None when
        every layer is simulated).
    """
    n_sim = len(sim_cycles)
    if n_sim == per:
        return [(c, "cycle-level", None) for c in sim_cycles], None
    lent = steady_layers(n_sim)
    mid = lent[-1]                            # the last steady-state layer of the window
    out: list[tuple[float, str, int | None]] = [
        (sim_cycles[i], "cycle-level", None) for i in range(mid + 1)]
    out += [(sim_cycles[lent[k % len(lent)]], "reused", lent[k % len(lent)])
            for k in range(per - n_sim)]
    out += [(sim_cycles[i], "cycle-level", None) for i in range(mid + 1, n_sim)]
    src = (f"period of simulated layer {mid}" if len(lent) == 1 else
           f"periods of simulated layers {lent[0]}..{mid} in turn")
    note = (f"layer reuse: {n_sim} consecutive layers simulated as one program (prologue, "
            f"steady state, epilogue); layers {mid + 1}..{per - n_sim + mid} of each stage reuse "
            f"the steady-state {src} (identical batch, lengths, "
            f"sub-batches and channel placement: compiler layer_key); the last "
            f"{n_sim - mid - 1} layer(s) are timed by the window's last layer(s)")
    return out, note


__all__ = ["steady_layers", "stage_layer_times"]
