#!/bin/sh
# Runs the built `dpt` binary and checks exit codes, messages, run
# directories, training runs, checkpoints, resume, signals and evaluation.
# Each numbered "defect" below was reproducible before the trainer layer and
# must stay fixed.
# usage: cli_test.sh PATH_TO_DPT PATH_TO_CKPT_COMPARE WORK_DIR [ENV_PLUGIN [EMBED_TRAIN [WIDE_PLUGIN]]]
dpt="$1" cmp="$2" work="$3" plugin="$4" embed="$5" wide="$6"
fails=0 passes=0
. "$(cd "$(dirname "$0")" && pwd)/unstick.sh"
rm -rf "$work" && mkdir -p "$work" || exit 1
cd "$work" || exit 1

ok()   { echo "ok   $*"; passes=$((passes + 1)); }
bad()  { echo "FAIL $*"; fails=$((fails + 1)); }
check() { # check "description" COMMAND...: ok when the command succeeds
    what="$1"; shift
    if "$@"; then ok "$what"; else bad "$what"; fi
}
expect() { # expect CODE PATTERN -- ARGS...
    code="$1" pattern="$2"; shift 3
    out=$("$dpt" "$@" 2>&1); rc=$?
    if [ "$rc" -ne "$code" ]; then
        bad "dpt $*: exit $rc, expected $code"; echo "$out" | tail -5
    elif ! printf '%s\n' "$out" | grep -q -- "$pattern"; then
        bad "dpt $*: output lacks \"$pattern\""; echo "$out" | tail -5
    else
        ok "dpt $*"
    fi
}
# Metrics without the fields that measure wall time.
untimed() { sed -E 's/"(time_[a-z_]*|env_steps_per_s|samples_per_s|timing_breakdown)":(\{[^}]*\}|[^,}]*),?//g' "$1"; }
rows() { wc -l < "$1" | tr -d ' '; }

# ---- the exit-code table is one table: the same in both documents -----------
docs="$(cd "$(dirname "$0")/../docs" && pwd)"
table() { sed -n '/^<!-- The exit-code table/,/^<!-- end of the exit-code table/p' "$1"; }
if [ -n "$(table "$docs/RELIABILITY.md")" ] &&
   [ "$(table "$docs/RELIABILITY.md")" = "$(table "$docs/TRAINING.md")" ]; then
    ok "docs: RELIABILITY.md and TRAINING.md hold the same exit-code table"
else
    bad "docs: the exit-code tables of RELIABILITY.md and TRAINING.md differ"
fi

# ---- basics ----------------------------------------------------------------
expect 0 "features:"            -- info
expect 2 "unexpected argument"  -- info extra
expect 0 "usage: dpt COMMAND"   -- --help
expect 2 "usage: dpt COMMAND"   --
expect 2 "unknown command \"nope\"" -- nope
expect 0 "dpt 0.2"              -- --version
expect 0 "usage: dpt demo"      -- demo --help
expect 2 "unknown argument"     -- demo --bogus
expect 2 "--epochs expects an integer" -- demo --epochs 0
expect 0 "test accuracy"        -- demo --epochs 2 --quiet
expect 2 "unknown benchmark"    -- bench nope
expect 0 "allreduce"            -- bench --help
expect 2 "rounds 1..101"         -- bench towers --rounds 0
expect 0 '"mode":"ps","order":"fast","chunk":0,"devices":2,"batch":32' -- bench towers --mode ps --batch 32 --seconds 0.2 --rounds 3 --json
expect 0 '"mode":"ps","order":"invariant","chunk":8,"devices":2,"batch":32' -- bench towers --mode ps --batch 32 --seconds 0.2 --rounds 3 --invariant 8 --json
expect 0 "usage: dpt bench lstm" -- bench lstm --help
expect 2 "multiple of --threads" -- bench lstm --batch 5 --threads 2
expect 2 "--hidden expects an integer" -- bench lstm --hidden 0
expect 2 "not a backend"        -- bench lstm --gemm nope
expect 0 '"hidden":8,"batch":4,"seq":3,"input":2,"threads":2' -- bench lstm --hidden 8 --batch 4 --seq 3 --input 2 --threads 2 --seconds 0.05 --json
expect 0 "samples/s"            -- bench cnn --net fashion --batch 8 --rounds 1 --seconds 0.05
expect 0 '"net":"minatar","devices":2,"batch":8' -- bench cnn --net minatar --batch 8 --devices 2 --rounds 1 --seconds 0.05 --json
expect 2 "unknown or incomplete option" -- bench cnn --bogus
expect 2 "expected fashion or minatar" -- bench cnn --net nope
expect 2 "multiple of --devices" -- bench cnn --net fashion --batch 9 --devices 2
expect 0 "keys of job = ppo"    -- train --help
expect 0 "standardize advantages over each minibatch" -- train --help
expect 2 "CONFIG file or --resume" -- train
expect 0 "usage: dpt eval"      -- eval --help
expect 2 "needs a value"        -- train --set

# ---- dpt init: a starter config that trains --------------------------------------
expect 0 "wrote starter_ppo.conf" -- init ppo starter_ppo.conf
expect 2 "exists; not overwritten" -- init ppo starter_ppo.conf
expect 2 "unknown job \"sarsa\"" -- init sarsa
check "dpt init ppo lists CleanRL's lr and the per-minibatch normalization" \
    grep -q "^lr = 0.00025" starter_ppo.conf
check "dpt init ppo lists normalize_advantages = minibatch" grep -q "^normalize_advantages = minibatch" starter_ppo.conf
expect 0 "reached stop_iters" -- train starter_ppo.conf --set stop_iters=1 --set output_dir=starter_run

# ---- config errors (exit 2, file and line named) ----------------------------
printf 'job = ppo\nlearning_rate = 0.1\n' > unknown.conf
expect 2 'unknown.conf:2: unknown key "learning_rate" (did you mean "lr"?)' -- train unknown.conf
printf 'job = ppo\nnum_sgd_iter = four\n' > badtype.conf
expect 2 'badtype.conf:2: num_sgd_iter expects an integer, got "four"' -- train badtype.conf
printf 'gamma = 1.5\n' > range.conf
expect 2 'range.conf:1: gamma = 1.5 is out of range' -- train range.conf
printf 'lr = 0.1\n# comment\nlr = 0.2\n' > dup.conf
expect 2 'dup.conf:3: duplicate key "lr"' -- train dup.conf
printf 'job = sarsa\n' > choice.conf
expect 2 'job must be one of supervised|ppo|ddppo|appo|impala|sync_replicas, got "sarsa"' -- train choice.conf
printf 'just some words\n' > syntax.conf
expect 2 'syntax.conf:1: expected "key = value"' -- train syntax.conf
expect 2 'config missing.conf: cannot open' -- train missing.conf
printf 'job = ppo\n' > ok.conf
expect 2 '--set lr=abc: lr expects a number' -- train ok.conf --set lr=abc
expect 2 'unknown key "envv"' -- train ok.conf --set envv=CartPole-v1
printf 'job = ddppo\ntrain_batch_size = 512\n' > ddtb.conf
expect 2 'train_batch_size is derived for ddppo' -- train ddtb.conf
printf 'job = ppo\nenv = NoSuchEnv-v0\n' > env.conf
expect 2 'NoSuchEnv-v0' -- train env.conf
# Defect 7: usage errors that used to run, crash or exit 1.
mkdir -p adir
expect 2 'config adir: not a regular file (a directory)' -- train adir
printf 'job = ppo\nenv = Cart\000Pole-v1\n' > nul.conf
expect 2 'nul.conf:2: byte 11 is a control character (0x00)' -- train nul.conf
head -c 300 "$dpt" > binary.conf
out=$("$dpt" train binary.conf 2>&1); rc=$?
if [ $rc -eq 2 ] && ! printf '%s' "$out" | LC_ALL=C grep -q '[^[:print:][:space:]]'; then
    ok "a binary file as config: exit 2, no raw bytes echoed"
else
    bad "binary config: exit $rc, output: $(printf '%s' "$out" | head -c 200 | od -c | head -3)"
fi
{ printf 'job = ppo\n# '; head -c 3000 /dev/zero | tr '\0' 'x'; printf '\nstop_iters = 1\n'; } > longcomment.conf
expect 0 "reached stop_iters" -- train longcomment.conf --set output_dir=longcomment
# Defect 8: keys of another job are refused (exit 2, naming job and key), and
# PPO's defaults are CleanRL's, not the supervised job's.
printf 'job = ppo\nhidden = 32\n' > hidden.conf
expect 2 'key hidden does not apply to job ppo' -- train hidden.conf
expect 2 'key num_workers does not apply to job supervised' -- train ok.conf --set job=supervised --set num_workers=2
if grep -q '^lr = 0.00025$' starter_run/config.conf && grep -q '^num_devices = 1$' starter_run/config.conf &&
   grep -q '^grad_clip = 0.5$' starter_run/config.conf && grep -q '^adam_eps = 1e-5$' starter_run/config.conf &&
   ! grep -q '^hidden' starter_run/config.conf && ! grep -q '^epochs' starter_run/config.conf; then
    ok "config.conf of a ppo run: CleanRL's defaults, only ppo keys"
