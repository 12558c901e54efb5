#!/usr/bin/env bash
# The sandbox (issue 29's acceptance; impls/sandbox/README.md): `attnbench validate` on a plugin that
# attacks the harness and the machine from inside its call (tests/plugins/hostile/: signals to its
# parent and its group, a write outside its scratch directory, an escape by setsid then a crash, a
# fork bomb, a thread writing its output after run() returned, closing every descriptor, a socket)
# fails that case (case 1 of CASE_FILE) naming what the plugin did, while attnbench itself is never
# killed or stopped: each run ends as a failure (exit 1, never a hang or a signal) within a bounded
# time, its verify.json complete with every case (the others passed), no process left behind, no
# file written outside, and the console names the sandbox's bounds ("sandbox: ...").
# Where the machine cannot set a bound up (the console's sandbox line says "off" or lists it after
# "unavailable"), the checks only that bound guarantees are notes, not failures; the rest still
# hold. Skipped (exit 77) only where user and PID namespaces cannot be made at all
# (`unshare --user --pid --fork true` fails).
# Usage: plugin_sandbox.sh ATTNBENCH HOSTILE_SANDBOX_PLUGIN CASE_FILE WORK_DIR [MODE,MODE,...]
#   (default: every mode; a list runs only those, e.g. the modes safe without a sandbox)
set -uo pipefail
attnbench=$1 plugin=$2 cases=$3 work=$4
all_modes=kill_parent,stop_parent,kill_group,stop_group,write_outside,setsid_crash,fork_bomb,late_writer,close_fds,connect
IFS=, read -r -a modes <<<"${5:-$all_modes}"
for mode in "${modes[@]}"; do
  [[ ",$all_modes," == *",$mode,"* ]] || { echo "unknown mode '$mode' (one of $all_modes)"; exit 2; }
done

if ! unshare --user --pid --fork true 2>/dev/null; then
  echo "SKIP: this machine cannot make user and PID namespaces (unshare --user --pid --fork true failed): no sandbox to test"
  exit 77
fi

rm -rf "$work" && mkdir -p "$work"
marker=attn_sandbox_sleeper_$$
call_timeout=5                          # validate --timeout: seconds per plugin call
bound=$((2 * call_timeout + 20))        # a run's wall time: two timeouts and a start-up allowance
hard_limit=$((bound + 5))               # past this the run is killed (timeout -k 5): a hang
failures=0 notes=0
mode_failures=0 mode_notes=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); mode_failures=$((mode_failures + 1)); }
note() { echo "NOTE: $*"; notes=$((notes + 1)); mode_notes=$((mode_notes + 1)); }
summary=()

# The bound each mode's own checks rest on (the sandbox line names it when it cannot be set up);
# "" for a mode whose checks every sandbox must meet.
bound_of() {
  case $1 in
    kill_* | stop_* | fork_bomb | close_fds | connect) echo seccomp ;;
    write_outside) echo landlock ;;
    setsid_crash) echo "pid namespace" ;;
    *) echo "" ;;
  esac
}

# The texts case 1's reasons must contain, one a line.
expected_texts() {
  case $1 in
    kill_parent | kill_group) printf '%s\n' "the sandbox refused the plugin's kill(" "SIGKILL" ;;
    stop_parent | stop_group) printf '%s\n' "the sandbox refused the plugin's kill(" "SIGSTOP" ;;
    write_outside) printf '%s\n' "for writing" ;;
    setsid_crash) printf '%s\n' "SIGSEGV" ;;
    fork_bomb) printf '%s\n' "the sandbox refused the plugin's" "new process" ;;
    late_writer) printf '%s\n' "after its run() returned" ;;
    close_fds) printf '%s\n' "descriptor 3" ;;
    connect) printf '%s\n' "the sandbox refused the plugin's socket(" ;;
  esac
}

# check OK MESSAGE (in a mode's run): OK 0 is a failure, or a note where the sandbox line says the
# mode's bound ($needs) is not in place ($guaranteed 0).
check() {
  (($1)) && return
  if ((guaranteed)); then fail "$mode: $2"; else note "$mode: $2 (the sandbox could not set up ${needs:-its bounds}: $sandbox_line)"; fi
}

# Processes of this test still running: sleepers with the marker, and workers of this plugin
# (attnbench-plugin-host with the plugin's path; PR_SET_PDEATHSIG should end those with attnbench).
leftovers() {
  ps -eo pid=,args= | MARKER=$marker PLUGIN=$(basename "$plugin") awk -v self=$$ '
    $1 != self && (index($0, ENVIRON["MARKER"]) || (index($0, "attnbench-plugin-host ") && index($0, ENVIRON["PLUGIN"])))'
}

