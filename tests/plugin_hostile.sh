#!/usr/bin/env bash
# The isolation bounds (impls/plugin/README.md, "Isolation"): `attnbench validate` on a plugin that
# attacks the machine (tests/plugins/hostile_plugin.c) ends each run as a failure (exit 1) within a
# bounded time, leaves no process behind, and goes on with the other cases. Each run's wall time is
# printed and checked against a bound generous enough for a loaded 2-core machine.
#   processes: a leftover child, one that left the process group, 1 GiB on stdout, a hang on every
#              call (with the property suite and with a replayed case), names that clash
#   memory:    50 GiB allocated under a 1 GiB limit; skipped (exit 77) where the limit cannot apply
#              (a sanitizer build), since the allocation would then reach the machine
# Usage: plugin_hostile.sh ATTNBENCH HOSTILE_PLUGIN CASE_FILE WORK_DIR processes|memory
set -uo pipefail
attnbench=$1 plugin=$2 cases=$3 work=$4 part=$5
rm -rf "$work" && mkdir -p "$work"
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
marker=attn_hostile_sleeper_$$

# hostile NAME MODE EXPECTED_EXIT BOUND_SECONDS [validate options]: runs validate with the plugin in
# MODE, its console in $work/NAME.log; checks the exit code, the wall time and that no sleeper is
# left. Sets $seconds and $maxrss_kib (the largest of attnbench and its workers).
hostile() {
  local name=$1 mode=$2 expected=$3 bound=$4
  shift 4
  local result rc
  result=$(ATTN_HOSTILE_MODE=$mode ATTN_HOSTILE_MARKER=$marker python3 -c '
import resource, subprocess, sys, time
start = time.monotonic()
with open(sys.argv[1], "w") as log:
    rc = subprocess.run(sys.argv[2:], stdout=log, stderr=subprocess.STDOUT).returncode
print(rc, "%.1f" % (time.monotonic() - start), resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
' "$work/$name.log" "$attnbench" validate --plugin "$plugin" --out "$work/$name" "$@")
  read -r rc seconds maxrss_kib <<<"$result"
  echo "== $name: exit $rc in $seconds s (bound $bound s), peak RSS $((maxrss_kib / 1024)) MiB"
  [[ $rc == "$expected" ]] || { fail "$name: exit $rc, expected $expected"; cat "$work/$name.log"; }
  python3 -c 'import sys; sys.exit(0 if float(sys.argv[1]) <= float(sys.argv[2]) else 1)' "$seconds" "$bound" ||
    fail "$name: took $seconds s, more than $bound s"
  sleep 0.2  # a process the harness failed to kill would still be here; one it killed is gone
  if pgrep -f "$marker" >/dev/null; then
    fail "$name: processes left behind: $(pgrep -af "$marker" | tr '\n' ';')"
    pkill -KILL -f "$marker"
  fi
}
expect_log() { grep -qF -- "$2" "$work/$1.log" || { fail "$1: the output lacks '$2'"; cat "$work/$1.log"; }; }
# expect_record NAME CASE STATUS [TEXT...]: verify.json has the case with that status and a reason
# (or skip reason) containing each TEXT.
expect_record() {
  python3 - "$work/$1/verify.json" "$2" "$3" "${@:4}" <<'PY' || fail "$1: case $2 is not '$3' with '${*:4}' in verify.json"
import json, sys
path, case, status, texts = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4:]
records = [r for r in json.load(open(path))["records"] if r["case_index"] == case]
reasons = " ".join(records[0].get("reasons", []) + [records[0].get("skip_reason", "")]) if records else ""
ok = len(records) == 1 and records[0]["status"] == status and all(t in reasons for t in texts)
if not ok: print(json.dumps(records, indent=1)[:3000])
sys.exit(0 if ok else 1)
PY
}
n17_case=$(grep -v '^#' "$cases" | sed -n 2p)

if [[ $part == processes ]]; then
  # In the sandbox (the default) a plugin starts no process: the fork is refused, named.
  hostile fork_sandboxed fork 1 30 --cases "$cases" --timeout 10 --property-cases 0
  expect_record fork_sandboxed 1 fail "the sandbox refused the plugin's clone() of a new process"
  for c in 0 2 3; do expect_record fork_sandboxed $c pass; done
  # Without it (--sandbox=off): a child left running after the call is killed, that call fails
  # naming it, the next cases pass.
  hostile fork fork 1 30 --cases "$cases" --timeout 10 --property-cases 0 --sandbox=off
  expect_record fork 1 fail "the plugin left 1 process(es) running after run()" "(killed; a plugin must wait for every process"
  for c in 0 2 3; do expect_record fork $c pass; done

  # The same from a grandchild in a session of its own, outside the worker's process group.
  hostile escape escape 1 30 --cases "$cases" --timeout 10 --property-cases 0 --sandbox=off
  expect_record escape 1 fail "the plugin left 1 process(es) running after run()"
  for c in 0 2 3; do expect_record escape $c pass; done

  # 1 GiB on stdout: drained as it comes (the harness stays small), its first and last 4 KiB in
  # the failure, the next cases pass.
  hostile flood flood 1 60 --cases "$cases" --timeout 30 --property-cases 0
  expect_record flood 1 fail "returned status 1: wrote 1073741824 bytes to stdout" \
    "the plugin's output (1073741824 bytes; the first 4096 and the last 4096 shown): FLOOD-BEGIN\\nxxx" "\\nFLOOD-END"
  for c in 0 2 3; do expect_record flood $c pass; done
  ((maxrss_kib < 512 * 1024)) || fail "flood: the harness or its worker grew to $((maxrss_kib / 1024)) MiB on 1 GiB of output"

  # A hang on every call, with the whole property suite asked for: two timeouts, then no more
  # calls (the later cases skipped with the reason, no property run), so about 2 timeouts in all.
  hostile hang hang 1 $((2 * 2 + 30)) --cases "$cases" --timeout 2
  expect_record hang 0 fail "the plugin timed out after 2 s in run() (worker killed with its process group; the next call starts a new one)"
  expect_record hang 1 fail "a second consecutive timeout: the plugin gets no more calls"
  for c in 2 3; do expect_record hang $c skip "the plugin timed out on 2 consecutive calls (2 s each; the last in run()): it gets no more calls"; done
  expect_log hang "properties and benchmarks not run: the plugin timed out on 2 consecutive calls"
  expect_log hang "worker processes started: 2"

  # A replayed case runs eight times: still two timeouts.
  hostile hang_replay hang 1 $((2 * 2 + 30)) --case "$n17_case" --timeout 2
  expect_log hang_replay "0 passed, 2 failed, 6 skipped"

  # A replayed property: it fails on the first timeout (one timeout, not eight replays).
  hostile hang_property hang 1 $((2 + 30)) --case "$n17_case" --property 2 --timeout 2
  expect_log hang_property "   2 FAILED: masked keys get exactly zero weight"
  expect_log hang_property "timed out after 2 s in run()"

  # A plugin cannot take a built-in's name (its results would merge with the built-in's), nor a
  # name outside the ABI's alphabet.
  for name in cpu_naive cuda_fused; do
    ATTN_HOSTILE_NAME=$name hostile "name_$name" none 2 30 --cases "$cases" --property-cases 0
    expect_log "name_$name" "its name '$name' is a built-in implementation's"
  done
  ATTN_HOSTILE_NAME="a/b" hostile name_slash none 2 30 --cases "$cases" --property-cases 0
  expect_log name_slash "its name 'a/b' has a character outside [A-Za-z0-9_.-]"
elif [[ $part == memory ]]; then
  hostile memory_default none 0 30 --case "$(grep -v '^#' "$cases" | sed -n 1p)" --property-cases 0
  if grep -q "memory limit: none: not applied" "$work/memory_default.log"; then
    grep "memory limit" "$work/memory_default.log"
    echo "SKIP: the worker's memory limit cannot apply in this build; 50 GiB would reach the machine"
    exit 77
  fi
  expect_log memory_default "of address space per worker (RLIMIT_AS; half of the"
  hostile memory_bad_size none 2 30 --cases "$cases" --plugin-memory-limit banana
  expect_log memory_bad_size "--plugin-memory-limit banana: not a size"

  # 50 GiB in 64 MiB steps under a 1 GiB limit: the step that crosses it fails, the case fails
  # naming the limit, the next cases pass.
  hostile alloc alloc 1 60 --cases "$cases" --timeout 30 --property-cases 0 --plugin-memory-limit 1G
  expect_record alloc 1 fail "the plugin crashed: SIGSEGV" "the worker was at its memory limit of 1 GiB of address space (RLIMIT_AS"
  for c in 0 2 3; do expect_record alloc $c pass; done
else
  echo "unknown part '$part' (processes or memory)"
  exit 2
fi

echo "$failures failure(s)"
exit $((failures > 0))
