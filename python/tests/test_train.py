"""dpt.train and dpt.Trainer: a run from Python is the command's run (bitwise),
a Trainer saves, restores and continues bitwise, takes another trainer's
weights, refuses bad configs before anything runs, and Ctrl-C or leaving the
loop early stops a run after a checkpoint."""
import glob
import json
import os
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import dpt
from conftest import EXAMPLES

CARTPOLE = str(EXAMPLES / "cartpole_ppo.conf")
SMALL = {"job": "ppo", "env": "CartPole-v1", "seed": 3, "num_envs_per_worker": 4,
         "rollout_fragment_length": 64, "sgd_minibatch_size": 64, "num_sgd_iter": 2,
         "policy_hidden": [16, 16], "num_devices": 2, "total_timesteps": 100000}


def newest_checkpoint(run_dir):
    files = sorted(glob.glob(os.path.join(run_dir, "checkpoints", "checkpoint-*.safetensors")))
    assert files, "no checkpoint in %s" % run_dir
    return files[-1]


def test_train_is_the_command(tmp_path, dpt_bin):
    """dpt.train writes the run `dpt train` writes: the same results row by row
    and a final checkpoint whose tensors are bitwise the command's."""
    py_dir, cmd_dir = tmp_path / "py", tmp_path / "cmd"
    results = list(dpt.train(CARTPOLE, total_timesteps=20000, output_dir=py_dir))
    done = subprocess.run([dpt_bin, "train", CARTPOLE, "--quiet", "--set", "total_timesteps=20000",
                           "--set", "output_dir=%s" % cmd_dir], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert [r["training_iteration"] for r in results] == list(range(1, len(results) + 1))
    assert results[-1]["done"] and results[-1]["timesteps_total"] >= 20000
    assert all(r["run_dir"] == str(py_dir) for r in results)
    rows = [json.loads(line) for line in open(cmd_dir / "result.jsonl")]
    assert len(rows) == len(results)
    for row, r in zip(rows, results):
        for key in ("timesteps_total", "episode_reward_mean", "episodes_total"):
            assert row[key] == r[key], key
        assert row["info"]["learner"] == r["info"]["learner"]
    a, _ = dpt.read_checkpoint(newest_checkpoint(py_dir))
    b, _ = dpt.read_checkpoint(newest_checkpoint(cmd_dir))
    assert sorted(a) == sorted(b)
    for name in a:
        assert a[name].tobytes() == b[name].tobytes(), name
    # The files of a run, and a resume of a finished run does nothing.
    for f in ("config.conf", "result.jsonl", "progress.csv"):
        assert (py_dir / f).is_file()
    gen = dpt.train(resume=py_dir)
    assert list(gen) == []


def test_train_returns_a_summary(tmp_path):
    gen = dpt.train(SMALL, total_timesteps=2048, eval_episodes=3, output_dir=tmp_path / "r")
    n = 0
    while True:
        try:
            next(gen)
            n += 1
        except StopIteration as stop:
            summary = stop.value
            break
    assert n == 2048 // (4 * 64)
    assert summary["run_dir"] == str(tmp_path / "r")
    assert summary["reason"] == "finished"
    assert summary["evaluation"]["count"] == 3


def test_trainer_save_restore_continues_bitwise(tmp_path):
    with dpt.Trainer(SMALL) as a:
        for _ in range(2):
            a.train()
        path = a.save(tmp_path / "ck.safetensors")
        ra = [a.train() for _ in range(2)]
        wa = a.get_weights()
    with dpt.Trainer(SMALL) as b:
        b.restore(path)
        rb = [b.train() for _ in range(2)]
        wb = b.get_weights()
    assert sorted(wa) == sorted(wb)
    for name in wa:
        assert wa[name].tobytes() == wb[name].tobytes(), name
    for x, y in zip(ra, rb):
        assert x["training_iteration"] == y["training_iteration"]
        assert x["timesteps_total"] == y["timesteps_total"]
        assert x["info"]["learner"] == y["info"]["learner"]
        assert x["episode_reward_mean"] == y["episode_reward_mean"]
    # What save() wrote is a checkpoint like a run's: dpt.load reads it.
    policy = dpt.load(path)
    assert policy.discrete


def test_set_weights_reproduces_another_trainers_evaluation():
    with dpt.Trainer(SMALL) as a, dpt.Trainer(SMALL, seed=9) as b:
        for _ in range(4):
            a.train()
        before = b.get_weights()
        assert any(before[k].tobytes() != v.tobytes() for k, v in a.get_weights().items())
        b.set_weights(a.get_weights())
        for k, v in a.get_weights().items():
            assert b.get_weights()[k].tobytes() == v.tobytes()
        assert b.evaluate(10, seed=5) == a.evaluate(10, seed=5)
        assert b.evaluate()["count"] == int(dict(
            line.split(" = ") for line in b.config.splitlines() if " = " in line)["eval_episodes"])
        # It trains on from them.
        assert b.train()["training_iteration"] == 1


def test_set_weights_refuses_bad_input_and_changes_nothing():
    with dpt.Trainer(SMALL) as t:
        w = t.get_weights()
        with pytest.raises(dpt.DptError, match="no variable 'nope'"):
            t.set_weights({"nope": np.zeros(3)})
        with pytest.raises(ValueError, match=r"actor.0.weight has shape \(3,\)"):
            t.set_weights({"actor.0.weight": np.zeros(3)})
        bad = w["critic.0.bias"].copy()
        bad[2] = np.nan
        with pytest.raises(dpt.DptError, match=r"critic.0.bias\[2\] is nan; nothing changed"):
            t.set_weights({"critic.0.bias": bad})
        for k, v in t.get_weights().items():
            assert v.tobytes() == w[k].tobytes()
        # Part of the model: the rest keeps its values.
        t.set_weights({"critic.0.bias": np.ones_like(w["critic.0.bias"])})
        now = t.get_weights()
        assert (now["critic.0.bias"] == 1).all()
        assert now["actor.0.weight"].tobytes() == w["actor.0.weight"].tobytes()


def test_config_errors_raise_before_anything_runs(tmp_path):
    out = tmp_path / "never"
    with pytest.raises(dpt.DptError, match='unknown key "lrr"') as e:
        dpt.train(SMALL, lrr=0.1, output_dir=out)
    assert isinstance(e.value, ValueError) and e.value.code == -1
    with pytest.raises(dpt.DptError, match="num_sgd_iter"):
        dpt.train(SMALL, num_sgd_iter=0, output_dir=out)
    with pytest.raises(dpt.DptError, match="num_sgd_iter"):
        dpt.Trainer(SMALL, num_sgd_iter=0)
    with pytest.raises(dpt.DptError, match="hidden does not apply to job ppo"):
        dpt.Trainer(SMALL, hidden=[8])
    with pytest.raises(dpt.DptError, match="env_config.num_tokens"):
        dpt.Trainer({"job": "ppo", "env": "RepeatPrevious-v0", "env_config": {"num_tokens": "x"}})
    with pytest.raises(dpt.DptError, match="env_config: a dict"):
        dpt.Trainer(SMALL, env_config=3)
    with pytest.raises(dpt.DptError, match="not a config value"):
        dpt.Trainer(SMALL, lr=object())
    with pytest.raises(FileNotFoundError):
        dpt.train(str(tmp_path / "missing.conf"))
    with pytest.raises(FileNotFoundError, match="not a run directory"):
        dpt.train(resume=tmp_path / "nothing")
    assert not out.exists()
    # A closed trainer says so.
    t = dpt.Trainer(SMALL)
    t.close()
    t.close()
    with pytest.raises(dpt.DptError, match="closed"):
        t.train()


def test_leaving_the_loop_stops_after_a_checkpoint(tmp_path):
    out = tmp_path / "run"
    for r in dpt.train(SMALL, output_dir=out):
        if r["training_iteration"] == 3:
            break
    _, meta = dpt.read_checkpoint(newest_checkpoint(out))
    assert meta["stop_reason"] == "stopped by a signal"
    assert int(meta["training_iteration"]) >= 3
    # And it resumes from there.
    more = []
    for r in dpt.train(resume=out, stop_iters=6):
        more.append(r["training_iteration"])
    assert more[0] == int(meta["training_iteration"]) + 1 and more[-1] == 6


def test_ctrl_c_leaves_a_checkpoint(tmp_path):
    """SIGINT to a Python process inside dpt.train: the run stops after a
    checkpoint and KeyboardInterrupt reaches the caller."""
    out = tmp_path / "run"
    # (Python leaves SIGINT ignored when it starts with it ignored, as a job
    # started in the background by a non-interactive shell does: the child
    # sets the default handler itself.)
    script = textwrap.dedent("""
        import signal, sys, dpt
        signal.signal(signal.SIGINT, signal.default_int_handler)
        cfg = dict(%r, total_timesteps=10000000)
        try:
            for r in dpt.train(cfg, output_dir=%r):
                print("iteration", r["training_iteration"], flush=True)
        except KeyboardInterrupt:
            print("interrupted", flush=True)
            sys.exit(3)
        """ % (SMALL, str(out)))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in [os.path.dirname(dpt.__path__[0]),
                                                    env.get("PYTHONPATH")] if p)
    p = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env=env)
    try:
        line = p.stdout.readline()
        assert line.startswith("iteration"), line + p.stderr.read()
        p.send_signal(signal.SIGINT)
        rest, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 3, rest + err
    assert rest.splitlines()[-1] == "interrupted"
    _, meta = dpt.read_checkpoint(newest_checkpoint(out))
    assert meta["stop_reason"] == "stopped by a signal"
    assert int(meta["training_iteration"]) >= 1
