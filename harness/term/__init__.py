"""The term, instructor side (the release leaves this folder out; a term's files are read through
harness/store.py).

catalogue  the fixture cases, as data
case_rules  the rules the catalogue keeps (distinct axis sizes, every argument varied, large
            spreads), derived from the contract; checked at term new and contract --check
build      builds a term from the reference and verifies one
suite      runs the student suite in-process and collects what each test said
coverage   the mistake-coverage table and MISTAKES.md
release    writes the student edition
"""
