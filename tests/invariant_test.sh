#!/bin/sh
# reduction_order = invariant through `dpt train`: the final checkpoints
# (weights and optimizer state) are bitwise equal whatever the device and
# rank counts, and a run resumed with another device count continues as
# the uninterrupted one; the fast order gives other bits (so the
# comparisons can tell); the rules of the keys are refused with exit 2.
#
#   supervised, spirals, batch 40 in chunks of 8 (5 chunks: 3 devices hold
#   2, 2, 1 and 4 devices 2, 1, 1, 1): 1, 2, 3 and 4 devices (ps), 3
#   (replicated); under mpirun 2 ranks x 2 devices, 4 ranks x 1 and 3 x 1;
#   checkpointed with 2 devices after 2 epochs, resumed with 3.
#   ppo, CartPole, 8 envs, minibatches of 64 in chunks of 16: 1, 2 and 4
#   devices; 2 devices resumed with 4.
#   ddppo, CartPole, 8 envs: 1 x 8, 2 x 4, 4 x 2 and 8 x 1 worker threads; under
#   mpirun 2 ranks x 4 envs and 2 ranks x 2 workers x 2 envs (weights and
#   optimizer state compared: the worker states differ by layout); 2 x 4
#   resumed as 4 x 2, and 1 x 8 resumed by mpirun 2 ranks x 4.
#
# usage: invariant_test.sh DPT CKPT_COMPARE MPIRUN WORKDIR
# The mpirun cases are skipped (and say so) when the build has no MPI or
# there is no mpirun.
dpt="$1" cmp="$2" mpirun="$3" work="$4"
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 1
passes=0 fails=0
ok() { echo "ok   $*"; passes=$((passes + 1)); }
bad() { echo "FAIL $*"; fails=$((fails + 1)); }
mpi=0
if "$dpt" info | grep -q "^  mpi    yes" && [ -n "$mpirun" ] && command -v "$mpirun" >/dev/null 2>&1; then
    mpi=1
fi

# run NAME CONFIG [--set ...]: a run into directory NAME; fails the test
# when it does not finish.
run() {
    name="$1" conf="$2"
    shift 2
    out=$("$dpt" train "$conf" --quiet --set output_dir="$name" "$@" 2>&1) ||
        { bad "$name: exit $?: $(printf '%s\n' "$out" | tail -2)"; return 1; }
}
mpi_run() {
    np="$1" name="$2" conf="$3"
    shift 3
    out=$("$mpirun" --oversubscribe -np "$np" "$dpt" train "$conf" --quiet \
        --set output_dir="$name" "$@" 2>&1) ||
        { bad "$name: mpirun -np $np: exit $?: $(printf '%s\n' "$out" | tail -2)"; return 1; }
}
# same A B WHAT [--weights]: A's and B's final checkpoints are bitwise
# identical (--weights: their weights and optimizer state; DD-PPO runs that
# split the envs differently save different worker states).
same() {
    if "$cmp" $4 "$1" "$2" >/dev/null 2>&1; then
        ok "$3: bitwise equal"
    else
        bad "$3: the checkpoints differ: $("$cmp" $4 "$1" "$2" 2>&1 | head -1)"
    fi
}
# differs A B WHAT [--weights]: the fast order's runs end with other bits
# (so that the comparisons can tell).
differs() {
    if "$cmp" $4 "$1" "$2" >/dev/null 2>&1; then
        bad "$3: the same bits (the comparisons cannot tell)"
    else
        ok "$3: differ"
    fi
}
# refused CONFIG WHAT PATTERN ARGS...: exit 2 naming the problem, nothing
# written.
refused() {
    conf="$1" what="$2" pattern="$3"
    shift 3
    out=$("$dpt" train "$conf" --set output_dir=bad "$@" 2>&1); rc=$?
    if [ $rc -eq 2 ] && printf '%s\n' "$out" | grep -q -- "$pattern" && [ ! -e bad ]; then
        ok "$what: refused (exit 2)"
    else
        bad "$what: exit $rc, or no \"$pattern\": $out"
    fi
}

printf 'job = supervised\ndataset = spirals\nspirals_points = 400\nhidden = 16,16\n' > sup.conf
printf 'epochs = 3\nbatch_size = 40\ngrad_clip = 0.5\nseed = 4\n' >> sup.conf
printf 'reduction_order = invariant\nreduction_chunk = 8\n' >> sup.conf
last=checkpoints/checkpoint-00000003.safetensors

run s1 sup.conf --set num_devices=1
for d in 2 3 4; do
    run s$d sup.conf --set num_devices=$d && same s1/$last s$d/$last "supervised, $d devices against 1"