else
    bad "ppo defaults in config.conf"; cat starter_run/config.conf | head -20
fi

# ---- PPO: train, checkpoint, eval, bitwise resume ----------------------------
cat > ppo.conf <<'CONF'
job = ppo
env = CartPole-v1
num_envs_per_worker = 4
rollout_fragment_length = 64
sgd_minibatch_size = 64
total_timesteps = 5120
checkpoint_every = 5
eval_episodes = 3
CONF
expect 0 "" -- train ppo.conf --quiet --set output_dir=ppo_full
expect 0 "evaluation" -- train ppo.conf --set output_dir=ppo_full2
if [ -f ppo_full/checkpoints/checkpoint-00000020.safetensors ] && [ -f ppo_full/result.jsonl ] &&
   [ "$(rows ppo_full/result.jsonl)" -eq 20 ] && [ "$(rows ppo_full/progress.csv)" -eq 21 ]; then
    ok "ppo run wrote 20 metrics rows, a csv header and checkpoint 20"
else
    bad "ppo run outputs"; ls -R ppo_full | head
fi
# Defect 1: a fresh run into a used directory is refused and deletes nothing.
ls ppo_full/checkpoints > before.txt
expect 2 "not empty: continue that run with \`dpt train --resume ppo_full\`" -- train ppo.conf --set output_dir=ppo_full
ls ppo_full/checkpoints > after.txt
check "defect 1: the refused run left the old run's checkpoints alone" cmp -s before.txt after.txt
# The default directory is new for every run.
mkdir -p dflt && cd dflt || exit 1
"$dpt" train ../ppo.conf --set stop_iters=1 --quiet >/dev/null 2>&1
"$dpt" train ../ppo.conf --set stop_iters=1 --quiet >/dev/null 2>&1
n=$(ls -d runs/ppo-CartPole-v1-* 2>/dev/null | wc -l)
cd .. || exit 1
[ "$n" -eq 2 ] && ok "two runs without output_dir get two run directories" || bad "default run directories: $n"
# Half the steps, then resume for the rest: same weights, same metrics.
expect 0 "" -- train ppo.conf --quiet --set output_dir=ppo_half --set stop_iters=10
cp ppo_half/config.conf config_before.txt
# Defect 2: orphaned temporaries of a killed write are removed on resume.
touch ppo_half/checkpoints/checkpoint-00000011.safetensors.tmp-999-0 ppo_half/config.conf.tmp-999
expect 0 "removed 2 temporary files" -- train --resume ppo_half --set stop_iters=0
check "defect 2: resume never rewrites config.conf" cmp -s config_before.txt ppo_half/config.conf
if [ ! -e ppo_half/checkpoints/checkpoint-00000011.safetensors.tmp-999-0 ] && [ ! -e ppo_half/config.conf.tmp-999 ]; then
    ok "defect 2: temporaries of a killed write are gone after resume"
else
    bad "temporaries left"
fi
check "the resume recorded its override" grep -q "stop_iters = 0 (was 10)" ppo_half/overrides.log
if "$cmp" ppo_full/checkpoints/checkpoint-00000020.safetensors \
          ppo_half/checkpoints/checkpoint-00000020.safetensors >cmp.out 2>&1; then
    ok "ppo: resumed run ends with bitwise-identical weights, optimizer and env state"
else
    bad "ppo resume differs: $(cat cmp.out)"
fi
if [ "$(untimed ppo_full/result.jsonl)" = "$(untimed ppo_half/result.jsonl)" ]; then
    ok "ppo: resumed run has identical metrics"
else
    bad "ppo resume metrics differ"
fi
# Defect 3: resuming a finished run does no work.
n0=$(rows ppo_half/result.jsonl)
expect 0 "already finished; nothing to do" -- train --resume ppo_half
check "defect 3: no iteration was added to a finished run" [ "$(rows ppo_half/result.jsonl)" -eq "$n0" ]
# ...unless a stop condition is raised: then the steps/s count this process only.
expect 0 "reached stop_iters after iteration 22" -- train --resume ppo_half --set total_timesteps=10240 --set stop_iters=22
out=$("$dpt" train --resume ppo_half --set total_timesteps=10240 --set stop_iters=23 2>&1)
if printf '%s\n' "$out" | grep -q "dpt train: 256 env steps in"; then
    ok "defect 3: a resumed run reports the steps it made itself"
else
    bad "resumed steps/s: $(printf '%s\n' "$out" | grep 'env steps')"
fi
# eval: a checkpoint or a run directory, no config needed, from any directory.
expect 0 "mean return" -- eval ppo_full/checkpoints/checkpoint-00000020.safetensors --episodes 2
expect 0 "checkpoint-00000020.safetensors: greedy policy, 3 episodes" -- eval ppo_full
expect 0 '"episodes":2,"mean_return"' -- eval ppo_full --episodes 2 --json --seed 5
expect 2 "--episodes expects an integer in \[1, 1000000\], got \"99999999999999999999\"" -- eval ppo_full --episodes 99999999999999999999
expect 2 "--episodes expects an integer" -- eval ppo_full --episodes 12abc
# --stochastic: actions sampled from a stream of the seed, so a seed repeats.
expect 0 "stochastic policy, 2 episodes" -- eval ppo_full --episodes 2 --stochastic
s1=$("$dpt" eval ppo_full --episodes 4 --seed 9 --stochastic --json)
s2=$("$dpt" eval ppo_full --episodes 4 --seed 9 --set eval_stochastic=true --json)
check "eval --stochastic: the same seed gives the same episodes" [ "$s1" = "$s2" ]
check "eval --stochastic: says so in --json" sh -c "echo '$s1' | grep -q '\"stochastic\":true'"
expect 2 "eval_stochastic expects true or false" -- eval ppo_full --set eval_stochastic=maybe
expect 2 "unexpected argument" -- eval ppo_full ppo.conf
# A corrupted newest checkpoint: resume falls back to the previous one, and
# the checkpoints it writes are not rotated away by the corrupt newer one.
cp -r ppo_half ppo_corrupt
printf 'garbage' | dd of=ppo_corrupt/checkpoints/checkpoint-00000023.safetensors bs=1 seek=200 conv=notrunc 2>/dev/null
expect 0 "skipping checkpoint" -- train --resume ppo_corrupt --set stop_iters=23 --set total_timesteps=10240
check "rotation kept the checkpoint this run wrote (23 again, valid)" \
    "$cmp" ppo_half/checkpoints/checkpoint-00000023.safetensors ppo_corrupt/checkpoints/checkpoint-00000023.safetensors
expect 2 "checkpoint-00000099.safetensors: no such file" -- eval ppo_corrupt/checkpoints/checkpoint-00000099.safetensors
head -c 100 ppo_full/checkpoints/checkpoint-00000010.safetensors > trunc.safetensors
expect 2 "trunc.safetensors" -- eval trunc.safetensors
expect 2 "not a run directory" -- train --resume ok_missing_dir
mkdir -p empty_run/checkpoints && cp ppo_full/config.conf empty_run/config.conf
printf 'garbage' > empty_run/checkpoints/checkpoint-00000003.safetensors
expect 2 "no valid checkpoint" -- train --resume empty_run
expect 2 "no valid checkpoint in empty_run/checkpoints; the newest: checkpoint" -- eval empty_run
# Stopped before its first checkpoint: --resume starts the run over from
# its config.conf; a fresh start into a directory holding only the
# temporary of a killed start goes ahead.
mkdir -p no_ckpt_yet && cp ppo_full/config.conf no_ckpt_yet/config.conf
printf '{"training_iteration":1' > no_ckpt_yet/result.jsonl
expect 0 "from the start: it has no checkpoint yet" -- train --resume no_ckpt_yet --set stop_iters=2
check "the restarted run wrote iterations 1 and 2 only" [ "$(rows no_ckpt_yet/result.jsonl)" = 2 ]
mkdir -p tmp_only && touch tmp_only/config.conf.tmp-999
expect 0 "run directory tmp_only" -- train ppo.conf --set output_dir=tmp_only --set stop_iters=1
check "the temporary of the killed start is gone" [ ! -e tmp_only/config.conf.tmp-999 ]
# A run directory of dpt 0.1 is refused with the reason (exit 2).
mkdir -p old_run/checkpoints && printf '# dpt configuration used by this run (every key)\njob = ppo\nhidden = 256,128\n' > old_run/config.conf
expect 2 "this run was made by dpt 0.1" -- train --resume old_run
# Resuming with a key that changes the results is refused, naming the key.
expect 2 "these keys cannot change: lr (0.00025, now 0.1)" -- train --resume ppo_half --set lr=0.1
expect 2 "give CONFIG or --resume DIR, not both" -- train ppo.conf --resume ppo_half

