#!/usr/bin/env python3
"""Writes the seed corpora of the fuzz targets into fuzz/corpus/<target>/:
a handful of small valid and near-valid inputs each. Run from anywhere;
the output is deterministic (the committed files are its output)."""
import glob
import gzip
import json
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def put(target, name, data):
    d = os.path.join(HERE, "corpus", target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


# ---- config: the examples, and small near-valid texts ----------------------
for path in sorted(glob.glob(os.path.join(ROOT, "examples", "*.conf"))):
    lines = [l for l in open(path).read().splitlines() if l and not l.startswith("#")]
    put("config", os.path.basename(path), "\n".join(lines) + "\n")
put("config", "supervised_spirals", "job = supervised\ndataset = spirals\nhidden = 16,16\nepochs = 2\n")
put("config", "bad_value", "job = ppo\nlr = -1\nenv = CartPole-v1 # comment\n")
put("config", "unknown_key", "job = ddppo\nnum_workers = 0\nfoo = bar\n")
put("config", "plugin_path", "job = ppo\nenv = ./libmyenv.so\npolicy_hidden = 64,,64\n")
put("config", "env_config", "job = ppo\nenv = RepeatPrevious-v0\nenv_config.k = 3\n"
    "env_config.num_tokens = 4\n")
put("config", "empty", "")

# ---- safetensors ------------------------------------------------------------
FNV_OFF, FNV_PRIME = 0xCBF29CE484222325, 0x100000001B3


def fnv1a64(b):
    h = FNV_OFF
    for x in b:
        h = ((h ^ x) * FNV_PRIME) & 0xFFFFFFFFFFFFFFFF
    return h


def safetensors(tensors, meta=None, checksum=False):
    """tensors: list of (name, dtype, shape, raw bytes)."""
    header, off, blob = {}, 0, b""
    if meta is not None or checksum:
        m = dict(meta or {})
        if checksum:
            m["dpt.format"] = "1"
            m["dpt.checksum"] = "fnv1a64:" + "0" * 16
        header["__metadata__"] = m
    for name, dtype, shape, raw in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + len(raw)]}
        off += len(raw)
        blob += raw
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    data = struct.pack("<Q", len(h)) + h + blob
    if checksum:
        digest = "%016x" % fnv1a64(data)
        data = data.replace(b"0" * 16, digest.encode(), 1)
    return data


def f32(*v):
    return struct.pack("<%df" % len(v), *v)


w = ("params.w", "F32", [2, 3], f32(1, 2, 3, 4, 5, 6))
b = ("params.b", "F32", [3], f32(0.5, -0.5, 0))
put("safetensors", "arena", safetensors([w, b], {"iteration": "7"}))
put("safetensors", "arena_checksum", safetensors([w, b], {"iteration": "12"}, checksum=True))
put("safetensors", "blob", safetensors([("rng", "U8", [5], b"\x01\x02\x03\x04\x05"),
                                         ("step", "I64", [], struct.pack("<q", 3))]))
put("safetensors", "wrong_shape", safetensors([("params.w", "F32", [3, 2], f32(1, 2, 3, 4, 5, 6)), b]))
put("safetensors", "extra_tensor", safetensors([w, b, ("params.x", "I32", [1], b"\0\0\0\0")]))
put("safetensors", "empty_header", safetensors([]))
bad = bytearray(safetensors([w, b], checksum=True))
bad[-1] ^= 1
put("safetensors", "checksum_mismatch", bytes(bad))
put("safetensors", "bf16", safetensors([("x", "BF16", [2], b"\0\0\0\0")]))

# ---- idx: [num_classes int8][images length u32 LE][images][labels] ----------
def idx_pair(n, rows, cols, num_classes=0, labels=None, gz=False):
    img = struct.pack(">IIII", 0x803, n, rows, cols) + bytes((i * 37) % 256 for i in range(n * rows * cols))
    lab = struct.pack(">II", 0x801, n) + bytes(labels if labels is not None else [i % 3 for i in range(n)])
    if gz:
        img, lab = gzip.compress(img, mtime=0), gzip.compress(lab, mtime=0)
    return struct.pack("<bI", num_classes, len(img)) + img + lab


