"""The `dpt` console script of the package: runs the dpt command that pip
built beside the library (dpt/bin/dpt), with the same arguments, so that
`pip install ./python` gives the command `make` builds."""
import os
import sys


def command_path():
    """The bundled dpt binary."""
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "bin", "dpt")


def main():
    path = command_path()
    if not os.access(path, os.X_OK):
        sys.stderr.write("dpt: no dpt command at %s; install the package with `pip install "
                         "./python` from a dpt checkout (or build it with `make`)\n" % path)
        return 1
    try:
        os.execv(path, ["dpt"] + sys.argv[1:])
    except OSError as e:
        sys.stderr.write("dpt: cannot run %s: %s\n" % (path, e.strerror))
        return 1


if __name__ == "__main__":
    sys.exit(main())
