#!/usr/bin/env bash
# Two builds of caduceus-bench side by side, interleaved, on one machine:
#   OLD=<dir with caduceus + caduceus-bench> NEW=<dir> bench/hermes-peer/ab_caduceus.sh ROUNDS N MODE...
# e.g. ... ab_caduceus.sh 3 500 embedded_echo embedded_read_1000 loopback_echo loopback_read_1000
# Variants: old (as built), new-root (CADUCEUS_ALLOW_ROOT_SANDBOX=1, as the old
# table ran), new-nobody (the default sandbox of a root host). Prints p10/p50/p90
# of each run and the process tree's CPU per call (start-up included).
set -euo pipefail
rounds=$1; n=$2; shift 2
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
mkdir -p "$work/data"
python3 -c "
f=open('$work/data/file1000.txt','w')
for i in range(1,1001): f.write(f'line {i:04d}: lorem ipsum dolor sit amet, consectetur adipiscing\n')"
chmod -R a+rwX "$work"
for _ in $(seq 1 "$rounds"); do
  for mode in "$@"; do
    for variant in ${VARIANTS:-old new-root new-nobody}; do
      case $variant in
        old) bin=$OLD; env=();;
        new-root) bin=$NEW; env=(CADUCEUS_ALLOW_ROOT_SANDBOX=1);;
        new-nobody) bin=$NEW; env=();;
      esac
      rm -rf "$work/home"; mkdir -p "$work/home"
      out=$(env "${env[@]}" CADUCEUS_HOME="$work/home" /usr/bin/time -f "%U %S" -o "$work/time" \
        "$bin/caduceus-bench" "$mode" "$n" "$work" | tail -1)
      echo "$out" | python3 -c "
import json,sys
xs=sorted(json.loads(sys.stdin.read())['samples_ms']); n=len(xs)
u,s=map(float,open('$work/time').read().split()[-2:])
print(f'$variant $mode p10={xs[n//10]:.3f} p50={xs[n//2]:.3f} p90={xs[9*n//10]:.3f} ms, cpu/call={(u+s)*1000/n:.3f} ms')"
    done
  done
done
