"""libdpt through ctypes: finding the library, the C declarations the
package uses, and dpt's status codes as Python exceptions.

The library is the libdpt.so installed inside this package (pip builds it
from the repository's CMake project), or the file named by the DPT_LIBRARY
environment variable (the tests point it at a build tree's library). It is
loaded with RTLD_GLOBAL: an env plug-in is not linked with libdpt and finds
the dpt_rng_* functions it calls among the symbols already loaded.
"""
import ctypes
import os
import threading

c_size_t = ctypes.c_size_t
c_int = ctypes.c_int
c_void_p = ctypes.c_void_p
c_char_p = ctypes.c_char_p
P = ctypes.POINTER

# dpt/status.h: DPT_STATUS_LIST.
OK, EINVAL, ENOMEM, EIO, ETIMEDOUT, ECLOSED, ENOTSUP, ENUMERIC, EFORMAT, ESTATE = range(0, -10, -1)
ECOMM, EOVERFLOW, ENOENT, ETHREAD, EPROTO = -10, -11, -12, -13, -14

# dpt/env.h: dpt_action_kind_t.
ACTION_DISCRETE, ACTION_BOX = 0, 1


class DptError(RuntimeError):
    """A dpt call failed; .code is its DPT_E... status (negative). A bad
    argument, config or value (DPT_EINVAL) is also a ValueError, a missing
    file (DPT_ENOENT) a FileNotFoundError, DPT_ENOMEM a MemoryError."""

    def __init__(self, code, message):
        super().__init__(message)
        self.code = code


class DptValueError(DptError, ValueError):
    pass


class DptFileNotFoundError(DptError, FileNotFoundError):
    def __new__(cls, code, message):
        return FileNotFoundError.__new__(cls, message)


class DptMemoryError(DptError, MemoryError):
    pass


def error(code, message):
    """The exception of status `code` with `message`."""
    cls = {EINVAL: DptValueError, ENOENT: DptFileNotFoundError,
           ENOMEM: DptMemoryError}.get(code, DptError)
    return cls(code, message)


class Shape(ctypes.Structure):
    """dpt_shape_t of dpt/shape.h: one sample's channels, height, width."""

    _fields_ = [("c", c_size_t), ("h", c_size_t), ("w", c_size_t)]


class EnvClass(ctypes.Structure):
    """struct dpt_env_class of dpt/env.h (env ABI 3); only read here."""

    _fields_ = [
        ("name", c_char_p),
        ("obs_dim", c_size_t),
        ("obs_shape", Shape),
        ("action_kind", c_int),
        ("num_actions", c_size_t),
        ("action_dim", c_size_t),
        ("action_low", P(ctypes.c_float)),
        ("action_high", P(ctypes.c_float)),
        ("max_episode_steps", ctypes.c_uint32),
        ("reward_threshold", ctypes.c_double),
        ("state_size", c_size_t),
        ("params", c_void_p),
        ("num_params", c_size_t),
        ("configure", c_void_p),
        ("init", c_void_p),
        ("reset", c_void_p),
        ("step", c_void_p),
        ("values", c_void_p),
    ]


# name: (restype, argtypes)
_PROTOTYPES = {
    "dpt_version": (c_char_p, []),
    "dpt_last_error": (c_char_p, []),
    "dpt_strerror": (c_char_p, [c_int]),
    "dpt_fnv1a64": (ctypes.c_uint64, [ctypes.c_uint64, c_void_p, c_size_t]),
    "dpt_env_count": (c_size_t, []),
    "dpt_env_get": (P(EnvClass), [c_size_t]),
    "dpt_env_obs_shape": (Shape, [P(EnvClass)]),
    "dpt_config_create": (c_int, [P(c_void_p)]),
    "dpt_config_destroy": (None, [c_void_p]),
    "dpt_config_set": (c_int, [c_void_p, c_char_p]),
    "dpt_config_finalize": (c_int, [c_void_p]),
    "dpt_config_make_env": (c_int, [c_void_p, P(P(EnvClass))]),
    "dpt_env_class_destroy": (None, [P(EnvClass)]),
    "dpt_vecenv_create": (c_int, [P(c_void_p), P(EnvClass), c_size_t, ctypes.c_uint64,
                                  ctypes.c_uint32]),
    "dpt_vecenv_destroy": (None, [c_void_p]),
    "dpt_vecenv_reset": (None, [c_void_p, c_void_p]),
    "dpt_vecenv_step": (c_int, [c_void_p, c_void_p, c_void_p, c_void_p, c_void_p, c_void_p,
                                c_void_p]),
    "dpt_vecenv_step_masked": (c_int, [c_void_p, c_void_p, c_void_p, c_void_p, c_void_p,
                                       c_void_p, c_void_p, c_void_p]),
    "dpt_vecenv_env_state": (c_void_p, [c_void_p, c_size_t]),
}

_lock = threading.Lock()
_lib = None


def path():
    """The library this package loads: $DPT_LIBRARY, or the package's own."""
    env = os.environ.get("DPT_LIBRARY")
    if env:
        return env
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "libdpt.so")


def lib():
    """The loaded library (loaded on first use), its functions declared."""
    global _lib
    with _lock:
        if _lib is None:
            where = path()
            if not os.path.exists(where):
                raise ImportError(
                    "dpt: no libdpt at %s; install the package with `pip install ./python` "
                    "from a dpt checkout, or set DPT_LIBRARY to a built libdpt.so" % where)
            cdll = ctypes.CDLL(where, mode=os.RTLD_NOW | os.RTLD_GLOBAL)
            for name, (res, args) in _PROTOTYPES.items():
                try:
                    fn = getattr(cdll, name)
                except AttributeError:
                    # EnvClass follows this package's dpt/env.h: a libdpt
                    # without its functions is another version.
                    raise ImportError(
                        "dpt: %s has no %s(): it is another version of libdpt than this "
                        "package's (env ABI 3); rebuild it from the same checkout" %
                        (where, name)) from None
                fn.restype = res
                fn.argtypes = args
            _lib = cdll
    return _lib


_declared_tables = set()


def declare(prototypes):
    """The loaded library with the functions of `prototypes` ({name:
    (restype, argtypes)}, a module's own table) declared (once)."""
    cdll = lib()
    if id(prototypes) not in _declared_tables:
        with _lock:
            for name, (res, args) in prototypes.items():
                fn = getattr(cdll, name)
                fn.restype = res
                fn.argtypes = args
            _declared_tables.add(id(prototypes))
    return cdll


def check(rc):
    """Raises the exception of a failed call's status (rc < 0) with the
    library's message; returns rc otherwise: a DptError, which for
    DPT_EINVAL is also a ValueError, for DPT_ENOENT a FileNotFoundError,
    for DPT_ENOMEM a MemoryError."""
    if rc >= 0:
        return rc
    cdll = lib()
    msg = (cdll.dpt_last_error() or b"").decode("utf-8", "replace")
    if not msg:
        msg = cdll.dpt_strerror(rc).decode()
    raise error(rc, msg)


def version():
    return lib().dpt_version().decode()


def fnv1a64(data):
    """64-bit FNV-1a of the bytes `data` (dpt_fnv1a64)."""
    return lib().dpt_fnv1a64(0xCBF29CE484222325, data, len(data))