# ---- bad input is exit 2 wherever a checkpoint or run directory is given --------------
# (docs/RELIABILITY.md, "Exit codes"): a directory without checkpoints, a
# device, a truncated or bit-flipped checkpoint, a config file, a path that
# names nothing; what was saved stays as it was.
cp ppo_full/checkpoints/checkpoint-00000020.safetensors before.safetensors
cp before.safetensors flipped.safetensors
at=$(($(wc -c < flipped.safetensors) - 100))
byte=$(od -An -tu1 -j $at -N 1 flipped.safetensors | tr -d ' ')
if [ "$byte" = 1 ]; then flip='\002'; else flip='\001'; fi
printf "$flip" | dd of=flipped.safetensors bs=1 seek=$at conv=notrunc 2>/dev/null
mkdir -p no_checkpoints
expect 2 "no valid checkpoint in no_checkpoints/checkpoints" -- eval no_checkpoints
expect 2 "checkpoint /dev/zero: not a regular file" -- eval /dev/zero
expect 2 "runs past the end of the file" -- eval trunc.safetensors
expect 2 "flipped.safetensors: checksum mismatch" -- eval flipped.safetensors
expect 2 "is over the 100 MiB limit: not a safetensors file" -- eval ppo_full/config.conf
expect 2 "no_such_run: no such file" -- eval no_such_run
for target in no_checkpoints /dev/zero trunc.safetensors flipped.safetensors ppo_full/config.conf no_such_run; do
    expect 2 "--resume $target: not a run directory" -- train --resume $target
done
expect 2 "not a directory (give run directories)" -- plot /dev/zero -o zero.svg
check "a refused checkpoint or run directory changes nothing saved" \
    cmp -s before.safetensors ppo_full/checkpoints/checkpoint-00000020.safetensors
check "a refused --resume writes nothing into the directory" sh -c '[ -z "$(ls -A no_checkpoints)" ]'

# ---- a key set while the key that enables it is off: refused, naming both -------------
expect 2 "lstm_use_prev_action = true is used only with use_lstm = true (use_lstm = false)" -- \
    train ppo.conf --set lstm_use_prev_action=true --set use_lstm=false --set output_dir=dep1
expect 2 "max_seq_len = 8 is used only with use_lstm = true" -- train ppo.conf --set max_seq_len=8 --set output_dir=dep1
expect 2 "evaluation_episodes = 3 is used only with evaluation_interval > 0" -- \
    train ppo.conf --set evaluation_episodes=3 --set output_dir=dep1
printf 'job = supervised\ndataset = spirals\nspirals_points = 256\nhidden = 16\nepochs = 1\n' > dep.conf
expect 2 "lr_end = 0.001 is used only with lr_schedule = linear (lr_schedule = constant)" -- \
    train dep.conf --set lr_end=0.001 --set output_dir=dep1
expect 2 "momentum = 0.5 is used only with optimizer = momentum (optimizer = adam)" -- \
    train dep.conf --set momentum=0.5 --set output_dir=dep1
expect 2 "data_dir = /data is used only with dataset = fashion_mnist (dataset = spirals)" -- \
    train dep.conf --set data_dir=/data --set output_dir=dep1
expect 2 "spirals_points = 256 is used only with dataset = spirals (dataset = csv)" -- \
    train dep.conf --set dataset=csv --set train_csv=a.csv --set test_csv=b.csv --set output_dir=dep1
# The model language: syntax when the config is read, shapes against the data or the env.
printf 'job = supervised\ndataset = spirals\nspirals_points = 256\nepochs = 1\n' > net.conf
expect 2 'network: network layer 2 "maxpool(2,foo=1)": unknown argument "foo"' -- \
    train net.conf --set "network=dense(8) maxpool(2,foo=1)" --set output_dir=dep1
expect 2 "hidden sizes the built-in MLP, which network replaces" -- \
    train dep.conf --set "network=dense(8) relu" --set output_dir=dep1
expect 2 "layer 1 of 2 (conv(4,k=3x3,stride=1x1,pad=0x0)) on input \\[2, 1, 1\\]" -- \
    train net.conf --set "network=conv(4,k=3)" --set output_dir=dep1
expect 2 "network on the observations of CartPole-v1, shape \\[4, 1, 1\\]: layer 2 of 2" -- \
    train ppo.conf --set "network=dense(8) maxpool(2)" --set output_dir=dep1
check "a refused key leaves no run directory" [ ! -e dep1 ]
expect 0 "" -- train net.conf --set "network=dense(16) tanh dense(16) relu" --set output_dir=net1 --quiet
check "a network's checkpoint records it" grep -q '"network":"dense(16) tanh dense(16) relu"' \
    net1/checkpoints/checkpoint-00000001.safetensors
expect 0 "test samples" -- eval net1
# Batch normalization: supervised and sync_replicas only, averaged running
# statistics (reduce_op = avg); a run stopped and resumed ends as the whole.
expect 2 'network: layer 2 is batchnorm, which the RL jobs do not take' -- \
    train ppo.conf --set "network=dense(8) bn tanh" --set output_dir=dep1
expect 2 'network: layer 2 is batchnorm, which needs reduce_op = avg' -- \
    train net.conf --set "network=dense(8) batchnorm relu" --set reduce_op=sum --set output_dir=dep1
expect 2 'network layer 2 "batchnorm(momentum=2)": momentum = "2" is not a number in (0, 1]' -- \
    train net.conf --set "network=dense(8) batchnorm(momentum=2)" --set output_dir=dep1
bnn="network=dense(16) bn tanh dense(16) batchnorm(momentum=0.2,eps=0.001) relu"
expect 0 "" -- train net.conf --set "$bnn" --set epochs=2 --set num_devices=2 --set output_dir=bn_full --quiet
expect 0 "" -- train net.conf --set "$bnn" --set epochs=2 --set num_devices=2 --set stop_iters=1 \
    --set output_dir=bn_half --quiet
expect 0 "" -- train --resume bn_half --quiet --set stop_iters=0
check "batchnorm: stopped after epoch 1 and resumed = the whole run, bitwise" "$cmp" \
    bn_full/checkpoints/checkpoint-00000002.safetensors bn_half/checkpoints/checkpoint-00000002.safetensors
expect 0 "" -- train net.conf --set "$bnn" --set epochs=2 --set num_devices=2 --set towers_mode=replicated \
    --set output_dir=bn_repl --quiet
check "batchnorm: towers ps and replicated end bitwise equal" "$cmp" \
    bn_full/checkpoints/checkpoint-00000002.safetensors bn_repl/checkpoints/checkpoint-00000002.safetensors
check "batchnorm: the checkpoint records the network with its arguments" grep -q \
    '"network":"dense(16) bn tanh dense(16) batchnorm(momentum=0.2,eps=0.001) relu"' \
    bn_full/checkpoints/checkpoint-00000002.safetensors
bn_eval=$(grep -o '"test_accuracy":[0-9.]*' bn_full/result.jsonl | tail -1 | cut -d: -f2)
expect 0 "accuracy $(printf '%.4f' "$bn_eval")" -- eval bn_full
# On resume and in dpt eval too; a run's own config.conf names every key and
# is not refused; a key at its default is not.
expect 2 "evaluation_episodes = 3 is used only with" -- train --resume ppo_half --set evaluation_episodes=3
expect 2 "lstm_cell_size = 32 is used only with use_lstm = true" -- eval ppo_full --set lstm_cell_size=32
expect 0 "reached stop_iters" -- train ppo.conf --set lstm_use_prev_action=false --set stop_iters=1 --set output_dir=dep_default

# ---- evaluation during training: evaluation/ metrics, checkpoints/best -------------
expect 0 "" -- train ppo.conf --quiet --set output_dir=evald --set evaluation_interval=4 --set evaluation_episodes=3
check "evaluation: the training is the run without it, bitwise" "$cmp" \
    ppo_full/checkpoints/checkpoint-00000020.safetensors evald/checkpoints/checkpoint-00000020.safetensors
best=$(grep -o '"episode_reward_mean":[0-9.]*,"episode_len_mean":[0-9.]*,"episodes":3' evald/result.jsonl |
    cut -d: -f2 | cut -d, -f1 | sort -n | tail -1)
got=$("$dpt" eval evald/checkpoints/best.safetensors --episodes 3 --json | sed 's/.*"mean_return":\([0-9.]*\).*/\1/')
if [ -n "$best" ] && [ "$best" = "$got" ]; then
    ok "evaluation: checkpoints/best holds the best evaluation's weights (return $best)"
else
    bad "evaluation: best in result.jsonl $best, best.safetensors evaluates to $got"
