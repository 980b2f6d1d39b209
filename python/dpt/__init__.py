"""dpt from Python: training (dpt.train, dpt.Trainer), its C environments as
Gymnasium environments (dpt.gym), and the policies and models of its
checkpoints (dpt.load).

    for result in dpt.train("examples/cartpole_ppo.conf", total_timesteps=50000):
        print(result["training_iteration"], result["episode_reward_mean"])

    import dpt
    env = dpt.gym.make("CartPole-v1")
    policy = dpt.load("runs/ppo-CartPole-v1-20261123-101500")
    obs, info = env.reset(seed=1)
    action, state = policy.predict(obs)
    model = dpt.load("runs/supervised-fashion_mnist-20261123-101500")
    logits = model.predict(images)    # [N, 1, 28, 28] -> [N, 10]

The package loads its own libdpt (built by pip from the repository's CMake
project) through ctypes; DPT_LIBRARY names another one.
"""
from . import _lib
from ._lib import DptError
from .trainer import Trainer, config_text, train
from . import network
from .model import Model
from .policy import Policy, State, find_checkpoint, load, read_checkpoint

__all__ = ["train", "Trainer", "config_text", "gym", "network", "load", "Model", "Policy", "State", "read_checkpoint",
           "find_checkpoint", "DptError", "library_path", "__version__"]


def library_path():
    """The libdpt this package loads."""
    return _lib.path()


def __getattr__(name):
    # dpt.gym imports gymnasium: only when it is used.
    if name == "gym":
        import importlib

        return importlib.import_module(".gym", __name__)
    if name == "__version__":
        return _lib.version()
    raise AttributeError("module 'dpt' has no attribute %r" % name)
