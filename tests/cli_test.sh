#!/bin/sh
# Runs the built `dpt` binary and checks exit codes, messages, training runs,
# checkpoints and resume.
# usage: cli_test.sh PATH_TO_DPT PATH_TO_CKPT_COMPARE WORK_DIR [ENV_PLUGIN]
dpt="$1" cmp="$2" work="$3" plugin="$4"
fails=0 passes=0
rm -rf "$work" && mkdir -p "$work" || exit 1
cd "$work" || exit 1

ok()   { echo "ok   $*"; passes=$((passes + 1)); }
bad()  { echo "FAIL $*"; fails=$((fails + 1)); }
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

# ---- basics ----------------------------------------------------------------
expect 0 "features:"            -- info
expect 0 "gemm:"                -- info
expect 2 "unexpected argument"  -- info extra
expect 0 "usage: dpt COMMAND"   -- --help
expect 2 "usage: dpt COMMAND"   --
expect 2 "unknown command \"nope\"" -- nope
expect 0 "dpt "                 -- --version
expect 0 "usage: dpt demo"      -- demo --help
expect 2 "unknown argument"     -- demo --bogus
expect 2 "--epochs must be"     -- demo --epochs 0
expect 0 "test accuracy"        -- demo --epochs 2 --quiet
expect 2 "unknown benchmark"    -- bench nope
expect 0 "allreduce"            -- bench --help
expect 2 "rounds 1..101"         -- bench towers --rounds 0
expect 0 '"mode":"ps","devices":2,"batch":32' -- bench towers --mode ps --batch 32 --seconds 0.2 --rounds 3 --json
expect 0 "sgd_minibatch_size"   -- train --help
expect 2 "CONFIG file or --resume" -- train
expect 0 "usage: dpt eval"      -- eval --help

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
expect 2 'job must be one of supervised|ppo|ddppo, got "sarsa"' -- train choice.conf
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

# ---- PPO: train, checkpoint, eval, bitwise resume ----------------------------
cat > ppo.conf <<'CONF'
job = ppo
env = CartPole-v1
num_envs_per_worker = 4
rollout_fragment_length = 64
sgd_minibatch_size = 64
total_timesteps = 5120
checkpoint_every = 5
lr_schedule = linear
lr = 0.00025
CONF
expect 0 "" -- train ppo.conf --quiet --set output_dir=ppo_full
expect 0 "evaluation" -- train ppo.conf --set output_dir=ppo_full2 --set eval_episodes=3
if [ -f ppo_full/checkpoints/checkpoint-00000020.safetensors ] && [ -f ppo_full/result.jsonl ] &&
   [ "$(wc -l < ppo_full/result.jsonl)" -eq 20 ] && [ "$(wc -l < ppo_full/progress.csv)" -eq 21 ]; then
    ok "ppo run wrote 20 metrics rows, a csv header and checkpoint 20"
else
    bad "ppo run outputs"; ls -R ppo_full | head
fi
# Half the steps, then resume for the rest: same weights, same metrics.
expect 0 "" -- train ppo.conf --quiet --set output_dir=ppo_half --set stop_iters=10
expect 0 "" -- train --resume ppo_half --quiet --set stop_iters=0
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
expect 0 "mean return" -- eval ppo_full/checkpoints/checkpoint-00000020.safetensors --episodes 2
# A corrupted newest checkpoint: resume falls back to the previous one.
cp -r ppo_half ppo_corrupt
printf 'garbage' | dd of=ppo_corrupt/checkpoints/checkpoint-00000020.safetensors bs=1 seek=200 conv=notrunc 2>/dev/null
expect 0 "skipping checkpoint" -- train --resume ppo_corrupt --set stop_iters=0
expect 1 "checksum\|corrupt\|malformed" -- eval ppo_corrupt/checkpoints/checkpoint-00000020.safetensors.bak
head -c 100 ppo_full/checkpoints/checkpoint-00000010.safetensors > trunc.safetensors
expect 1 "trunc.safetensors" -- eval trunc.safetensors ppo.conf
expect 2 "ok_missing_dir/config.conf: cannot open" -- train --resume ok_missing_dir
mkdir -p empty_run && cp ppo.conf empty_run/config.conf
expect 1 "no valid checkpoint" -- train --resume empty_run
# Resuming with a config that changes the results is refused.
expect 2 "different config" -- train --resume ppo_half --set lr=0.1