fi
check "evaluation: 5 evaluations in 20 iterations" [ "$(grep -c '"episodes":3' evald/result.jsonl)" -eq 5 ]
expect 0 "" -- train ppo.conf --quiet --set output_dir=evald_half --set evaluation_interval=4 --set evaluation_episodes=3 --set stop_iters=10
expect 0 "" -- train --resume evald_half --quiet --set stop_iters=0
check "evaluation: half + resume = the whole run (metrics included)" cmp -s \
    "$(untimed evald/result.jsonl > e1.txt; echo e1.txt)" "$(untimed evald_half/result.jsonl > e2.txt; echo e2.txt)"

# ---- --seeds: one run per seed, side by side, and a summary ------------------------
expect 0 "final return over 3 of 3 seeds: mean" -- train ppo.conf --seeds 1-2,7 --set output_dir=seeds --set eval_episodes=0
check "--seeds: one directory per seed" [ -f seeds/seed-1/config.conf ] && [ -f seeds/seed-2/config.conf ] && [ -f seeds/seed-7/config.conf ]
check "--seeds: each run has its seed" grep -q "^seed = 7" seeds/seed-7/config.conf
expect 0 "" -- train ppo.conf --quiet --set output_dir=seed7_alone --set seed=7 --set eval_episodes=0
check "--seeds: a seed run side by side is bitwise the same run alone" "$cmp" \
    seeds/seed-7/checkpoints/checkpoint-00000020.safetensors seed7_alone/checkpoints/checkpoint-00000020.safetensors
mkdir -p seeds_fail/seed-2 && touch seeds_fail/seed-2/keep
expect 2 "seed 2: output_dir seeds_fail/seed-2 is not empty" -- train ppo.conf --seeds 1,2 --set output_dir=seeds_fail --parallel 1
check "--seeds: a failed seed does not stop the others" [ -f seeds_fail/seed-1/checkpoints/checkpoint-00000020.safetensors ]
expect 2 "seed 1 is given twice" -- train ppo.conf --seeds 1,1
expect 2 "got \"1,x\"" -- train ppo.conf --seeds 1,x
expect 2 "got \"4-2\"" -- train ppo.conf --seeds 4-2
expect 2 "--parallel goes with --seeds" -- train ppo.conf --parallel 2
expect 2 "resume each run directory on its own" -- train --resume ppo_full --seeds 1,2

# ---- SIGINT / SIGTERM: finish the iteration, checkpoint, exit 130 / 143 ------------
cat > long.conf <<'CONF'
job = ppo
env = CartPole-v1
total_timesteps = 100000000
checkpoint_every = 0
eval_episodes = 0
CONF
for sig in INT TERM; do
    "$dpt" train long.conf --set output_dir=sig_$sig --quiet > sig_$sig.out 2>&1 &
    pid=$!
    i=0; while [ ! -s sig_$sig/result.jsonl ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
    kill -$sig $pid; wait $pid; rc=$?
    want=130; [ $sig = TERM ] && want=143
    last=$(ls sig_$sig/checkpoints 2>/dev/null | tail -1)
    if [ $rc -eq $want ] && [ -n "$last" ]; then
        ok "SIG$sig: exit $rc with checkpoint $last written"
    else
        bad "SIG$sig: exit $rc (want $want), checkpoints: $last"; cat sig_$sig.out | tail -3
    fi
done
# The stopped run resumes bitwise like one that was never interrupted.
its=$(rows sig_INT/result.jsonl)
expect 0 "" -- train long.conf --set output_dir=sig_ref --set stop_iters=$((its + 2)) --quiet
expect 0 "" -- train --resume sig_INT --set stop_iters=$((its + 2)) --quiet
check "a run stopped by SIGINT resumes bitwise" "$cmp" \
    sig_ref/checkpoints/checkpoint-$(printf %08d $((its + 2))).safetensors \
    sig_INT/checkpoints/checkpoint-$(printf %08d $((its + 2))).safetensors
# --seeds: after a stop request no seed starts, and the summary leaves the
# stopped runs out of its figures. SIGINT once seeds 1 and 2 both have a
# result (long.conf never ends by itself).
"$dpt" train long.conf --seeds 1-4 --parallel 2 --set output_dir=seeds_stop > seeds_stop.out 2>&1 &
pid=$!
i=0
while { [ ! -s seeds_stop/seed-1/result.jsonl ] || [ ! -s seeds_stop/seed-2/result.jsonl ]; } &&
      [ $i -lt 600 ]; do sleep 0.1; i=$((i + 1)); done
kill -INT $pid; wait $pid; rc=$?
check "--seeds stopped by SIGINT: exit 130" [ $rc -eq 130 ]
check "--seeds stopped: seeds 3 and 4 never started" \
    sh -c '[ ! -e seeds_stop/seed-3 ] && [ ! -e seeds_stop/seed-4 ]'
check "--seeds stopped: seeds 1 and 2 wrote their checkpoint" \
    sh -c 'ls seeds_stop/seed-1/checkpoints/checkpoint-*.safetensors seeds_stop/seed-2/checkpoints/checkpoint-*.safetensors >/dev/null 2>&1'
check "--seeds stopped: the summary marks seeds 1, 2 stopped and 3, 4 not run" \
    sh -c 'grep -q "^1  *stopped " seeds_stop.out && grep -q "^2  *stopped " seeds_stop.out &&
           grep -q "^3  *not run " seeds_stop.out && grep -q "^4  *not run " seeds_stop.out'
check "--seeds stopped: no figure averages the stopped runs" \
    grep -q "^final return: none of 4 seeds ran to its end" seeds_stop.out
check "--seeds stopped: the summary says what it left out" \
    grep -q "^left out after the stop request: 2 runs stopped before their end, 2 not started" seeds_stop.out

# ---- DD-PPO with threads --------------------------------------------------------
cat > dd.conf <<'CONF'
job = ddppo
env = CartPole-v1
num_workers = 2
num_envs_per_worker = 2
rollout_fragment_length = 64
sgd_minibatch_size = 64
num_sgd_iter = 4
total_timesteps = 5120
checkpoint_every = 10
eval_episodes = 2
CONF
expect 0 "evaluation: greedy policy, 2 episodes" -- train dd.conf --set output_dir=dd_full
expect 0 "" -- train dd.conf --quiet --set output_dir=dd_half --set stop_iters=10
expect 0 "" -- train --resume dd_half --quiet --set stop_iters=0
if "$cmp" dd_full/checkpoints/checkpoint-00000020.safetensors \
          dd_half/checkpoints/checkpoint-00000020.safetensors >cmp.out 2>&1; then
    ok "ddppo: resumed run ends bitwise identical"
else
    bad "ddppo resume differs: $(cat cmp.out)"
fi
if [ "$(untimed dd_full/result.jsonl)" = "$(untimed dd_half/result.jsonl)" ]; then
    ok "ddppo: resumed run has identical metrics"
else
    bad "ddppo resume metrics differ"
fi
# RLlib's step counters in result.jsonl and progress.csv: every batch of
# every worker sampled and trained once (5120 steps).
check "ddppo: result.jsonl and progress.csv count the steps sampled and trained" \
    grep -q '"num_env_steps_sampled":5120,"num_env_steps_trained":5120,"num_agent_steps_sampled":5120,"num_agent_steps_trained":5120' dd_full/result.jsonl
check "ddppo: progress.csv has the step counters' columns" \
    grep -q '^training_iteration,.*,num_env_steps_sampled,num_env_steps_trained,num_agent_steps_sampled,num_agent_steps_trained' dd_full/progress.csv
# A run that an earlier build started (no step counters in its progress.csv)
# and this one resumes: the rows after the resume keep the header's columns.
expect 0 "" -- train dd.conf --quiet --set output_dir=dd_oldcsv --set stop_iters=10
awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) keep[i] = $i !~ /^num_(env|agent)_steps_/ }
         { o = ""; for (i = 1; i <= NF; i++) if (keep[i]) o = o (o == "" ? "" : ",") $i; print o }' \
    dd_oldcsv/progress.csv > old.csv && mv old.csv dd_oldcsv/progress.csv
expect 0 "" -- train --resume dd_oldcsv --quiet --set stop_iters=12
check "a resumed run writes the columns of its progress.csv header" \
    awk -F, 'NR == 1 { n = NF; if ($0 ~ /num_env_steps/) bad = 1 } NF != n { bad = 1 }
             END { exit bad || NR != 13 }' dd_oldcsv/progress.csv
# Defect 4: a minibatch that does not divide the worker's batch (500 rows,
# minibatches of 128) used to overflow the heap.
expect 0 "" -- train dd.conf --set rollout_fragment_length=100 --set num_envs_per_worker=5 \
    --set sgd_minibatch_size=128 --set total_timesteps=4000 --set output_dir=dd_odd --quiet
