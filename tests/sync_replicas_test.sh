#!/bin/sh
# The sync_replicas job through the dpt command: bitwise reproducible runs
# and resume without backups, a run with backups, evaluation of its
# checkpoints, the bags task with sparse gradients and EMA to its loss bar,
# config errors (exit 2), and Fashion-MNIST through the example config
# (>= 88%) when Debian's dataset package is installed. Under a sanitizer
# (SANITIZE not empty) the bags task is shrunk (no quality bar) and the
# Fashion-MNIST run is skipped: they are minutes there.
# usage: sync_replicas_test.sh PATH_TO_DPT PATH_TO_CKPT_COMPARE WORK_DIR [MPIEXEC [SANITIZE]]
dpt="$1" cmp="$2" work="$3" mpiexec="$4" sanitize="$5"
examples="$(cd "$(dirname "$0")/../examples" && pwd)"
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 1
passes=0 fails=0
ok()   { echo "ok   $*"; passes=$((passes + 1)); }
bad()  { echo "FAIL $*"; fails=$((fails + 1)); }
check() { # check "description" COMMAND...
    d="$1"; shift
    if "$@" >/dev/null 2>&1; then ok "$d"; else bad "$d"; fi
}
expect() { # expect CODE PATTERN -- ARGS...: dpt exits CODE and prints PATTERN
    code="$1" pat="$2"; shift 3
    out=$("$dpt" "$@" 2>&1); rc=$?
    if [ "$rc" -eq "$code" ] && { [ -z "$pat" ] || printf '%s' "$out" | grep -qF -- "$pat"; }; then
        ok "dpt $* (exit $rc)"
    else
        bad "dpt $*: exit $rc, wanted $code with \"$pat\""; printf '%s\n' "$out" | tail -3
    fi
}
rows() { wc -l < "$1" | tr -d ' '; }
untimed() { sed -E 's/"(time_[a-z_]*|samples_per_s|step_time_ms|token_wait_ms|timing_breakdown)":(\{[^}]*\}|[^,}]*),?//g' "$1"; }
metric() { # metric FILE NAME: the value of NAME in the last row of FILE
    tail -1 "$1" | tr ',{}' '\n\n\n' | sed -n "s/^\"$2\"://p" | head -1
}

# ---- spirals, N = R = 3: bitwise, and resumed bitwise -------------------------------
printf 'job = sync_replicas\ndataset = spirals\nspirals_points = 2048\nhidden = 64,64\n' > sp.conf
printf 'batch_size = 96\nepochs = 4\ntotal_num_replicas = 3\nreplicas_to_aggregate = 3\n' >> sp.conf
printf 'optimizer = momentum\nlr = 0.05\nema_decay = 0.9\n' >> sp.conf
expect 0 "" -- train sp.conf --quiet --set output_dir=a
expect 0 "" -- train sp.conf --quiet --set output_dir=b
check "N = R: two runs end with bitwise-identical weights, optimizer and EMA" "$cmp" \
    a/checkpoints/checkpoint-00000004.safetensors b/checkpoints/checkpoint-00000004.safetensors
expect 0 "" -- train sp.conf --quiet --set output_dir=h --set stop_iters=2
expect 0 "" -- train --resume h --quiet --set stop_iters=0
check "N = R: 2 epochs + --resume equal 4 epochs bitwise" "$cmp" \
    a/checkpoints/checkpoint-00000004.safetensors h/checkpoints/checkpoint-00000004.safetensors
if [ "$(untimed a/result.jsonl)" = "$(untimed h/result.jsonl)" ]; then
    ok "N = R: the resumed run has identical metrics"
else
    bad "N = R: resumed metrics differ"
fi
st=$(metric a/result.jsonl stale_gradients_dropped)
gs=$(metric a/result.jsonl global_step)
w0=$(metric a/result.jsonl w0)
if [ "$st" = "0" ] && [ "$gs" = "84" ] && [ "$w0" = "84" ]; then
    ok "N = R: no stale gradients, 84 steps, worker 0 contributed to each"
else
    bad "N = R: stale $st, global_step $gs, w0 $w0"
fi
if grep -q '"test_accuracy_ema"' a/result.jsonl; then
    ok "ema_decay: the EMA's test accuracy is reported"
else
    bad "no test_accuracy_ema"
