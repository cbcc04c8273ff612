"""The operator graph of a stack of consecutive decoder layers, as the compiler sees it: the
layer graphs of :func:`workloads.graph.build_layer_graph` joined by the hidden-state edges."""
from __future__ import annotations

import networkx as nx

from workloads.graph import build_layer_graph
from workloads.models import ModelSpec
from workloads.moe import Routing
from workloads.requests import Batch


def stack_graph(model: ModelSpec, batch: Batch, phase: str, tp: int, layers: list[int],
                routing: Routing | None = None) -> nx.DiGraph:
    """The operator graph of consecutive ``layers`` (of ``model`` on one tensor-parallel device
    of ``tp``, for ``batch`` in ``phase``; ``routing``: a mixture of experts' routing).

    It is ``nx.compose`` of the layer graphs one after another, each layer's
    ``L{l-1}.ffn_residual -> L{l}.attn_norm / attn_residual`` edges (the hidden state and the
    residual, ``tokens * d_model * dtype_bytes`` each) added after the compose of layer ``l``,
    then ``graph.graph`` the stack's ``model``, ``phase``, ``tp``, ``layers``, ``requests``
    and ``routing``. Built in place with one compose at the end: a compose per layer copies
    the graph so far (quadratic in the layers: 9 of the 32 s of a 32-layer GPT3-7B compile).
    A compose keeps the order of the nodes and of each node's successors and lists each node's
    predecessors in node order, so composing once what was built in place gives the graph of
    composing layer by layer, orders included (tests/test_mapping_compile.py holds them equal).

    Raises:
        workloads.errors.WorkloadError: as :func:`workloads.graph.build_layer_graph`.
    """
    g = None
    join: list[tuple] = []
    for k, l in enumerate(layers):
        gl = build_layer_graph(model, phase, batch, tp=tp, layer=l, routing=routing)
        if g is None:
            g = gl
        else:
            g.graph.update(gl.graph)
            g.add_nodes_from(gl.nodes(data=True))
            g.add_edges_from(gl.edges(data=True))
        if k:
            size = gl.graph["tokens"] * model.d_model * model.dtype_bytes
            join = [(f"L{layers[k - 1]}.ffn_residual", f"L{l}.{v}",
                     {"tensor": t, "size_bytes": size})
                    for v, t in (("attn_norm", "hidden"), ("attn_residual", "residual"))]
            if k < len(layers) - 1:
                g.add_edges_from(join)
    g = nx.compose(nx.DiGraph(), g)
    g.add_edges_from(join)            # the last layer's join: after the last compose
    g.graph.update(model=model.name, phase=phase, tp=tp, layers=layers,
                   requests=gl.graph["requests"], routing=gl.graph.get("routing"))
    return g


__all__ = ["stack_graph"]
