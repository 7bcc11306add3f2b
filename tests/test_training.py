"""Train it: checks no fixture can make (random draws, a resumed run, what a call allocates).

Inputs come from fixed seeds; expected values from properties every correct implementation has.
Every call is to a contract function with tensors in and out (the drills run_clip_gradients,
run_sample_batches, run_resume_training stand for CS336's entry points), so these tests run
unchanged in grading, where each call is made in the submission's worker.
"""

import math

import pytest
import torch

from harness.runtime import AdaptersError, ContractViolation
from harness.student_run.checks import generator
from harness.student_run.probes import allocations, footprint

adapter = pytest.mark.adapter


def rng(seed: int = 0) -> torch.Generator:
    return generator(seed)


# ---------------------------------------------------------------- cross-entropy

@adapter("run_cross_entropy")
@pytest.mark.parametrize("offset", [1000.0, -1000.0, 1e4])
def test_cross_entropy_ignores_a_shift_of_every_logit(adapters, offset):
    """softmax(x + c) = softmax(x): the loss of logits shifted by c is the loss of the logits."""
    logits = torch.randn(4, 9, generator=rng()) * 3
    targets = torch.randint(0, 9, (4,), generator=rng())
    base = adapters.run_cross_entropy(logits, targets)
    shifted = adapters.run_cross_entropy(logits + offset, targets)
    assert torch.isfinite(shifted), (
        f"the loss of logits shifted by {offset:g} is {shifted.item()}: exp overflowed. Subtract each row's max "
        "before exp (log-sum-exp), so exp never sees more than 0")
    # float32 holds x + 1e4 to 1e-3: allow that much, far less than any real error
    assert abs(shifted.item() - base.item()) < 2e-6 * abs(offset) + 1e-5, (
        f"shifting every logit by {offset:g} changed the loss from {base.item():.6g} to {shifted.item():.6g}; "
        "softmax(x + c) = softmax(x), so the loss must not change")


@adapter("run_cross_entropy")
def test_cross_entropy_of_equal_logits_is_log_vocab(adapters):
    """With every logit equal, every class has probability 1/V: the loss is log V whatever the targets."""
    loss = adapters.run_cross_entropy(torch.full((3, 5, 20), 7.0), torch.randint(0, 20, (3, 5), generator=rng()))
    times = {5: ": summed over each row's 5 positions, then divided by the batch size 3 alone",  # the multiples
             15: ": summed over the 15 positions, not averaged", 3: ": summed over the batch of 3, not averaged"}
    why = next((f" = {k} x log 20{said}" for k, said in times.items() if abs(loss.item() - k * math.log(20)) < 1e-4), "")
    assert abs(loss.item() - math.log(20)) < 1e-5, (
        f"equal logits over 20 classes give log 20 = 2.9957; got {loss.item():.6g}{why}"
        + ("; the loss is the mean over every position of logits [3, 5, 20]" if why else ""))


V_PROBE, ROWS = 4096, 64  # logits [64, 4096]: a one-hot of the targets is as large as they are


# What makes a one-hot: a loss's own [..., V] intermediates (x - max, exp, log_softmax) are never zeros filled in
# place (blind trial 14: torch.zeros_like(x).scatter_(...) passed), nor a comparison or a scatter
ONE_HOT_OPS = ("one_hot", "scatter", "eq", "zeros", "zeros_like", "new_zeros", "full", "full_like")


@pytest.mark.reports_only  # the allocation hook runs in the code's own process
@adapter("run_cross_entropy")
def test_cross_entropy_builds_no_one_hot(adapters):
    """A one-hot [..., V] of the targets is the size of the logits, as the loss's own intermediates are
    (x - max, exp): it is told apart by what makes it (aten.one_hot, a comparison, a scatter, zeros to fill
    in place) and its dtype."""
    logits = torch.randn(ROWS, V_PROBE, generator=rng())
    targets = torch.randint(0, V_PROBE, (ROWS,), generator=rng())
    _, found = allocations(adapters.run_cross_entropy, logits, targets)
    one_hot = [a for a in found if a.shape == [ROWS, V_PROBE]
               and (not a.dtype.is_floating_point or a.op in ONE_HOT_OPS)]
    assert not one_hot, (
        f"from targets [{ROWS}] run_cross_entropy made {str(one_hot[0].dtype).removeprefix('torch.')}"
        f"{one_hot[0].shape} (aten.{one_hot[0].op}), a one-hot [..., vocab_size]. At GPT-2 scale ([8, 1024] "
        "targets, V=50257) it is 1.6 GB in fp32. Pick each target's logit instead: "
        "logits.gather(-1, targets.unsqueeze(-1)) or logits[rows, targets]")