put("idx", "small", idx_pair(3, 2, 2))
put("idx", "classes10", idx_pair(4, 3, 1, num_classes=10))
put("idx", "label_range", idx_pair(2, 2, 2, num_classes=2, labels=[0, 5]))
put("idx", "gzip", idx_pair(3, 2, 2, gz=True))
put("idx", "flat_2d", struct.pack("<bI", 0, 16) + struct.pack(">III", 0x802, 2, 2) + bytes(4)
    + struct.pack(">II", 0x801, 2) + b"\0\1")
put("idx", "count_mismatch", idx_pair(3, 1, 1)[:-1])

# ---- csv: [flags][label_index int8][num_classes int8][file] -----------------
def csv(flags, label_index, num_classes, text):
    return struct.pack("<Bbb", flags, label_index, num_classes) + text.encode()


put("csv", "plain", csv(0, 0, 0, "0,1.5,2\n1,-3,4e2\n2,0.25,0\n"))
put("csv", "header_name", csv(3, 0, 0, "x,y,label\n1,2,0\n3,4,1\n"))
put("csv", "last_col_semicolon", csv(4, -1, 3, "# comment\n1;2;0\r\n\n3;4;2\r\n"))
put("csv", "gzip", csv(16, 0, 0, "1,0.5\n0,0.25\n"))
put("csv", "bad_cell", csv(0, 0, 0, "0,abc\n1,2\n"))
put("csv", "ragged", csv(8, 1, 0, "1\t2\t3\n4\t5\n"))
put("csv", "huge_number", csv(0, 0, 0, "0,1e300\n1,2\n"))

# ---- env: see fuzz_env.c for the layout -------------------------------------
def text(b):
    return bytes([len(b)]) + b


def size(n):
    return bytes([n]) if n < 64 else bytes([64]) + struct.pack("<H", n)


def env(name, flags, obs_dim, kind, num_actions, action_dim, bounds, steps_max, state_size,
        nenv, steps, actions, params=(), sets=()):
    """params: (type, name, default, min, max); sets: (param index, text)."""
    out = text(name) + bytes([flags]) + size(obs_dim) + bytes([kind]) + size(num_actions)
    out += size(action_dim) + bytes(bounds)
    out += bytes([steps_max]) + bytes(8) + size(state_size)
    out += bytes([len(params)])
    for ptype, pname, pdef, lo, hi in params:
        out += bytes([ptype]) + text(pname) + text(pdef) + struct.pack("<bb", lo, hi)
    out += bytes([len(sets)])
    for index, value in sets:
        out += bytes([index]) + text(value)
    out += bytes([nenv]) + bytes(8) + bytes([steps]) + actions
    return out


put("env", "discrete", env(b"Fuzz-v0", 0, 4, 0, 2, 0, [0] * 16, 5, 16, 2, 8,
                           b"".join(struct.pack("<i", i % 2) for i in range(16))))
put("env", "box", env(b"FuzzBox-v0", 0, 3, 1, 0, 2, [3, 3] * 8, 0, 8, 1, 4,
                      b"".join(struct.pack("<f", x) for x in (0.5, -9, 1e9, 0.0) * 2)))
put("env", "out_of_range_action", env(b"F", 0, 1, 0, 3, 0, [0] * 16, 2, 0, 3, 2,
                                      struct.pack("<iii", 0, 3, -1) * 2))
put("env", "no_reset", env(b"F", 8, 1, 0, 3, 0, [0] * 16, 2, 0, 1, 0, b""))
put("env", "bad_dims", env(b"", 0, 33, 2, 0, 40, [0] * 16, 0, 63, 1, 0, b""))
# 100 observations and 40 box actions, past the 32 of env ABI 1.
put("env", "wide", env(b"Wide-v0", 0, 100, 1, 0, 40, [2, 2] * 8, 3, 0, 2, 3,
                       b"".join(struct.pack("<f", x) for x in (0.25, -1.0) * 120)))