fi
expect 0 "512 test samples" -- eval a
ema=$(metric a/result.jsonl test_accuracy_ema)
out=$("$dpt" eval a --json --set eval_ema=true 2>&1)
if printf '%s' "$out" | grep -q "\"accuracy\":$ema"; then
    ok "dpt eval --set eval_ema=true scores the EMA ($ema, as the run reported)"
else
    bad "dpt eval with eval_ema: $out (run: $ema)"
fi
expect 2 "eval_ema = true needs ema_decay > 0" -- train sp.conf --set eval_ema=true \
    --set ema_decay=0 --set output_dir=e7

# ---- N < R, set explicitly: each worker computes several gradients a step -------------
expect 0 "total_num_replicas = 2 < replicas_to_aggregate = 3" -- train sp.conf \
    --set total_num_replicas=2 --set output_dir=nr --set epochs=1
gs=$(metric nr/result.jsonl global_step)
if [ "$gs" = "21" ]; then ok "N = 2 < R = 3: every step of the epoch made (21)"; else bad "N < R: global_step $gs"; fi

# ---- backups ---------------------------------------------------------------------------
expect 0 "" -- train sp.conf --quiet --set output_dir=bk \
    --set total_num_replicas=4 --set num_ps=2
gs=$(metric bk/result.jsonl global_step)
if [ "$gs" = "84" ] && grep -q '"ps1":' bk/result.jsonl; then
    ok "N = 4, R = 3: every step made; the placement over 2 services is reported"
else
    bad "backups: global_step $gs"
fi

# ---- a CSV regression (examples/data/friedman1_*.csv) --------------------------------
printf 'job = sync_replicas\ndataset = csv\ntrain_csv = %s/data/friedman1_train.csv\n' "$examples" > csv.conf
printf 'test_csv = %s/data/friedman1_test.csv\nloss = mse\ntarget_columns = y\n' "$examples" >> csv.conf
printf 'hidden = 64,64\nbatch_size = 64\nepochs = 20\ntotal_num_replicas = 3\n' >> csv.conf
printf 'replicas_to_aggregate = 2\nlr = 0.003\n' >> csv.conf
expect 0 "" -- train csv.conf --quiet --set output_dir=csv
r2=$(metric csv/result.jsonl test_r2)
if awk -v r="$r2" 'BEGIN { exit !(r >= 0.7) }'; then
    ok "CSV regression (Friedman #1) with a backup worker: test R^2 $r2 >= 0.7"
else
    bad "CSV regression: test R^2 $r2"
fi
expect 0 "rmse" -- eval csv

# ---- bags: an embedding table trained with sparse gradients --------------------------
printf 'job = sync_replicas\ndataset = bags\nhidden = 64\nbatch_size = 256\nepochs = 3\n' > bags.conf
printf 'optimizer = adam\nlr = 0.01\ntotal_num_replicas = 3\nreplicas_to_aggregate = 2\n' >> bags.conf
if [ -n "$sanitize" ]; then
    expect 0 "" -- train bags.conf --quiet --set output_dir=bags --set bags_rows=4000 \
        --set bags_vocab=20000 --set epochs=1
    r2=$(metric bags/result.jsonl test_r2)
    echo "skipped: the bags quality bar under $sanitize (R^2 $r2 on a shrunk task)"
else
    expect 0 "" -- train bags.conf --quiet --set output_dir=bags
    r2=$(metric bags/result.jsonl test_r2)
    if awk -v r="$r2" 'BEGIN { exit !(r >= 0.85) }'; then
        ok "bags (100k x 64 table, sparse gradients): test R^2 $r2 >= 0.85 after 3 epochs"
    else
        bad "bags: test R^2 $r2 after 3 epochs"
    fi
fi
# A resumed bags run takes the memory of a fresh one (it took 1.6 times as
# much: the checkpoint, and a copy of the model read from it, were held
# beside the trainer they restored). Peak RSS of one epoch fresh, and of one
# epoch resumed after it, by /usr/bin/time; left out under a sanitizer
# (its allocator keeps freed memory).
if [ -z "$sanitize" ] && [ -x /usr/bin/time ]; then
    /usr/bin/time -f %M -o rss_fresh.txt "$dpt" train bags.conf --quiet --set output_dir=bags_rss \
        --set stop_iters=1 > rss.out 2>&1; rc1=$?
    /usr/bin/time -f %M -o rss_resumed.txt "$dpt" train --resume bags_rss --quiet \
        --set stop_iters=2 >> rss.out 2>&1; rc2=$?
    fresh=$(tail -1 rss_fresh.txt) resumed=$(tail -1 rss_resumed.txt)
    if [ $rc1 -eq 0 ] && [ $rc2 -eq 0 ] &&
       awk -v f="$fresh" -v r="$resumed" 'BEGIN { exit !(f > 0 && r <= 1.15 * f) }'; then
        ok "bags: max RSS resumed $resumed KiB, fresh $fresh KiB (at most 1.15 times)"
    else
        bad "bags: max RSS resumed $resumed KiB, fresh $fresh KiB (exit $rc1, $rc2)"
        tail -3 rss.out
    fi
