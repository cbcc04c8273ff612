"""A user's first hour: every kind of bad input, across all commands, is one line on stderr,
exit code 2, no traceback, and names the file, key or flag at fault (issue 21).

Each case runs ``archsim.cli.main`` in this process; none starts a long simulation (every check
happens before the first simulated cycle). ``{x}`` in an argument is a fixture file:

=========  ===============================================================================
{bin}      random bytes (given as YAML, JSON, a trace, a timestamp file, assembly, ...)
{file}     an existing plain file (an output *directory* that is a file; a file as parent)
{dir}      an existing directory (an output *file* that is a directory)
{dup}      machine YAML with a key given twice; {dupspec} the same in a sweep spec
{tras}     machine YAML with tRAS = 5 < tRCDRD = 14
{h100}     Hugging Face LLaMA config, hidden 100 with 3 heads
{dsv3}     a config.json of an unsupported model_type; {topk} a Mixtral config with top-9 of 8
           experts; {kv3} a Mixtral config with 4 query heads and 3 key/value heads
{hfbad}    Hugging Face config that transformers' LlamaConfig rejects (layer_types)
{ts}       three timestamps; {spec} a valid 2-point GPU sweep spec; {asm} valid assembly
{long}     a decode snapshot with a request longer than tiny-gpt's 256-token context
{empty}    an empty trace; {ooo} a DRAMsim3 trace whose cycles go back; {ram} Ramulator
=========  ===============================================================================
"""
from __future__ import annotations

import importlib.util

import pytest

from archsim.cli import main

TINY = ["--model", "tiny-gpt", "--batch", "2", "--quiet"]