# The seed's DD-PPO defaults (fragment 100, 5 envs, minibatch 50, 10 epochs,
# advantages standardized over each worker's batch).
printf 'job = ddppo\nstop_iters = 1\noutput_dir = dd_defaults\n' > ddd.conf
expect 0 "" -- train ddd.conf --quiet
if grep -q '^rollout_fragment_length = 100$' dd_defaults/config.conf && grep -q '^num_envs_per_worker = 5$' dd_defaults/config.conf &&
   grep -q '^sgd_minibatch_size = 50$' dd_defaults/config.conf && grep -q '^num_sgd_iter = 10$' dd_defaults/config.conf &&
   grep -q '^normalize_advantages = batch$' dd_defaults/config.conf; then
    ok "ddppo defaults are the seed's DD-PPO keys"
else
    bad "ddppo defaults"
fi

# ---- recurrent policies: PPO-LSTM and DD-PPO-LSTM ----------------------------------
cat > lstm.conf <<'CONF'
job = ppo
env = CartPole-v1
use_lstm = true
lstm_cell_size = 16
max_seq_len = 8
lstm_use_prev_action = true
lstm_use_prev_reward = true
num_envs_per_worker = 4
rollout_fragment_length = 32
sgd_minibatch_size = 32
total_timesteps = 2560
checkpoint_every = 5
eval_episodes = 2
CONF
expect 0 "evaluation: greedy policy, 2 episodes" -- train lstm.conf --set output_dir=lstm_full
expect 0 "" -- train lstm.conf --quiet --set output_dir=lstm_half --set stop_iters=10
expect 0 "" -- train --resume lstm_half --quiet --set stop_iters=0
if "$cmp" lstm_full/checkpoints/checkpoint-00000020.safetensors \
          lstm_half/checkpoints/checkpoint-00000020.safetensors >cmp.out 2>&1; then
    ok "ppo-lstm: half + resume ends bitwise identical (weights, optimizer, envs, LSTM states)"
else
    bad "ppo-lstm resume differs: $(cat cmp.out)"
fi
if [ "$(untimed lstm_full/result.jsonl)" = "$(untimed lstm_half/result.jsonl)" ]; then
    ok "ppo-lstm: resumed run has identical metrics"
else
    bad "ppo-lstm resume metrics differ"
fi
check "ppo-lstm: sequence metrics in result.jsonl" grep -q '"num_sequences":[0-9]*,"rows_padded":[0-9]*,"rows_dropped":[0-9]*' lstm_full/result.jsonl
check "ppo-lstm: the checkpoint describes the LSTM" grep -a -q '"use_lstm":"true","lstm_cell_size":"16","lstm_use_prev_action":"true","lstm_use_prev_reward":"true"' lstm_full/checkpoints/checkpoint-00000020.safetensors
expect 0 "greedy policy, 3 episodes: mean return" -- eval lstm_full --episodes 3
expect 0 "raised to 16 rows (one sequence per device)" -- train lstm.conf --set output_dir=lstm_raise --set stop_iters=1 --set num_devices=2 --set sgd_minibatch_size=6
expect 2 "max_seq_len expects an integer" -- train lstm.conf --set max_seq_len=x
# The recurrent examples start on the memory envs (one iteration each).
ex="$(dirname "$0")/../examples"
expect 0 "reached stop_iters" -- train "$ex/stateless_cartpole_lstm.conf" --set stop_iters=1 --set output_dir=ex_scp --set eval_episodes=1
expect 0 "reached stop_iters" -- train "$ex/repeat_previous_lstm.conf" --set stop_iters=1 --set output_dir=ex_rp --set eval_episodes=1
expect 0 "greedy policy, 2 episodes" -- eval ex_rp --episodes 2
sed 's/^job = ppo/job = ddppo\nnum_workers = 2/' lstm.conf > ddlstm.conf
expect 0 "evaluation: greedy policy, 2 episodes" -- train ddlstm.conf --set output_dir=ddlstm_full
expect 0 "" -- train ddlstm.conf --quiet --set output_dir=ddlstm_half --set stop_iters=5
expect 0 "" -- train --resume ddlstm_half --quiet --set stop_iters=0
check "ddppo-lstm: half + resume ends bitwise identical" "$cmp" \
    ddlstm_full/checkpoints/checkpoint-00000010.safetensors ddlstm_half/checkpoints/checkpoint-00000010.safetensors