# ---------------------------------------------------------------- gradient clipping

CLIPS = [  # (shapes of the gradients, each one's L2 norm, max_l2_norm)
    ([(4, 3), (5,), (2, 2)], 0.8, 0.5),  # norms other than 1: their sum (2.4) is not their squares' sum (1.92)
    ([(6,), (3, 3)], 0.2, 0.25),  # each gradient's own norm below the max, their joint norm (0.28) above it
]


@adapter("run_clip_gradients")
@pytest.mark.parametrize("shapes, norm, max_norm", CLIPS)
def test_clipping_scales_every_gradient_by_one_factor(adapters, shapes, norm, max_norm):
    """Above the maximum every gradient is multiplied by the same max / (norm + 1e-6), norm the joint L2
    norm of all gradients: the joint norm afterwards is max_l2_norm (less 1e-6) and directions are kept."""
    g = rng(len(shapes))
    draws = [torch.randn(s, generator=g) for s in shapes]
    gradients = {f"p{i}": t * (norm / t.norm()) for i, t in enumerate(draws)}  # norms as stated, on any draw
    joint = torch.cat([t.flatten() for t in gradients.values()]).norm().item()
    out = adapters.run_clip_gradients(gradients, max_norm)
    parts = out.split([t.numel() for t in gradients.values()])
    factors = [(p.double() @ t.double().flatten() / t.double().norm() ** 2).item() for p, t in zip(parts, gradients.values())]
    expected = max_norm / (joint + 1e-6)
    if any(abs(f - expected) > 1e-5 * expected for f in factors):
        own = [min(1.0, max_norm / (t.norm().item() + 1e-6)) for t in gradients.values()]
        alone = all(abs(f - o) < 1e-5 * o for f, o in zip(factors, own))
        unchanged = all(abs(f - 1) < 1e-6 for f in factors)
        summed = sum(t.norm().item() for t in gradients.values())  # each gradient's norm, added
        added = all(abs(f - max_norm / (summed + 1e-6)) < 1e-5 * f for f in factors)
        squared = all(abs(f - max_norm / (joint ** 2 + 1e-6)) < 1e-5 * f for f in factors)  # blind trial 13
        # unchanged gradients whose own norms are each below the max: no clipping and per-gradient
        # clipping give the same numbers here, so both are said
        why = (". The gradients were left unchanged: nothing was clipped (is the factor written into each .grad, "
               "in place?)" + (" Clipping each gradient by its own norm would leave these unchanged too, since each "
                               "is below the max on its own" if alone else "") if unchanged else
               ". Each gradient was clipped by its own norm: sum the squares of all gradients, then take one "
               "square root" if alone else
               f". Your factor is {max_norm:g} / {summed:.6g}, the sum of each gradient's own norm: the joint norm is "
               "the square root of the sum of the squares of all gradients" if added else
               f". Your factor is {max_norm:g} / {joint ** 2:.6g}, the sum of the squares of all gradients without "
               "its square root: the joint norm is the square root of that sum" if squared else "")
        raise AssertionError(
            f"the gradients were multiplied by {', '.join(f'{f:.6g}' for f in factors)}; one global norm "
            f"{joint:.6g} over all of them gives one factor, {max_norm:g} / (norm + 1e-6) = {expected:.6g}, for each"
            + why)


# ---------------------------------------------------------------- batches

N, T, B, CALLS = 30, 6, 32, 200  # 24 starts, 6,400 draws
FALSE_FAILURE = 1e-6
NOT_RUN = (NotImplementedError, TimeoutError, AdaptersError, ContractViolation)


