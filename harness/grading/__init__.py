"""Grading: a trusted driver, a confined worker, data on the wire between them.

Trusted (holds the term, judges, writes the verdicts; never imports a submission's code):
grade      the batch: vets and copies submissions, runs a driver per slot, writes results;
           rebuilds grades.csv and the class report from every result folder; shards and merge
drive      the driver: the official suite against one submission's worker
remote     the driver's side of a worker: adapter calls, gradients and modules as data
forward    the driver's own LM forward: it judges the weights a training run returns
sandbox    the confinement: bubblewrap, seccomp, a cgroup and a uid per submission
report     the class report (staff only), from what grade wrote
gradescope  the upload zip, and one submission graded inside Gradescope's container

Confined (the only code that shares a process with the submission):
worker     imports the submission and answers calls; sees one call's arguments, nothing else

Between them:
wire       the message format: JSON + safetensors, never pickle

The worker imports nothing else of the harness but paths, torch_imports and probes (sandbox.WORKER_MODULES):
this file must stay free of imports.
"""
