"""Your implementation. adapters.py calls into these modules."""