def _batches(adapters, dataset, batch_size, context_length, num_batches, seed, memmap=False):
    """The drill's batches; a crash explained by what it most often means for a sampler."""
    try:
        return adapters.run_sample_batches(dataset, batch_size, context_length, num_batches, seed, memmap)
    except NOT_RUN:
        raise
    except Exception as e:  # noqa: BLE001 - the student's get_batch raised
        said = f"get_batch raised {type(e).__name__} ({str(e)[:300]}) on {len(dataset)} ids with context_length " \
               f"{context_length}"
        if "get_batch returned x " in str(e):  # the adapter's own checks: the shapes or types say what is wrong
            raise AssertionError(said) from None
        raise AssertionError(
            f"{said}. The valid starts are 0 .. {len(dataset) - context_length - 1}; if a start can be "
            f"len(dataset) - context_length or more, its y window runs past the end and comes out short") from None


def _windows_or_fail(out) -> None:
    """The starts are read from x's first column, which needs (x, y) to be a window and its next tokens."""
    x, y = out[:, 0], out[:, 1]
    if not torch.equal(y, x + 1):
        raise AssertionError("the batches are not a window x and its next tokens y = x + 1 (see "
                             "test_batches_are_windows_and_their_next_tokens), so the starts, read from x's first "
                             "column, cannot be judged until they are")


def binomial_bounds(n: int, p: float, tail: float) -> tuple[int, int]:
    """The tightest lo and hi with P(X < lo) <= tail and P(X > hi) <= tail, for X ~ Binomial(n, p)."""
    log_pmf = [math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1) + k * math.log(p)
               + (n - k) * math.log1p(-p) for k in range(n + 1)]
    lo, below = 0, 0.0
    while below + math.exp(log_pmf[lo]) <= tail:
        below += math.exp(log_pmf[lo])
        lo += 1
    hi, above = n, 0.0
    while above + math.exp(log_pmf[hi]) <= tail:
        above += math.exp(log_pmf[hi])
        hi -= 1
    return lo, hi


@adapter("run_sample_batches")
@pytest.mark.parametrize("memmap", [False, True])
def test_batches_are_windows_and_their_next_tokens(adapters, memmap):
    dataset = torch.arange(100, 100 + N)  # the value is the position + 100, so a window shows its start
    out = _batches(adapters, dataset, 5, T, 4, seed=3, memmap=memmap)
    x, y = out[:, 0], out[:, 1]
    steps = torch.arange(T)
    windows = (x - x[..., :1] == steps).all(-1)
    assert windows.all(), f"x rows must be consecutive ids dataset[s : s + {T}]; got {x[~windows][0].tolist()}"
    assert torch.equal(y, x + 1), _not_next_tokens(x, y)


def _not_next_tokens(x: torch.Tensor, y: torch.Tensor) -> str:
    """Why y is not x + 1, at the first row where it is not (blind trial 13: row 0, a right pair, was shown)."""
    first = tuple((y != x + 1).any(-1).nonzero()[0].tolist())
    said = f"y must be x shifted by one token, y = dataset[s + 1 : s + {T} + 1]; for x {x[first].tolist()} got y " \
           f"{y[first].tolist()}"
    if torch.equal(y, x):
        return said + ": the targets are not shifted"
    if torch.equal(x, y + 1):
        return said + ": x and y are swapped (return the window first, then its next tokens)"
    if (y - y[..., :1] == torch.arange(T)).all() and len((y[..., 0] - x[..., 0]).unique()) > 1:  # other rows' windows
        return said + (": y's rows are windows, but not of their own x's start + 1: draw the starts once and slice "
                       "each row's x and y from the same start")
    return said