done
run r3 sup.conf --set num_devices=3 --set towers_mode=replicated &&
    same s1/$last r3/$last "supervised, 3 replicated devices against 1 ps"

# A network with batch norm (statistics of each chunk) and dropout (keyed by
# each row's place in the epoch's order).
sed 's/^hidden = .*/network = dense(16) batchnorm relu dropout(0.2) dense(2)/' sup.conf > bn.conf
run bn1 bn.conf --set num_devices=1 && run bn3 bn.conf --set num_devices=3 &&
    same bn1/$last bn3/$last "supervised with batch norm and dropout, 3 devices against 1"

# Checkpointed with 2 devices after epoch 2 (the run's last checkpoint
# removed, as if it had stopped there), resumed with 3.
run res sup.conf --set num_devices=2 && rm res/$last &&
    if out=$("$dpt" train --resume res --set num_devices=3 --quiet 2>&1); then
        same s2/$last res/$last "supervised, 2 devices resumed with 3 against 2 throughout"
        grep -q "num_devices = 3 (was 2)" res/overrides.log ||
            bad "the resume's overrides.log does not record num_devices"
    else
        bad "the resume with 3 devices: $(printf '%s\n' "$out" | tail -2)"
    fi

if [ $mpi -eq 1 ]; then
    mpi_run 2 m22 sup.conf --set num_devices=2 &&
        same s1/$last m22/$last "supervised, mpirun 2 ranks x 2 devices against 1 device"
    mpi_run 4 m41 sup.conf --set num_devices=1 &&
        same s1/$last m41/$last "supervised, mpirun 4 ranks x 1 device against 1 device"
    mpi_run 3 m31 sup.conf --set num_devices=1 &&
        same s1/$last m31/$last "supervised, mpirun 3 ranks x 1 device against 1 device"
else
    echo "skip the mpirun cases: this build has no MPI or there is no mpirun"
fi

# PPO on CartPole: 8 envs, minibatches of 64 in chunks of 16; 1, 2 and 4
# devices (each stepping its share of the envs) collect the same rollouts
# and end with the same bits; 2 devices resumed with 4 continue as 2.
printf 'job = ppo\nenv = CartPole-v1\nnum_envs_per_worker = 8\nrollout_fragment_length = 32\n' > ppo.conf
printf 'sgd_minibatch_size = 64\nnum_sgd_iter = 2\ntotal_timesteps = 1536\ngrad_clip = 0.5\n' >> ppo.conf
printf 'reduction_order = invariant\nreduction_chunk = 16\nseed = 5\ncheckpoint_every = 1\n' >> ppo.conf
plast=checkpoints/checkpoint-00000006.safetensors
run p1 ppo.conf --set num_devices=1
for d in 2 4; do
    run p$d ppo.conf --set num_devices=$d && same p1/$plast p$d/$plast "ppo, $d devices against 1"
done
run pres ppo.conf --set num_devices=2 && rm pres/$plast pres/checkpoints/checkpoint-00000005.safetensors &&
    if out=$("$dpt" train --resume pres --set num_devices=4 --quiet 2>&1); then
        same p2/$plast pres/$plast "ppo, 2 devices resumed with 4 after iteration 4 against 2 throughout"
    else
        bad "the ppo resume with 4 devices: $(printf '%s\n' "$out" | tail -2)"
    fi
sed 's/^reduction_order = invariant/reduction_order = fast/' ppo.conf > pfast.conf
run pf1 pfast.conf --set num_devices=1 && run pf2 pfast.conf --set num_devices=2 &&
    differs pf1/$plast pf2/$plast "ppo, fast order: 1 and 2 devices"
refused ppo.conf "ppo with an LSTM" "feed-forward" --set use_lstm=true