# ---- under mpirun (when this build has MPI) ------------------------------------------
if "$dpt" info | grep -q "^  mpi    yes" && command -v mpirun >/dev/null 2>&1; then
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    # Open MPI's own leaks are not dpt's (sanitizer builds); local transports only.
    mpienv="ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0 OMPI_MCA_btl=self,vader"
    mpirun_() { env $mpienv mpirun --oversubscribe "$@"; }
    for layout in "1 mpi" "2 hier"; do
        set -- $layout
        out=$(mpirun_ -np 2 "$dpt" train dd.conf --set num_workers=$1 --set output_dir=dd_$2 2>&1); rc=$?
        if [ $rc -eq 0 ] && [ "$(rows dd_$2/result.jsonl)" -eq $((5120 / (256 * $1))) ] &&
           [ "$(ls dd_$2 | wc -l)" -ge 4 ]; then
            ok "ddppo under mpirun -np 2 ($2, $((2 * $1)) workers): rank 0 wrote the run"
        else
            bad "ddppo under mpirun ($2): exit $rc"; printf '%s\n' "$out" | tail -5
        fi
    done
    # 2 MPI ranks x 1 worker equal 2 worker threads in one process.
    check "ddppo: 2 MPI ranks hold bitwise the weights of 2 threads" "$cmp" \
        dd_full/checkpoints/checkpoint-00000020.safetensors dd_mpi/checkpoints/checkpoint-00000020.safetensors
    # DD-PPO with a CNN policy on MinAtar (the example, shortened): 2 ranks, and
    # 5 iterations + --resume equal 10 bitwise (not in the sanitizer builds).
    if [ -n "$DPT_TEST_SANITIZE" ]; then
        echo "skipped: ddppo with a CNN policy under mpirun ($DPT_TEST_SANITIZE sanitizer build)"
    else
        mn="$(dirname "$0")/../examples/minatar_breakout_ddppo.conf"
        mnset="--set total_timesteps=163840 --set checkpoint_every=5 --set eval_episodes=2 --quiet"
        mpirun_ -np 2 "$dpt" train "$mn" $mnset --set output_dir=mn_dd_full >/dev/null 2>&1
        mpirun_ -np 2 "$dpt" train "$mn" $mnset --set output_dir=mn_dd_half --set stop_iters=5 >/dev/null 2>&1
        mpirun_ -np 2 "$dpt" train --resume mn_dd_half --set stop_iters=0 --quiet >/dev/null 2>&1
        check "ddppo, CNN policy on MinAtar Breakout under mpirun -np 2: 5 iterations + --resume equal 10 bitwise" \
            "$cmp" mn_dd_full/checkpoints/checkpoint-00000010.safetensors \
            mn_dd_half/checkpoints/checkpoint-00000010.safetensors
    fi
    # Defect 5: jobs that do not run across processes are refused before any work.
    out=$(mpirun_ -np 2 "$dpt" train ppo.conf --set output_dir=mpi_ppo 2>&1); rc=$?
    if [ $rc -eq 2 ] && printf '%s' "$out" | grep -q "use job = ddppo" && [ ! -e mpi_ppo ]; then
        ok "defect 5: ppo under mpirun is refused (exit 2) naming ddppo, nothing written"
    else
        bad "ppo under mpirun: exit $rc"; printf '%s\n' "$out" | tail -3
    fi
    # Supervised under mpirun with one device per rank (several devices per rank:
    # mpi_supervised_cli_test.sh).
    printf 'job = supervised\ndataset = spirals\nspirals_points = 256\nepochs = 4\nbatch_size = 32\n' > sp.conf
    out=$(mpirun_ -np 2 "$dpt" train sp.conf --set num_devices=1 --set output_dir=sup_mpi 2>&1); rc=$?
    if [ $rc -eq 0 ] && [ "$(rows sup_mpi/result.jsonl)" -eq 4 ] && [ -f sup_mpi/config.conf ] &&
       [ -f sup_mpi/checkpoints/checkpoint-00000004.safetensors ] &&
       [ "$(printf '%s\n' "$out" | grep -c "finished after iteration 4")" -eq 1 ]; then
        ok "supervised under mpirun -np 2 (one device per rank): rank 0 wrote the run"
    else
        bad "supervised under mpirun -np 2: exit $rc"; printf '%s\n' "$out" | tail -5
    fi
    mpirun_ -np 2 "$dpt" train sp.conf --set num_devices=1 --set output_dir=sup_mpi_half --set stop_iters=2 --quiet >/dev/null 2>&1
    mpirun_ -np 2 "$dpt" train --resume sup_mpi_half --set stop_iters=0 --quiet >/dev/null 2>&1
    check "supervised under mpirun -np 2: 2 epochs + --resume equal 4 epochs bitwise" "$cmp" \
        sup_mpi/checkpoints/checkpoint-00000004.safetensors sup_mpi_half/checkpoints/checkpoint-00000004.safetensors
    if [ "$(untimed sup_mpi/result.jsonl)" = "$(untimed sup_mpi_half/result.jsonl)" ]; then
        ok "supervised under mpirun -np 2: resumed run has identical metrics"
    else
        bad "supervised under mpirun resume metrics differ"
    fi
    # Defect 6: ranks started with different configs (MPMD) are refused by every
    # rank, rank 0 naming the keys.
    out=$(mpirun_ -np 1 "$dpt" train dd.conf --set output_dir=mpmd : -np 1 "$dpt" train dd.conf \
          --set output_dir=mpmd --set num_workers=1 --set seed=2 2>&1); rc=$?
    if [ $rc -eq 2 ] && printf '%s' "$out" | grep -q "differing from rank 0: seed (rank 1), num_workers (rank 1)"; then
        ok "defect 6: ranks with different configs exit 2 naming seed and num_workers"
    else
        bad "mpmd configs: exit $rc"; printf '%s\n' "$out" | tail -3
    fi
    out=$(mpirun_ -np 1 "$dpt" train dd.conf --set output_dir=mpmd2 : -np 1 "$dpt" train dd.conf \
          --set output_dir=mpmd2 --set rollout_fragment_length=32 2>&1); rc=$?
    if [ $rc -eq 2 ] && printf '%s' "$out" | grep -q "rollout_fragment_length (rank 1)"; then
        ok "defect 6: a different fragment length per rank is refused, not a heap overflow"
    else
        bad "mpmd fragment: exit $rc"; printf '%s\n' "$out" | tail -3
    fi
    out=$(mpirun_ -np 1 "$dpt" train dd.conf --set output_dir=mpmd3 --set env=RepeatPrevious-v0 : \
          -np 1 "$dpt" train dd.conf --set output_dir=mpmd3 --set env=RepeatPrevious-v0 \
          --set env_config.k=3 2>&1); rc=$?
    if [ $rc -eq 2 ] && printf '%s' "$out" | grep -q "differing from rank 0: env_config (rank 1)"; then
        ok "ranks with different env_config values exit 2 naming env_config"
    else
        bad "mpmd env_config: exit $rc"; printf '%s\n' "$out" | tail -3
    fi
    # Defect 6: a stopped rank (SIGSTOP) used to hang the others forever; now the
    # collective times out (comm_timeout_s) naming it, and the job ends.
    mpirun_ -np 2 "$dpt" train dd.conf --set num_workers=1 --set output_dir=dd_stop \
        --set total_timesteps=100000000 --set checkpoint_every=5 --set comm_timeout_s=2 \
        > dd_stop.out 2>&1 &
    mpid=$!
    unstick dd_stop.out "output_dir=dd_stop" "$mpid" </dev/null >/dev/null 2>&1 &
    i=0; while [ ! -f dd_stop/checkpoints/checkpoint-00000005.safetensors ] && [ $i -lt 200 ]; do sleep 0.1; i=$((i + 1)); done
    victim=""
    for p in $(pgrep -f "output_dir=dd_stop" 2>/dev/null); do
        if tr '\0' '\n' < /proc/$p/environ 2>/dev/null | grep -q '^OMPI_COMM_WORLD_RANK=1$'; then victim=$p; fi
    done
    t0=$(date +%s)
    [ -n "$victim" ] && kill -STOP "$victim"
    i=0; while kill -0 $mpid 2>/dev/null && [ $i -lt 300 ]; do sleep 0.1; i=$((i + 1)); done
    if kill -0 $mpid 2>/dev/null; then
        kill -9 $mpid; [ -n "$victim" ] && kill -9 "$victim"
        bad "defect 6: a stopped rank still hangs the job after 30 s"
    else
        wait $mpid; rc=$?; t=$(( $(date +%s) - t0 ))
        last=$(ls dd_stop/checkpoints | tail -1)
        if [ -n "$victim" ] && [ $rc -ne 0 ] && [ $t -le 15 ] && grep -q "timed out after .*rank 1" dd_stop.out &&
           "$dpt" eval dd_stop/checkpoints/$last --episodes 1 >/dev/null 2>&1; then
            ok "defect 6: a stopped rank ends the job in ${t} s (exit $rc) naming rank 1; $last still loads"
            unstuck_note dd_stop.out
        else
            bad "stopped rank: victim '$victim' exit $rc after ${t} s"; tail -5 dd_stop.out
        fi
    fi
    # SIGTERM to every rank (as a scheduler does): the ranks agree to stop after
    # the same iteration, rank 0 checkpoints it, the run resumes.
    mpirun_ -np 2 "$dpt" train dd.conf --set num_workers=1 --set output_dir=dd_term \
        --set total_timesteps=20000000 --set checkpoint_every=0 > dd_term.out 2>&1 &
    mpid=$!
    i=0; while [ "$(cat dd_term/result.jsonl 2>/dev/null | wc -l)" -lt 5 ] && [ $i -lt 200 ]; do sleep 0.1; i=$((i + 1)); done
    for p in $(pgrep -f "output_dir=dd_term" 2>/dev/null); do
        tr '\0' '\n' < /proc/$p/environ 2>/dev/null | grep -q '^OMPI_COMM_WORLD_RANK=' && kill -TERM $p
    done
    wait $mpid; rc=$?
    its=$(rows dd_term/result.jsonl)
    if [ $rc -ne 0 ] && [ -f dd_term/checkpoints/checkpoint-$(printf %08d "$its").safetensors ] &&
       mpirun_ -np 2 "$dpt" train --resume dd_term --set stop_iters=$((its + 2)) --quiet >/dev/null 2>&1 &&
       [ "$(rows dd_term/result.jsonl)" -eq $((its + 2)) ]; then
        ok "SIGTERM to both ranks: checkpoint of iteration $its written, the run resumes under mpirun"
    else
        bad "SIGTERM under mpirun: exit $rc, iterations $its"; tail -3 dd_term.out; ls dd_term/checkpoints
    fi
    # Bitwise resume across ranks.
    mpirun_ -np 2 "$dpt" train dd.conf --set num_workers=1 --set output_dir=dd_mpi_half --set stop_iters=10 --quiet >/dev/null 2>&1
    mpirun_ -np 2 "$dpt" train --resume dd_mpi_half --set stop_iters=0 --quiet >/dev/null 2>&1
    check "ddppo under mpirun -np 2: resume is bitwise" "$cmp" \
        dd_mpi/checkpoints/checkpoint-00000020.safetensors dd_mpi_half/checkpoints/checkpoint-00000020.safetensors
else
    echo "skipped: runs under mpirun (no MPI in this build)"
fi

# ---- supervised on a CSV dataset (made here), with resume ----------------------
awk 'BEGIN { srand(3); print "a,b,c,label";
  for (i = 0; i < 600; i++) { x = rand()*2-1; y = rand()*2-1; z = rand();
    l = (x*x + y*y < 0.5) ? 0 : ((x > 0) ? 1 : 2); printf "%.4f,%.4f,%.4f,%d\n", x, y, z, l } }' > train.csv
awk 'BEGIN { srand(4); print "a,b,c,label";
  for (i = 0; i < 200; i++) { x = rand()*2-1; y = rand()*2-1; z = rand();
    l = (x*x + y*y < 0.5) ? 0 : ((x > 0) ? 1 : 2); printf "%.4f,%.4f,%.4f,%d\n", x, y, z, l } }' > test.csv
