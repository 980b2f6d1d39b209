#!/bin/sh
# dpt's supervised regression against scikit-learn's MLPRegressor on the same
# split: examples/friedman_regression.conf (Friedman #1, 4000 training and
# 1000 test rows, a 64-64 ReLU MLP, Adam at lr 1e-3, batches of 64, 200
# epochs, mean squared error) and MLPRegressor with the same settings (no L2
# penalty, no early stopping), for SEEDS seeds each; the test rmse and wall
# time (sklearn's includes starting Python and reading the CSV files) of
# every run, and the median rmse.
#
#   bench/compare_regression_sklearn.sh [PYTHON] [SEEDS]
#
# PYTHON is an interpreter with numpy and scikit-learn (default python3);
# without them the script prints "skipped: no scikit-learn" and exits 0.
# Needs a built ./build/dpt (or DPT=path/to/dpt).
py="${1:-python3}" seeds="${2:-3}"
here=$(dirname "$0")
root="$here/.."
dpt="${DPT:-./build/dpt}"
"$py" -c "import numpy, sklearn" 2>/dev/null || { echo "skipped: no scikit-learn ($py cannot import numpy and sklearn)"; exit 0; }
[ -x "$dpt" ] || { echo "build dpt first (make), or set DPT=path/to/dpt"; exit 2; }
dir=$(mktemp -d) || exit 1
trap 'rm -rf "$dir"' EXIT
med() { sort -n | awk '{a[NR]=$1} END {if (NR) print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
echo "# Friedman #1 regression, test rmse (the noise alone gives 1.0)"
echo "# dpt: $dpt train examples/friedman_regression.conf --set seed=S"
echo "# sklearn $("$py" -c 'import sklearn; print(sklearn.__version__)'): MLPRegressor((64, 64), relu, adam, lr 1e-3, batch 64, 200 epochs, alpha 0, no early stopping)"
printf '%-5s %10s %10s %10s %10s\n' seed dpt_rmse sk_rmse dpt_s sk_s
s=1
while [ "$s" -le "$seeds" ]; do
    t0=$(date +%s.%N)
    "$dpt" train "$root/examples/friedman_regression.conf" --quiet --set seed=$s \
        --set output_dir="$dir/run$s" > /dev/null || exit 1
    t1=$(date +%s.%N)
    d=$(tail -1 "$dir/run$s/result.jsonl" | sed 's/.*"test_rmse":\([0-9.e+-]*\).*/\1/')
    d=$(awk -v d="$d" 'BEGIN {printf "%.6f", d}')
    k=$("$py" - "$root/examples/data" "$s" <<'PYEOF'
import sys, warnings
import numpy as np
from sklearn.neural_network import MLPRegressor
from sklearn.exceptions import ConvergenceWarning
warnings.simplefilter("ignore", ConvergenceWarning)
data, seed = sys.argv[1], int(sys.argv[2])
tr = np.loadtxt(data + "/friedman1_train.csv", delimiter=",", skiprows=1)
te = np.loadtxt(data + "/friedman1_test.csv", delimiter=",", skiprows=1)
m = MLPRegressor(hidden_layer_sizes=(64, 64), activation="relu", solver="adam",
                 learning_rate_init=1e-3, batch_size=64, max_iter=200, alpha=0.0,
                 shuffle=True, random_state=seed, tol=0.0, n_iter_no_change=10**9)
m.fit(tr[:, :-1], tr[:, -1])
p = m.predict(te[:, :-1])
print("%.6f" % float(np.sqrt(np.mean((p - te[:, -1]) ** 2))))
PYEOF
) || exit 1
    t2=$(date +%s.%N)
    printf '%-5s %10s %10s %10.2f %10.2f\n' "$s" "$d" "$k" "$(awk -v a="$t0" -v b="$t1" 'BEGIN {print b - a}')" "$(awk -v a="$t1" -v b="$t2" 'BEGIN {print b - a}')"
    echo "$d" >> "$dir/dpt"
    echo "$k" >> "$dir/sk"
    s=$((s + 1))
done
a=$(med < "$dir/dpt") b=$(med < "$dir/sk")
echo "median test rmse: dpt $a, sklearn $b; dpt / sklearn = $(awk -v a="$a" -v b="$b" 'BEGIN {printf "%.3f", a / b}')"
