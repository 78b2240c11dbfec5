#!/usr/bin/env bash
# An emulated multi-host cluster on one machine: W network namespaces joined
# by veth pairs to a bridge, each host's link shaped with tc (netem rate and
# delay, both directions), an sshd in each namespace, and `leapgnn train`
# over the ssh launcher for every strategy on the same dataset, partition
# and seed. Writes the summaries and a report (table + SVG plots) to
# runs/bench-<date>/ and removes every namespace, link, qdisc and process it
# made, also on error or Ctrl-C; it checks that at the end and says so.
#
# Needs root, iproute2 (ip, tc) and openssh-server; without them it exits 2.
set -euo pipefail

usage() {
	cat <<'EOF'
usage: scripts/emulated-cluster.sh [options] [-- extra `leapgnn train` flags]

  --hosts N            emulated hosts, one worker each (default 4)
  --dataset NAME       dataset (default synthetic-arxiv-easy)
  --rate R             link rate of every host, tc syntax (default 500mbit: model-centric then
                       spends about 60 % of its epoch waiting on the network here)
  --delay D            one-way delay added per link direction (default 0.5ms)
  --sweep R1,R2,...    run every strategy at each of these rates (overrides --rate)
  --strategies LIST    default model-centric,micrograph,pregather,leapgnn,p3; `full-graph` is the
                       full-graph engine's graph parallelism (varco, retexo and gnnpipe run on it too)
  --epochs E           epochs per run (default 2; retexo, which takes no --epochs: E rounds per
                       layer, one round an epoch, unless flags after -- give --rounds)
  --batch-size B       roots per worker per iteration (default 1024)
  --seed S             (default 0)
  --bin PATH           leapgnn binary (default target/release/leapgnn, built if missing)
  --data-dir DIR       where datasets and partitions live (default: leapgnn's default)
  --out DIR            report directory (default runs/bench-<date>)
  --threads N          RAYON_NUM_THREADS of each worker (default: cores / hosts, at least 1)
  --host-cpus C|off    CPU quota of each host, in cores (fractions allowed), enforced by a cgroup per
                       host (v1 cpu.cfs_quota_us, or v2 cpu.max) that its sshd and so its workers run
                       in (default: cores / hosts, as if each host were a machine of its own); `off`:
                       no quota, an idle host's CPU goes to the others (the old behaviour)
  --cpu-period MS      the quota's period in ms, 1 to 1000 (default 10): a host with 0.5 cores runs
                       5 ms of every 10, near enough to a machine half as fast; a long period (the
                       kernel's 100) runs it flat out and then stops it for up to half the period
  --calibrate          calibrate tune-merge's figures on the emulated hosts at each rate (slower);
                       without it tune-merge plans with the rough figures and the shaped rate
  --leapgnn-grid       also run leapgnn at every T = 1..hosts with --prefetch on and off
                       (run-<rate>-leapgnn@t<T>-<on|off>), so the report sets the plan against the
                       fastest configuration measured
  --check-only         set up, run `leapgnn cluster check`, tear down (no training)
  -h, --help           this text

Every run uses the same partition (METIS, one part per host; retexo too, whose own
default is random parts, unless flags after -- give --partition) and seed. The
leapgnn strategy uses the merge plan from `leapgnn tune-merge` when that
command succeeds, else `--time-steps auto`.
EOF
}

die() { echo "emulated-cluster: $*" >&2; exit 2; }

HOSTS=4 DATASET=synthetic-arxiv-easy RATE=500mbit DELAY=0.5ms SWEEP="" EPOCHS=2 BATCH=1024 SEED=0
STRATEGIES=model-centric,micrograph,pregather,leapgnn,p3
BIN="" DATA_DIR="" OUT="" THREADS="" HOST_CPUS="" CPU_PERIOD_MS=10 CHECK_ONLY=0 CALIBRATE=0 GRID=0
EXTRA=()
while (($#)); do
	case "$1" in
	--hosts | --dataset | --rate | --delay | --sweep | --strategies | --epochs | --batch-size | --seed | --bin | \
		--data-dir | --out | --threads | --host-cpus | --cpu-period)
		(($# >= 2)) || { usage >&2; die "$1 needs a value"; } ;;&
	--hosts) HOSTS=$2; shift 2 ;;
	--dataset) DATASET=$2; shift 2 ;;
	--rate) RATE=$2; shift 2 ;;
	--delay) DELAY=$2; shift 2 ;;
	--sweep) SWEEP=$2; shift 2 ;;
	--strategies) STRATEGIES=$2; shift 2 ;;
	--epochs) EPOCHS=$2; shift 2 ;;
	--batch-size) BATCH=$2; shift 2 ;;
	--seed) SEED=$2; shift 2 ;;
	--bin) BIN=$2; shift 2 ;;
	--data-dir) DATA_DIR=$2; shift 2 ;;
	--out) OUT=$2; shift 2 ;;
	--threads) THREADS=$2; shift 2 ;;
	--host-cpus) HOST_CPUS=$2; shift 2 ;;
	--cpu-period) CPU_PERIOD_MS=$2; shift 2 ;;
	--check-only) CHECK_ONLY=1; shift ;;
	--calibrate) CALIBRATE=1; shift ;;
	--leapgnn-grid) GRID=1; shift ;;
	-h | --help) usage; exit 0 ;;
	--) shift; EXTRA=("$@"); break ;;
	*) usage >&2; die "unknown option \`$1\`" ;;
	esac