cat > sup.conf <<'CONF'
job = supervised
dataset = csv
train_csv = train.csv
test_csv = test.csv
hidden = 32,32
batch_size = 32
num_devices = 2
epochs = 4
lr = 0.01
CONF
# sup_resume NAME [--set ...]: a 4-epoch run, and 2 epochs then --resume for the
# rest; the last checkpoints and the metrics must be identical.
sup_resume() {
    name="$1"; shift
    expect 0 "test accuracy" -- train sup.conf --set output_dir=${name}_full "$@"
    expect 0 "" -- train sup.conf --set output_dir=${name}_half --set stop_iters=2 --quiet "$@"
    expect 0 "" -- train --resume ${name}_half --set stop_iters=0 --quiet
    if "$cmp" ${name}_full/checkpoints/checkpoint-00000004.safetensors \
              ${name}_half/checkpoints/checkpoint-00000004.safetensors >cmp.out 2>&1; then
        ok "supervised ($name): 2+2 epochs with resume equal 4 epochs bitwise"
    else
        bad "supervised ($name) resume differs: $(cat cmp.out)"
    fi
    if [ "$(untimed ${name}_full/result.jsonl)" = "$(untimed ${name}_half/result.jsonl)" ]; then
        ok "supervised ($name): resumed run has identical metrics"
    else
        bad "supervised ($name) resume metrics differ"
    fi
}
sup_resume sup
# Plain SGD: the ps towers update into a second weight arena.
sup_resume sgd --set optimizer=sgd --set lr=0.1
acc=$(tail -1 sup_full/progress.csv | cut -d, -f8)
if awk -v a="$acc" 'BEGIN { exit !(a > 0.8) }'; then ok "supervised csv test accuracy $acc > 0.8"; else bad "supervised accuracy $acc"; fi
# eval from another directory: the data paths were saved absolute.
mkdir -p elsewhere && cd elsewhere || exit 1
expect 0 "200 test samples, loss" -- eval ../sup_full
cd .. || exit 1
cp test.csv moved_test.csv
expect 0 "200 test samples" -- eval sup_full --set test_csv=moved_test.csv
printf 'a,b,c,label\n1,2,x,0\n' > badcell.csv
# Defect 2: a start that fails removes what it created.
expect 2 'line 2, column 3' -- train sup.conf --set train_csv=badcell.csv --set output_dir=sup_bad
expect 2 'nothere.csv' -- train sup.conf --set train_csv=nothere.csv --set output_dir=sup_bad
check "defect 2: a failed start leaves no run directory behind" [ ! -e sup_bad ]
expect 2 'divisible by num_devices' -- train sup.conf --set batch_size=33 --set output_dir=sup_bad
# The built-in spirals dataset.
printf 'job = supervised\ndataset = spirals\nhidden = 64,64\nactivation = tanh\nbatch_size = 128\nlr = 0.01\nepochs = 3\n' > spirals.conf
expect 0 "test accuracy" -- train spirals.conf --set output_dir=spirals
expect 0 "1024 test samples" -- eval spirals
# Frozen variables: an entry that matches none is a config error naming it
# and the model's variables; a resume may change the list (logged), and
# checkpoints name the frozen variables.
expect 2 'frozen: "1" matches no variable (an entry is a name, or a prefix' -- train spirals.conf --set frozen=0,1 --set output_dir=frz_bad
check "a start refused for its frozen list leaves no run directory" [ ! -e frz_bad ]
expect 0 "reached stop_iters" -- train spirals.conf --set frozen=0 --set stop_iters=1 --set output_dir=frz
expect 0 "test accuracy" -- train --resume frz --set frozen=2.weight,4 --set stop_iters=0
check "a resume with another frozen list is logged" grep -q "frozen = 2.weight,4 (was 0)" frz/overrides.log
check "checkpoints name their frozen variables" grep -aq '"frozen":"0.weight,0.bias"' frz/checkpoints/checkpoint-00000001.safetensors
check "a resumed run's checkpoints name its own frozen variables" grep -aq '"frozen":"2.weight,4.weight,4.bias"' frz/checkpoints/checkpoint-00000003.safetensors
# A data_dir that is not there is bad input (exit 2), as the data files
# above; nothing is created.
expect 2 "no_such_data does not exist" -- train spirals.conf \
    --set dataset=fashion_mnist --set data_dir=no_such_data --set output_dir=fm_missing
check "a missing data_dir leaves no run directory" [ ! -e fm_missing ]

# ---- TensorBoard events and dpt plot -------------------------------------------------
check "every run writes TensorBoard events into its directory" ls ppo_full/events.out.tfevents.* spirals/events.out.tfevents.*
expect 0 "tensorboard_dir" -- train --help
expect 0 "" -- train ppo.conf --quiet --set output_dir=ppo_notb --set tensorboard_dir=off --set stop_iters=2
check "tensorboard_dir = off: no events file" [ -z "$(ls ppo_notb | grep tfevents)" ]
expect 0 "" -- train ppo.conf --quiet --set output_dir=ppo_tb --set tensorboard_dir=tb/ppo --set stop_iters=2
check "tensorboard_dir: the events go there, saved absolute" [ -n "$(ls tb/ppo | grep tfevents)" ] &&
    grep -q "^tensorboard_dir = /.*/tb/ppo$" ppo_tb/config.conf
expect 2 "tensorboard_dir $(pwd)/ppo.conf exists and is not a directory" -- train ppo.conf --set output_dir=ppo_tbbad --set tensorboard_dir=ppo.conf
check "a start refused for its tensorboard_dir leaves no run directory" [ ! -e ppo_tbbad ]
svg_ok() { # svg_ok FILE MEANS LABEL...: an SVG document with MEANS curves and these legend labels
    f="$1" n="$2"; shift 2
    [ "$(head -c 4 "$f")" = "<svg" ] && [ "$(tail -1 "$f")" = "</svg>" ] || return 1
    [ "$(grep -c 'class="mean"' "$f")" -eq "$n" ] && [ "$(grep -c 'class="band"' "$f")" -eq "$n" ] || return 1
    grep -q '<text class="title"' "$f" && grep -q 'class="xlabel"' "$f" && grep -q 'class="ylabel"' "$f" || return 1
    for label in "$@"; do grep -qF ">$label</text>" "$f" || return 1; done
    if command -v xmllint >/dev/null 2>&1; then xmllint --noout "$f" || return 1; fi
}
# The folder of a --seeds run: its runs are one group (seeds only differ).
expect 0 "episode_reward_mean of 3 runs in 1 group -> seeds.svg" -- plot seeds -o seeds.svg
check "plot: one curve for the seeds, its legend" svg_ok seeds.svg 1 "ppo CartPole-v1 (seeds 1, 2, 7)"
check "plot: the default x is env steps" grep -q "env steps (timesteps_total)" seeds.svg
# Another lr is another group; any metric, x and band.
expect 0 "" -- train ppo.conf --quiet --set output_dir=ppo_lr --set lr=0.001 --set eval_episodes=0
expect 0 "info/learner/default_policy/policy_loss of 4 runs in 2 groups -> two.svg" -- \
    plot seeds/seed-1 seeds/seed-2 ppo_lr seeds/seed-7 --metric info/learner/default_policy/policy_loss --x iteration --band std -o two.svg
check "plot: two groups, labelled by the key that differs" \
    svg_ok two.svg 2 "lr=0.00025 (seeds 1, 2, 7)" "lr=0.001 (seed 1)"
check "plot: --band std is said in the legend" grep -q "one standard deviation" two.svg
expect 0 "test_accuracy of 1 run in 1 group" -- plot spirals -o sup.svg --x time
check "plot: supervised runs plot test_accuracy" svg_ok sup.svg 1 "supervised spirals (seed 1)"
out=$("$dpt" plot ppo_full -o - 2>/dev/null)
check "plot -o - writes the SVG to standard output" [ "$(printf '%s' "$out" | head -c 4)" = "<svg" ]
expect 0 "usage: dpt plot" -- plot --help
expect 2 "give at least one run directory" -- plot
expect 2 "nothere: No such file or directory" -- plot nothere
expect 2 "ppo.conf is not a directory" -- plot ppo.conf
expect 2 "adir is not a run directory (no result.jsonl) and holds none" -- plot adir
expect 2 'ppo_full has no metric "nope"; its metrics: training_iteration, timesteps_total,' -- plot ppo_full --metric nope
expect 2 "--x must be one of timesteps, iteration, time; got \"epochs\"" -- plot ppo_full --x epochs
expect 2 "--band must be one of minmax, std" -- plot ppo_full --band iqr
expect 2 "unknown option \"--bogus\"" -- plot ppo_full --bogus
expect 2 "-o needs a value" -- plot ppo_full -o
mkdir -p noconf && cp ppo_full/result.jsonl noconf/
expect 2 "noconf has no config.conf" -- plot noconf
mkdir -p badjson && cp ppo_full/config.conf badjson/ && printf '{"a":1}\n{"a":}\n' > badjson/result.jsonl
expect 2 "badjson/result.jsonl:2: byte 6: expected a number" -- plot badjson
mkdir -p norows && cp ppo_full/config.conf norows/ && : > norows/result.jsonl
expect 2 "norows/result.jsonl has no rows yet" -- plot norows
expect 1 "cannot write adir" -- plot ppo_full -o adir

# ---- a user-written env (examples/custom_env) loaded as a plug-in ------------------
if [ -n "$plugin" ] && [ -f "$plugin" ]; then
    # The plug-in path is relative to the config file, and saved absolute.
    mkdir -p plugdir && cp "$plugin" plugdir/libcorridor.so
    printf 'job = ppo\nenv = libcorridor.so\nnum_envs_per_worker = 8\nsgd_minibatch_size = 256\nlr = 3e-4\ntotal_timesteps = 40960\neval_episodes = 5\n' > plugdir/plug.conf
    expect 0 "evaluation: greedy policy, 5 episodes" -- train plugdir/plug.conf --set output_dir=plug
    cd elsewhere || exit 1
    expect 0 "greedy policy, 3 episodes" -- eval ../plug --episodes 3
    cd .. || exit 1
    ret=$(tail -1 plug/progress.csv | cut -d, -f6)
    if awk -v r="$ret" 'BEGIN { exit !(r > 0.5) }'; then ok "plug-in env learned: return $ret"; else bad "plug-in env return $ret"; fi
    printf 'job = ppo\nenv = ./nothere.so\n' > noplug.conf
    expect 2 "nothere.so" -- train noplug.conf
    # A path with a slash, relative to the working directory (--set) or absolute.
    expect 0 "greedy policy, 2 episodes" -- train plugdir/plug.conf --set env=plugdir/libcorridor.so \
        --set total_timesteps=2048 --set eval_episodes=2 --set output_dir=plug_rel
    expect 0 "greedy policy, 2 episodes" -- train plugdir/plug.conf --set "env=$PWD/plugdir/libcorridor.so" \
        --set total_timesteps=2048 --set eval_episodes=2 --set output_dir=plug_abs
    check "the relative plug-in path is saved absolute" \
        grep -q "^env = $PWD/plugdir/libcorridor.so\$" plug_rel/config.conf