else
    echo "skipped: bags memory of a resume (${sanitize:+under $sanitize}${sanitize:-no /usr/bin/time})"
fi
rows=$(metric bags/result.jsonl rows_touched_per_push)
if awk -v r="$rows" 'BEGIN { exit !(r > 0 && r < 2048) }'; then
    ok "bags: a push carries $rows distinct rows, not the table"
else
    bad "bags: rows per push $rows"
fi
out=$("$dpt" eval bags 2>&1)
if printf '%s' "$out" | grep -q "r2 $(printf '%.4f' "$r2")"; then
    ok "dpt eval of a bags checkpoint gives the run's R^2"
else
    bad "dpt eval bags: $out (run: $r2)"
fi

# ---- config errors -------------------------------------------------------------------------
expect 2 "batch_size 100 must be divisible by replicas_to_aggregate 3" -- train sp.conf \
    --set batch_size=100 --set output_dir=e1
printf 'job = supervised\ndataset = bags\n' > supbags.conf
expect 2 "dataset = bags is for job = sync_replicas" -- train supbags.conf --set output_dir=e2
expect 2 "does not apply to job supervised (it is used by: sync_replicas)" -- train sp.conf \
    --set job=supervised --set output_dir=e3
expect 2 "key model does not apply to job sync_replicas" -- train sp.conf --set model=x.so \
    --set output_dir=e4
expect 2 "loss = mse" -- train bags.conf --set loss=softmax_xent --set output_dir=e5
expect 2 "fewer than batch_size" -- train sp.conf --set spirals_points=64 --set output_dir=e6
if [ -e e1 ] || [ -e e2 ] || [ -e e3 ] || [ -e e4 ] || [ -e e5 ] || [ -e e6 ] || [ -e e7 ]; then
    bad "a refused config left a run directory"
else
    ok "refused configs leave nothing behind"
