# Appended to the reference's adapters.py: print a digest of the table a visible lookup test draws from
# torch's global generator in the driver (tests/test_embeddings.py LOOKUPS). Red team 8: the driver serves
# a slot's submissions one after another, and a previous submission's hidden phase moved that generator
# (its checkpoint drill ran the driver's own training run, or not): 3 bits of its choosing reached here.
import hashlib as _hashlib

_reference_embedding = run_embedding  # noqa: F821 (defined above in adapters.py)


def run_embedding(vocab_size, d_model, weights, token_ids):
    if tuple(weights.shape) == (4096, 4):
        print("DRAWS", _hashlib.sha256(weights.detach().contiguous().numpy().tobytes()).hexdigest()[:16], flush=True)
    return _reference_embedding(vocab_size, d_model, weights, token_ids)