CASES: list[tuple[str, list[str], list[str]]] = [
    # (id, argv, fragments the one line must contain)
    # ---- config
    ("config-binary-yaml", ["config", "validate", "{bin}"], ["{bin}: not a text file"]),
    ("config-duplicate-key", ["config", "validate", "{dup}"],
     ["{dup}:6: duplicate key 'tRAS' (first given on line 5)"]),
    ("config-tras-below-trcd", ["config", "validate", "{tras}"],
     ["{tras}:4: memory.timing.tRAS", "tRAS (5) must be >= tRCDRD (14)"]),
    ("config-missing-file", ["config", "validate", "{tmp}/missing.yaml"],
     ["missing.yaml: config file not found"]),
    ("config-directory", ["config", "validate", "{dir}"], ["{dir}: cannot read"]),
    ("config-set-cwl-above-cl", ["config", "show", "neupims", "--set", "memory.timing.CWL=20"],
     ["--set memory.timing.CWL=20", "memory.timing.CWL: CWL (20) must be <= CL (14)"]),
    ("config-pim-commands-unknown", ["config", "show", "npu-pim-blocked", "--set",
                                     "pim.commands=foo"],
     ["--set pim.commands=foo", "pim.commands", "'neupims' or 'newton'"]),
    ("config-newton-dual-row-buffers", ["config", "show", "neupims", "--set",
                                        "pim.commands=newton"],
     ["commands: newton needs row_buffer_mode: single", "one row buffer per bank"]),
    ("compare-ablation-with-paper", ["compare", "--ablation", "--paper"],
     ["--ablation runs its own fixed steps", "--paper cannot be combined"]),
    ("compare-ablation-varied-key", ["compare", "--ablation", "--set", "system.sub_batches=1"],
     ["--set system.sub_batches=1", "the ablation varies system.sub_batches"]),
    ("config-unknown-preset", ["config", "show", "nope"], ["unknown config 'nope'", "neupims"]),
    ("config-misspelt-key", ["config", "show", "--set", "memory.timing.tRCDR=16"],
     ["unknown key 'memory.timing.tRCDR'", "did you mean", "memory.timing.tRCDRD"]),
    # ---- run: flags, files, output paths, capacity
    ("run-negative-seed", ["run", *TINY, "--seed", "-1"], ["--seed -1: must be >= 0"]),
    ("run-rate-without-poisson", ["run", *TINY, "--serve", "--rate", "5"],
     ["--rate 5 needs --arrival poisson"]),
    ("run-timestamps-with-poisson", ["run", *TINY, "--serve", "--timestamps", "{ts}",
                                     "--arrival", "poisson", "--rate", "3"],
     ["--timestamps", "excludes --arrival and --rate"]),
    ("run-chunked-with-max-prefill", ["run", *TINY, "--serve", "--chunked-prefill", "512",
                                      "--max-prefill-tokens", "1024"],
     ["--chunked-prefill and --max-prefill-tokens are exclusive"]),
    ("run-num-requests-without-serve", ["run", *TINY, "--num-requests", "5"],
     ["--num-requests applies only to a serving run"]),
    ("run-timing-without-serve", ["run", *TINY, "--timing", "exact"],
     ["--timing applies only to a serving run"]),
    ("run-timing-on-gpu", ["run", *TINY, "--serve", "--system", "gpu", "--timing", "exact"],
     ["--timing exact applies to the NPU systems"]),
    ("run-iterations-with-serve", ["run", *TINY, "--serve", "--iterations", "3"],
     ["--iterations and --serve are exclusive"]),
    ("run-poisson-without-rate", ["run", *TINY, "--serve", "--arrival", "poisson"],
     ["--arrival poisson needs --rate"]),
    ("run-unknown-arrival", ["run", *TINY, "--serve", "--arrival", "bursty"],
     ["--arrival 'bursty' not one of ['all', 'poisson']"]),
    ("run-ignore-capacity-with-serve", ["run", *TINY, "--serve", "--ignore-capacity"],
     ["--ignore-capacity applies to --batch/--iterations runs"]),
    ("run-keep-channels-without-file", ["run", *TINY, "--keep-channels"],
     ["--keep-channels keeps the channels of a --requests snapshot"]),
    ("run-dataset-with-requests", ["run", *TINY, "--requests", "{ts}", "--dataset", "alpaca"],
     ["--dataset and --requests are exclusive"]),
    ("run-unknown-dataset", ["run", *TINY, "--dataset", "wiki"], ["unknown dataset 'wiki'"]),
    ("run-unknown-system", ["run", *TINY, "--system", "tpu"], ["unknown system 'tpu'"]),
    ("run-json-under-a-file", ["run", *TINY, "--json", "{file}/r.json"],
     ["--json {file}/r.json: cannot be created", "is a file, not a directory"]),
    ("run-json-is-a-directory", ["run", *TINY, "--json", "{dir}"],
     ["--json {dir}: is a directory"]),
    ("run-trace-under-a-file", ["run", *TINY, "--trace", "{file}/t.json"],
     ["--trace {file}/t.json: cannot be created"]),
    ("run-plots-is-a-file", ["run", *TINY, "--plots", "{file}"],
     ["--plots {file}: exists and is not a directory"]),
    ("run-batch-beyond-capacity", ["run", "--batch", "100000", "--quiet"],
     ["memory capacity: the batch of 100000 requests needs", "--batch"]),
    ("run-binary-requests", ["run", *TINY, "--requests", "{bin}.json"],
     ["{bin}.json: not a text file"]),
    ("run-binary-model-config", ["run", "--model", "{bin}.json", "--quiet"],
     ["{bin}.json: not a text file"]),
    ("run-binary-timestamps", ["run", *TINY, "--serve", "--timestamps", "{bin}"],
     ["{bin}: cannot read timestamps"]),
    ("run-timestamps-go-back", ["run", *TINY, "--serve", "--timestamps", "{tsback}"],
     ["{tsback}:3: timestamp 0.05 is earlier than 0.2 on line 2",
      "arrival times must not decrease"]),
    ("run-serve-zero-replicas", ["run", *TINY, "--serve", "--replicas", "0"],
     ["--replicas 0: must be an integer 1..1024"]),
    ("run-serve-unknown-router", ["run", *TINY, "--serve", "--replicas", "2", "--router",
                                  "random"],
     ["--router 'random' not one of ['round-robin', 'least-loaded', 'kv-aware']"]),
    ("run-router-without-replicas", ["run", *TINY, "--serve", "--router", "least-loaded"],
     ["--router least-loaded splits requests across replicas: add --replicas N"]),
    ("run-replicas-without-serve", ["run", *TINY, "--replicas", "4"],
     ["--replicas applies only to a serving run"]),
    ("run-serve-zero-token-budget", ["run", *TINY, "--serve", "--chunked-prefill", "0"],
     ["--chunked-prefill 0: must be 1..1,048,576 tokens"]),
    ("run-serve-negative-prefill-budget", ["run", *TINY, "--serve", "--max-prefill-tokens",
                                           "-5"],
     ["--max-prefill-tokens -5: must be 1..1,048,576 tokens"]),
    ("run-serve-zero-batch", ["run", *TINY[:2], "--serve", "--batch", "0", "--quiet"],
     ["--batch 0: must be 1..1,048,576 requests per iteration"]),
    ("run-kv-block-size-zero", ["run", *TINY, "--serve", "--set", "serving.kv_block_tokens=0"],
     ["--set serving.kv_block_tokens=0", "serving.kv_block_tokens", "greater than or equal "
      "to 1"]),
    ("run-kv-block-larger-than-the-cache", ["run", "--system", "gpu", *TINY, "--serve", "--set",
                                            "gpu.memory_bytes=4000000", "--set",
                                            "serving.kv_block_tokens=65536"],
     ["memory capacity: a KV cache of 2,939 tokens holds no block of "
      "serving.kv_block_tokens = 65536 tokens"]),
    ("run-swap-bandwidth-without-swap", ["run", *TINY, "--serve", "--set",
                                         "serving.swap_bandwidth_bytes_per_s=1e9"],
     ["serving.swap_bandwidth_bytes_per_s", "applies to preemption: swap"]),
    ("run-serving-key-without-serve", ["run", *TINY, "--set", "serving.preemption=swap"],
     ["--set serving.preemption=swap: the serving.* keys", "apply only to a serving run"]),
    ("run-micro-batches-out-of-range", ["run", *TINY, "--set", "system.micro_batches=65"],
     ["--set system.micro_batches=65", "system.micro_batches", "less than or equal to 64"]),
    ("run-micro-batches-on-one-stage", ["run", *TINY, "--set", "system.micro_batches=2"],
     ["system.micro_batches 2 needs pipeline parallelism: model 'tiny-gpt' runs in one stage"]),
    ("run-serve-slo-not-positive", ["run", *TINY, "--serve", "--slo-tpot", "-0.5"],
     ["--slo-tpot -0.5: must be a positive number of seconds"]),
    ("run-micro-batches-on-gpu", ["run", *TINY, "--system", "gpu", "--set",
                                  "system.micro_batches=4"],
     ["system.micro_batches", "applies to the NPU systems"]),
    ("run-heads-do-not-divide-hidden", ["run", "--model", "{h100}", "--quiet"],
     ["{h100}: hidden_size = 100 is not divisible by num_attention_heads = 3"]),
    ("run-unsupported-model-type", ["run", "--model", "{dsv3}", "--quiet"],
     ["{dsv3}: model_type 'deepseek_v3' is not supported; supported:", "qwen2, mixtral"]),
    ("run-top-k-above-experts", ["run", "--model", "{topk}", "--quiet"],
     ["{topk}: num_experts_per_tok = 9 must be between 1 and num_local_experts = 8"]),
    ("run-kv-heads-do-not-divide-heads", ["run", "--model", "{kv3}", "--quiet"],
     ["{kv3}: num_attention_heads = 4 is not a multiple of num_key_value_heads = 3"]),
    ("run-expert-parallel-on-a-dense-model", ["run", *TINY, "--set",
                                              "system.expert_parallel=2"],
     ["system.expert_parallel = 2", "has no experts"]),
    ("run-expert-parallel-does-not-divide", ["run", "--model", "tiny-mixtral", "--batch", "2",
                                             "--quiet", "--set", "system.expert_parallel=3"],
     ["system.expert_parallel = 3", "must divide n_experts=8"]),
    ("run-usage-error", ["run", "--batch", "many"],
     ["archsim run: error: Invalid value for '--batch'"]),
    # ---- compare
    ("compare-paper-with-model", ["compare", "--paper", "--model", "gpt3-13b"],
     ["--paper runs the fixed NeuPIMs grid", "--model cannot be combined"]),
    ("compare-unknown-system", ["compare", "--systems", "neupims,tpu"],
     ["unknown system 'tpu'"]),
    ("compare-json-is-a-directory", ["compare", *TINY, "--json", "{dir}"],
     ["--json {dir}: is a directory"]),
    ("compare-negative-seed", ["compare", *TINY, "--seed", "-2"], ["--seed -2: must be >= 0"]),
    # ---- compile
    ("compile-out-is-a-file", ["compile", *TINY[:4], "-o", "{file}"],
     ["-o {file}: exists and is not a directory"]),
    ("compile-out-under-a-file", ["compile", *TINY[:4], "-o", "{file}/sub"],
     ["-o {file}/sub: cannot be created"]),
    ("compile-bad-layers", ["compile", *TINY[:4], "--layers", "3", "-o", "{tmp}/c"],
     ["--layers '3': expected 1, window or all"]),
    ("compile-binary-requests", ["compile", "--model", "tiny-gpt", "--requests", "{bin}.json",
                                 "-o", "{tmp}/c"], ["{bin}.json: not a text file"]),
    ("compile-unknown-system", ["compile", *TINY[:4], "--system", "tpu", "-o", "{tmp}/c"],
     ["unknown system 'tpu'"]),
    ("compile-negative-seed", ["compile", *TINY[:4], "--seed", "-1", "-o", "{tmp}/c"],
     ["--seed -1: must be >= 0"]),
    ("compile-scratchpad-below-the-smallest-plan",
     ["compile", *TINY[:4], "--set", "npu.scratchpad.size_bytes=65536", "-o", "{tmp}/c"],
     ["npu.scratchpad.size_bytes = 65536 is too small for the smallest buffer plan",
      "bytes"]),
    ("compile-context-beyond-max-positions",
     ["compile", "--model", "tiny-gpt", "--requests", "{long}", "-o", "{tmp}/c"],
     ["seq_len 300 > max_seq_len 256 of model 'tiny-gpt'"]),
    ("run-context-beyond-max-positions", ["run", "--model", "tiny-gpt", "--requests", "{long}",
                                          "--quiet"],
     ["seq_len 300 > max_seq_len 256 of model 'tiny-gpt'"]),
    # ---- validate
    ("validate-multipliers-do-not-divide-a-row",
     ["validate", "--set", "pim.multipliers_per_bank=7", "--quiet"],
     ["pim.multipliers_per_bank = 7 must divide the 512 elements of a DRAM row"]),
    ("validate-hf-config-rejected", ["validate", "--reference", "hf", "--model", "{hfbad}",
                                     "--quiet"],
     ["{hfbad}: transformers", "rejects this llama config", "layer_types"]),
    ("validate-heads-do-not-divide-hidden", ["validate", "--model", "{h100}", "--quiet"],
     ["hidden_size = 100 is not divisible by num_attention_heads = 3"]),
    ("validate-expert-parallel", ["validate", "--model", "tiny-mixtral", "--set",
                                  "system.expert_parallel=2", "--quiet"],
     ["system.expert_parallel 2: validation compares one device"]),
    ("validate-unknown-dtype", ["validate", "--dtype", "fp8", "--quiet"],
     ["--dtype 'fp8': each must be one of"]),
    ("validate-json-under-a-file", ["validate", "--json", "{file}/v.json", "--quiet"],
     ["--json {file}/v.json: cannot be created"]),
    ("validate-batch-with-prompt-lens", ["validate", "--batch", "2", "--prompt-lens", "3,4"],
     ["--prompt-lens and --batch are exclusive"]),
    ("validate-binary-model", ["validate", "--model", "{bin}.json", "--quiet"],
     ["{bin}.json: not a text file"]),
    # ---- workload
    ("workload-binary-model", ["workload", "show", "--model", "{bin}.json"],
     ["{bin}.json: not a text file"]),
    ("workload-unknown-phase", ["workload", "show", "--model", "tiny-gpt", "--phase", "train"],
     ["--phase 'train' not one of"]),
    ("workload-tp-does-not-divide", ["workload", "show", "--model", "tiny-gpt", "--tp", "3"],
     ["tensor-parallel degree 3 must divide n_heads=4"]),
    ("workload-policy-ignored-by-prefill", ["workload", "show", "--model", "tiny-gpt",
                                            "--phase", "prefill", "--policy", "round_robin"],
     ["--policy place the KV cache of a warmed-up decode batch"]),
    ("workload-json-under-a-file", ["workload", "show", "--model", "tiny-gpt", "--json",
                                    "{file}/w.json"], ["--json {file}/w.json: cannot be created"]),
    # ---- mem
    ("mem-empty-trace", ["mem", "run", "--trace", "{empty}"],
     ["{empty}: no request in the trace"]),
    ("mem-out-of-order-trace", ["mem", "run", "--trace", "{ooo}"],
     ["{ooo}:2: cycle 5 is earlier than cycle 10 of line 1"]),
    ("mem-binary-trace", ["mem", "run", "--trace", "{bin}"], ["{bin}: not a text file"]),
    ("mem-unknown-engine", ["mem", "run", "--trace", "{ram}", "--engine", "slow"],
     ["--engine 'slow' not one of ['fast', 'exact']"]),
    ("mem-unknown-format", ["mem", "run", "--trace", "{ram}", "--format", "gem5"],
     ["--format 'gem5' not one of"]),
    ("mem-json-under-a-file", ["mem", "run", "--trace", "{ram}", "--json", "{file}/m.json"],
     ["--json {file}/m.json: cannot be created"]),
    ("mem-config-with-bad-timing", ["mem", "run", "--trace", "{ram}", "--config", "{tras}"],
     ["{tras}:4: memory.timing.tRAS"]),
    ("mem-selftest-zero-requests", ["mem", "selftest", "--per-channel", "0"],
     ["Invalid value for '--per-channel'"]),
    ("mem-selftest-json-is-a-directory", ["mem", "selftest", "--json", "{dir}"],
     ["--json {dir}: is a directory"]),
    # ---- sweep
    ("sweep-binary-spec", ["sweep", "{bin}.yaml", "--out", "{tmp}/s"],
     ["{bin}.yaml: not a text file"]),
    ("sweep-duplicate-key", ["sweep", "{dupspec}", "--out", "{tmp}/s"],
     ["{dupspec}:7: duplicate key 'batch' (first given on line 6)"]),
    ("sweep-out-is-a-file", ["sweep", "{spec}", "--out", "{file}"],
     ["--out {file}: exists and is not a directory"]),
    ("sweep-zero-jobs", ["sweep", "{spec}", "--out", "{tmp}/s", "--jobs", "0"],
     ["--jobs 0: must be >= 1"]),
    ("sweep-report-plots-is-a-file", ["sweep", "report", "{tmp}/s", "--plots", "{file}"],
     ["--plots {file}: exists and is not a directory"]),
    ("sweep-report-no-results", ["sweep", "report", "{dir}"], ["no sweep results here"]),
    ("sweep-export-two-formats", ["sweep", "export", "{dir}", "--csv", "--parquet"],
     ["give exactly one of --csv or --parquet"]),
    # ---- ISA
    ("asm-binary-source", ["asm", "{bin}"], ["{bin}: not a text file"]),
    ("asm-out-under-a-file", ["asm", "{asm}", "-o", "{file}/p.bin"],
     ["-o {file}/p.bin: cannot be created"]),
    ("disasm-not-a-program", ["disasm", "{ts}"], ["{ts}: bad magic"]),
    ("isa-doc-out-under-a-file", ["isa", "doc", "-o", "{file}/isa.md"],
     ["{file}/isa.md: cannot write"]),
    ("no-such-command", ["simulate"], ["No such command 'simulate'"]),
]