# ---- DD-PPO with threads --------------------------------------------------------
cat > dd.conf <<'CONF'
job = ddppo
env = CartPole-v1
num_workers = 2
num_envs_per_worker = 2
rollout_fragment_length = 64
sgd_minibatch_size = 64
total_timesteps = 5120
checkpoint_every = 10
eval_episodes = 2
CONF
expect 0 "identical weights" -- train dd.conf --set output_dir=dd_full
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

# ---- DD-PPO across MPI ranks (when this build has MPI) ---------------------------
if "$dpt" info | grep -q "^  mpi    yes" && command -v mpirun >/dev/null 2>&1; then
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    # Open MPI's own leaks are not dpt's (sanitizer builds); local transports only.
    mpienv="ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0 OMPI_MCA_btl=self,vader"
    for layout in "1 mpi" "2 hier"; do
        set -- $layout
        out=$(env $mpienv mpirun --oversubscribe -np 2 "$dpt" train dd.conf --set num_workers=$1 \
              --set output_dir=dd_$2 2>&1); rc=$?
        workers=$((2 * $1))
        if [ $rc -eq 0 ] && printf '%s\n' "$out" | grep -q "$workers DD-PPO workers hold identical weights" &&
           [ "$(wc -l < dd_$2/result.jsonl)" -eq $((5120 / (256 * $1))) ]; then
            ok "ddppo under mpirun -np 2 ($2, $workers workers): identical weights, rank 0 wrote the metrics"
        else
            bad "ddppo under mpirun ($2): exit $rc"; printf '%s\n' "$out" | tail -5
        fi
    done
else
    echo "skipped: DD-PPO under mpirun (no MPI in this build)"
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
expect 0 "accuracy" -- eval sup_full/checkpoints/checkpoint-00000004.safetensors
printf 'a,b,c,label\n1,2,x,0\n' > badcell.csv
expect 1 'line 2, column 3' -- train sup.conf --set train_csv=badcell.csv --set output_dir=sup_bad
expect 1 'nothere.csv' -- train sup.conf --set train_csv=nothere.csv --set output_dir=sup_bad
expect 2 'divisible by num_devices\|batch_size' -- train sup.conf --set batch_size=33 --set output_dir=sup_bad

# ---- a user-written env (examples/custom_env) loaded as a plug-in ------------------
if [ -n "$plugin" ] && [ -f "$plugin" ]; then
    printf 'job = ppo\nenv = %s\nnum_envs_per_worker = 8\nsgd_minibatch_size = 256\nlr = 3e-4\ntotal_timesteps = 40960\neval_episodes = 5\n' "$plugin" > plug.conf
    expect 0 "episodes of Corridor-v0" -- train plug.conf --set output_dir=plug
    expect 0 "Corridor-v0, 3 episodes" -- eval plug/checkpoints/checkpoint-00000040.safetensors --episodes 3
    ret=$(tail -1 plug/progress.csv | cut -d, -f6)
    if awk -v r="$ret" 'BEGIN { exit !(r > 0.5) }'; then ok "plug-in env learned: return $ret"; else bad "plug-in env return $ret"; fi
    printf 'job = ppo\nenv = ./nothere.so\n' > noplug.conf
    expect 2 "nothere.so" -- train noplug.conf
else
    echo "skipped: plug-in env (not built)"
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
    expect 0 "10000 test samples" -- eval fmnist/checkpoints/checkpoint-00000001.safetensors
else
    echo "skipped: Fashion-MNIST job (install dataset-fashion-mnist; needs zlib)"
fi

echo "$passes passed, $fails failed"
[ "$fails" -eq 0 ]
