"""ProgramBuilder.wait's knowledge bookkeeping (checkpoints, deltas, the consumer's own entry
left out) equals the happens-before order of the WAITs and SIGNALs it emits.

A random program (streams emitting instructions and waiting for random earlier events) is
built; after every wait a plain oracle computes the waiting stream's vector clock from the
WAITs just emitted: ``WAIT sem, n`` on the pair ``P -> C`` covers ``P``'s instructions up to
the pair's newest consumed signal, and with them everything ``P`` knew there (its clock after
its last WAIT at or before that position, kept whole per WAIT, no checkpoints). The builder's
knowledge must equal that clock without the stream's own entry, and cover every waited event.
"""
from __future__ import annotations

import random

import pytest

from isa.encoding import Instruction
from mapping.builder import ProgramBuilder

_NOP = Instruction("SIGNAL", sem=0, count=1)   # any instruction: the builder does not look


def _oracle_check(B: ProgramBuilder, clocks: dict, stream: str, before: int, events: dict):
    st = B._streams[stream]
    by_sem = {pair.sem: (prod, pair) for prod, pair in st.pairs.items()}
    clock = dict(clocks[stream][-1][1]) if clocks[stream] else {}
    for ins in st.instrs[before:]:
        assert ins.spec.mnemonic == "WAIT"
        sem, n = ins.codes
        prod, pair = by_sem[sem]
        sp = pair.sig[pair.consumed - 1]
        clock[prod] = max(clock.get(prod, -1), sp)
        prior = [c for pos, c in clocks[prod] if pos <= sp]
        for q, v in (prior[-1] if prior else {}).items():
            clock[q] = max(clock.get(q, -1), v)
    clock.pop(stream, None)
    if len(st.instrs) > before:
        clocks[stream].append((len(st.instrs) - 1, dict(clock)))
    assert st.kn == clock
    for p, q in events.items():
        assert p == stream or q < 0 or clock.get(p, -1) >= q


@pytest.mark.parametrize("seed", range(12))
def test_wait_knowledge_is_the_happens_before_clock_of_the_emitted_waits(seed):
    rng = random.Random(seed)
    names = [f"s{k}" for k in range(rng.randint(2, 9))]
    B = ProgramBuilder()
    clocks: dict[str, list] = {n: [] for n in names}
    for _ in range(3000):
        s = rng.choice(names)
        emitted = [n for n in names if B.stream_len(n)]
        if emitted and rng.random() < 0.6:
            events = {}
            for p in rng.sample(emitted, rng.randint(1, min(3, len(emitted)))):
                n = B.stream_len(p)
                events[p] = rng.randrange(max(0, n - 12), n) if rng.random() < 0.9 else -1
            before = B.stream_len(s)
            B.wait(s, events)
            _oracle_check(B, clocks, s, before, events)
        B.append(s, _NOP)
    built = B.finish([], 1 << 20)
    assert set(built.program.streams) == {n for n in names if B.stream_len(n)}
