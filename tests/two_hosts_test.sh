#!/bin/sh
# Two hosts on one machine: two network namespaces joined by a virtual
# Ethernet link (veth), each with its own host name, and Open MPI starting
# the second host's daemon through `ip netns exec` where it would use ssh
# (docs/MULTI_NODE.md, "Two hosts on one machine"). The ranks reach each
# other only over TCP across the link, the path between machines; the run
# directory is on the filesystem both hosts share, and rank 0 writes it.
# Across the two hosts the test runs:
#   - MPI_Get_processor_name tells the hosts apart (hostname on each rank);
#   - DD-PPO, the command of docs/MULTI_NODE.md, one worker per host;
#   - the supervised job with 2 devices per rank (the hierarchical backend
#     across hosts), twice, ending with bitwise-identical checkpoints.
#
# usage: two_hosts_test.sh DPT CKPT_COMPARE WORKDIR
# Exit 77 (skipped, with the reason) without MPI, without root, or where
# the machine does not allow network namespaces or veth links.
dpt="$1" cmp="$2" work="$3"
case "$dpt" in /*) ;; *) dpt="$PWD/$dpt" ;; esac
case "$cmp" in /*) ;; *) cmp="$PWD/$cmp" ;; esac
skip() { echo "skipped: $*"; exit 77; }
"$dpt" info | grep -q "^  mpi    yes" || skip "this build has no MPI"
command -v mpirun >/dev/null 2>&1 || skip "no mpirun"
[ "$(id -u)" -eq 0 ] || skip "network namespaces need root"
command -v ip >/dev/null 2>&1 && command -v unshare >/dev/null 2>&1 ||
    skip "no ip (iproute2) or unshare (util-linux)"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
here=$(cd "$(dirname "$0")" && pwd)
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 1
work=$(pwd)

# Names and a /24 of our own, so that two runs at once do not collide.
id=$$
h1=dpt_h1_$id h2=dpt_h2_$id v1=dpv1_$id v2=dpv2_$id
net=10.231.$((id % 200 + 20))
cleanup() {
    ip netns del "$h1" 2>/dev/null
    ip netns del "$h2" 2>/dev/null
}
trap cleanup EXIT
trap 'exit 1' INT TERM
err=$(ip netns add "$h1" 2>&1) || skip "cannot create a network namespace ($err)"
ip netns add "$h2" || exit 1
err=$(ip link add "$v1" type veth peer name "$v2" 2>&1) || skip "cannot create a veth link ($err)"
ip link set "$v1" netns "$h1" && ip link set "$v2" netns "$h2" || exit 1
ip -n "$h1" addr add "$net.1/24" dev "$v1" && ip -n "$h1" link set "$v1" up &&
    ip -n "$h1" link set lo up || exit 1
ip -n "$h2" addr add "$net.2/24" dev "$v2" && ip -n "$h2" link set "$v2" up &&
    ip -n "$h2" link set lo up || exit 1

# Open MPI's launch agent for the second host: "AGENT HOST COMMAND...", run
# like ssh runs a remote command, inside that host's namespace and name.
cat > netns_rsh <<EOF
#!/bin/sh
host=\$1
shift
case "\$host" in
$net.1) ns=$h1 name=dpt-host1 ;;
$net.2) ns=$h2 name=dpt-host2 ;;
*) echo "netns_rsh: unknown host \$host" >&2; exit 255 ;;
esac
exec ip netns exec "\$ns" unshare --uts sh -c "hostname \$name && \$*"
EOF
chmod +x netns_rsh
printf '%s slots=1\n%s slots=1\n' "$net.1" "$net.2" > hosts

# mpirun on the first host, one rank per host, TCP on the link only.
on_two_hosts() {
    ip netns exec "$h1" unshare --uts sh -c 'hostname dpt-host1 && exec "$@"' sh \
        mpirun --hostfile hosts -np 2 --mca plm_rsh_agent "$work/netns_rsh" \
        --mca pml ob1 --mca btl tcp,self --mca btl_tcp_if_include "$net.0/24" \
        --mca oob_tcp_if_include "$net.0/24" "$@" 2>&1
}

passes=0 fails=0
ok() { echo "ok   $*"; passes=$((passes + 1)); }
bad() { echo "FAIL $*"; fails=$((fails + 1)); }

out=$(on_two_hosts hostname)
if [ "$(printf '%s\n' "$out" | sort | tr '\n' ' ')" = "dpt-host1 dpt-host2 " ]; then
    ok "one rank on each host (dpt-host1, dpt-host2)"
else
    bad "hostname on two hosts gave: $out"
fi

cp "$here/../examples/cartpole_ddppo.conf" dd.conf || exit 1
out=$(on_two_hosts "$dpt" train dd.conf --set num_workers=1 --set total_timesteps=4096 \
    --set output_dir=ddppo)
rc=$?
if [ $rc -eq 0 ] && [ "$(wc -l < ddppo/result.jsonl)" -eq 4 ] &&
    [ "$(printf '%s\n' "$out" | grep -c "finished after iteration 4")" -eq 1 ]; then
    ok "DD-PPO, one worker per host: rank 0 wrote the run"
else
    bad "DD-PPO on two hosts: exit $rc"
    printf '%s\n' "$out" | tail -5
fi

printf 'job = supervised\ndataset = spirals\nspirals_points = 512\nhidden = 32,32\n' > sp.conf
printf 'epochs = 4\nbatch_size = 48\nnum_devices = 2\ngrad_clip = 1\n' >> sp.conf
last=checkpoints/checkpoint-00000004.safetensors
for k in 1 2; do
    out=$(on_two_hosts "$dpt" train sp.conf --set output_dir=sup_$k)
    rc=$?
    if [ $rc -eq 0 ] && [ -f "sup_$k/$last" ] &&
        [ "$(printf '%s\n' "$out" | grep -c "finished after iteration 4")" -eq 1 ]; then
        ok "supervised, 2 hosts x 2 devices, run $k" \
            "($(printf '%s\n' "$out" | grep -o "test accuracy [0-9.]*" | tail -1))"
    else
        bad "supervised on two hosts, run $k: exit $rc"
        printf '%s\n' "$out" | tail -5
    fi
done
if "$cmp" "sup_1/$last" "sup_2/$last" >/dev/null; then
    ok "supervised, 2 hosts x 2 devices: two runs end with bitwise-identical checkpoints"
else
    bad "supervised on two hosts: the two runs' checkpoints differ"
fi
echo "$passes passed, $fails failed"
[ "$fails" -eq 0 ]
