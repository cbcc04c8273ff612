"""What the framework runs: model specs, request batches, operator graphs, PyTorch references.

Modules (``workloads`` imports nothing else from the project; numpy, networkx, torch, stdlib only):

* :mod:`workloads.models`: :class:`~workloads.models.ModelSpec`, the registry
  (:func:`~workloads.models.get_model`, :func:`~workloads.models.list_models`) and
  :func:`~workloads.models.load_hf_config`.
* :mod:`workloads.requests`: :class:`~workloads.requests.Request`,
  :class:`~workloads.requests.Batch`, file loaders, built-in length distributions, the
  continuous-batching warm-up (channel placement of a run: :mod:`mapping.channels`).
* :mod:`workloads.moe`: mixture-of-experts routing (:class:`~workloads.moe.Routing`, the
  router model :func:`~workloads.moe.draw_routing`).
* :mod:`workloads.graph`: per-device operator graphs of a layer or a model
  (:func:`~workloads.graph.build_layer_graph`, :func:`~workloads.graph.build_model_graph`).
* :mod:`workloads.reference`: PyTorch golden models (imported on demand: it loads torch).
"""
from workloads.errors import WorkloadError
from workloads.graph import (OpKind, OpNode, Phase, build_layer_graph, build_model_graph,
                             graph_totals, iter_ops, op_of)
from workloads.models import ModelSpec, get_model, list_models, load_hf_config
from workloads.moe import Routing, draw_routing, routing_from_choices
from workloads.requests import (Batch, LengthTable, Request, default_batch,
                                load_decode_snapshot, load_length_table, load_request_file,
                                load_sharegpt_json, sample_requests, warmup_decode_snapshot)

__all__ = [
    "WorkloadError", "ModelSpec", "get_model", "list_models", "load_hf_config", "Request", "Batch",
    "LengthTable", "load_length_table", "load_decode_snapshot", "load_sharegpt_json",
    "load_request_file", "sample_requests", "warmup_decode_snapshot",
    "default_batch", "OpKind", "OpNode", "Phase", "build_layer_graph", "build_model_graph",
    "graph_totals", "iter_ops", "op_of", "Routing", "draw_routing", "routing_from_choices",
]