done

[[ $HOSTS =~ ^[0-9]+$ ]] && ((HOSTS >= 1 && HOSTS <= 64)) || die "--hosts $HOSTS: give 1 to 64"
[[ $CPU_PERIOD_MS =~ ^[0-9]+$ ]] && ((CPU_PERIOD_MS >= 1 && CPU_PERIOD_MS <= 1000)) ||
	die "--cpu-period $CPU_PERIOD_MS: give whole milliseconds, 1 to 1000"
IFS=, read -r -a RATES <<<"${SWEEP:-$RATE}"
for r in "${RATES[@]}"; do
	[[ ${r,,} =~ ^[0-9]+(kbit|mbit|gbit|bit)$ ]] || die "rate \`$r\`: write it as e.g. 100mbit or 1gbit"
done
[[ -z $HOST_CPUS || $HOST_CPUS == off || $HOST_CPUS =~ ^[0-9]*\.?[0-9]+$ ]] ||
	die "--host-cpus $HOST_CPUS: give a number of cores (e.g. 0.5) or off"
[[ $(id -u) == 0 ]] || die "needs root (network namespaces, veth, tc); run it with sudo"
for c in ip tc ssh-keygen; do
	command -v "$c" >/dev/null || die "\`$c\` is missing: install iproute2 and openssh-client"
done
SSHD=/usr/sbin/sshd
[[ -x $SSHD ]] || die "$SSHD is missing: install openssh-server"
ip netns list >/dev/null 2>&1 || die "cannot list network namespaces here (no CAP_SYS_ADMIN?)"

ROOT=$(cd "$(dirname "$0")/.." && pwd)
if [[ -z $BIN ]]; then
	BIN=$ROOT/target/release/leapgnn
	[[ -x $BIN ]] || (cd "$ROOT" && cargo build --release --quiet) || die "cannot build $BIN"
fi
[[ -x $BIN ]] || die "--bin $BIN is not an executable"
BIN=$(cd "$(dirname "$BIN")" && pwd)/$(basename "$BIN")
[[ -n $OUT ]] || OUT=$ROOT/runs/bench-$(date +%Y-%m-%d-%H%M%S)
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
[[ -n $THREADS ]] || THREADS=$(( $(nproc) / HOSTS > 0 ? $(nproc) / HOSTS : 1 ))
[[ -n $HOST_CPUS ]] || HOST_CPUS=$(awk -v c="$(nproc)" -v h="$HOSTS" 'BEGIN { printf "%.3f", c / h }')
# The CPU controller: cgroup v1's where it is mounted (these machines), else v2's.
CG_KIND="" CG_ROOT=""
if [[ $HOST_CPUS != off ]]; then
	if [[ -f /sys/fs/cgroup/cpu/cpu.cfs_quota_us ]]; then
		CG_KIND=v1 CG_ROOT=/sys/fs/cgroup/cpu
	elif grep -qw cpu /sys/fs/cgroup/cgroup.controllers 2>/dev/null; then
		CG_KIND=v2 CG_ROOT=/sys/fs/cgroup
	else
		die "no CPU cgroup controller here (v1 cpu.cfs_quota_us or v2 cpu.max) to give each host its own CPUs: \
run with --host-cpus off to share the machine's CPUs between the hosts"
	fi
	PERIOD_US=$((CPU_PERIOD_MS * 1000))
	QUOTA_US=$(awk -v c="$HOST_CPUS" -v p="$PERIOD_US" 'BEGIN { q = int(c * p); print (q < 1000 ? 1000 : q) }')