else
    echo "skipped: plug-in env (not built)"
fi

# ---- MinAtar: a built-in name with a slash, a CNN policy ------------------------------
ex="$(dirname "$0")/../examples"
printf 'job = ppo\nenv = MinAtar/Breakout-v1\nnetwork = conv(8,k=2,pad=same) relu avgpool(2) flatten dense(32) relu\npolicy_hidden = 32\nnum_envs_per_worker = 8\nrollout_fragment_length = 32\nsgd_minibatch_size = 64\ntotal_timesteps = 1024\neval_episodes = 2\n' > mn.conf
expect 0 "greedy policy, 2 episodes" -- train mn.conf --set output_dir=mn
check "config.conf keeps the MinAtar name as it is" grep -q '^env = MinAtar/Breakout-v1$' mn/config.conf
check "config.conf lists MinAtar's parameters" grep -q '^env_config.sticky_action_prob = 0.1$' mn/config.conf
expect 0 "greedy policy, 2 episodes" -- eval mn --episodes 2
expect 2 "env plug-in .*MinAtar/Pong-v1: no such file, and no built-in env has that name" \
    -- train mn.conf --set env=MinAtar/Pong-v1 --set output_dir=mn_bad
# The MinAtar examples start (one iteration each, small batches): PPO on each
# game, APPO, and the CNN with the LSTM. Not in the sanitizer builds, where
# these convolutions take minutes (the small run above covers the code).
if [ -n "$DPT_TEST_SANITIZE" ]; then
    echo "skipped: the MinAtar examples ($DPT_TEST_SANITIZE sanitizer build)"
else
    for f in "$ex"/minatar_*_ppo.conf; do
        expect 0 "stochastic policy, 1 episodes" -- train "$f" --set stop_iters=1 --set num_envs_per_worker=16 \
            --set rollout_fragment_length=32 --set sgd_minibatch_size=256 --set eval_episodes=1 \
            --set "output_dir=ex_$(basename "$f" .conf)"
    done
    expect 0 "stochastic policy, 1 episodes" -- train "$ex/minatar_breakout_appo.conf" --set stop_iters=1 \
        --set num_envs_per_worker=16 --set train_batch_size=512 --set min_sample_timesteps_per_iteration=512 \
        --set eval_episodes=1 --set output_dir=ex_minatar_breakout_appo
    expect 0 "stochastic policy, 1 episodes" -- train "$ex/minatar_breakout_ppo.conf" --set stop_iters=1 \
        --set num_envs_per_worker=16 --set rollout_fragment_length=32 --set sgd_minibatch_size=256 \
        --set use_lstm=true --set max_seq_len=8 --set eval_episodes=1 --set output_dir=ex_mn_lstm
fi

# ---- env_config: the parameters of an env -------------------------------------------
printf 'job = ppo\nenv = RepeatPrevious-v0\nnum_envs_per_worker = 4\ntotal_timesteps = 1024\neval_episodes = 2\n' > rp.conf
expect 0 "mean length 100.0" -- train rp.conf --set env_config.k=3 --set output_dir=rp
check "config.conf names the given env_config.k = 3" \
    grep -q '^env_config.k = 3$' rp/config.conf
check "config.conf names the default env_config.num_tokens = 2" grep -q '^env_config.num_tokens = 2$' rp/config.conf
check "the checkpoint records env_config k=3,num_tokens=2" \
    grep -q '"env_config":"k=3,num_tokens=2"' rp/checkpoints/checkpoint-00000002.safetensors
expect 0 "greedy policy, 2 episodes" -- eval rp --episodes 2
expect 2 'env_config.kk: env "RepeatPrevious-v0" has no such parameter (its parameters: num_tokens, k)' \
    -- train rp.conf --set env_config.kk=3 --set output_dir=rp_bad
check "an unknown env_config key leaves no run directory" [ ! -e rp_bad ]
expect 2 'env_config.k = 100 is out of range .0, 99. (env "RepeatPrevious-v0")' \
    -- train rp.conf --set env_config.k=100 --set output_dir=rp_bad
cp rp.conf rp_type.conf && printf 'env_config.num_tokens = three\n' >> rp_type.conf
expect 2 'rp_type.conf:6: env_config.num_tokens expects an integer, got "three"' -- train rp_type.conf
expect 2 '"env_config.k-1": after env_config. comes a parameter name' -- train rp.conf --set env_config.k-1=2
expect 2 'env "CartPole-v1" has no such parameter (it takes no parameters)' -- train ok.conf --set env_config.k=3
expect 2 'key env_config.k does not apply to job supervised' -- train spirals.conf --set env_config.k=3
expect 2 'these keys cannot change: env_config.k (3, now 4)' -- train --resume rp --set env_config.k=4
check "a refused env_config change leaves the run as it was" grep -q '^env_config.k = 3$' rp/config.conf

# ---- a plug-in env with 100 observations, 40 actions and parameters -------------------
if [ -n "$wide" ] && [ -f "$wide" ]; then
    printf 'job = ppo\nenv = %s\nnum_envs_per_worker = 4\nrollout_fragment_length = 64\nsgd_minibatch_size = 64\ntotal_timesteps = 512\neval_episodes = 2\n' "$wide" > wide.conf
    expect 0 "evaluation: greedy policy, 2 episodes" -- train wide.conf --set output_dir=wide
    check "config.conf of the plug-in names its defaults" grep -q '^env_config.obs_dim = 100$' wide/config.conf
    check "the checkpoint records obs_dim 100 and action_dim 40" \
        sh -c "grep -q '\"obs_dim\":\"100\"' wide/checkpoints/*.safetensors && grep -q '\"action_dim\":\"40\"' wide/checkpoints/*.safetensors"
    expect 0 "greedy policy, 2 episodes" -- eval wide --episodes 2
    expect 0 "evaluation: greedy policy" -- train wide.conf --set env_config.obs_dim=300 --set env_config.scale=0.5 --set output_dir=wide300
    check "env_config.obs_dim = 300 reaches the plug-in (the policy takes 300 inputs)" \
        grep -q '"obs_dim":"300"' wide300/checkpoints/checkpoint-00000002.safetensors
    expect 2 'env_config.obs_dim = 0 is out of range .1, 4096. (env "Wide-v0")' -- train wide.conf --set env_config.obs_dim=0
    expect 2 'env_config.scale expects a finite number, got "big" (env "Wide-v0")' -- train wide.conf --set env_config.scale=big
else
    echo "skipped: wide plug-in env (not built)"
fi

# ---- examples/embed_train.c: PPO through dpt/train.h alone, capped -----------------
if [ -n "$embed" ] && [ -x "$embed" ]; then
    out=$("$embed" 20480 2>&1); rc=$?
    if [ $rc -eq 0 ] && printf '%s\n' "$out" | grep -q "after 20480 steps: mean return"; then
        ok "embed_train (20480 steps): $(printf '%s\n' "$out" | tail -1)"
    else
        bad "embed_train: exit $rc"; printf '%s\n' "$out" | tail -3
    fi
else
    echo "skipped: embed_train (not built)"
fi

# ---- the Fashion-MNIST job for real, when Debian's dataset package is installed --
if [ -f /usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz ] &&
   "$dpt" info | grep -q "^  zlib   yes"; then
    expect 0 "" -- train "$(dirname "$0")/../examples/fashion_mnist_mlp.conf" \
        --set epochs=1 --set output_dir=fmnist --quiet
    acc=$(tail -1 fmnist/progress.csv | cut -d, -f8)
    if awk -v a="$acc" 'BEGIN { exit !(a > 0.82) }'; then
        ok "fashion-mnist: one epoch reaches test accuracy $acc > 0.82"
    else
        bad "fashion-mnist: test accuracy $acc after one epoch"
    fi
    expect 0 "10000 test samples" -- eval fmnist
else
    echo "skipped: Fashion-MNIST job (install dataset-fashion-mnist; needs zlib)"
fi

echo "$passes passed, $fails failed"
[ "$fails" -eq 0 ]