for mode in "${modes[@]}"; do
  mode_failures=0 mode_notes=0
  log=$work/$mode.log out=$work/$mode outside=$work/outside_$mode.txt
  rm -f "$outside"
  result=$(ATTN_HOSTILE_MODE=$mode ATTN_HOSTILE_MARKER=$marker ATTN_HOSTILE_FILE=$outside python3 -c '
import subprocess, sys, time
start = time.monotonic()
with open(sys.argv[1], "w") as log:
    rc = subprocess.run(sys.argv[2:], stdout=log, stderr=subprocess.STDOUT).returncode
print(rc, "%.1f" % (time.monotonic() - start))
' "$log" timeout -k 5 "$hard_limit" "$attnbench" validate --plugin "$plugin" --out "$out" --cases "$cases" \
    --timeout "$call_timeout" --property-cases 0)
  read -r rc seconds <<<"$result"
  echo "== $mode: exit $rc in $seconds s (bound $bound s)"

  # The sandbox's line, and whether this mode's bound is among those it could not set up.
  sandbox_line=$(grep -m1 -E '^[[:space:]]*sandbox:' "$log" | sed -E 's/^[[:space:]]*//')
  [[ -n $sandbox_line ]] && echo "   $sandbox_line"
  needs=$(bound_of "$mode") guaranteed=1
  if [[ $sandbox_line == "sandbox: off"* ]] ||
     [[ -n $needs && $sandbox_line == *unavailable* && ${sandbox_line#*unavailable} == *"$needs"* ]]; then
    guaranteed=0
  fi
  [[ -n $sandbox_line ]] || fail "$mode: the output does not name the sandbox's bounds (no 'sandbox:' line)"
  case $rc in
    1) ;;
    124 | 137) check 0 "exit $rc: attnbench hung (killed by timeout after $hard_limit s; stopped?)" ;;
    143) check 0 "exit 143: attnbench was terminated (SIGTERM)" ;;
    *) check 0 "exit $rc, expected 1 (a failed case)$( ((rc > 128)) && echo ": attnbench died of signal $((rc - 128))")" ;;
  esac
  python3 -c 'import sys; sys.exit(0 if float(sys.argv[1]) <= float(sys.argv[2]) else 1)' "$seconds" "$bound"
  check $((!$?)) "took $seconds s, more than $bound s"

  # verify.json: complete, every case recorded, the others passed, case 1 failed naming the attack.
  mapfile -t texts < <(expected_texts "$mode")
  problems=$(python3 - "$out/verify.json" "${texts[@]}" <<'PY'
import json, sys
path, texts = sys.argv[1], sys.argv[2:]
try:
    doc = json.load(open(path))
except Exception as e:
    print(f"no readable verify.json ({e}): attnbench did not finish the run")
    sys.exit()
if doc.get("complete", True) is not True:
    print(f"verify.json is not complete (complete: {doc.get('complete')!r})")
records = {}
for r in doc.get("records", []):
    records.setdefault(r.get("case_index"), []).append(r)
for case in range(4):
    rs = records.get(case, [])
    if len(rs) != 1:
        print(f"case {case}: {len(rs)} record(s), expected 1")
        continue
    r = rs[0]
    reasons = " | ".join(r.get("reasons", []) + ([r["skip_reason"]] if r.get("skip_reason") else []))
    if case != 1 and r.get("status") != "pass":
        print(f"case {case}: {r.get('status')}, expected pass (the run must go on around the attack): {reasons[:600]}")
    if case == 1:
        if r.get("status") != "fail":
            print(f"case 1: {r.get('status')}, expected fail: {reasons[:600]}")
        missing = [t for t in texts if t not in reasons]
        if missing:
            print(f"case 1: its reasons lack {missing}: {reasons[:1500]}")
PY
)
  while IFS= read -r problem; do
    [[ -z $problem ]] && continue
    check 0 "$problem"
  done <<<"$problems"

  if [[ $mode == write_outside ]]; then
    [[ ! -e $outside ]]
    check $((!$?)) "the plugin wrote $outside, outside its scratch directory"
  fi

  sleep 0.2  # a process the harness failed to kill would still be here; one it killed is gone
  left=$(leftovers)
  if [[ -n $left ]]; then
    fail "$mode: processes left behind: $(tr '\n' ';' <<<"$left")"
    awk '{print $1}' <<<"$left" | while read -r pid; do kill -CONT "$pid" 2>/dev/null; kill -KILL "$pid" 2>/dev/null; done
  fi

  if ((mode_failures > 0)); then
    echo "--- $mode: the console ($log), last 40 lines:"
    tail -n 40 "$log"
    echo "---"
  fi
  verdict=PASS
  ((mode_notes > 0)) && verdict="PASS where guaranteed ($mode_notes note(s): its bound unavailable)"
  ((mode_failures > 0)) && verdict="FAIL ($mode_failures)"
  summary+=("$(printf '%-14s exit %-4s %6s s   %s' "$mode" "$rc" "$seconds" "$verdict")")
done

echo
echo "summary (bound $bound s a run; --timeout $call_timeout):"
printf '  %s\n' "${summary[@]}"
echo "$failures failure(s), $notes note(s)"
exit $((failures > 0))
