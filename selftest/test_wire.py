"""The grader <-> worker message format carries what a student's module can hand back."""

import socket

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