@adapter("run_sample_batches")
def test_starts_are_uniform_over_every_valid_start(adapters):
    """Over CALLS x B draws from N ids with context_length T, each of the k = N - T valid starts is drawn
    X_s ~ Binomial(CALLS x B, 1/k) times. The test requires lo <= X_s <= hi for every s, with lo and hi
    the exact binomial quantiles whose tails are at most 1e-6 / (2k) each: by the union bound a uniform
    sampler fails with probability below 1e-6 (6,400 draws, k = 24: 184 <= X_s <= 359, mean 266.7). A start
    that is never drawn (the last one, with randint's exclusive high taken as inclusive), a start past the
    end, or a skewed draw fails."""
    out = _batches(adapters, torch.arange(N), B, T, CALLS, seed=0)
    _windows_or_fail(out)
    starts = out[:, 0, :, 0].flatten()
    k = N - T
    assert int(starts.min()) >= 0 and int(starts.max()) <= k - 1, (
        f"a start of {int(starts.max())} was drawn; with {N} ids and context_length {T} the last valid start is "
        f"{k - 1}: a larger one runs past the end (y = dataset[s + 1 : s + T + 1] needs s + T < len(dataset))")
    counts = torch.bincount(starts, minlength=k).tolist()
    lo, hi = binomial_bounds(len(starts), 1 / k, FALSE_FAILURE / (2 * k))
    never = [s for s, c in enumerate(counts) if c == 0]
    if never:
        last = " (the last valid start, len(dataset) - context_length - 1: randint's upper bound is exclusive)" \
            if never == [k - 1] else ""
        raise AssertionError(f"start{'s' if len(never) > 1 else ''} {never} never drawn in {len(starts)} draws"
                             f"{last}; every start 0 .. {k - 1} must be possible")
    off = {s: c for s, c in enumerate(counts) if not lo <= c <= hi}
    assert not off, (f"starts are not uniform: over {len(starts)} draws each of the {k} starts should come up "
                     f"{lo} to {hi} times (a uniform sampler fails this with probability below 1e-6); "
                     f"start: count {off}")


@adapter("run_sample_batches")
def test_rows_are_drawn_independently(adapters):
    """With as many valid starts as rows (k = B = 8), independent draws repeat some start within a call in all
    but k!/k^k = 0.24% of calls, so a correct sampler makes 4 calls without a repeat with probability 3e-11; it
    draws one start for every row of a call with probability k / k^k = 5e-7.
    A draw without replacement (np.random.choice(..., replace=False), a permutation) never repeats one: its
    rows depend on each other (blind trial 11: replace=False passed every other test). Neither do independent
    rows come in increasing order, but in C(15, 8) / 8^8 = 0.04% of calls (4 in a row: 2e-14); sorted starts
    always do (blind trial 14)."""
    k, calls = 8, 4
    out = _batches(adapters, torch.arange(k + T), k, T, calls, seed=0)
    _windows_or_fail(out)
    starts = out[:, 0, :, 0]
    assert not all(len(set(row.tolist())) == 1 for row in starts), (  # blind trial 13: randint(..., (1,)).repeat(B)
        f"every row of a batch has the same start, in each of {calls} calls (starts {starts[:, 0].tolist()}): one "
        f"start was drawn and repeated. Draw batch_size starts, one for each row, "
        "torch.randint(0, len(dataset) - context_length, (batch_size,))")
    assert not all(len(set(row.tolist())) == k for row in starts), (
        f"rows are not drawn independently: with {k} valid starts and batch_size {k}, each of {calls} calls drew "
        f"every start exactly once, a permutation ({k}!/{k}^{k} = 0.24% of independent batches do that; "
        f"{calls} in a row, 3e-11). Drawing without replacement (np.random.choice(..., replace=False), "
        "np.random.permutation, torch.randperm) ties each row to the others: draw every start on its own, "
        "torch.randint(0, len(dataset) - context_length, (batch_size,))")
    assert not all(row.tolist() == sorted(row.tolist()) for row in starts), (
        f"rows are not drawn independently: in each of {calls} calls the starts come in increasing order (call 0: "
        f"{starts[0].tolist()}), so row 0 holds the smallest: sorted starts (np.sort, .sort()) tie each row to the "
        f"others ({k} independent starts come in increasing order in 0.04% of calls; {calls} in a row, 2e-14). Keep "
        "the starts in the order they were drawn, torch.randint(0, len(dataset) - context_length, (batch_size,))")


CORPUS = 1 << 19  # ids in the probe's corpus: 1 MiB as a uint16 token file


