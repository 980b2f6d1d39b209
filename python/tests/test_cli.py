"""The `dpt` console script of an installed package (pip install ./python):
it runs the command built beside the library. Skipped where the package is
used from a checkout (PYTHONPATH) rather than installed."""
import os
import subprocess
import sys

import pytest

import dpt
from conftest import EXAMPLES
from dpt import _cli


def installed_command():
    script = os.path.join(os.path.dirname(sys.executable), "dpt")
    if not os.path.isfile(script) or not os.path.isfile(_cli.command_path()):
        pytest.skip("dpt is not installed in this environment (pip install ./python)")
    return script


def test_help_and_info():
    cmd = installed_command()
    done = subprocess.run([cmd, "--help"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "usage: dpt COMMAND" in done.stdout, done.stderr
    done = subprocess.run([cmd, "info"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "dpt %s" % dpt.__version__ in done.stdout
    assert "built by: the Python package" in done.stdout
    for feature in ("cblas", "mpi", "zlib"):
        assert "  %s " % feature in done.stdout


def test_train_the_example(tmp_path):
    cmd = installed_command()
    done = subprocess.run([cmd, "train", str(EXAMPLES / "cartpole_ppo.conf"), "--quiet", "--set",
                           "output_dir=%s" % (tmp_path / "run")], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / "run" / "checkpoints").is_dir()
    # A usage error keeps the command's exit status.
    done = subprocess.run([cmd, "train", str(EXAMPLES / "cartpole_ppo.conf"), "--set", "lrr=1"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "lrr" in done.stderr


def test_missing_binary_is_reported(monkeypatch, capsys):
    monkeypatch.setattr(_cli, "command_path", lambda: "/nonexistent/dpt")
    assert _cli.main() == 1
    assert "no dpt command at /nonexistent/dpt" in capsys.readouterr().err