# Parameters of each type, configure and init, values given and refused.
put("env", "params", env(b"Params-v0", 64 | 128, 4, 0, 2, 0, [0] * 16, 4, 8, 2, 6,
                         struct.pack("<ii", 1, 0) * 6,
                         params=[(0, b"size", b"4", 1, 50), (1, b"gain", b"0.5", 0, 2),
                                 (3, b"tag", b"abc", 0, 0), (2, b"refuse", b"false", 0, 0)],
                         sets=[(0, b"7"), (2, b"xyz")]))
put("env", "param_errors", env(b"P", 0, 1, 0, 2, 0, [0] * 16, 0, 0, 1, 0, b"",
                               params=[(0, b"k", b"9", 0, 5), (0, b"k", b"1", 0, 5)],
                               sets=[(4, b"1")]))


# ---- metrics: result.jsonl rows ----------------------------------------------
put("metrics", "ppo_rows",
    '{"training_iteration":1,"timesteps_total":512,"episode_reward_mean":22.04,'
    '"info":{"learner":{"default_policy":{"policy_loss":-0.0019,"kl":1.5e-4}}},'
    '"timing_breakdown":{"sample_time_ms":0.86}}\n'
    '{"training_iteration":2,"timesteps_total":1024,"episode_reward_mean":null,'
    '"info":{"learner":{"default_policy":{"policy_loss":-0.0027,"kl":1.7e-4}}}}\n')
put("metrics", "late_column_cut_row", '{"a":1}\n\n{"a":2,"b":{"c":3}}\n{"a":3,"b":')
put("metrics", "escapes_blanks", '{ "q\\"\\/\\\\" : -1e-3 , "e" : {} }\r\n')
put("metrics", "bad_value", '{"a":"text"}\n{"a":0x10}\n')


# ---- tfevents: TFRecord files of Event protobufs ------------------------------
def crc32c(data):
    c = 0xFFFFFFFF
    for b in data:
        c ^= b
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
    return c ^ 0xFFFFFFFF


def masked(c):
    return ((((c >> 15) | (c << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


def record(data):
    head = struct.pack("<Q", len(data))
    return head + struct.pack("<I", masked(crc32c(head))) + data + struct.pack("<I", masked(crc32c(data)))


def varint(v):
    out = b""
    while v >= 0x80:
        out += bytes([(v & 0x7F) | 0x80])
        v >>= 7
    return out + bytes([v])


def event(wall, step, version=None, values=()):
    out = b"\x09" + struct.pack("<d", wall) + b"\x10" + varint(step)
    if version:
        out += b"\x1a" + varint(len(version)) + version
    summary = b""
    for tag, value in values:
        v = b"\x0a" + varint(len(tag)) + tag + b"\x15" + struct.pack("<f", value)
        summary += b"\x0a" + varint(len(v)) + v
    if summary:
        out += b"\x2a" + varint(len(summary)) + summary
    return out


first = record(event(1.7e9, 0, b"brain.Event:2"))
scalars = record(event(1.7e9 + 1, 512, values=[(b"episode_reward_mean", 22.5),
                                               (b"info/learner/default_policy/kl", 1e-4)]))
put("tfevents", "run", first + scalars + record(event(1.7e9 + 2, 1024, values=[(b"a", 1.0)])))
put("tfevents", "cut_record", first + scalars[:-7])
put("tfevents", "bad_data_crc", first[:-1] + bytes([first[-1] ^ 1]) + scalars)
put("tfevents", "unknown_fields", record(b"\x20\x05\x35\x00\x00\x80\x3f" + event(0.0, 7)))

# ---- network: model-language descriptions ----------------------------------
put("network", "lenet", "conv(32,k=3,pad=1) relu maxpool(2) conv(64,k=3,pad=1) relu maxpool(2) "
    "flatten dense(128) relu")
put("network", "minatar", "conv(32,k=2,pad=same) relu avgpool(2) flatten dense(64) relu")
put("network", "forms", "conv2d(8, 2x3, stride=2x1, pad=same, init=orthogonal, gain=1.4)\n"
    "avgpool2d(3x2,stride=1,pad=1x0,count_pad=0) flatten linear(4,init=normal,gain=0.5) tanh()")
put("network", "bad_arg", "conv(32,k=3,foo=1) maxpool(2,stride=0) dense(1a)")
put("network", "unclosed", "relu conv(4,k=3 dense(2)")