fi
DATA_ARGS=()
[[ -n $DATA_DIR ]] && DATA_ARGS=(--data-dir "$DATA_DIR")
DATA_ROOT=${DATA_DIR:-${LEAPGNN_DATA:-data}}

# Names carry this shell's PID so two runs (or a crashed one) never collide.
TAG=$$
NET=$((TAG % 200 + 20))
SUBNET=10.213.$NET
BR=lgbr$TAG
WORK=$(mktemp -d /tmp/lg-emu.XXXXXX)
SSHD_PIDS=()
NSS=()
CGS=()

ns() { echo "lg$TAG-h$1"; }
cg() { echo "$CG_ROOT/lg$TAG-h$1"; }
host_ip() { echo "$SUBNET.$((10 + $1))"; }

cleanup() {
	local rc=$?
	trap - EXIT INT TERM
	set +e
	# SSH sessions start new sessions (process groups), so stopping sshd does
	# not reach the workers: kill everything that runs inside our namespaces.
	for n in "${NSS[@]}"; do
		for pid in $(ip netns pids "$n" 2>/dev/null); do kill -KILL "$pid" 2>/dev/null; done
	done
	# (in a group whose stderr is dropped: bash reports each killed job there)
	# The sshds are disowned (so bash prints no "Killed" for them): wait,
	# bounded, until they are gone.
	for pid in "${SSHD_PIDS[@]}"; do
		for ((t = 0; t < 100; t++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.05; done
	done
	for n in "${NSS[@]}"; do ip netns del "$n" 2>/dev/null; done
	# A cgroup can go once its last process has (bounded wait for the killed ones).
	for d in "${CGS[@]}"; do
		for ((t = 0; t < 100; t++)); do rmdir "$d" 2>/dev/null && break; sleep 0.05; done
	done
	ip link del "$BR" 2>/dev/null
	for ((i = 0; i < HOSTS; i++)); do ip link del "lgv$TAG-$i" 2>/dev/null; done
	rm -rf "$WORK"
	# Verify: nothing of ours is left.
	local left=()
	for n in $(ip netns list | awk '{print $1}'); do [[ $n == lg$TAG-* ]] && left+=("namespace $n"); done
	ip link show "$BR" >/dev/null 2>&1 && left+=("bridge $BR")
	for ((i = 0; i < HOSTS; i++)); do
		ip link show "lgv$TAG-$i" >/dev/null 2>&1 && left+=("link lgv$TAG-$i")
	done
	for pid in "${SSHD_PIDS[@]}"; do kill -0 "$pid" 2>/dev/null && left+=("sshd $pid"); done
	for d in "${CGS[@]}"; do [[ -d $d ]] && left+=("cgroup $d"); done
	local workers
	workers=$(pgrep -f "$WORK/" | tr '\n' ' ')
	[[ -n $workers ]] && left+=("processes $workers")
	if ((${#left[@]})); then
		echo "emulated-cluster: LEFT BEHIND: ${left[*]}" >&2
		((rc == 0)) && rc=1
	else
		echo "emulated-cluster: clean: no namespace, link, qdisc, cgroup or process of this run is left" >&2
	fi
	exit "$rc"
}
trap cleanup EXIT
trap 'echo "emulated-cluster: interrupted" >&2; exit 130' INT TERM

echo "emulated-cluster: $HOSTS hosts on $SUBNET.0/24, work dir $WORK, report in $OUT" >&2

# --- network: a bridge in this namespace, one veth per host -----------------
ip link add "$BR" type bridge
ip addr add "$SUBNET.1/24" dev "$BR"
ip link set "$BR" up
for ((i = 0; i < HOSTS; i++)); do
	n=$(ns "$i")
	ip netns add "$n"
	NSS+=("$n")
	ip link add "lgv$TAG-$i" type veth peer name "lgp$TAG-$i"
	ip link set "lgp$TAG-$i" netns "$n"
	ip -n "$n" link set "lgp$TAG-$i" name eth0
	ip -n "$n" addr add "$(host_ip "$i")/24" dev eth0
	ip -n "$n" link set lo up
	ip -n "$n" link set eth0 up
	ip link set "lgv$TAG-$i" master "$BR"
	ip link set "lgv$TAG-$i" up
done

# Bytes per second of a tc rate such as 100mbit, 1gbit, 500kbit.
rate_bytes() {
	local r=${1,,} n unit
	[[ $r =~ ^([0-9]+)(kbit|mbit|gbit|bit)$ ]] || die "rate \`$1\`: write it as e.g. 100mbit or 1gbit"
	n=${BASH_REMATCH[1]} unit=${BASH_REMATCH[2]}
	case $unit in
	bit) echo $((n / 8)) ;; kbit) echo $((n * 1000 / 8)) ;; mbit) echo $((n * 1000000 / 8)) ;;
	gbit) echo $((n * 1000000000 / 8)) ;;
	esac
}

# netem (rate + delay) where the kernel has it; otherwise tbf (rate only; some
# kernels, this project's CI among them, ship without sch_netem).
NETEM=1
DELAY_NOTE=$DELAY
# Shapes host i's link: egress from the host (its eth0) and towards it (the bridge port).
shape() {
	local rate=$1 burst qd
	# A real link never runs above its rate: the bucket holds 1 ms of traffic (at
	# least one 64 KiB GSO segment), so an idle spell banks almost nothing. With
	# 10 ms (the old bucket) a 1 MB fetch after 40 ms idle ran at 2.1x the rate,
	# which rewarded many short, spaced-out fetches (micrograph's per step).
	burst=$(rate_bytes "$rate")
	burst=$((burst / 1000 > 65536 ? burst / 1000 : 65536))
	# Nor below it: a 64 KiB GSO packet empties the whole bucket, and waiting for
	# it to refill cost 30 % of the rate (TCP ran at 42 MB/s on 500mbit). Packets
	# of at most a quarter of the bucket keep it metering: 56 MB/s, the rate less
	# the headers (measured with a plain TCP all-to-all over the same shaping).
	gso=$((burst / 4 < 65536 ? burst / 4 : 65536))
	for ((i = 0; i < HOSTS; i++)); do
		for dev in "ns:eth0" "root:lgv$TAG-$i"; do
			local where=${dev%%:*} d=${dev#*:} run=()
			[[ $where == ns ]] && run=(ip netns exec "$(ns "$i")")
			"${run[@]}" ip link set dev "$d" gso_max_size "$gso" 2>/dev/null ||
				echo "emulated-cluster: cannot cap GSO packets on $d (ip link gso_max_size): the link may run below its rate" >&2
			if ((NETEM)) && "${run[@]}" tc qdisc replace dev "$d" root netem rate "$rate" delay "$DELAY" limit 100000 \
				2>/dev/null; then
				continue
			fi
			if ((NETEM)); then
				NETEM=0
				DELAY_NOTE="none (this kernel has no sch_netem; rate shaped with tbf)"
				echo "emulated-cluster: netem is not available here: shaping the rate with tbf, no added delay" >&2
			fi
			"${run[@]}" tc qdisc replace dev "$d" root tbf rate "$rate" burst "$burst" latency 200ms
		done
	done
}

# --- one sshd per host --------------------------------------------------------
mkdir -p /run/sshd "$WORK/remote"
ssh-keygen -q -t ed25519 -N "" -C leapgnn-emulated -f "$WORK/id_client"
cp "$WORK/id_client.pub" "$WORK/authorized_keys"
: >"$WORK/known_hosts"
for ((i = 0; i < HOSTS; i++)); do
	ssh-keygen -q -t ed25519 -N "" -C "host$i" -f "$WORK/hostkey$i"
	cat >"$WORK/sshd$i.conf" <<EOF
Port 22
ListenAddress $(host_ip "$i")
HostKey $WORK/hostkey$i
PidFile $WORK/sshd$i.pid
AuthorizedKeysFile $WORK/authorized_keys
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
PermitRootLogin prohibit-password
UseDNS no
MaxStartups 64
Subsystem sftp internal-sftp
EOF
	if [[ -n $CG_KIND ]]; then
		# Host i's CPUs: its sshd starts inside the host's cgroup, so every session and
		# worker it forks is held to the quota too.
		mkdir "$(cg "$i")"
		CGS+=("$(cg "$i")")
		if [[ $CG_KIND == v1 ]]; then
			echo "$PERIOD_US" >"$(cg "$i")/cpu.cfs_period_us"
			echo "$QUOTA_US" >"$(cg "$i")/cpu.cfs_quota_us"
		else
			echo "$QUOTA_US $PERIOD_US" >"$(cg "$i")/cpu.max"
		fi
	fi
	# shellcheck disable=SC2016 # $$ is the inner shell's, which then becomes sshd
	sh -c '[ -z "$1" ] || echo $$ >"$1/cgroup.procs"; shift; exec "$@"' sh "${CG_KIND:+$(cg "$i")}" \
		ip netns exec "$(ns "$i")" "$SSHD" -D -e -f "$WORK/sshd$i.conf" 2>"$WORK/sshd$i.log" &
	SSHD_PIDS+=($!)
	disown "$!"
	echo "$(host_ip "$i") $(cut -d' ' -f1,2 "$WORK/hostkey$i.pub")" >>"$WORK/known_hosts"
done
for ((i = 0; i < HOSTS; i++)); do
	ok=0
	for _ in $(seq 1 100); do
		if timeout 1 bash -c "exec 3<>/dev/tcp/$(host_ip "$i")/22" 2>/dev/null; then ok=1; break; fi
		kill -0 "${SSHD_PIDS[$i]}" 2>/dev/null || die "sshd of host $i exited: $(cat "$WORK/sshd$i.log")"
		sleep 0.1
	done
	((ok)) || die "sshd of host $i does not listen on $(host_ip "$i"):22 after 10 s"
done

PROFILE=$WORK/profile.toml
{
	cat <<EOF
[cluster]
launcher = "ssh"
remote_dir = "$WORK/remote"
known_hosts = "$WORK/known_hosts"
driver_bind = "$SUBNET.1:0"
connect_timeout = 20

[cluster.env]
RAYON_NUM_THREADS = "$THREADS"
EOF
	for ((i = 0; i < HOSTS; i++)); do
		printf '\n[[host]]\naddress = "%s"\nport = 22\nuser = "root"\nidentity = "%s"\nworkers = 1\n' \
			"$(host_ip "$i")" "$WORK/id_client"
	done
} >"$PROFILE"
cp "$PROFILE" "$OUT/profile.toml"

"$BIN" "${DATA_ARGS[@]}" cluster check "$PROFILE" >&2 || die "cluster check failed (see above)"
if ((CHECK_ONLY)); then
	shape "$RATE"
	tc -s qdisc show dev "lgv$TAG-0" >&2
	ip -d link show dev "lgv$TAG-0" | grep -o "gso_max_size [0-9]*" | sed "s/^/lgv$TAG-0: /" >&2
	# The quota periods counted show that each host's processes ran in its cgroup.
	for d in "${CGS[@]}"; do
		periods=$(awk '$1 == "nr_periods" { print $2 }' "$d/cpu.stat" 2>/dev/null || echo "?")
		if [[ $CG_KIND == v1 ]]; then
			limit="$(cat "$d/cpu.cfs_quota_us") us per $(cat "$d/cpu.cfs_period_us") us"
		else
			read -r q p <"$d/cpu.max"
			limit="$q us per $p us"
		fi
		echo "emulated-cluster: ${d##*-}: $HOST_CPUS cores (cgroup $CG_KIND $d: $limit), $periods quota periods used" >&2
	done
	exit 0
fi

# --- runs ---------------------------------------------------------------------
"$BIN" "${DATA_ARGS[@]}" download "$DATASET" >&2
"$BIN" "${DATA_ARGS[@]}" partition "$DATASET" --parts "$HOSTS" --method metis --seed "$SEED" >&2

IFS=, read -r -a STRATS <<<"$STRATEGIES"
COMMON=(--cluster "$PROFILE" --workers "$HOSTS" --parts "$HOSTS" --seed "$SEED" --no-tui --json)
# Whether the flags after -- give flag $1 (as `--flag value` or `--flag=value`).
extra_has() {
	local a
	for a in "${EXTRA[@]}"; do [[ $a == "$1" || $a == "$1="* ]] && return 0; done
	return 1
}
# One training run into run-<rate>-<label>.json (+ its step records); a failed
# run is reported and left out of the report.
train_run() {
	local rate=$1 label=$2 run=bench-$TAG-$1-${2//@/-} span=(--epochs "$EPOCHS")
	shift 2
	if [[ $label == retexo ]]; then
		# RETEXO refuses --epochs (a run is --layers x --rounds rounds, one round an
		# epoch) and partitions at random by default: E rounds per layer, METIS parts.
		span=()
		extra_has --rounds || span+=(--rounds "$EPOCHS")
		extra_has --partition || span+=(--partition metis)
	fi
	echo "emulated-cluster: rate $rate, $label" >&2
	if ! "$BIN" "${DATA_ARGS[@]}" train "$DATASET" "${COMMON[@]}" "${span[@]}" --run "$run" "$@" "${EXTRA[@]}" \
		>"$OUT/run-$rate-$label.json.tmp"; then
		echo "emulated-cluster: $label at $rate failed; it is missing from the report" >&2
		rm -f "$OUT/run-$rate-$label.json.tmp"
		return 0
	fi
	mv "$OUT/run-$rate-$label.json.tmp" "$OUT/run-$rate-$label.json"
	# The per-step records: the report takes training's own feature bytes from them.
	cp "$DATA_ROOT/runs/$run/metrics.jsonl" "$OUT/run-$rate-$label.metrics.jsonl" ||
		echo "emulated-cluster: no metrics.jsonl for $label at $rate" >&2
}

for rate in "${RATES[@]}"; do
	shape "$rate"
	for s in "${STRATS[@]}"; do
		# Full-graph runs take no batch size: `full-graph` is graph parallelism (the
		# full-graph engine's default strategy); varco, retexo and gnnpipe imply that engine.
		case $s in
		full-graph) args=(--full-batch) ;;
		varco | retexo | gnnpipe) args=(--strategy "$s") ;;
		*) args=(--strategy "$s" --batch-size "$BATCH") ;;
		esac
		if [[ $s == leapgnn ]]; then
			plan=$OUT/plan-$rate.toml
			# tune-merge's figures per rate: calibrated on these hosts, or the rough
			# defaults with the shaped rate as the links' bandwidth.
			figs=$OUT/profile-$rate.toml
			cp "$PROFILE" "$figs"
			cal=()
			if ((CALIBRATE)); then
				cal=(--calibrate)
			else
				printf '\n[cost]\nbandwidth = %s\n' "$(rate_bytes "$rate")" >>"$figs"
			fi
			if "$BIN" "${DATA_ARGS[@]}" tune-merge "$DATASET" --parts "$HOSTS" --cluster "$figs" "${cal[@]}" \
				--batch-size "$BATCH" --seed "$SEED" --out "$plan" >&2; then
				args+=(--merge-plan "$plan")
			else
				echo "emulated-cluster: tune-merge failed; leapgnn runs with --time-steps auto" >&2
				args+=(--time-steps auto)
			fi
		fi
		train_run "$rate" "$s" "${args[@]}"
		if [[ $s == leapgnn ]] && ((GRID)); then
			for ((t = 1; t <= HOSTS; t++)); do
				for p in on off; do
					train_run "$rate" "leapgnn@t$t-$p" --strategy leapgnn --batch-size "$BATCH" --time-steps "$t" --prefetch "$p"
				done
			done
		fi
	done