@pytest.fixture
def files(tmp_path):
    f = {"tmp": str(tmp_path)}
    blob = bytes(range(128, 256)) * 8
    for name in ("bin", "bin.json", "bin.yaml"):
        (tmp_path / name).write_bytes(blob)
    f["bin"] = str(tmp_path / "bin")
    (tmp_path / "plain").write_text("x\n")
    f["file"] = str(tmp_path / "plain")
    (tmp_path / "d").mkdir()
    f["dir"] = str(tmp_path / "d")
    texts = {
        "dup": ("dup.yaml", "name: d\nbase: neupims\nmemory:\n  timing:\n    tRAS: 40\n"
                            "    tRAS: 41\n"),
        "tras": ("tras.yaml", "base: neupims\nmemory:\n  timing:\n    tRAS: 5\n"),
        "h100": ("h100.json", '{"model_type": "llama", "hidden_size": 100, '
                              '"num_attention_heads": 3, "intermediate_size": 256, '
                              '"num_hidden_layers": 2, "max_position_embeddings": 128, '
                              '"vocab_size": 1000}'),
        "hfbad": ("hfbad.json", '{"model_type": "llama", "hidden_size": 64, '
                                '"num_attention_heads": 4, "intermediate_size": 128, '
                                '"num_hidden_layers": 2, "max_position_embeddings": 128, '
                                '"vocab_size": 100, "layer_types": ["full_attention"]}'),
        "dsv3": ("dsv3.json", '{"model_type": "deepseek_v3", "hidden_size": 64}'),
        "topk": ("topk.json", '{"model_type": "mixtral", "hidden_size": 64, '
                              '"num_attention_heads": 4, "intermediate_size": 128, '
                              '"num_hidden_layers": 2, "max_position_embeddings": 128, '
                              '"vocab_size": 100, "num_local_experts": 8, '
                              '"num_experts_per_tok": 9}'),
        "kv3": ("kv3.json", '{"model_type": "mixtral", "hidden_size": 64, '
                            '"num_attention_heads": 4, "num_key_value_heads": 3, '
                            '"intermediate_size": 128, "num_hidden_layers": 2, '
                            '"max_position_embeddings": 128, "vocab_size": 100}'),
        "ts": ("ts.txt", "0.1\n0.2\n0.3\n"),
        "tsback": ("tsback.txt", "0.1\n0.2\n0.05\n"),
        "long": ("long.csv", "seq_len,ch_idx\n12,0\n300,1\n"),
        "empty": ("empty.trc", "# no requests\n"),
        "ooo": ("ooo.trc", "0x0 READ 10\n0x40 READ 5\n"),
        "ram": ("ram.trc", "0x0 R\n0x40 R\n"),
        "asm": ("p.s", ".stream npu0\n    NOP\n"),
        "spec": ("spec.yaml", "name: s\nworkload: {system: gpu, model: tiny-gpt}\n"
                              "parameters:\n  batch: [1, 2]\nsearch: {kind: grid}\n"
                              "objectives:\n  - {metric: tokens_per_s, goal: maximize}\n"),
        "dupspec": ("dupspec.yaml", "name: s\nworkload:\n  system: gpu\n  model: tiny-gpt\n"
                                    "parameters:\n  batch: [1, 2]\n  batch: [3]\n"
                                    "search: {kind: grid}\n"),
    }
    (tmp_path / "d" / "x").write_text("")
    for key, (name, text) in texts.items():
        (tmp_path / name).write_text(text)
        f[key] = str(tmp_path / name)
    return f