@pytest.mark.reports_only  # the allocation hooks run in the code's own process
@adapter("run_sample_batches")
@pytest.mark.parametrize("memmap", [False, True], ids=["int64-array", "uint16-memmap"])
def test_batches_read_their_windows_not_the_whole_corpus(adapters, memmap):
    """A corpus is an np.memmap of a token file that may not fit in memory: get_batch reads its B windows. Made
    whole, as a tensor (torch.tensor(dataset), torch.from_numpy(dataset).long()) or a numpy copy
    (np.array(dataset), dataset.astype(np.int64)), the file is read in full on every call. The memmap's own setup
    (the drill writes the file) holds 2 bytes an id at once, so there only more than 3 count; any tensor of a
    quarter of the ids counts."""
    dataset = torch.arange(CORPUS) % 50_000
    _batches(adapters, dataset, 4, T, 1, seed=0, memmap=memmap)  # a first call: its imports and caches are not reads
    _, largest, peak = footprint(adapters.run_sample_batches, dataset, 4, T, 1, 0, memmap)
    made = largest is not None and math.prod(largest.shape) >= CORPUS // 4
    what = (f"made {str(largest.dtype).removeprefix('torch.')}{largest.shape} (aten.{largest.op})" if made else
            f"held {peak / 2**20:.1f} MiB of numpy memory at once ({peak / CORPUS:.0f} bytes an id)")
    corpus = (f"an np.memmap of {CORPUS:,} uint16 ids (a {2 * CORPUS / 2**20:.0f} MiB file)" if memmap else
              f"an int64 array of {CORPUS:,} ids")
    copied = ("converted or copied the whole array (torch.tensor(dataset), torch.from_numpy(dataset).long(), "
              "dataset.astype(np.int64), np.array(dataset))")
    permuted = ("drew its starts from a permutation of every position (torch.randperm, np.random.choice(n, "
                "replace=False), np.random.permutation)")
    # a tensor it made names its op (blind trial 13's randperm was told both); numpy memory does not
    how = (permuted if largest.op == "randperm" else copied) if made else f"{copied}, or {permuted}"
    assert not made and peak <= (3 if memmap else 1) * CORPUS, (
        f"to take 4 windows of {T} ids from {corpus}, get_batch {what}: it {how}. A real corpus is a memmap of "
        "gigabytes, read or permuted in full on every call that way: draw B starts, index the windows, "
        "dataset[s : s + context_length], and convert only those")


@adapter("run_sample_batches")
def test_batches_are_made_on_the_requested_device(adapters):
    """The drill asks for batches on the dataset's device: on meta, x and y must be meta tensors (a GPU
    run would ask for cuda)."""
    out = adapters.run_sample_batches(torch.zeros(N, dtype=torch.long, device="meta"), 2, T, 1, 0, False)
    assert out.device.type == "meta", (
        f"get_batch(..., device='meta') returned its batches on {out.device}: put x and y on `device` "
        "(torch.from_numpy(...).to(device), or torch.tensor(..., device=device))")


# ---------------------------------------------------------------- checkpoints

def _resume(adapters, save_at: int, to_file: bool, dtype: torch.dtype) -> torch.Tensor:
    g = rng(save_at)
    w1, w2 = torch.randn(5, 3, generator=g) * 0.5, torch.randn(2, 5, generator=g) * 0.5
    inputs, targets = torch.randn(6, 4, 3, generator=g), torch.randn(6, 4, 2, generator=g)
    return adapters.run_resume_training(*(t.to(dtype) for t in (w1, w2, inputs, targets)), save_at, 0.05, to_file)


@adapter("run_resume_training")
@pytest.mark.parametrize("to_file, dtype", [(False, torch.float32), (True, torch.float32), (False, torch.bfloat16)],
                         ids=["bytesio", "file", "bytesio-bf16"])
def test_resumed_training_continues_bit_for_bit(adapters, to_file, dtype):
    """Training resumed from a checkpoint gives exactly the weights of the run that never stopped; in
    bfloat16 too (numpy, for one, has no bfloat16: a checkpoint must keep each tensor's dtype)."""
    out = _resume(adapters, 3, to_file, dtype)
    if torch.equal(out[0], out[1]):
        return
    differ = int((out[0] != out[1]).sum())
    # saved before the first step, the optimizer has no state yet: what differs there is not the optimizer's
    fresh = _resume(adapters, 0, to_file, dtype)
    cause = (" Resumed before any step it is exact, so the optimizer's state is what is lost: save and load "
             "optimizer.state_dict() (its moments and step counts: AdamW's m, v and t) too" if torch.equal(fresh[0], fresh[1]) else
             " Restore the model (load_state_dict), the optimizer's state and the iteration the checkpoint saved")
    raise AssertionError(f"the resumed run ends with other weights than the run that never stopped ({differ} of "
                         f"{out.shape[1]} differ, by up to {(out[0] - out[1]).abs().max().item():.3g}).{cause}")
