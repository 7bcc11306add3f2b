"""The grader <-> worker message format carries what a student's module can hand back."""

import socket
import threading
import time

import torch
from torch import nn

from harness.grading import wire


def round_trip(value):
    a, b = socket.socketpair()
    with a, b:
        wire.send(a, value)
        return wire.recv(b)


def test_a_tied_weight_under_two_names_crosses_the_wire():
    """A tied LM head (nanoGPT's `lm_head.weight = wte.weight`) puts one storage in the state dict
    twice; safetensors refuses shared memory, so the worker used to die sending it."""
    embedding = nn.Embedding(7, 4)
    head = nn.Linear(4, 7, bias=False)
    head.weight = embedding.weight
    state = {"token_embeddings.weight": embedding.weight.detach(), "lm_head.weight": head.weight.detach(),
             "row": embedding.weight.detach()[2]}
    got = round_trip(state)
    assert all(torch.equal(got[k], v) for k, v in state.items())


def test_a_blob_listing_too_many_tensors_is_refused_before_it_is_parsed():
    """Red team 5: a reply whose blob lists a million empty tensors cost the parser a minute and 2 GB."""
    import pytest
    from safetensors.torch import save
    many = save({f"t{i}": torch.empty(0) for i in range(30_000)})
    header = b'{"$dict": {}}'
    a, b = socket.socketpair()
    with a, b:  # more than a socket buffer holds: sent beside the read
        sender = threading.Thread(target=a.sendall, args=(wire._HEAD.pack(len(header), len(many)) + header + many,))
        sender.start()
        with pytest.raises(wire.WireError, match="tensor list"):
            wire.recv(b, deadline=time.monotonic() + 60)
        sender.join(60)
    assert len(round_trip({f"t{i}": torch.zeros(2) for i in range(500)})) == 500  # a big state dict still crosses


def test_a_message_over_the_limit_is_refused_from_its_length_unread():
    """Red team 9: a module of one 480 MB parameter, read whole, took the trusted driver to 2.5 GB. A message
    longer than the receiver's limit is refused from its 16-byte length header: its body is never sent here
    (recv would block for it), so nothing of it is read or allocated."""
    import pytest
    header = b'{"$dict": {}}'
    a, b = socket.socketpair()
    with a, b:
        a.sendall(wire._HEAD.pack(len(header), 80 << 20))  # 80 MB announced, none of it sent
        with pytest.raises(wire.TooLarge, match="exceeds the 67,108,864-byte limit"):
            wire.recv(b, deadline=time.monotonic() + 5, limit=64 << 20)
    a, b = socket.socketpair()
    with a, b:  # and a message under the limit is read as ever
        wire.send(a, {"w": torch.ones(1 << 13)})
        assert torch.equal(wire.recv(b, limit=64 << 10)["w"], torch.ones(1 << 13))


def test_every_dtype_shape_and_layout_crosses_as_safetensors_writes_it():
    """The blob is written by the wire itself (5x faster than safetensors' save): each dtype, an empty and
    a 0-d tensor, a permuted view and a slice read back exactly through safetensors' own load."""
    g = torch.Generator().manual_seed(0)
    values = {"f64": torch.randn(3, 2, dtype=torch.float64, generator=g), "f16": torch.randn(5, generator=g).half(),
              "bf16": torch.randn(2, 3, generator=g).bfloat16(), "i64": torch.arange(-3, 4),
              "i32": torch.arange(6, dtype=torch.int32).reshape(2, 3), "u8": torch.arange(250, 256, dtype=torch.uint8),
              "i8": torch.tensor([-128, 127], dtype=torch.int8), "i16": torch.tensor([-7], dtype=torch.int16),
              "bool": torch.tensor([True, False, True]), "empty": torch.zeros(0, 4), "scalar": torch.tensor(2.5),
              "permuted": torch.randn(2, 3, 4, generator=g).permute(2, 0, 1), "slice": torch.randn(6, 4, generator=g)[1:5, ::2]}
    got = round_trip(values)
    for name, value in values.items():
        assert got[name].dtype == value.dtype and got[name].shape == value.shape and torch.equal(got[name], value), name


def test_a_dtype_the_wire_does_not_write_itself_goes_through_safetensors_shared_or_not():
    """uint16 and float8 tensors (no code in the wire's own writer) go through safetensors' save, which refuses
    shared memory: a tensor under two names is copied first, as the wire's own writer copies bytes."""
    shared = torch.arange(6).to(torch.uint16)
    values = {"a": shared, "b": shared, "c": shared[2:], "f8": torch.tensor([0.5, -2.0]).to(torch.float8_e4m3fn)}
    got = round_trip(values)
    assert all(got[k].dtype == v.dtype and torch.equal(got[k].view(torch.uint8), v.contiguous().view(torch.uint8))
               for k, v in values.items()), got


def test_a_message_of_too_many_values_or_strings_is_refused_before_anyone_reads_them():
    """Red team 13: replies of 150,000 keys cost the driver 2.3 s of its own CPU each (every string is read for
    posed diagnoses), none of it charged to the submission. A message holds at most MAX_VALUES values and
    MAX_TEXTS strings; a state dict's worth of both passes."""
    import pytest
    a, b = socket.socketpair()
    with a, b:
        for value, refused in (({f"k{i}": i for i in range(wire.MAX_TEXTS + 1)}, True),
                               ([0] * (wire.MAX_VALUES + 1), True),
                               ({f"layers.{i}.weight": torch.zeros(1) for i in range(200)}, False)):
            sender = threading.Thread(target=wire.send, args=(a, value))
            sender.start()
            if refused:
                with pytest.raises(wire.TooLarge, match="values or"):
                    wire.recv(b)
            else:
                assert set(wire.recv(b)) == set(value)
            sender.join()


def test_the_phrase_search_reads_a_bounded_share_of_a_submissions_text():
    """Red team 14: replies of 950 strings of 4 KiB each cost the driver 20x the submission's own CPU in the
    search for a known mistake's phrase. The search reads at most PHRASE_CHARS of a submission's text; past
    that every string is marked as the code's words unread, as one over 4 KiB always is. Labels are defused
    whatever the budget."""
    from harness.grading.remote import PHRASE_CHARS, disarm
    from harness.grading.report import POSED
    budget = [PHRASE_CHARS]
    honest = disarm({"name": "run_silu", "message": "shape [2, 3]"}, budget)
    assert honest == {"name": "run_silu", "message": "shape [2, 3]"} and budget[0] == PHRASE_CHARS - 31  # keys too
    filler = "x" * 4000
    while budget[0] >= len(filler):
        disarm([filler], budget)
    assert disarm(["short"], [3]) == [f"short {POSED}"]  # past the budget: unread, marked
    assert disarm(["Likely cause: mine"], [0]) == [f"Likely cause {POSED} mine"]
    assert disarm([filler], budget) == [f"{filler} {POSED}"] and budget[0] >= 0