def _fill(s: str, f: dict[str, str]) -> str:
    return s.format(**f)


def test_the_table_is_large_and_covers_every_command():
    assert len(CASES) >= 45
    commands = {c[1][0] if c[1][0] not in ("config", "mem", "sweep", "workload", "isa")
                else " ".join(c[1][:2]) for c in CASES}
    for cmd in ("run", "compare", "compile", "validate", "workload show", "mem run",
                "mem selftest", "config validate", "config show", "asm", "disasm", "isa doc"):
        assert cmd in commands, cmd
    assert {c[1][1] for c in CASES if c[1][0] == "sweep"} >= {"report", "export"}
    assert len({c[0] for c in CASES}) == len(CASES)


@pytest.mark.parametrize("argv,fragments", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_is_one_line_exit_2_naming_what_is_wrong(argv, fragments, files, capsys):
    if "{hfbad}" in argv and importlib.util.find_spec("transformers") is None:
        pytest.skip("needs the 'hf' extra (transformers)")
    rc = main([_fill(a, files) for a in argv])
    err = capsys.readouterr().err
    lines = [x for x in err.splitlines() if x.strip()]
    assert rc == 2, err
    assert "Traceback" not in err
    assert len(lines) == 1, lines
    for frag in fragments:
        assert _fill(frag, files) in lines[0], lines[0]
