# Appended to the reference's adapters.py: say, in a visible test's failure, the first values a
# property test drew (softmax's slices-sum-to-one draws x [4, 5, 6]). In a student's run they are
# the test's fixed seed's, which anyone can compute: a table of answers to them, laid over wrong
# code, would pass the property. In grading they must be other values.
_reference_softmax = run_softmax  # noqa: F821 (defined above in adapters.py)


def run_softmax(in_features, dim):
    if tuple(in_features.shape) == (4, 5, 6) and dim == -1:
        raise ValueError(f"drawn {[round(v, 6) for v in in_features[0, 0, :3].tolist()]}")
    return _reference_softmax(in_features, dim)
