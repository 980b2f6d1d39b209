"""Shared fixtures: the dpt command (DPT_BIN) that trains the runs the policy
and model tests load, and the policy tests' runs (trained once per session in a temporary
directory). tests/python_test.sh, which CTest runs, sets DPT_BIN to the
build's dpt, DPT_LIBRARY to its libdpt, DPT_TEST_PLUGIN to the corridor env
plug-in and DPT_TEST_SHAPED_PLUGIN to the Shaped-v0 plug-in (observations of
shape (2, 3, 4), tests/env_shaped_plugin.c)."""
import os
import subprocess
from pathlib import Path

import pytest

SOURCE_DIR = Path(__file__).resolve().parents[2]
EXAMPLES = SOURCE_DIR / "examples"


def _dpt_bin():
    path = os.environ.get("DPT_BIN")
    if not path:
        pytest.skip("DPT_BIN is not set (the dpt command that trains the runs these tests load)")
    if not EXAMPLES.is_dir():
        pytest.skip("no examples/ directory at %s (run from a dpt checkout)" % EXAMPLES)
    return path


def train(out_dir, conf, *sets):
    """Runs `dpt train CONF --set ... --set output_dir=OUT_DIR --quiet`."""
    cmd = [_dpt_bin(), "train", str(EXAMPLES / conf), "--quiet", "--set",
           "output_dir=%s" % out_dir]
    for s in sets:
        cmd += ["--set", s]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, "%s\n%s%s" % (" ".join(cmd), done.stdout, done.stderr)
    return out_dir


@pytest.fixture(scope="session")
def dpt_bin():
    return _dpt_bin()


@pytest.fixture(scope="session")
def ppo_run(tmp_path_factory):
    """A short PPO run on CartPole-v1 (CleanRL's settings, 20k steps)."""
    return train(tmp_path_factory.mktemp("runs") / "ppo", "cartpole_ppo.conf",
                 "total_timesteps=20000")


@pytest.fixture(scope="session")
def lstm_run(tmp_path_factory):
    """A short recurrent PPO run on RepeatPrevious-v0 (num_tokens 2, k 2) whose
    LSTM reads the previous action and reward."""
    return train(tmp_path_factory.mktemp("runs") / "lstm", "repeat_previous_lstm.conf",
                 "total_timesteps=8000", "lstm_use_prev_action=true",
                 "lstm_use_prev_reward=true")


@pytest.fixture(scope="session")
def encoder_run(tmp_path_factory):
    """A short PPO run on CartPole-v1 whose policy has an encoder (key
    network) under its actor and critic."""
    return train(tmp_path_factory.mktemp("runs") / "encoder", "cartpole_ppo.conf",
                 "total_timesteps=20000", "network=dense(16) tanh dense(8) relu")


@pytest.fixture(scope="session")
def appo_policies_run(tmp_path_factory):
    """A short APPO run on CartPole-v1 with two policies, a trained and b not."""
    return train(tmp_path_factory.mktemp("runs") / "appo2", "cartpole_appo.conf",
                 "total_timesteps=20000", "min_sample_timesteps_per_iteration=10000",
                 "policies=a,b", "policies_to_train=a")


@pytest.fixture(scope="session")
def plugin_path():
    path = os.environ.get("DPT_TEST_PLUGIN")
    if not path:
        pytest.skip("DPT_TEST_PLUGIN is not set (an env plug-in: the build's libcorridor_env.so)")
    return path


@pytest.fixture(scope="session")
def shaped_plugin_path():
    path = os.environ.get("DPT_TEST_SHAPED_PLUGIN")
    if not path:
        pytest.skip("DPT_TEST_SHAPED_PLUGIN is not set (an env plug-in with image observations: "
                    "the build's tests/libenv_shaped.so)")
    return path