# DD-PPO on CartPole: 8 envs as 1 x 8, 2 x 4, 4 x 2 and 8 x 1 worker
# threads (8 x 1: 32 rows per worker, fewer than a minibatch), and (mpirun)
# as 2 ranks x 4 envs and 2 ranks x 2 workers x 2 envs, global minibatches
# of 64 in chunks of 8.
printf 'job = ddppo\nenv = CartPole-v1\nrollout_fragment_length = 32\nsgd_minibatch_size = 64\n' > dd.conf
printf 'num_sgd_iter = 2\ntotal_timesteps = 1536\ngrad_clip = 0.5\nsync_frac = 1\n' >> dd.conf
printf 'reduction_order = invariant\nreduction_chunk = 8\nseed = 5\ncheckpoint_every = 1\n' >> dd.conf
run d1x8 dd.conf --set num_workers=1 --set num_envs_per_worker=8
for wk in 2x4 4x2 8x1; do
    run d$wk dd.conf --set num_workers=${wk%x*} --set num_envs_per_worker=${wk#*x} &&
        same d1x8/$plast d$wk/$plast "ddppo, $wk workers x envs against 1 x 8" --weights
done
if [ $mpi -eq 1 ]; then
    mpi_run 2 dm2x4 dd.conf --set num_workers=1 --set num_envs_per_worker=4 &&
        same d1x8/$plast dm2x4/$plast "ddppo, mpirun 2 ranks x 4 envs against 1 x 8" --weights
    mpi_run 2 dm2x2x2 dd.conf --set num_workers=2 --set num_envs_per_worker=2 &&
        same d1x8/$plast dm2x2x2/$plast "ddppo, mpirun 2 ranks x 2 workers x 2 envs against 1 x 8" \
            --weights
fi
# Resumed with another split of the same 8 envs: 2 x 4 after iteration 4
# as 4 x 2 (and, under mpirun, 1 x 8 as 2 ranks x 4) continue as 1 x 8;
# another number of envs in all is refused.
# resume_as FROM DIR WHAT [mpirun NP] ARGS...: FROM's run cut after iteration 4, resumed
resume_as() {
    from="$1" dir="$2" what="$3"
    shift 3
    launch=""
    if [ "$1" = mpirun ]; then
        launch="$mpirun --oversubscribe -np $2"
        shift 2
    fi
    rm -rf "$dir" && cp -r "$from" "$dir" &&
        rm "$dir/checkpoints/checkpoint-00000005.safetensors" "$dir/$plast" &&
        if out=$($launch "$dpt" train --resume "$dir" --quiet "$@" 2>&1); then
            same d1x8/$plast "$dir/$plast" "$what" --weights
        else
            bad "$what: $(printf '%s\n' "$out" | tail -2)"
        fi
}
resume_as d2x4 dres4x2 "ddppo, 2 x 4 resumed as 4 x 2 against 1 x 8" \
    --set num_workers=4 --set num_envs_per_worker=2
[ $mpi -eq 1 ] && resume_as d1x8 dresm "ddppo, 1 x 8 resumed by mpirun 2 ranks x 4 against 1 x 8" \
    mpirun 2 --set num_envs_per_worker=4
rm -rf dbad && cp -r d2x4 dbad && rm dbad/$plast
out=$("$dpt" train --resume dbad --set num_workers=3 --set num_envs_per_worker=2 2>&1); rc=$?
[ $rc -eq 2 ] && printf '%s\n' "$out" | grep -q "not the envs in all" &&
    "$cmp" d2x4/checkpoints/checkpoint-00000005.safetensors dbad/checkpoints/checkpoint-00000005.safetensors >/dev/null &&
    ok "ddppo resumed with 6 envs instead of 8: refused (exit 2), the run's checkpoints kept" ||
    bad "ddppo resumed with 6 envs: exit $rc: $out"
sed 's/^reduction_order = invariant/reduction_order = fast/' dd.conf > ddfast.conf
run df1 ddfast.conf --set num_workers=1 --set num_envs_per_worker=8 --set sgd_minibatch_size=32 &&
    run df2 ddfast.conf --set num_workers=2 --set num_envs_per_worker=4 --set sgd_minibatch_size=32 &&
    differs df1/$plast df2/$plast "ddppo, fast order: 1 x 8 and 2 x 4" --weights
refused dd.conf "ddppo with preemption" "sync_frac = 1" --set sync_frac=0.6

# The fast order: 1 and 2 devices end with other bits.
sed 's/^reduction_order = invariant/reduction_order = fast/' sup.conf > fast.conf
run f1 fast.conf --set num_devices=1 && run f2 fast.conf --set num_devices=2 &&
    differs f1/$last f2/$last "supervised, fast order: 1 and 2 devices"
# ... and a resume with another device count is refused there.
if out=$("$dpt" train --resume f2 --set num_devices=3 2>&1); then
    bad "fast order: a resume with another num_devices was accepted"
else
    rc=$?
    printf '%s\n' "$out" | grep -q "num_devices" && [ $rc -eq 2 ] &&
        ok "fast order: a resume with another num_devices is refused (exit 2)" ||
        bad "fast order resume: exit $rc: $out"
fi

refused sup.conf "a batch that is not whole chunks" "multiple of reduction_chunk" --set batch_size=44
refused sup.conf "fewer chunks than devices" "every device needs a chunk" --set num_devices=6
refused sup.conf "async towers" "ps or replicated" --set towers_mode=async
refused sup.conf "reduce_op = sum" "reduce_op = avg" --set reduce_op=sum
refused sup.conf "a batch larger than the training set" "fewer than batch_size" --set batch_size=800

echo "$passes passed, $fails failed"
[ $fails -eq 0 ]
