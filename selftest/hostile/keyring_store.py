# Appended to the stub adapters.py: store a secret in every kernel keyring within reach (the user,
# user-session and session keyrings). Keys outlive processes and are shared by a uid: a later
# submission graded under the same uid would read them (keyring_read.py).
import ctypes as _ctypes

_libc = _ctypes.CDLL(None, use_errno=True)
_NR = {"x86_64": (248, 250), "aarch64": (217, 219)}[__import__("platform").machine()]  # add_key, keyctl
for _ring in (-4, -5, -3):  # KEY_SPEC_USER_KEYRING, USER_SESSION_KEYRING, SESSION_KEYRING
    _key = _libc.syscall(_NR[0], b"user", b"harness-leak", KEYRING_SECRET.encode(), len(KEYRING_SECRET), _ring)
    print("add_key", _ring, "->", _key, "errno", _ctypes.get_errno())