done

cat >"$OUT/command.txt" <<EOF
scripts/emulated-cluster.sh --hosts $HOSTS --dataset $DATASET --delay $DELAY --host-cpus $HOST_CPUS$([[ $HOST_CPUS == off ]] || echo " --cpu-period $CPU_PERIOD_MS") $(if [[ -n $SWEEP ]]; then echo "--sweep $SWEEP"; else echo "--rate $RATE"; fi)$( ((CALIBRATE)) && echo " --calibrate" || true)$( ((GRID)) && echo " --leapgnn-grid" || true) --strategies $STRATEGIES --epochs $EPOCHS --batch-size $BATCH --seed $SEED ${EXTRA[*]:+-- ${EXTRA[*]}}
EOF
if [[ -n $CG_KIND ]]; then
	CPU_NOTE="$HOST_CPUS cores per host (cgroup $CG_KIND quota, $CPU_PERIOD_MS ms period), RAYON_NUM_THREADS=$THREADS"
else
	CPU_NOTE="no per-host quota (--host-cpus off): the hosts share $(nproc) cores, RAYON_NUM_THREADS=$THREADS"
fi
"$BIN" bench-report "$OUT" --note "link delay: $DELAY_NOTE; CPU: $CPU_NOTE" >&2
echo "emulated-cluster: report in $OUT/report.md" >&2
