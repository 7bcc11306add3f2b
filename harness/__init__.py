"""Test harness for the transformer-from-scratch assignment.

contract   the adapter functions students implement, declared once
runtime    loads an adapters module and checks every call against the contract
store      reads (and, for instructors, writes) a fixture term: safetensors + JSON
compare    compares outputs and gradients and writes the failure report
probes     checks that need no fixture: allocation size, device, mutation
plugin     the pytest plugin: options, case parametrisation, progress table
"""