fi
# ---- under mpirun: rank 0 the service, the other ranks one worker each -----------
if [ -n "$mpiexec" ] && [ -x "$mpiexec" ] && "$dpt" info | grep -q "^  mpi    yes"; then
    mpirun_() { "$mpiexec" --oversubscribe "$@"; }
    printf 'job = sync_replicas\ndataset = spirals\nspirals_points = 4096\nhidden = 64,64\n' > mp.conf
    printf 'activation = tanh\nbatch_size = 64\nepochs = 10\ntotal_num_replicas = 2\n' >> mp.conf
    printf 'replicas_to_aggregate = 2\noptimizer = adam\nlr = 0.01\ncomm_timeout_s = 60\n' >> mp.conf
    expect 0 "" -- train mp.conf --quiet --set output_dir=mp_threads
    out=$(mpirun_ -np 3 "$dpt" train mp.conf --quiet --set output_dir=mp_ranks 2>&1); rc=$?
    acc=$(metric mp_ranks/result.jsonl test_accuracy)
    if [ $rc -eq 0 ] && awk -v a="$acc" 'BEGIN { exit !(a >= 0.85) }'; then
        ok "mpirun -np 3 (1 service + 2 workers): exit 0, test accuracy $acc >= 0.85"
    else
        bad "mpirun -np 3: exit $rc, accuracy $acc"; printf '%s\n' "$out" | tail -3
    fi
    check "N = R = 2: the same job over threads and over mpirun -np 3 ends bitwise equal" "$cmp" \
        mp_threads/checkpoints/checkpoint-00000010.safetensors \
        mp_ranks/checkpoints/checkpoint-00000010.safetensors
    # Dropout's masks are keyed by the global step and the rows' positions,
    # which worker threads and worker ranks both know.
    printf 'job = sync_replicas\ndataset = spirals\nspirals_points = 1024\nbatch_size = 64\n' > md.conf
    printf 'network = dense(32) tanh dropout(0.3) dense(32) tanh\nepochs = 3\n' >> md.conf
    printf 'total_num_replicas = 2\nreplicas_to_aggregate = 2\noptimizer = adam\nlr = 0.01\n' >> md.conf
    expect 0 "" -- train md.conf --quiet --set output_dir=md_threads --set comm_timeout_s=60
    out=$(mpirun_ -np 3 "$dpt" train md.conf --quiet --set output_dir=md_ranks \
        --set comm_timeout_s=60 2>&1) || printf '%s\n' "$out" | tail -3
    check "dropout, N = R = 2: threads and mpirun -np 3 end bitwise equal" "$cmp" \
        md_threads/checkpoints/checkpoint-00000003.safetensors \
        md_ranks/checkpoints/checkpoint-00000003.safetensors
    # Batch normalization: each worker pushes its update of the running
    # statistics with its gradient; the service averages the accepted ones.
    expect 0 "" -- train md.conf --quiet --set output_dir=mb_threads --set comm_timeout_s=60 \
        --set "network=dense(32) bn tanh dense(32) batchnorm(momentum=0.2) tanh"
    out=$(mpirun_ -np 3 "$dpt" train md.conf --quiet --set output_dir=mb_ranks \
        --set "network=dense(32) bn tanh dense(32) batchnorm(momentum=0.2) tanh" \
        --set comm_timeout_s=60 2>&1) || printf '%s\n' "$out" | tail -3
    check "batchnorm, N = R = 2: threads and mpirun -np 3 end bitwise equal" "$cmp" \
        mb_threads/checkpoints/checkpoint-00000003.safetensors \
        mb_ranks/checkpoints/checkpoint-00000003.safetensors
    out=$(mpirun_ -np 2 "$dpt" train mp.conf --set output_dir=mp_bad 2>&1); rc=$?
    if [ $rc -eq 2 ] && printf '%s' "$out" | grep -q "must add up to the 2 ranks" &&
       [ ! -e mp_bad ]; then
        ok "mpirun -np 2 with 1 service and 2 workers: refused (exit 2), nothing written"
    else
        bad "mpirun -np 2, 2 workers: exit $rc"; printf '%s\n' "$out" | tail -3
    fi
    out=$(mpirun_ -np 4 "$dpt" train mp.conf --set num_ps=2 --set grad_clip=1 \
          --set output_dir=mp_bad 2>&1); rc=$?
    if [ $rc -eq 2 ] && printf '%s' "$out" | grep -q "each service would clip only its part" &&
       [ ! -e mp_bad ]; then
        ok "grad_clip with num_ps = 2 under mpirun: refused (exit 2)"
    else
        bad "grad_clip, num_ps = 2 under mpirun: exit $rc"; printf '%s\n' "$out" | tail -3
    fi
    # Two services (ranks 0 and 1) and two workers: the same bits as threads,
    # and a resumed run too (rank 0 hands rank 1 its part of the checkpoint).
    expect 0 "" -- train mp.conf --quiet --set output_dir=ps2_threads --set num_ps=2 --set epochs=4
    mpirun_ -np 4 "$dpt" train mp.conf --quiet --set output_dir=ps2_ranks --set num_ps=2 \
        --set epochs=4 > ps2.log 2>&1
    check "num_ps = 2 under mpirun -np 4 (2 services + 2 workers) ends bitwise as threads" "$cmp" \
        ps2_threads/checkpoints/checkpoint-00000004.safetensors \
        ps2_ranks/checkpoints/checkpoint-00000004.safetensors
    mpirun_ -np 4 "$dpt" train mp.conf --quiet --set output_dir=ps2_half --set num_ps=2 \
        --set epochs=4 --set stop_iters=2 > ps2.log 2>&1
    mpirun_ -np 4 "$dpt" train --resume ps2_half --quiet --set stop_iters=0 >> ps2.log 2>&1
    check "num_ps = 2 under mpirun: 2 epochs + --resume equal 4 epochs bitwise" "$cmp" \
        ps2_threads/checkpoints/checkpoint-00000004.safetensors \
        ps2_half/checkpoints/checkpoint-00000004.safetensors
    # The model is gathered to rank 0 only for an evaluation or a checkpoint:
    # test_interval = checkpoint_every = 5 over 10 epochs makes 2 gathers (its
    # own counter), the same bits as threads.
    expect 0 "" -- train mp.conf --quiet --set output_dir=ps2_threads10 --set num_ps=2
    mpirun_ -np 4 "$dpt" train mp.conf --quiet --set output_dir=ps2_lazy --set num_ps=2 \
        --set test_interval=5 --set checkpoint_every=5 > ps2.log 2>&1
    gathers=$(metric ps2_lazy/result.jsonl model_gathers)
    tests=$(grep -c '"test_loss":[0-9]' ps2_lazy/result.jsonl)
    if [ "$gathers" = "2" ] && [ "$tests" = "2" ]; then
        ok "num_ps = 2, test_interval = checkpoint_every = 5, 10 epochs: 2 gathers, 2 test evaluations"
    else
        bad "num_ps = 2, test_interval = 5: $gathers gathers, $tests evaluations (2 each expected)"
    fi
    check "num_ps = 2 with gathers every 5 epochs ends bitwise as threads" "$cmp" \
        ps2_threads10/checkpoints/checkpoint-00000010.safetensors \
        ps2_lazy/checkpoints/checkpoint-00000010.safetensors
    # A backup rank stopped (SIGSTOP) for two whole epochs: the steps go on without it, its
    # gradients count again once it continues, and the run ends with exit 0.
    (mpirun_ -np 4 "$dpt" train mp.conf --quiet --set output_dir=mp_stop --set total_num_replicas=3 \
        --set spirals_points=65536 --set batch_size=128 --set epochs=8 > mp_stop.log 2>&1
     echo "exit $?" >> mp_stop.log) &
    job=$!
    pid=""
    i=0
    while [ $i -lt 300 ]; do
        i=$((i + 1))
        sleep 0.1
        [ -s mp_stop/result.jsonl ] || continue
        for p in $(pgrep -f "output_dir=mp_stop"); do
            if tr '\0' '\n' < "/proc/$p/environ" 2>/dev/null | grep -qx OMPI_COMM_WORLD_RANK=3; then
                pid=$p
            fi
        done
        [ -n "$pid" ] && break
    done
    if [ -n "$pid" ]; then
        kill -STOP "$pid"
        # The epoch under way when it stopped may still count its last
        # gradients; the two epochs after that have none of them.
        n0=$(rows mp_stop/result.jsonl)
        wait_rows() { j=0; while [ $j -lt 600 ] && [ "$(rows mp_stop/result.jsonl)" -lt "$1" ]; do
                          j=$((j + 1)); sleep 0.1; done; }
        wait_rows $((n0 + 1))
        before=$(metric mp_stop/result.jsonl w2)
        s0=$(metric mp_stop/result.jsonl global_step)
        wait_rows $((n0 + 3))
        during=$(metric mp_stop/result.jsonl w2)
        s1=$(metric mp_stop/result.jsonl global_step)
        kill -CONT "$pid"
        wait $job
        w2=$(metric mp_stop/result.jsonl w2)
        w0=$(metric mp_stop/result.jsonl w0)
        if grep -q "exit 0" mp_stop.log && [ "$before" = "$during" ] && [ "$s1" -gt "$s0" ] &&
           [ "$(metric mp_stop/result.jsonl global_step)" = "4096" ]; then
            ok "a stopped backup rank: steps $s0 -> $s1 while its count stayed at $during; exit 0 (w0 $w0, w2 $w2)"
        else
            bad "stopped backup rank: steps $s0 -> $s1, w2 $before -> $during"; tail -3 mp_stop.log
        fi
    else
        wait $job
        bad "stopped backup rank: rank 3 of the run not found"
    fi
else
    echo "skipped: sync_replicas under mpirun (no MPI in this build or no mpirun)"
fi

# ---- Fashion-MNIST through the example ------------------------------------------------
if [ -n "$sanitize" ]; then
    echo "skipped: Fashion-MNIST under $sanitize"
elif [ -f /usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz ] &&
   "$dpt" info | grep -q "^  zlib   yes"; then
    expect 0 "" -- train "$examples/fashion_mnist_sync_replicas.conf" \
        --set output_dir=fmnist --quiet
    acc=$(metric fmnist/result.jsonl test_accuracy)
    if awk -v a="$acc" 'BEGIN { exit !(a >= 0.88) }'; then
        ok "examples/fashion_mnist_sync_replicas.conf (N = 5, R = 4): test accuracy $acc >= 0.88"
    else
        bad "fashion-mnist sync replicas: test accuracy $acc"
    fi
else
    echo "skipped: Fashion-MNIST (install dataset-fashion-mnist; needs zlib)"
fi

echo "$passes passed, $fails failed"
[ "$fails" -eq 0 ]
